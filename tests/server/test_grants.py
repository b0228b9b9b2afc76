"""The pure rules of a scoped key's grant: scopes in order, a space, a prefix segment by segment
(hostile prefixes refused), and a request's own path prefix narrowed by the grant's."""

from __future__ import annotations

import pytest

from kiwifs.errors import InvalidPath
from kiwifs.server.grants import (
    SCOPE_NAMES,
    Grant,
    Scope,
    allows,
    canonical_prefix,
    key_digest,
    narrowed_prefix,
    path_allowed,
)


def grant(
    scope: Scope = Scope.ADMIN, space: str | None = "team", prefix: str | None = None
) -> Grant:
    return Grant(space, scope, canonical_prefix(prefix))


def test_scopes_are_ordered_read_write_admin() -> None:
    assert Scope.READ < Scope.WRITE < Scope.ADMIN
    assert SCOPE_NAMES == ("read", "write", "admin")


@pytest.mark.parametrize(
    ("text", "scope"),
    [("read", Scope.READ), (" Write ", Scope.WRITE), ("ADMIN", Scope.ADMIN), ("", Scope.ADMIN)],
)
def test_scope_parse(text: str, scope: Scope) -> None:
    assert Scope.parse(text) is scope


@pytest.mark.parametrize("text", ["superuser", "reader", "rw", "1"])
def test_unknown_scope_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="unknown scope"):
        Scope.parse(text)


@pytest.mark.parametrize(
    ("held", "needed", "expected"),
    [
        (Scope.READ, Scope.READ, True),
        (Scope.READ, Scope.WRITE, False),
        (Scope.READ, Scope.ADMIN, False),
        (Scope.WRITE, Scope.READ, True),
        (Scope.WRITE, Scope.WRITE, True),
        (Scope.WRITE, Scope.ADMIN, False),
        (Scope.ADMIN, Scope.READ, True),
        (Scope.ADMIN, Scope.WRITE, True),
        (Scope.ADMIN, Scope.ADMIN, True),
    ],
)
def test_allows_by_scope(held: Scope, needed: Scope, expected: bool) -> None:
    assert allows(grant(held), "team", needed) is expected


def test_allows_only_its_own_space() -> None:
    assert allows(grant(space="team"), "team", Scope.READ)
    assert not allows(grant(space="team"), "other", Scope.READ)
    assert not allows(grant(space="team"), "Team", Scope.READ)
    assert allows(grant(space=None), "other", Scope.ADMIN)  # no space: every space


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        (None, None),
        ("", None),
        ("/", None),
        ("team", "team/"),
        ("/team/", "team/"),
        ("team/notes", "team/notes/"),
    ],
)
def test_canonical_prefix(prefix: str | None, expected: str | None) -> None:
    assert canonical_prefix(prefix) == expected


@pytest.mark.parametrize(
    "prefix",
    [
        "..",
        "../other",
        "team/../../etc",
        "team/./x",
        "./team",
        ".git",
        "team/.kiwi",
        ".kiwi/",
        "team//x",
        "team\x00",
        "team\nx",
        "caf\\xe9",  # a byte that is not UTF-8: it can name no folder a key may write
    ],
)
def test_hostile_prefixes_are_refused(prefix: str) -> None:
    with pytest.raises(InvalidPath):
        canonical_prefix(prefix)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("team/x.md", True),
        ("/team/x.md", True),
        ("team/deep/er/x.md", True),
        ("team", True),
        ("team/", True),
        ("teamx.md", False),
        ("teamx/x.md", False),
        ("tea", False),
        ("other/team/x.md", False),
        ("", False),
        ("/", False),
        ("team/../secret.md", False),
        ("team/./x.md", False),
        ("team/.git/config", False),
        ("team//x.md", False),
        ("Team/x.md", False),
    ],
)
def test_path_allowed_is_segment_wise(path: str, expected: bool) -> None:
    assert path_allowed(grant(prefix="team/"), path) is expected


def test_path_allowed_without_prefix_allows_every_path() -> None:
    assert path_allowed(grant(prefix=None), "anything/at/all.md")
    assert path_allowed(grant(prefix=None), "")


def test_nested_prefix() -> None:
    g = grant(prefix="team/notes")
    assert path_allowed(g, "team/notes/a.md")
    assert not path_allowed(g, "team/other.md")
    assert not path_allowed(g, "team/notesx/a.md")


@pytest.mark.parametrize(
    ("prefix", "requested", "expected"),
    [
        (None, None, ""),
        (None, "", ""),
        (None, "/notes/", "notes/"),
        (None, "no", "no"),
        ("team", None, "team/"),
        ("team", "", "team/"),
        ("team", "/", "team/"),
        ("team", "te", "team/"),
        ("team", "team", "team/"),
        ("team", "team/", "team/"),
        ("team", "/team/pro", "team/pro"),
        ("team", "team/projects/", "team/projects/"),
        ("team", "teamx", None),
        ("team", "other/", None),
        ("team", "x", None),
        ("team/notes", "team/", "team/notes/"),
        ("team/notes", "team/other", None),
    ],
)
def test_narrowed_prefix(prefix: str | None, requested: str | None, expected: str | None) -> None:
    assert narrowed_prefix(grant(prefix=prefix), requested) == expected


def test_narrowed_prefix_never_reaches_outside_the_grant() -> None:
    """Whatever a request asks, every path the narrowed string prefix matches is allowed."""
    g = grant(prefix="team/")
    paths = ["team", "team/a.md", "team/b/c.md", "teamx.md", "tea.md", "other/a.md", "a.md"]
    for requested in ["", "t", "te", "team", "team/", "team/b", "teamx", "other", "../", "/"]:
        narrowed = narrowed_prefix(g, requested)
        matched = [p for p in paths if narrowed is not None and p.startswith(narrowed)]
        assert all(path_allowed(g, p) for p in matched), (requested, matched)


def test_key_digest_is_sha256_and_distinguishes_keys() -> None:
    assert key_digest("abc").hex() == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )
    assert key_digest("abc") != key_digest("abd")
    assert len(key_digest("x" * 10_000)) == 32


def test_a_grant_is_frozen_and_holds_no_key() -> None:
    g = Grant("team", Scope.READ, "team/", "bot", "config entry 1")
    with pytest.raises(AttributeError):
        g.scope = Scope.ADMIN  # type: ignore[misc]
    assert "team" in repr(g)
