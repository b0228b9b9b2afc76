"""The API-key rule shared by REST and MCP over HTTP, and the rule against web pages."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from kiwifs.config import parse_config
from kiwifs.errors import ConfigError, Forbidden, Unauthorized
from kiwifs.knowledge import Knowledge
from kiwifs.rest.app import create_app
from kiwifs.server.auth import api_key_for, check_bearer, check_browser
from realserver import KIWIFS


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


@pytest.mark.parametrize(
    ("host", "origin", "loopback"),
    [
        ("127.0.0.1:3333", None, True),  # an agent, a script, curl
        ("localhost:3333", None, True),
        ("[::1]:3333", None, True),
        ("127.0.0.1:3333", "http://127.0.0.1:3333", True),  # the server's own /docs page
        ("LocalHost:3333", "http://localhost:3333", True),
        ("kiwi.internal:3333", None, False),  # a non-loopback bind: any name
        ("kiwi.internal:3333", "https://kiwi.internal:3333", False),
    ],
)
def test_check_browser_lets_agents_and_same_origin_pages_through(
    host: str, origin: str | None, loopback: bool
) -> None:
    check_browser(host, origin, loopback)


@pytest.mark.parametrize(
    ("host", "origin", "loopback", "message"),
    [
        ("127.0.0.1:3333", "https://evil.example", True, "cross-origin request refused"),
        ("127.0.0.1:3333", "http://127.0.0.1:8080", True, "cross-origin"),  # another local app
        ("127.0.0.1:3333", "null", True, "cross-origin"),  # a sandboxed frame, a file:// page
        ("evil.example:3333", "http://evil.example:3333", True, "not a loopback name"),  # rebinding
        ("evil.example:3333", None, True, "not a loopback name"),
        (None, None, True, "not a loopback name"),
        ("[::1:3333", None, True, "not a loopback name"),
        ("kiwi.internal:3333", "https://evil.example", False, "cross-origin"),
    ],
)
def test_check_browser_refuses_other_sites(
    host: str | None, origin: str | None, loopback: bool, message: str
) -> None:
    with pytest.raises(Forbidden, match=message):
        check_browser(host, origin, loopback)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_web_page_cannot_append_to_a_loopback_server(
    tmp_path: Path, anyio_backend: str
) -> None:
    """The write a page could send without a CORS preflight: a text/plain POST."""
    Knowledge.init(tmp_path / "kb")
    app = create_app(Knowledge.open(tmp_path / "kb"), host="127.0.0.1")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:3333") as client:
        url, text = "/api/kiwi/file/append?path=index.md", {"content-type": "text/plain"}
        before = (tmp_path / "kb" / "index.md").read_bytes()
        page = {**text, "origin": "https://evil.example"}
        refused = await client.post(url, content=b"pwned", headers=page)
        assert refused.status_code == 403
        assert refused.json() == {
            "error": "cross-origin request refused (Origin 'https://evil.example')"
        }
        rebound = await client.get("/api/kiwi/tree", headers={"host": "evil.example:3333"})
        assert rebound.status_code == 403
        assert (tmp_path / "kb" / "index.md").read_bytes() == before
        assert (await client.post(url, content=b"agent", headers=text)).status_code == 200


@pytest.mark.parametrize("kind", ["oauth", "per-space", ""])
def test_an_auth_type_kiwifs_lacks_is_refused_even_with_a_key(kind: str) -> None:
    """An unknown type once started the server with no authentication at all."""
    config = parse_config(f'[auth]\ntype = "{kind}"\napi_key = "k"\n')
    with pytest.raises(ConfigError, match=r"supported: none, apikey, perspace"):
        api_key_for(config)
    with pytest.raises(ConfigError):
        api_key_for(config, "flag")


@pytest.mark.parametrize("command", [["serve"], ["mcp", "--http"]])
def test_servers_refuse_an_auth_type_they_cannot_enforce(
    tmp_path: Path, command: list[str]
) -> None:
    """A process (the timeout only bounds the failure: a server that starts would never end)."""
    root = tmp_path / "kb"
    Knowledge.init(root)
    (root / ".kiwi" / "config.toml").write_text('[auth]\ntype = "oauth"\n')
    args = [KIWIFS, *command, "--root", str(root), "--port", "0"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: [auth] type = 'oauth'") and "none, apikey, perspace" in line


def test_standalone_mcp_http_refuses_scoped_keys(tmp_path: Path) -> None:
    """``kiwifs mcp --http`` does not enforce scoped keys: it refuses them, never serves open."""
    root = tmp_path / "kb"
    Knowledge.init(root)
    (root / ".kiwi" / "config.toml").write_text('[auth]\ntype = "perspace"\n')
    args = [KIWIFS, "mcp", "--http", "--root", str(root), "--port", "0"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "enforced by kiwifs serve" in done.stderr
