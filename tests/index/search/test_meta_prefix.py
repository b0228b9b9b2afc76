"""``/meta`` confined to a path prefix (what a scoped key with a prefix is shown): the prefix is
part of the query, so ``count`` and each page hold only the files under it, and ``limit`` and
``offset`` apply after it. Real files, a real index."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiwifs.errors import InvalidQuery
from kiwifs.knowledge import Knowledge


def draft(root: Path, rel: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\nstatus: draft\n---\n# x\n")


@pytest.fixture
def drafts(root: Path) -> Knowledge:
    for rel in ("a/0.md", "a/1.md", "team/1.md", "team/2.md", "team/3.md", "teamx.md", "z/9.md"):
        draft(root, rel)
    return Knowledge.open(root)


def paths(kb: Knowledge, **options: object) -> tuple[int, list[str]]:
    found = kb.meta(["$.status=draft"], **options)  # type: ignore[arg-type]
    return found.count, [hit.path for hit in found.results]


def test_the_prefix_filters_before_the_page(drafts: Knowledge) -> None:
    with drafts as kb:
        team = ["team/1.md", "team/2.md", "team/3.md"]
        assert paths(kb, path_prefix="team/", limit=3) == (3, team)
        assert paths(kb, path_prefix="/team/", limit=2, offset=1) == (3, team[1:])
        assert paths(kb, path_prefix="team", limit=10) == (4, [*team, "teamx.md"])
        assert paths(kb, path_prefix="team/", order="desc", limit=1) == (3, ["team/3.md"])
        assert paths(kb, path_prefix="nowhere/") == (0, [])
        assert paths(kb, path_prefix="team/", paths=["a/0.md", "team/2.md"]) == (1, team[1:2])
        everything = paths(kb, limit=50)
        assert everything[0] == 7 and paths(kb, path_prefix="", limit=50) == everything
        assert paths(kb, path_prefix=None, limit=50) == everything


def test_a_prefix_that_is_not_text_is_refused(drafts: Knowledge) -> None:
    with drafts as kb, pytest.raises(InvalidQuery, match="path prefix"):
        kb.meta(["$.status=draft"], path_prefix="team/\udc80")
