"""The changes feed confined to a path prefix (what a scoped key with a prefix is shown).

Only commits whose every changed path starts with the prefix are listed, a rename naming a path
outside it is left out whole, and ``limit`` cuts after the filter, however many commits outside
the prefix lie between. Real roots, real git.
"""

from __future__ import annotations

import pytest

from gitrepo import git_line
from kiwifs.errors import UsageError
from kiwifs.git import log
from kiwifs.knowledge import Knowledge


def seen(kb: Knowledge, start: str, prefix: str | None, limit: int | None = None) -> list:
    return [(c.action, c.path) for c in kb.changes(start, limit, path_prefix=prefix)]


def test_only_commits_inside_the_prefix_before_the_limit(knowledge_kb: Knowledge) -> None:
    start = git_line(knowledge_kb.root, "rev-parse", "HEAD")
    for n in range(3):
        knowledge_kb.write(f"team/a{n}.md", f"a{n}")
        for m in range(2):
            knowledge_kb.write(f"other/b{n}{m}.md", "b")
    knowledge_kb.write("teamx.md", "not a folder of team")
    inside = [("write", f"team/a{n}.md") for n in reversed(range(3))]
    assert seen(knowledge_kb, start, "team/", 3) == inside
    assert seen(knowledge_kb, start, "/team/", 2) == inside[:2]
    assert seen(knowledge_kb, start, "team/a1", None) == [("write", "team/a1.md")]
    assert seen(knowledge_kb, start, "nowhere/", None) == []
    everything = seen(knowledge_kb, start, None, 500)
    assert len(everything) == 10 and everything == seen(knowledge_kb, start, "", 500)


def test_a_commit_naming_a_path_outside_is_left_out_whole(knowledge_kb: Knowledge) -> None:
    root = knowledge_kb.root
    start = git_line(root, "rev-parse", "HEAD")
    knowledge_kb.write("secret.md", "s")
    knowledge_kb.rename("secret.md", "team/moved.md")  # out of the dark: names secret.md
    knowledge_kb.write("team/keep.md", "k")
    knowledge_kb.rename("team/keep.md", "team/kept.md")  # both sides inside
    knowledge_kb.rename("team/kept.md", "gone.md")  # out: names gone.md
    knowledge_kb.bulk_write([("team/x.md", "x"), ("y.md", "y")])  # touches y.md too
    knowledge_kb.bulk_write([("team/p.md", "p"), ("team/q.md", "q")])
    knowledge_kb.delete("team/moved.md")
    assert seen(knowledge_kb, start, "team/") == [
        ("delete", "team/moved.md"),
        ("write", ""),  # a bulk write, every file inside
        ("rename", "team/kept.md"),
        ("write", "team/keep.md"),
    ]


def test_the_filter_reads_past_a_page_of_commits(
    knowledge_kb: Knowledge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More commits of the folder that touch a path outside too than ``git log`` is asked for
    at a time: the filter pages on until the limit is met."""
    start = git_line(knowledge_kb.root, "rev-parse", "HEAD")
    knowledge_kb.write("team/first.md", "1")
    for n in range(5):
        knowledge_kb.bulk_write([(f"team/m{n}.md", "m"), (f"out/{n}.md", "o")])
    monkeypatch.setattr(log, "_PAGE", 2)
    assert seen(knowledge_kb, start, "team/", 1) == [("write", "team/first.md")]


def test_a_prefix_that_is_not_text_is_refused(knowledge_kb: Knowledge) -> None:
    with pytest.raises(UsageError, match="path prefix"):
        knowledge_kb.changes(path_prefix="team/\udc80")
