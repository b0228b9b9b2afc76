"""REST plumbing without a server: the status table, the request models and the query parsers.

The routes themselves are tested in ``test_rest.py``.
"""

from __future__ import annotations

import json
import re

import pytest

from kiwifs import errors
from kiwifs.errors import KiwiError, UsageError
from kiwifs.memory.rules import MergeEntry
from kiwifs.rest.http import kiwi_error_response, optional_int
from kiwifs.rest.statuses import STATUS
from kiwifs.server.payloads import BulkRequest, MergeRequest, RenameRequest, field_name, parse

# the server's own trouble: 500, no details (cannot_listen stops a server before it serves)
SERVER_FAULTS = {"error", "config", "cannot_listen"}
UNAVAILABLE = {"busy", "storage", "unavailable"}  # cannot serve it now: 503 with its message
WORKER_ONLY = {"consolidation"}  # raised by the consolidation worker, a client of the server


def error_classes() -> list[type[KiwiError]]:
    found = [c for c in vars(errors).values() if isinstance(c, type)]
    return [c for c in found if issubclass(c, KiwiError)]


def test_every_client_error_code_has_a_status() -> None:
    codes = {c.code for c in error_classes()}
    assert codes - SERVER_FAULTS - WORKER_ONLY == set(STATUS)
    assert {code for code, status in STATUS.items() if status == 503} == UNAVAILABLE
    assert all(400 <= STATUS[code] < 500 for code in set(STATUS) - UNAVAILABLE)


def test_unavailable_is_503_with_its_message() -> None:
    resp = kiwi_error_response(errors.Unavailable("semantic search is not enabled"))
    assert resp.status_code == 503
    assert json.loads(resp.body) == {"error": "semantic search is not enabled"}


def test_server_faults_hide_their_message() -> None:
    resp = kiwi_error_response(errors.ConfigError("config path /secret failed"))
    assert resp.status_code == 500
    assert json.loads(resp.body) == {"error": "internal server error"}


@pytest.mark.parametrize("error", [errors.StorageError, errors.Busy])
def test_unavailable_is_503_and_says_why(error: type[KiwiError]) -> None:
    resp = kiwi_error_response(error("background commits are failing: disk full"))
    assert resp.status_code == 503
    assert json.loads(resp.body) == {"error": "background commits are failing: disk full"}


def test_unauthorized_asks_for_a_bearer_token() -> None:
    resp = kiwi_error_response(errors.Unauthorized("missing token"))
    assert resp.status_code == 401 and resp.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(("raw", "expected"), [(None, None), ("", None), ("  ", None), (" 7 ", 7)])
def test_optional_int_treats_empty_as_not_given(raw: str | None, expected: int | None) -> None:
    assert optional_int("limit", raw) == expected


def test_optional_int_refuses_words() -> None:
    with pytest.raises(UsageError, match="limit must be a whole number, got 'ten'"):
        optional_int("limit", "ten")


def test_merge_entries_are_checked_one_by_one() -> None:
    body = parse(MergeRequest, {"path": "p.md", "entries": [{"id": 42}, {"path": "e.md"}]})
    assert body.merge_entries() == [MergeEntry(id="42"), MergeEntry(path="e.md")]
    cases = [
        ({"path": "p.md", "entries": [{"id": "a"}, "run:1"]}, "entries[1] must be an object"),
        ({"path": "p.md", "entries": [{"id": "a", "note": ["x"]}]}, "entries[0].note must be a"),
        ({"path": "p.md", "entries": [{"id": True}]}, "entries[0].id must be a string"),
        ({"path": "p.md", "entries": []}, "entries must not be empty"),
        ({"entries": [{"id": "a"}]}, "path is required"),
        ({"path": "p.md", "entries": [{"idd": "a"}]}, "entries[0].idd is not a known field"),
    ]
    for value, message in cases:
        with pytest.raises(UsageError, match=re.escape(message)):
            parse(MergeRequest, value)


def test_request_models_name_every_bad_field() -> None:
    with pytest.raises(UsageError) as info:
        parse(BulkRequest, {"files": [{"content": 3}]})
    assert info.value.message == "files[0].path is required; files[0].content must be a string"
    assert parse(BulkRequest, {"files": [{"path": "a.md"}], "future": 1}).files[0].content == ""
    assert parse(RenameRequest, {"from": "a.md", "to": "b.md"}).from_ == "a.md"
    assert field_name(("files", 0, "path")) == "files[0].path" and field_name(()) == "request"
