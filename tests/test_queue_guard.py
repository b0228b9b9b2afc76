"""The queue's promises in the core: no episode is merged twice (a lost lease, another page's
merge), ``force`` for a person who means it, warnings for entries that cite nothing, and what
claims do to renames, deletes, writes and forgets. Real files, real git, real SQLite; the claims
clock is set by the tests, so a lease expires without waiting for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gitrepo import commit_count
from kiwifs.errors import Conflict, UsageError
from kiwifs.knowledge import Knowledge
from kiwifs.memory.rules import MergeEntry

T0 = 1_796_061_419.0  # 2026-11-30T17:56:59Z


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "kb"
    Knowledge.init(folder, "blank")
    (folder / "episodes").mkdir()
    for n in range(3):
        (folder / f"episodes/e{n}.md").write_text(
            f"---\nmemory_kind: episodic\nepisode_id: e{n}\n---\nepisode {n}\n"
        )
    (folder / "tasks").mkdir()
    (folder / "tasks/a.md").write_text("---\ntitle: A\nstatus: todo\n---\nDo A.\n")
    return folder


@pytest.fixture
def kb(root: Path, clock: Clock) -> Iterator[Knowledge]:
    with Knowledge.open(root) as opened:
        opened.ensure_versioned()
        opened.claims.clock = clock
        yield opened


def doubles(kb: Knowledge) -> list[tuple[str, tuple[str, ...]]]:
    return [(d.path, d.pages) for d in kb.memory_check().double_merges]


# -- no episode is merged twice -----------------------------------------------------------------


def test_a_merge_after_the_lease_was_lost_and_consumed_is_refused(
    kb: Knowledge, clock: Clock, root: Path
) -> None:
    kb.claim_episodes("A", limit=1, lease="1m")
    clock.now += 62
    assert [c.path for c in kb.claim_episodes("B", limit=1).claimed] == ["episodes/e0.md"]
    kb.merge("concepts/b.md", [MergeEntry(id="e0")], worker="B")
    before = commit_count(root)
    for worker in ("A", None):
        for entry in (MergeEntry(id="e0"), MergeEntry(path="episodes/e0.md")):
            with pytest.raises(
                Conflict, match="episodes/e0.md is already merged into concepts/b.md; merging"
            ):
                kb.merge("concepts/a.md", [entry], worker=worker)
    assert not (root / "concepts/a.md").exists() and commit_count(root) == before
    assert doubles(kb) == []


def test_merging_into_the_same_page_again_stays_idempotent(kb: Knowledge, root: Path) -> None:
    kb.merge("concepts/b.md", [MergeEntry(id="e0")])
    before = commit_count(root)
    again = kb.merge("concepts/b.md", [MergeEntry(id="e0")], worker="A")
    assert again.added == () and commit_count(root) == before
    other_key = kb.merge("concepts/b.md", [MergeEntry(path="episodes/e0.md")])
    assert len(other_key.added) == 1  # the same episode, the same page: not a double merge
    assert doubles(kb) == []


def test_force_merges_anyway_and_ends_the_claims_it_cites(kb: Knowledge) -> None:
    kb.merge("concepts/b.md", [MergeEntry(id="e0")])
    forced = kb.merge("concepts/a.md", [MergeEntry(id="e0")], force=True)
    assert len(forced.added) == 1
    assert doubles(kb) == [("episodes/e0.md", ("concepts/a.md", "concepts/b.md"))]
    kb.claim_episodes("A", limit=1)  # e1
    with pytest.raises(Conflict, match="claimed by A"):
        kb.merge("concepts/c.md", [MergeEntry(id="e1")], worker="B")
    kb.merge("concepts/c.md", [MergeEntry(id="e1")], worker="B", force=True)
    assert kb.claims_list() == []
    with pytest.raises(Conflict, match="episodes/e1.md is already merged into concepts/c.md"):
        kb.merge("concepts/a.md", [MergeEntry(id="e1")], worker="A")


def test_the_plain_merge_of_a_free_episode_still_works(kb: Knowledge) -> None:
    result = kb.merge("concepts/a.md", [MergeEntry(id="e2")])
    assert len(result.added) == 1 and result.warnings == ()


# -- entries that cite nothing ------------------------------------------------------------------


def test_a_merge_of_an_unknown_episode_is_written_with_a_warning(kb: Knowledge, root: Path) -> None:
    result = kb.merge(
        "concepts/a.md", [MergeEntry(id="nope"), MergeEntry(path="episodes/later.md")]
    )
    assert len(result.added) == 2 and (root / "concepts/a.md").exists()
    assert result.warnings == (
        "episode nope cites nothing yet (no episode has id 'nope'); memory check lists it as"
        " dangling until the episode exists",
        "episode path episodes/later.md cites nothing yet (no file at episodes/later.md);"
        " memory check lists it as dangling until the episode exists",
    )
    assert len(kb.memory_check().dangling) == 2
    assert result.to_json()["warnings"] == list(result.warnings)


# -- claims and the changes of the paths they hold ----------------------------------------------


def paths_claimed(kb: Knowledge) -> list[tuple[str, str]]:
    return [(c.path, c.holder) for c in kb.claims_list()]


def test_the_generic_release_does_not_end_a_memory_claim(kb: Knowledge) -> None:
    kb.claim_episodes("w1", limit=1)
    for holder in ("w1", "bob"):
        with pytest.raises(UsageError, match="held by a memory claim of w1, not a file claim"):
            kb.release("episodes/e0.md", holder)
    assert paths_claimed(kb) == [("episodes/e0.md", "w1")]


def test_a_file_under_a_file_claim_changes_only_by_its_holder(kb: Knowledge, root: Path) -> None:
    kb.claim("tasks/a.md", "alice")
    claimed = (root / "tasks/a.md").read_bytes()
    before = commit_count(root)
    refused = "tasks/a.md is claimed by alice until .*; only alice may {} it"
    with pytest.raises(Conflict, match=refused.format("change")):
        kb.write("tasks/a.md", "---\ntitle: A\n---\nmine now\n", actor="bob")
    with pytest.raises(Conflict, match=refused.format("change")):
        kb.append("tasks/a.md", "more", actor="bob")
    with pytest.raises(Conflict, match=refused.format("change")):
        kb.bulk_write([("tasks/z.md", "z"), ("tasks/a.md", "x")], actor="bob")
    with pytest.raises(Conflict, match=refused.format("change")):
        kb.merge("tasks/a.md", [MergeEntry(id="e0")], actor="bob")
    for action, call in (
        ("forget", lambda: kb.forget("tasks/a.md", actor="bob")),
        ("rename", lambda: kb.rename("tasks/a.md", "tasks/b.md", actor="bob")),
        ("delete", lambda: kb.delete("tasks/a.md", actor="bob")),
    ):
        with pytest.raises(Conflict, match=refused.format(action)):
            call()
    assert (root / "tasks/a.md").read_bytes() == claimed and commit_count(root) == before
    assert not (root / "tasks/z.md").exists()
    # the holder's write without the claim keys keeps them: the file agrees with the store
    kb.write("tasks/a.md", "---\ntitle: A\nstatus: done\n---\nDone.\n", actor="alice")
    assert kb.frontmatter("tasks/a.md")["claimed-by"] == "alice"
    assert paths_claimed(kb) == [("tasks/a.md", "alice")]
    kb.release("tasks/a.md", "alice")
    kb.write("tasks/a.md", "free again\n", actor="bob")


def test_a_claim_follows_its_holders_rename_and_ends_with_its_delete(
    kb: Knowledge, root: Path, clock: Clock
) -> None:
    kb.claim_episodes("w1", limit=1)
    for action, call in (
        ("rename", lambda: kb.rename("episodes/e0.md", "episodes/x.md", actor="bob")),
        ("delete", lambda: kb.delete("episodes/e0.md", actor="bob")),
        ("forget", lambda: kb.forget("episodes/e0.md", actor="bob")),
    ):
        with pytest.raises(Conflict, match=f"claimed by w1 until .*; only w1 may {action} it"):
            call()
    assert (root / "episodes/e0.md").exists()
    kb.write("episodes/e0.md", "---\nmemory_kind: episodic\nepisode_id: e0\n---\nfixed\n")
    kb.rename("episodes/e0.md", "episodes/x.md", actor="w1")
    assert paths_claimed(kb) == [("episodes/x.md", "w1")]
    assert [c.path for c in kb.claim_episodes("w1", limit=1).claimed] == ["episodes/x.md"]
    kb.claim("tasks/a.md", "alice")
    kb.rename("tasks/a.md", "tasks/done/a.md", actor="alice")
    assert paths_claimed(kb) == [("episodes/x.md", "w1"), ("tasks/done/a.md", "alice")]
    assert kb.frontmatter("tasks/done/a.md")["claimed-by"] == "alice"
    kb.delete("episodes/x.md", actor="w1")
    assert paths_claimed(kb) == [("tasks/done/a.md", "alice")]
    clock.now += 3600  # expired: anyone may move it, and the row goes with the file
    kb.rename("tasks/done/a.md", "tasks/a.md", actor="bob")
    rows = kb.claims.store.read(clock.now, live_only=False)
    assert [(c.path, c.holder) for c in rows] == [("tasks/a.md", "alice")]
    kb.release("tasks/a.md", "alice")  # its holder can still clean the keys at the new path
    assert "claimed-by" not in kb.frontmatter("tasks/a.md")


def test_forgetting_a_claimed_episode_is_for_its_holder_and_ends_the_claim(
    kb: Knowledge,
) -> None:
    kb.claim_episodes("w1", limit=1)
    kb.forget("episodes/e0.md", reason="wrong", actor="w1")
    assert kb.claims_list() == []
    assert "episodes/e0.md" not in [e.path for e in kb.memory_report().unmerged]
    kb.restore("episodes/e0.md", actor="bob")  # no claim holds it any more
