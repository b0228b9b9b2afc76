"""The queue's promises in the core: no episode is merged twice (a lost lease, another page's
merge), ``force`` for a person who means it, warnings for entries that cite nothing, and what
claims do to renames, deletes, writes and forgets. Real files, real git, real SQLite; the claims
clock is set by the tests, so a lease expires without waiting for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from filetree import write_files
from gitrepo import commit_count
from kiwifs.errors import Conflict, UsageError
from kiwifs.knowledge import Knowledge
from kiwifs.memory.rules import MergeEntry
from queuekit import Clock, add_episodes, opened_on, stored_claims


@pytest.fixture
def queue_root(root: Path) -> Path:
    """The blank root with three episodes (e0-e2) and one todo task."""
    add_episodes(root, 3)
    return write_files(root, {"tasks/a.md": "---\ntitle: A\nstatus: todo\n---\nDo A.\n"})


@pytest.fixture
def queue_kb(queue_root: Path, clock: Clock) -> Iterator[Knowledge]:
    with opened_on(queue_root, clock) as opened:
        yield opened


def doubles(kb: Knowledge) -> list[tuple[str, tuple[str, ...]]]:
    return [(d.path, d.pages) for d in kb.memory_check().double_merges]


# -- no episode is merged twice -----------------------------------------------------------------


def test_a_merge_after_the_lease_was_lost_and_consumed_is_refused(
    queue_kb: Knowledge, clock: Clock, queue_root: Path
) -> None:
    queue_kb.claim_episodes("A", limit=1, lease="1m")
    clock.now += 62
    assert [c.path for c in queue_kb.claim_episodes("B", limit=1).claimed] == ["episodes/e0.md"]
    queue_kb.merge("concepts/b.md", [MergeEntry(id="e0")], worker="B")
    before = commit_count(queue_root)
    for worker in ("A", None):
        for entry in (MergeEntry(id="e0"), MergeEntry(path="episodes/e0.md")):
            with pytest.raises(
                Conflict, match="episodes/e0.md is already merged into concepts/b.md; merging"
            ):
                queue_kb.merge("concepts/a.md", [entry], worker=worker)
    assert not (queue_root / "concepts/a.md").exists() and commit_count(queue_root) == before
    assert doubles(queue_kb) == []


def test_merging_into_the_same_page_again_stays_idempotent(
    queue_kb: Knowledge, queue_root: Path
) -> None:
    queue_kb.merge("concepts/b.md", [MergeEntry(id="e0")])
    before = commit_count(queue_root)
    again = queue_kb.merge("concepts/b.md", [MergeEntry(id="e0")], worker="A")
    assert again.added == () and commit_count(queue_root) == before
    other_key = queue_kb.merge("concepts/b.md", [MergeEntry(path="episodes/e0.md")])
    assert len(other_key.added) == 1  # the same episode, the same page: not a double merge
    assert doubles(queue_kb) == []


def test_force_merges_anyway_and_ends_the_claims_it_cites(queue_kb: Knowledge) -> None:
    queue_kb.merge("concepts/b.md", [MergeEntry(id="e0")])
    forced = queue_kb.merge("concepts/a.md", [MergeEntry(id="e0")], force=True)
    assert len(forced.added) == 1
    assert doubles(queue_kb) == [("episodes/e0.md", ("concepts/a.md", "concepts/b.md"))]
    queue_kb.claim_episodes("A", limit=1)  # e1
    with pytest.raises(Conflict, match="claimed by A"):
        queue_kb.merge("concepts/c.md", [MergeEntry(id="e1")], worker="B")
    queue_kb.merge("concepts/c.md", [MergeEntry(id="e1")], worker="B", force=True)
    assert queue_kb.claims_list() == []
    with pytest.raises(Conflict, match="episodes/e1.md is already merged into concepts/c.md"):
        queue_kb.merge("concepts/a.md", [MergeEntry(id="e1")], worker="A")


def test_the_plain_merge_of_a_free_episode_still_works(queue_kb: Knowledge) -> None:
    result = queue_kb.merge("concepts/a.md", [MergeEntry(id="e2")])
    assert len(result.added) == 1 and result.warnings == ()


# -- entries that cite nothing ------------------------------------------------------------------


def test_a_merge_of_an_unknown_episode_is_written_with_a_warning(
    queue_kb: Knowledge, queue_root: Path
) -> None:
    result = queue_kb.merge(
        "concepts/a.md", [MergeEntry(id="nope"), MergeEntry(path="episodes/later.md")]
    )
    assert len(result.added) == 2 and (queue_root / "concepts/a.md").exists()
    assert result.warnings == (
        "episode nope cites nothing yet (no episode has id 'nope'); memory check lists it as"
        " dangling until the episode exists",
        "episode path episodes/later.md cites nothing yet (no file at episodes/later.md);"
        " memory check lists it as dangling until the episode exists",
    )
    assert len(queue_kb.memory_check().dangling) == 2
    assert result.to_json()["warnings"] == list(result.warnings)


# -- claims and the changes of the paths they hold ----------------------------------------------


def paths_claimed(kb: Knowledge) -> list[tuple[str, str]]:
    return [(c.path, c.holder) for c in kb.claims_list()]


def test_the_generic_release_does_not_end_a_memory_claim(queue_kb: Knowledge) -> None:
    queue_kb.claim_episodes("w1", limit=1)
    for holder in ("w1", "bob"):
        with pytest.raises(UsageError, match="held by a memory claim of w1, not a file claim"):
            queue_kb.release("episodes/e0.md", holder)
    assert paths_claimed(queue_kb) == [("episodes/e0.md", "w1")]


def test_a_file_under_a_file_claim_changes_only_by_its_holder(
    queue_kb: Knowledge, queue_root: Path
) -> None:
    queue_kb.claim("tasks/a.md", "alice")
    claimed = (queue_root / "tasks/a.md").read_bytes()
    before = commit_count(queue_root)
    refused = "tasks/a.md is claimed by alice until .*; only alice may {} it"
    with pytest.raises(Conflict, match=refused.format("change")):
        queue_kb.write("tasks/a.md", "---\ntitle: A\n---\nmine now\n", actor="bob")
    with pytest.raises(Conflict, match=refused.format("change")):
        queue_kb.append("tasks/a.md", "more", actor="bob")
    with pytest.raises(Conflict, match=refused.format("change")):
        queue_kb.bulk_write([("tasks/z.md", "z"), ("tasks/a.md", "x")], actor="bob")
    with pytest.raises(Conflict, match=refused.format("change")):
        queue_kb.merge("tasks/a.md", [MergeEntry(id="e0")], actor="bob")
    for action, call in (
        ("forget", lambda: queue_kb.forget("tasks/a.md", actor="bob")),
        ("rename", lambda: queue_kb.rename("tasks/a.md", "tasks/b.md", actor="bob")),
        ("delete", lambda: queue_kb.delete("tasks/a.md", actor="bob")),
    ):
        with pytest.raises(Conflict, match=refused.format(action)):
            call()
    assert (queue_root / "tasks/a.md").read_bytes() == claimed and commit_count(
        queue_root
    ) == before
    assert not (queue_root / "tasks/z.md").exists()
    # the holder's write without the claim keys keeps them: the file agrees with the store
    queue_kb.write("tasks/a.md", "---\ntitle: A\nstatus: done\n---\nDone.\n", actor="alice")
    assert queue_kb.frontmatter("tasks/a.md")["claimed-by"] == "alice"
    assert paths_claimed(queue_kb) == [("tasks/a.md", "alice")]
    queue_kb.release("tasks/a.md", "alice")
    queue_kb.write("tasks/a.md", "free again\n", actor="bob")


def test_a_claim_follows_its_holders_rename_and_ends_with_its_delete(
    queue_kb: Knowledge, queue_root: Path, clock: Clock
) -> None:
    queue_kb.claim_episodes("w1", limit=1)
    for action, call in (
        ("rename", lambda: queue_kb.rename("episodes/e0.md", "episodes/x.md", actor="bob")),
        ("delete", lambda: queue_kb.delete("episodes/e0.md", actor="bob")),
        ("forget", lambda: queue_kb.forget("episodes/e0.md", actor="bob")),
    ):
        with pytest.raises(Conflict, match=f"claimed by w1 until .*; only w1 may {action} it"):
            call()
    assert (queue_root / "episodes/e0.md").exists()
    queue_kb.write("episodes/e0.md", "---\nmemory_kind: episodic\nepisode_id: e0\n---\nfixed\n")
    queue_kb.rename("episodes/e0.md", "episodes/x.md", actor="w1")
    assert paths_claimed(queue_kb) == [("episodes/x.md", "w1")]
    assert [c.path for c in queue_kb.claim_episodes("w1", limit=1).claimed] == ["episodes/x.md"]
    queue_kb.claim("tasks/a.md", "alice")
    queue_kb.rename("tasks/a.md", "tasks/done/a.md", actor="alice")
    assert paths_claimed(queue_kb) == [("episodes/x.md", "w1"), ("tasks/done/a.md", "alice")]
    assert queue_kb.frontmatter("tasks/done/a.md")["claimed-by"] == "alice"
    queue_kb.delete("episodes/x.md", actor="w1")
    assert paths_claimed(queue_kb) == [("tasks/done/a.md", "alice")]
    clock.now += 3600  # expired: anyone may move it, and the row goes with the file
    queue_kb.rename("tasks/done/a.md", "tasks/a.md", actor="bob")
    rows = stored_claims(queue_kb.root, clock.now)
    assert [(c.path, c.holder) for c in rows] == [("tasks/a.md", "alice")]
    queue_kb.release("tasks/a.md", "alice")  # its holder can still clean the keys at the new path
    assert "claimed-by" not in queue_kb.frontmatter("tasks/a.md")


def test_forgetting_a_claimed_episode_is_for_its_holder_and_ends_the_claim(
    queue_kb: Knowledge,
) -> None:
    queue_kb.claim_episodes("w1", limit=1)
    queue_kb.forget("episodes/e0.md", reason="wrong", actor="w1")
    assert queue_kb.claims_list() == []
    assert "episodes/e0.md" not in [e.path for e in queue_kb.memory_report().unmerged]
    queue_kb.restore("episodes/e0.md", actor="bob")  # no claim holds it any more
