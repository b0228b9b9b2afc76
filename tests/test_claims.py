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

from gitrepo import commit_count
from kiwifs.claims import CLAIMS_FILE, STATE_DIR, ClaimStore
from kiwifs.errors import Conflict, InvalidPath, NotFound, UsageError
from kiwifs.knowledge import Knowledge
from kiwifs.leases import MEMORY, Claim
from kiwifs.memory.rules import MergeEntry
from kiwifs.printed_json import dumps

T0 = 1_796_061_419.0  # 2026-11-30T17:56:59Z


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def episode(ident: str, *extra: str) -> str:
    return "\n".join(["---", "memory_kind: episodic", f"episode_id: {ident}", *extra, "---", ""])


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "kb"
    Knowledge.init(folder, "blank")
    (folder / "episodes").mkdir()
    for n in range(6):
        (folder / f"episodes/e{n}.md").write_text(episode(f"e{n}") + f"episode {n}\n")
    (folder / "tasks").mkdir()
    (folder / "tasks/a.md").write_text("---\ntitle: A\nstatus: todo\npriority: 2\n---\nDo A.\n")
    (folder / "tasks/b.md").write_text("---\ntitle: B\nstatus: TODO\npriority: 1\n---\nDo B.\n")
    (folder / "tasks/c.md").write_text("---\ntitle: C\nstatus: done\n---\nDone.\n")
    (folder / "tasks/d.md").write_text("---\ntitle: D\nstatus: todo\n---\nDo D.\n")
    return folder


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def kb(root: Path, clock: Clock) -> Iterator[Knowledge]:
    with Knowledge.open(root) as opened:
        opened.ensure_versioned()
        opened.claims.clock = clock
        yield opened


def paths_of(batch: object) -> list[str]:
    return [c.path for c in batch.claimed]  # type: ignore[attr-defined]


# -- the store ----------------------------------------------------------------------------------


def test_store_keeps_claims_across_a_restart(root: Path) -> None:
    store = ClaimStore(root)
    assert store.read(T0) == [] and not (root / STATE_DIR / CLAIMS_FILE).exists()
    with store.transaction() as tx:
        tx.put([Claim("a.md", "w", MEMORY, "a", T0, T0 + 60)])
    store.close()
    again = ClaimStore(root)
    assert again.read(T0) == [Claim("a.md", "w", MEMORY, "a", T0, T0 + 60)]
    assert again.read(T0 + 60) == []  # expired: no longer live
    assert len(again.read(T0 + 60, live_only=False)) == 1
    mode = sqlite3.connect(root / STATE_DIR / CLAIMS_FILE).execute("PRAGMA journal_mode")
    assert mode.fetchone()[0] == "wal"


def test_a_failed_transaction_changes_nothing(root: Path) -> None:
    store = ClaimStore(root)
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.put([Claim("a.md", "w", MEMORY, "", T0, T0 + 60)])
        raise RuntimeError("boom")
    assert store.read(T0) == []


def test_one_row_per_path(root: Path) -> None:
    store = ClaimStore(root)
    with store.transaction() as tx:
        tx.put([Claim("a.md", "w1", MEMORY, "", T0, T0 + 60)])
        tx.put([Claim("a.md", "w2", MEMORY, "", T0, T0 + 90)])
    assert [c.holder for c in store.read(T0)] == ["w2"]


def test_a_corrupt_store_is_rebuilt_empty_with_a_warning(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = root / STATE_DIR
    state.mkdir(parents=True, exist_ok=True)
    (state / CLAIMS_FILE).write_bytes(b"this is not a database" * 100)
    with caplog.at_level(logging.WARNING, logger="kiwifs.claims"):
        with Knowledge.open(root) as kb:
            assert kb.claims_list() == []
            batch = kb.claim_episodes("w1", limit=1)
    assert paths_of(batch) == ["episodes/e0.md"]
    assert any("starting it empty" in r.getMessage() for r in caplog.records)


# -- memory claims ------------------------------------------------------------------------------


def test_claims_hand_out_disjoint_batches_in_report_order(kb: Knowledge, root: Path) -> None:
    before = commit_count(root)
    first = kb.claim_episodes("w1", limit=2, with_content=True)
    second = kb.claim_episodes("w2", limit=3)
    assert paths_of(first) == ["episodes/e0.md", "episodes/e1.md"]
    assert paths_of(second) == ["episodes/e2.md", "episodes/e3.md", "episodes/e4.md"]
    claimed = first.claimed[0]
    assert claimed.episode_id == "e0"
    assert claimed.content == (root / "episodes/e0.md").read_text()
    assert claimed.etag == kb.read("episodes/e0.md").etag
    assert claimed.lease_expires == first.lease_expires == "2026-11-30T18:06:59Z"  # 10 minutes
    assert second.claimed[0].content is None
    assert commit_count(root) == before  # memory claims make no commit
    assert kb.claim_episodes("w3", limit=5).to_json()["claimed"] == [
        {
            "path": "episodes/e5.md",
            "episode_id": "e5",
            "etag": kb.read("episodes/e5.md").etag,
            "lease_expires": "2026-11-30T18:06:59Z",
        }
    ]
    assert kb.claim_episodes("w4").claimed == ()


def test_claiming_again_renews_and_tops_up(kb: Knowledge, clock: Clock) -> None:
    kb.claim_episodes("w1", limit=2, lease="5m")
    clock.now += 120
    again = kb.claim_episodes("w1", limit=3, lease="5m")
    assert paths_of(again) == ["episodes/e0.md", "episodes/e1.md", "episodes/e2.md"]
    assert {c.lease_expires for c in again.claimed} == {"2026-11-30T18:03:59Z"}
    renewed = kb.claim_episodes("w1", limit=0, lease="1h")
    assert len(renewed.claimed) == 3 and renewed.lease_expires == "2026-11-30T18:58:59Z"
    assert [c.holder for c in kb.claims_list()] == ["w1"] * 3


def test_an_expired_lease_is_free_for_anyone(kb: Knowledge, clock: Clock) -> None:
    kb.claim_episodes("w1", limit=2, lease="1m")
    clock.now += 61
    assert kb.claims_list() == []
    taken = kb.claim_episodes("w2", limit=2)
    assert paths_of(taken) == ["episodes/e0.md", "episodes/e1.md"]
    assert kb.claim_episodes("w1", limit=1).claimed[0].path == "episodes/e2.md"


def test_merged_episodes_leave_the_holders_batch(kb: Knowledge) -> None:
    kb.claim_episodes("w1", limit=2)
    kb.merge("concepts/p.md", [MergeEntry(id="e0")], worker="w1")
    assert paths_of(kb.claim_episodes("w1", limit=2)) == ["episodes/e1.md", "episodes/e2.md"]


def test_claims_follow_the_prefix(kb: Knowledge, root: Path) -> None:
    (root / "raw").mkdir()
    (root / "raw/r.md").write_text("---\nepisode_id: r\n---\nraw\n")
    assert paths_of(kb.claim_episodes("w1", limit=10, prefix="raw")) == [
        "episodes/e0.md",  # memory_kind: episodic counts wherever it is
        "episodes/e1.md",
        "episodes/e2.md",
        "episodes/e3.md",
        "episodes/e4.md",
        "episodes/e5.md",
        "raw/r.md",
    ]


def test_an_episode_gone_since_it_was_listed_is_not_handed_out(kb: Knowledge, root: Path) -> None:
    kb.stop_watching()
    (root / "episodes/e0.md").unlink()
    assert paths_of(kb.claim_episodes("w1", limit=1)) == ["episodes/e1.md"]


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
def test_bad_claims_change_nothing(kb: Knowledge, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        kb.claim_episodes(**kwargs)  # type: ignore[arg-type]
    assert kb.claims_list() == []


def test_release(kb: Knowledge, clock: Clock) -> None:
    kb.claim_episodes("w1", limit=3)
    kb.claim_episodes("w2", limit=1)
    assert kb.release_episodes("w1", ["episodes/e1.md"]) == ["episodes/e1.md"]
    with pytest.raises(Conflict, match="claimed by w2, not w1"):
        kb.release_episodes("w1", ["episodes/e0.md", "episodes/e3.md"])
    with pytest.raises(NotFound, match="no live claim on episodes/e1.md"):
        kb.release_episodes("w1", ["episodes/e1.md"])
    with pytest.raises(InvalidPath):
        kb.release_episodes("w1", ["../outside.md"])
    assert [c.path for c in kb.claims_list() if c.holder == "w1"] == [
        "episodes/e0.md",
        "episodes/e2.md",
    ]  # the refused calls released nothing
    assert kb.release_episodes("w1") == ["episodes/e0.md", "episodes/e2.md"]
    with pytest.raises(NotFound, match="worker w1 holds no live claims"):
        kb.release_episodes("w1")
    with pytest.raises(NotFound, match="worker nobody holds no live claims"):
        kb.release_episodes("nobody")
    clock.now += 3600
    with pytest.raises(NotFound):
        kb.release_episodes("w2")  # its lease expired: nothing left to release


# -- merges honour claims -----------------------------------------------------------------------


def test_a_merge_citing_an_episode_another_worker_holds_is_refused(
    kb: Knowledge, root: Path
) -> None:
    kb.claim_episodes("w1", limit=2)
    before = commit_count(root)
    for worker in ("w2", None):
        for entry in (MergeEntry(id="e1"), MergeEntry(path="./episodes/e1.md")):
            with pytest.raises(Conflict, match="episodes/e1.md is claimed by w1 until"):
                kb.merge("concepts/p.md", [MergeEntry(id="e4"), entry], worker=worker)
    assert not (root / "concepts/p.md").exists() and commit_count(root) == before
    assert len(kb.claims_list()) == 2


def test_the_holders_merge_ends_its_claims_in_the_same_step(kb: Knowledge, root: Path) -> None:
    kb.claim_episodes("w1", limit=3)
    result = kb.merge(
        "concepts/p.md", [MergeEntry(id="e0"), MergeEntry(path="episodes/e1.md")], worker="w1"
    )
    assert result.created and len(result.added) == 2
    assert [c.path for c in kb.claims_list()] == ["episodes/e2.md"]
    assert kb.memory_report().claimed_count == 1
    # an idempotent repeat (nothing added) still ends a claim it names
    kb.merge("concepts/p.md", [MergeEntry(id="e0"), MergeEntry(id="e2")], worker="w1")
    assert kb.claims_list() == []


def test_a_merge_naming_an_expired_claim_of_its_worker_is_refused(
    kb: Knowledge, clock: Clock, root: Path
) -> None:
    kb.claim_episodes("w1", limit=1, lease="1m")
    clock.now += 120
    with pytest.raises(Conflict, match="the claim of w1 on episodes/e0.md expired at"):
        kb.merge("concepts/p.md", [MergeEntry(id="e0")], worker="w1")
    assert not (root / "concepts/p.md").exists()
    # another worker (or none) may merge it: an expired claim holds nothing
    kb.merge("concepts/p.md", [MergeEntry(id="e0")], worker="w2")
    assert kb.claims_list() == [] and kb.claims.store.read(clock.now, live_only=False) == []


def test_merging_free_episodes_needs_no_claim(kb: Knowledge) -> None:
    kb.merge("concepts/p.md", [MergeEntry(id="e5")])
    kb.merge("concepts/q.md", [MergeEntry(id="e4")], worker="w9")
    assert kb.memory_report().unmerged_count == 4


def test_workers_in_many_threads_merge_every_episode_exactly_once(kb: Knowledge) -> None:
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        try:
            while batch := kb.claim_episodes(name, limit=1).claimed:
                entry = MergeEntry(path=batch[0].path)
                kb.merge(f"concepts/{name}.md", [entry], worker=name)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(f"w{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    check = kb.memory_check()
    assert (check.unmerged_count, check.double_merges, check.dangling) == (0, (), ())
    assert kb.claims_list() == []


# -- the report shows claims ---------------------------------------------------------------------


def test_report_marks_claimed_episodes_identically_from_index_and_scan(kb: Knowledge) -> None:
    kb.claim_episodes("w1", limit=2)
    kb.claim_episodes("w2", limit=1)
    kb.merge("concepts/p.md", [MergeEntry(id="e5")])
    indexed = kb.memory_report(limit=3, offset=1)
    scanned = kb.memory_report(limit=3, offset=1, use_index=False)
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


def test_report_document_is_the_report_with_claims(kb: Knowledge, tmp_path: Path) -> None:
    kb.claim_episodes("w1", limit=2)
    kb.claim("tasks/a.md", "alice")  # a file claim outside the episodes counts for nothing
    for limit in (None, 2):
        document = kb.memory_report_document(limit=limit)
        out = tmp_path / "out.json"
        out.write_bytes(dumps(document.value))
        report = kb.memory_report(limit=limit).to_json()
        assert json.loads(out.read_text()) == report
        assert out.read_text() == json.dumps(report, indent=2, ensure_ascii=False)
        assert report["claimed_count"] == 2


# -- file claims (KiwiFS's generic claims) -------------------------------------------------------


def test_a_file_claim_is_written_into_the_frontmatter(kb: Knowledge, root: Path) -> None:
    before = commit_count(root)
    claim = kb.claim("tasks/a.md", "alice", "15m")
    assert claim.to_json() == {
        "path": "tasks/a.md",
        "holder": "alice",
        "claimed_at": "2026-11-30T17:56:59Z",
        "lease_expires": "2026-11-30T18:11:59Z",
    }
    text = (root / "tasks/a.md").read_text()
    assert text == (
        "---\ntitle: A\nstatus: todo\npriority: 2\nclaimed-by: alice\n"
        'claimed-at: "2026-11-30T17:56:59Z"\nlease-expires: "2026-11-30T18:11:59Z"\n---\nDo A.\n'
    )
    assert commit_count(root) == before + 1
    assert kb.claims_list() == [claim]


def test_file_claim_conflict_renewal_and_takeover(kb: Knowledge, clock: Clock, root: Path) -> None:
    kb.claim("tasks/a.md", "alice", "2m")
    with pytest.raises(Conflict, match="tasks/a.md is claimed by alice until"):
        kb.claim("tasks/a.md", "bob")
    clock.now += 60
    renewed = kb.claim("tasks/a.md", "alice", "2m")  # the same holder renews
    assert renewed.claimed_at == T0 and renewed.expires == T0 + 180
    clock.now += 200
    taken = kb.claim("tasks/a.md", "bob")  # expired: free
    assert taken.holder == "bob" and "claimed-by: bob" in (root / "tasks/a.md").read_text()


def test_file_claims_and_memory_claims_share_one_claim_per_path(kb: Knowledge) -> None:
    kb.claim_episodes("w1", limit=1)
    with pytest.raises(Conflict, match="claimed by w1"):
        kb.claim("episodes/e0.md", "alice")
    kb.claim("episodes/e1.md", "alice")
    assert paths_of(kb.claim_episodes("w2", limit=1)) == ["episodes/e2.md"]
    with pytest.raises(Conflict, match="episodes/e1.md is claimed by alice"):
        kb.merge("concepts/p.md", [MergeEntry(id="e1")], worker="w2")


def test_release_removes_the_keys(kb: Knowledge, root: Path, clock: Clock) -> None:
    original = (root / "tasks/a.md").read_text()
    kb.claim("tasks/a.md", "alice")
    with pytest.raises(Conflict, match="claimed by alice, not bob"):
        kb.release("tasks/a.md", "bob")
    assert kb.release("tasks/a.md", "alice") == "tasks/a.md"
    assert (root / "tasks/a.md").read_text() == original
    with pytest.raises(NotFound, match="no claim on tasks/a.md by alice"):
        kb.release("tasks/a.md", "alice")
    (root / "plain.md").write_text("no frontmatter\n")
    kb.claim("plain.md", "alice")
    clock.now += 7200
    kb.release("plain.md", "alice")  # its own claim, even expired: cleans the file
    assert (root / "plain.md").read_text() == "no frontmatter\n"


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
    kb: Knowledge,
    root: Path,
    path: str,
    holder: str,
    lease: str | None,
    error: type[Exception],
    message: str,
) -> None:
    before = (root / "tasks/a.md").read_bytes(), commit_count(root)
    with pytest.raises(error, match=message):
        kb.claim(path, holder, lease)
    assert ((root / "tasks/a.md").read_bytes(), commit_count(root)) == before
    assert kb.claims_list() == []


def test_eligible_lists_unclaimed_todo_tasks_best_priority_first(
    kb: Knowledge, clock: Clock
) -> None:
    assert [t.path for t in kb.eligible()] == ["tasks/b.md", "tasks/a.md", "tasks/d.md"]
    kb.claim("tasks/b.md", "alice", "1m")
    assert [t.to_json() for t in kb.eligible(limit=1)] == [
        {"path": "tasks/a.md", "title": "A", "priority": 2}
    ]
    clock.now += 61
    assert [t.path for t in kb.eligible(path_prefix="tasks/b")] == ["tasks/b.md"]
    assert kb.eligible(path_prefix="nothing/") == []
    for bad in (0, 201):
        with pytest.raises(UsageError, match="limit must be between 1 and 200"):
            kb.eligible(limit=bad)


def test_the_dashboard_queue_and_overview_show_claims(kb: Knowledge) -> None:
    assert kb.overview().to_json()["claimed_count"] == 0
    kb.claim_episodes("w1", limit=2)
    kb.claim("tasks/a.md", "alice")  # not an episode: not in the queue's count
    page = kb.queue()
    assert [(i.episode.path, i.claimed_by) for i in page.items[:3]] == [
        ("episodes/e0.md", "w1"),
        ("episodes/e1.md", "w1"),
        ("episodes/e2.md", None),
    ]
    assert page.to_json()["unmerged"][0]["lease_expires"] == "2026-11-30T18:06:59Z"
    assert kb.overview().to_json()["claimed_count"] == 2
