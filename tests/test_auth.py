"""The API-key rule shared by REST and MCP over HTTP."""

from __future__ import annotations

import pytest

from kiwifs.auth import api_key_for, check_bearer
from kiwifs.config import parse_config
from kiwifs.errors import ConfigError, Unauthorized


@pytest.mark.parametrize(
    ("toml", "override", "expected"),
    [
        ("", None, None),
        ('[auth]\ntype = "none"\napi_key = "k"\n', None, None),
        ('[auth]\ntype = "apikey"\napi_key = "k"\n', None, "k"),
        ('[auth]\ntype = "APIKey"\napi_key = "k"\n', None, "k"),
        ('[auth]\ntype = "apikey"\napi_key = "k"\n', "flag", "flag"),
        ("", "flag", "flag"),
    ],
    ids=["default-open", "none", "apikey", "case-insensitive-type", "flag-wins", "flag-alone"],
)
def test_api_key_for(toml: str, override: str | None, expected: str | None) -> None:
    assert api_key_for(parse_config(toml), override) == expected


def test_apikey_without_a_key_fails_closed() -> None:
    with pytest.raises(ConfigError, match="needs api_key"):
        api_key_for(parse_config('[auth]\ntype = "apikey"\n'))


@pytest.mark.parametrize(
    "header",
    [None, "", "k", "Bearer", "Bearer ", "Bearer K", "bearer k", "Bearer k ", "Basic k"],
    ids=[
        "absent",
        "empty",
        "bare",
        "no-key",
        "blank-key",
        "case",
        "scheme-case",
        "trailing",
        "basic",
    ],
)
def test_check_bearer_refuses(header: str | None) -> None:
    with pytest.raises(Unauthorized, match="invalid API key"):
        check_bearer(header, "k")


def test_check_bearer_accepts_the_key_and_anything_when_open() -> None:
    check_bearer("Bearer k", "k")
    check_bearer(None, None)
    check_bearer("Bearer whatever", None)
