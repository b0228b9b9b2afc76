"""The access decisions (:mod:`kiwifs.server.access`): scopes per route, events under a prefix,
the web pages' sign-in with a scoped key."""

from __future__ import annotations

import pytest

from kiwifs.errors import Forbidden, Unauthorized
from kiwifs.server.access import Gate, decide, event_allowed, needed_scope, tool_call
from kiwifs.server.grants import Grant, Scope, key_digest
from kiwifs.server.keys import Keyring
from kiwifs.writes.events import Event

TEAM = Grant("default", Scope.WRITE, "team/")


def test_needed_scope_by_method_and_path() -> None:
    assert needed_scope("GET", "/api/kiwi/file") is Scope.READ
    assert needed_scope("HEAD", "/api/kiwi/tree") is Scope.READ
    assert needed_scope("POST", "/api/kiwi/search/semantic") is Scope.READ
    assert needed_scope("POST", "/api/kiwi/memory/claim") is Scope.WRITE
    assert needed_scope("DELETE", "/api/kiwi/claim") is Scope.WRITE
    assert needed_scope("POST", "/mcp") is Scope.READ  # its calls are checked one by one
    assert needed_scope("POST", "/mcp/") is Scope.READ
    assert needed_scope("GET", "/api/spaces") is Scope.ADMIN
    assert needed_scope("DELETE", "/api/spaces/x") is Scope.ADMIN


def test_decide_names_only_what_was_asked() -> None:
    with pytest.raises(Forbidden, match="does not reach space other"):
        decide(TEAM, "other", Scope.READ)
    with pytest.raises(Forbidden, match="scope is write; this request needs admin"):
        decide(TEAM, "default", Scope.ADMIN)
    decide(TEAM, "default", Scope.WRITE)


def test_events_outside_the_prefix_are_left_out() -> None:
    assert event_allowed(TEAM, Event("write", path="team/a.md"))
    assert not event_allowed(TEAM, Event("write", path="secret.md"))
    assert not event_allowed(TEAM, Event("bulk", paths=("team/a.md", "b.md")))
    assert event_allowed(TEAM, Event("bulk", paths=("team/a.md", "team/b.md")))
    assert event_allowed(Grant(None, Scope.READ), Event("write", path="secret.md"))


def test_web_sign_in_takes_only_keys_the_pages_can_honour() -> None:
    ring = Keyring.of(
        [
            (key_digest("whole"), Grant("default", Scope.READ)),
            (key_digest("team"), TEAM),
        ]
    )
    gate = Gate(keyring=ring)
    assert gate.sign_in("whole") == Grant("default", Scope.READ)  # its space's pages only
    assert gate.sign_in("team") is None  # a prefix the pages cannot keep to
    assert gate.sign_in("wrong") is None
    with pytest.raises(Unauthorized):
        gate.grant("Bearer wrong")
    assert Gate().grant(None).scope is Scope.ADMIN  # no auth: open, as before


def test_tool_calls_need_write_to_write_and_take_the_key_s_actor() -> None:
    reader = Grant("default", Scope.READ)
    assert tool_call(reader, "kiwi_read", True, {"path": "a.md"}, False) == {"path": "a.md"}
    with pytest.raises(Forbidden, match="scope is read; kiwi_write needs write"):
        tool_call(reader, "kiwi_write", False, {"path": "a.md"}, True)
    writer = Grant("default", Scope.WRITE, actor="agent:w")
    assert tool_call(writer, "kiwi_write", False, {"actor": "x"}, True) == {"actor": "agent:w"}
    assert tool_call(writer, "kiwi_claims_list", True, {}, False) == {}
    assert tool_call(None, "kiwi_write", False, {"actor": "x"}, True) == {"actor": "x"}
