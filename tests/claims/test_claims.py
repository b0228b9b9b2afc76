"""Claims in the core: the store, memory claims, file claims, merges that honour them, and the
report that shows them. Real files, real git, real SQLite; the clock is set by the tests, so a
lease expires without waiting for it."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from filetree import write_files
from gitrepo import commit_count
from kiwifs.base.printed_json import dumps
from kiwifs.claims.store import CLAIMS_FILE, STATE_DIR, ClaimStore
from kiwifs.errors import Conflict, InvalidPath, NotFound, UsageError
from kiwifs.knowledge import Knowledge
from kiwifs.memory.leases import MEMORY, Claim
from kiwifs.memory.rules import MergeEntry
from kiwifs.server.lifecycle import Serving
from queuekit import T0, Clock, add_episodes, opened_on, stored_claims


@pytest.fixture
def queue_root(root: Path) -> Path:
    """The blank root with six episodes (e0-e5) and tasks a-d (a, b and d to do, c done)."""
    add_episodes(root, 6)
    tasks = {
        "tasks/a.md": "---\ntitle: A\nstatus: todo\npriority: 2\n---\nDo A.\n",
        "tasks/b.md": "---\ntitle: B\nstatus: TODO\npriority: 1\n---\nDo B.\n",
        "tasks/c.md": "---\ntitle: C\nstatus: done\n---\nDone.\n",
        "tasks/d.md": "---\ntitle: D\nstatus: todo\n---\nDo D.\n",
    }
    return write_files(root, tasks)


@pytest.fixture
def queue_kb(queue_root: Path, clock: Clock) -> Iterator[Knowledge]:
    with opened_on(queue_root, clock) as opened:
        yield opened


def paths_of(batch: object) -> list[str]:
    return [c.path for c in batch.claimed]  # type: ignore[attr-defined]


# -- the store ----------------------------------------------------------------------------------


def test_store_keeps_claims_across_a_restart(queue_root: Path) -> None:
    store = ClaimStore(queue_root)
    assert store.read(T0) == [] and not (queue_root / STATE_DIR / CLAIMS_FILE).exists()
    with store.transaction() as tx:
        tx.put([Claim("a.md", "w", MEMORY, "a", T0, T0 + 60)])
    store.close()
    again = ClaimStore(queue_root)
    assert again.read(T0) == [Claim("a.md", "w", MEMORY, "a", T0, T0 + 60)]
    assert again.read(T0 + 60) == []  # expired: no longer live
    assert len(again.read(T0 + 60, live_only=False)) == 1
    mode = sqlite3.connect(queue_root / STATE_DIR / CLAIMS_FILE).execute("PRAGMA journal_mode")
    assert mode.fetchone()[0] == "wal"


def test_a_failed_transaction_changes_nothing(queue_root: Path) -> None:
    store = ClaimStore(queue_root)
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.put([Claim("a.md", "w", MEMORY, "", T0, T0 + 60)])
        raise RuntimeError("boom")
    assert store.read(T0) == []


def test_one_row_per_path(queue_root: Path) -> None:
    store = ClaimStore(queue_root)
    with store.transaction() as tx:
        tx.put([Claim("a.md", "w1", MEMORY, "", T0, T0 + 60)])
        tx.put([Claim("a.md", "w2", MEMORY, "", T0, T0 + 90)])
    assert [c.holder for c in store.read(T0)] == ["w2"]


def test_a_corrupt_store_is_rebuilt_empty_with_a_warning(
    queue_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = queue_root / STATE_DIR
    state.mkdir(parents=True, exist_ok=True)
    (state / CLAIMS_FILE).write_bytes(b"this is not a database" * 100)
    with caplog.at_level(logging.WARNING, logger="kiwifs.claims.store"):
        with Knowledge.open(queue_root) as kb:
            assert kb.claims_list() == []
            batch = kb.claim_episodes("w1", limit=1)
    assert paths_of(batch) == ["episodes/e0.md"]
    assert any("starting it empty" in r.getMessage() for r in caplog.records)


# -- memory claims ------------------------------------------------------------------------------


def test_claims_hand_out_disjoint_batches_in_report_order(
    queue_kb: Knowledge, queue_root: Path
) -> None:
    before = commit_count(queue_root)
    first = queue_kb.claim_episodes("w1", limit=2, with_content=True)
    second = queue_kb.claim_episodes("w2", limit=3)
    assert paths_of(first) == ["episodes/e0.md", "episodes/e1.md"]
    assert paths_of(second) == ["episodes/e2.md", "episodes/e3.md", "episodes/e4.md"]
    claimed = first.claimed[0]
    assert claimed.episode_id == "e0"
    assert claimed.content == (queue_root / "episodes/e0.md").read_text()
    assert claimed.etag == queue_kb.read("episodes/e0.md").etag
    assert claimed.lease_expires == first.lease_expires == "2026-11-30T18:06:59Z"  # 10 minutes
    assert second.claimed[0].content is None
    assert commit_count(queue_root) == before  # memory claims make no commit
    assert queue_kb.claim_episodes("w3", limit=5).to_json()["claimed"] == [
        {
            "path": "episodes/e5.md",
            "episode_id": "e5",
            "etag": queue_kb.read("episodes/e5.md").etag,
            "lease_expires": "2026-11-30T18:06:59Z",
        }
    ]
    assert queue_kb.claim_episodes("w4").claimed == ()


def test_claiming_again_renews_and_tops_up(queue_kb: Knowledge, clock: Clock) -> None:
    queue_kb.claim_episodes("w1", limit=2, lease="5m")
    clock.now += 120
    again = queue_kb.claim_episodes("w1", limit=3, lease="5m")
    assert paths_of(again) == ["episodes/e0.md", "episodes/e1.md", "episodes/e2.md"]
    assert {c.lease_expires for c in again.claimed} == {"2026-11-30T18:03:59Z"}
    renewed = queue_kb.claim_episodes("w1", limit=0, lease="1h")
    assert len(renewed.claimed) == 3 and renewed.lease_expires == "2026-11-30T18:58:59Z"
    assert [c.holder for c in queue_kb.claims_list()] == ["w1"] * 3


def test_an_expired_lease_is_free_for_anyone(queue_kb: Knowledge, clock: Clock) -> None:
    queue_kb.claim_episodes("w1", limit=2, lease="1m")
    clock.now += 61
    assert queue_kb.claims_list() == []
    taken = queue_kb.claim_episodes("w2", limit=2)
    assert paths_of(taken) == ["episodes/e0.md", "episodes/e1.md"]
    assert queue_kb.claim_episodes("w1", limit=1).claimed[0].path == "episodes/e2.md"


def test_merged_episodes_leave_the_holders_batch(queue_kb: Knowledge) -> None:
    queue_kb.claim_episodes("w1", limit=2)
    queue_kb.merge("concepts/p.md", [MergeEntry(id="e0")], worker="w1")
    assert paths_of(queue_kb.claim_episodes("w1", limit=2)) == ["episodes/e1.md", "episodes/e2.md"]


def test_claims_follow_the_prefix(queue_kb: Knowledge, queue_root: Path) -> None:
    (queue_root / "raw").mkdir()
    (queue_root / "raw/r.md").write_text("---\nepisode_id: r\n---\nraw\n")
    assert paths_of(queue_kb.claim_episodes("w1", limit=10, prefix="raw")) == [
        "episodes/e0.md",  # memory_kind: episodic counts wherever it is
        "episodes/e1.md",
        "episodes/e2.md",
        "episodes/e3.md",
        "episodes/e4.md",
        "episodes/e5.md",
        "raw/r.md",
    ]


def test_an_episode_gone_since_it_was_listed_is_not_handed_out(
    queue_kb: Knowledge, queue_root: Path
) -> None:
    Serving(queue_kb).stop_watching()
    (queue_root / "episodes/e0.md").unlink()
    assert paths_of(queue_kb.claim_episodes("w1", limit=1)) == ["episodes/e1.md"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"worker": ""}, "worker is required"),
        ({"worker": "w", "limit": -1}, "limit must be between 0 and 1000"),
        ({"worker": "w", "limit": 1001}, "limit must be between 0 and 1000"),
        ({"worker": "w", "lease": "30s"}, "between 1m and 24h"),
        ({"worker": "w", "lease": "25h"}, "between 1m and 24h"),
        ({"worker": "w", "lease": "soon"}, "lease must be a duration"),
        ({"worker": "w", "prefix": "../x"}, ".."),
    ],
)
def test_bad_claims_change_nothing(
    queue_kb: Knowledge, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        queue_kb.claim_episodes(**kwargs)  # type: ignore[arg-type]
    assert queue_kb.claims_list() == []


def test_release(queue_kb: Knowledge, clock: Clock) -> None:
    queue_kb.claim_episodes("w1", limit=3)
    queue_kb.claim_episodes("w2", limit=1)
    assert queue_kb.release_episodes("w1", ["episodes/e1.md"]) == ["episodes/e1.md"]
    with pytest.raises(Conflict, match="claimed by w2, not w1"):
        queue_kb.release_episodes("w1", ["episodes/e0.md", "episodes/e3.md"])
    with pytest.raises(NotFound, match="no live claim on episodes/e1.md"):
        queue_kb.release_episodes("w1", ["episodes/e1.md"])
    with pytest.raises(InvalidPath):
        queue_kb.release_episodes("w1", ["../outside.md"])
    assert [c.path for c in queue_kb.claims_list() if c.holder == "w1"] == [
        "episodes/e0.md",
        "episodes/e2.md",
    ]  # the refused calls released nothing
    assert queue_kb.release_episodes("w1") == ["episodes/e0.md", "episodes/e2.md"]
    with pytest.raises(NotFound, match="worker w1 holds no live claims"):
        queue_kb.release_episodes("w1")
    with pytest.raises(NotFound, match="worker nobody holds no live claims"):
        queue_kb.release_episodes("nobody")
    clock.now += 3600
    with pytest.raises(NotFound):
        queue_kb.release_episodes("w2")  # its lease expired: nothing left to release


# -- merges honour claims -----------------------------------------------------------------------


def test_a_merge_citing_an_episode_another_worker_holds_is_refused(
    queue_kb: Knowledge, queue_root: Path
) -> None:
    queue_kb.claim_episodes("w1", limit=2)
    before = commit_count(queue_root)
    for worker in ("w2", None):
        for entry in (MergeEntry(id="e1"), MergeEntry(path="./episodes/e1.md")):
            with pytest.raises(Conflict, match="episodes/e1.md is claimed by w1 until"):
                queue_kb.merge("concepts/p.md", [MergeEntry(id="e4"), entry], worker=worker)
    assert not (queue_root / "concepts/p.md").exists() and commit_count(queue_root) == before
    assert len(queue_kb.claims_list()) == 2


def test_the_holders_merge_ends_its_claims_in_the_same_step(
    queue_kb: Knowledge, queue_root: Path
) -> None:
    queue_kb.claim_episodes("w1", limit=3)
    result = queue_kb.merge(
        "concepts/p.md", [MergeEntry(id="e0"), MergeEntry(path="episodes/e1.md")], worker="w1"
    )
    assert result.created and len(result.added) == 2
    assert [c.path for c in queue_kb.claims_list()] == ["episodes/e2.md"]
    assert queue_kb.memory_report().claimed_count == 1
    # an idempotent repeat (nothing added) still ends a claim it names
    queue_kb.merge("concepts/p.md", [MergeEntry(id="e0"), MergeEntry(id="e2")], worker="w1")
    assert queue_kb.claims_list() == []


def test_a_merge_naming_an_expired_claim_of_its_worker_is_refused(
    queue_kb: Knowledge, clock: Clock, queue_root: Path
) -> None:
    queue_kb.claim_episodes("w1", limit=1, lease="1m")
    clock.now += 120
    with pytest.raises(Conflict, match="the claim of w1 on episodes/e0.md expired at"):
        queue_kb.merge("concepts/p.md", [MergeEntry(id="e0")], worker="w1")
    assert not (queue_root / "concepts/p.md").exists()
    # another worker (or none) may merge it: an expired claim holds nothing
    queue_kb.merge("concepts/p.md", [MergeEntry(id="e0")], worker="w2")
    assert queue_kb.claims_list() == [] and stored_claims(queue_kb.root, clock.now) == []


def test_merging_free_episodes_needs_no_claim(queue_kb: Knowledge) -> None:
    queue_kb.merge("concepts/p.md", [MergeEntry(id="e5")])
    queue_kb.merge("concepts/q.md", [MergeEntry(id="e4")], worker="w9")
    assert queue_kb.memory_report().unmerged_count == 4


def test_workers_in_many_threads_merge_every_episode_exactly_once(queue_kb: Knowledge) -> None:
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        try:
            while batch := queue_kb.claim_episodes(name, limit=1).claimed:
                entry = MergeEntry(path=batch[0].path)
                queue_kb.merge(f"concepts/{name}.md", [entry], worker=name)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(f"w{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    check = queue_kb.memory_check()
    assert (check.unmerged_count, check.double_merges, check.dangling) == (0, (), ())
    assert queue_kb.claims_list() == []


# -- the report shows claims ---------------------------------------------------------------------


def test_report_marks_claimed_episodes_identically_from_index_and_scan(queue_kb: Knowledge) -> None:
    queue_kb.claim_episodes("w1", limit=2)
    queue_kb.claim_episodes("w2", limit=1)
    queue_kb.merge("concepts/p.md", [MergeEntry(id="e5")])
    indexed = queue_kb.memory_report(limit=3, offset=1)
    scanned = queue_kb.memory_report(limit=3, offset=1, use_index=False)
    assert indexed.to_json() == scanned.to_json()
    data = indexed.to_json()
    assert data["claimed_count"] == 3 and list(data)[-1] == "claimed_count"
    assert data["unmerged"] == [
        {
            "path": "episodes/e1.md",
            "episode_id": "e1",
            "memory_kind": "episodic",
            "claimed_by": "w1",
            "lease_expires": "2026-11-30T18:06:59Z",
        },
        {
            "path": "episodes/e2.md",
            "episode_id": "e2",
            "memory_kind": "episodic",
            "claimed_by": "w2",
            "lease_expires": "2026-11-30T18:06:59Z",
        },
        {"path": "episodes/e3.md", "episode_id": "e3", "memory_kind": "episodic"},
    ]
    assert all("claimed_by" not in e for e in data["episodic_files"])


def test_report_document_is_the_report_with_claims(queue_kb: Knowledge, tmp_path: Path) -> None:
    queue_kb.claim_episodes("w1", limit=2)
    queue_kb.claim("tasks/a.md", "alice")  # a file claim outside the episodes counts for nothing
    for limit in (None, 2):
        document = queue_kb.memory_report_document(limit=limit)
        out = tmp_path / "out.json"
        out.write_bytes(dumps(document.value))
        report = queue_kb.memory_report(limit=limit).to_json()
        assert json.loads(out.read_text()) == report
        assert out.read_text() == json.dumps(report, indent=2, ensure_ascii=False)
        assert report["claimed_count"] == 2


# -- file claims (KiwiFS's generic claims) -------------------------------------------------------


def test_a_file_claim_is_written_into_the_frontmatter(
    queue_kb: Knowledge, queue_root: Path
) -> None:
    before = commit_count(queue_root)
    claim = queue_kb.claim("tasks/a.md", "alice", "15m")
    assert claim.to_json() == {
        "path": "tasks/a.md",
        "holder": "alice",
        "claimed_at": "2026-11-30T17:56:59Z",
        "lease_expires": "2026-11-30T18:11:59Z",
    }
    text = (queue_root / "tasks/a.md").read_text()
    assert text == (
        "---\ntitle: A\nstatus: todo\npriority: 2\nclaimed-by: alice\n"
        'claimed-at: "2026-11-30T17:56:59Z"\nlease-expires: "2026-11-30T18:11:59Z"\n---\nDo A.\n'
    )
    assert commit_count(queue_root) == before + 1
    assert queue_kb.claims_list() == [claim]


def test_file_claim_conflict_renewal_and_takeover(
    queue_kb: Knowledge, clock: Clock, queue_root: Path
) -> None:
    queue_kb.claim("tasks/a.md", "alice", "2m")
    with pytest.raises(Conflict, match="tasks/a.md is claimed by alice until"):
        queue_kb.claim("tasks/a.md", "bob")
    clock.now += 60
    renewed = queue_kb.claim("tasks/a.md", "alice", "2m")  # the same holder renews
    assert renewed.claimed_at == T0 and renewed.expires == T0 + 180
    clock.now += 200
    taken = queue_kb.claim("tasks/a.md", "bob")  # expired: free
    assert taken.holder == "bob" and "claimed-by: bob" in (queue_root / "tasks/a.md").read_text()


def test_file_claims_and_memory_claims_share_one_claim_per_path(queue_kb: Knowledge) -> None:
    queue_kb.claim_episodes("w1", limit=1)
    with pytest.raises(Conflict, match="claimed by w1"):
        queue_kb.claim("episodes/e0.md", "alice")
    queue_kb.claim("episodes/e1.md", "alice")
    assert paths_of(queue_kb.claim_episodes("w2", limit=1)) == ["episodes/e2.md"]
    with pytest.raises(Conflict, match="episodes/e1.md is claimed by alice"):
        queue_kb.merge("concepts/p.md", [MergeEntry(id="e1")], worker="w2")


def test_release_removes_the_keys(queue_kb: Knowledge, queue_root: Path, clock: Clock) -> None:
    original = (queue_root / "tasks/a.md").read_text()
    queue_kb.claim("tasks/a.md", "alice")
    with pytest.raises(Conflict, match="claimed by alice, not bob"):
        queue_kb.release("tasks/a.md", "bob")
    assert queue_kb.release("tasks/a.md", "alice") == "tasks/a.md"
    assert (queue_root / "tasks/a.md").read_text() == original
    with pytest.raises(NotFound, match="no claim on tasks/a.md by alice"):
        queue_kb.release("tasks/a.md", "alice")
    (queue_root / "plain.md").write_text("no frontmatter\n")
    queue_kb.claim("plain.md", "alice")
    clock.now += 7200
    queue_kb.release("plain.md", "alice")  # its own claim, even expired: cleans the file
    assert (queue_root / "plain.md").read_text() == "no frontmatter\n"


@pytest.mark.parametrize(
    ("path", "holder", "lease", "error", "message"),
    [
        ("../outside.md", "alice", None, InvalidPath, "'..'"),
        ("/etc/passwd/../x.md", "alice", None, InvalidPath, "'..'"),
        ("tasks/missing.md", "alice", None, NotFound, "file not found"),
        ("tasks/a.md", "", None, UsageError, "holder is required"),
        ("tasks/a.md", "alice", "59s", UsageError, "lease_duration must be between 1m and 24h"),
        ("tasks/a.md", "alice", "24h1m", UsageError, "between 1m and 24h"),
    ],
)
def test_bad_file_claims_change_nothing(
    queue_kb: Knowledge,
    queue_root: Path,
    path: str,
    holder: str,
    lease: str | None,
    error: type[Exception],
    message: str,
) -> None:
    before = (queue_root / "tasks/a.md").read_bytes(), commit_count(queue_root)
    with pytest.raises(error, match=message):
        queue_kb.claim(path, holder, lease)
    assert ((queue_root / "tasks/a.md").read_bytes(), commit_count(queue_root)) == before
    assert queue_kb.claims_list() == []


def test_eligible_lists_unclaimed_todo_tasks_best_priority_first(
    queue_kb: Knowledge, clock: Clock
) -> None:
    assert [t.path for t in queue_kb.eligible()] == ["tasks/b.md", "tasks/a.md", "tasks/d.md"]
    queue_kb.claim("tasks/b.md", "alice", "1m")
    assert [t.to_json() for t in queue_kb.eligible(limit=1)] == [
        {"path": "tasks/a.md", "title": "A", "priority": 2}
    ]
    clock.now += 61
    assert [t.path for t in queue_kb.eligible(path_prefix="tasks/b")] == ["tasks/b.md"]
    assert queue_kb.eligible(path_prefix="nothing/") == []
    for bad in (0, 201):
        with pytest.raises(UsageError, match="limit must be between 1 and 200"):
            queue_kb.eligible(limit=bad)


def test_the_dashboard_queue_and_overview_show_claims(queue_kb: Knowledge) -> None:
    assert queue_kb.overview().to_json()["claimed_count"] == 0
    queue_kb.claim_episodes("w1", limit=2)
    queue_kb.claim("tasks/a.md", "alice")  # not an episode: not in the queue's count
    page = queue_kb.queue()
    assert [(i.episode.path, i.claimed_by) for i in page.items[:3]] == [
        ("episodes/e0.md", "w1"),
        ("episodes/e1.md", "w1"),
        ("episodes/e2.md", None),
    ]
    assert page.to_json()["unmerged"][0]["lease_expires"] == "2026-11-30T18:06:59Z"
    assert queue_kb.overview().to_json()["claimed_count"] == 2
