"""The whole memory report kept as printed: the same bytes as making it again, and gone as soon
as any file row changes, whoever changes it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kiwifs.base.printed_json import Printed, dumps
from kiwifs.index.core import Index
from kiwifs.index.memory import printed
from kiwifs.knowledge import Knowledge
from kiwifs.tuning import Tuning

PLAIN = Tuning(monitor_files=0)


def episode(root: Path, rel: str, eid: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\nmemory_kind: episodic\nepisode_id: {eid}\n---\na run\n")


@pytest.fixture(autouse=True)
def small_reports_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """These roots' reports are a few hundred bytes: kept all the same."""
    monkeypatch.setattr(printed, "MIN_BYTES", 0)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    top = tmp_path / "root"
    for n in range(5):
        episode(top, f"episodes/run-{n}.md", f"e-{n}")
    (top / "episodes" / "no-id.md").write_text("---\nmemory_kind: episodic\n---\nx\n")
    (top / "page.md").write_text("---\nmerged-from:\n  - type: episode\n    id: e-1\n---\ny\n")
    with Knowledge.open(top, tuning=PLAIN) as kb:
        kb.reindex()
    return top


def kept(root: Path) -> list[tuple[str, str, int]]:
    with sqlite3.connect(root / ".kiwi" / "state" / "index.db") as conn:
        try:
            rows = conn.execute("SELECT prefix, form, unmerged FROM printed_reports").fetchall()
        except sqlite3.OperationalError:
            return []
    return sorted(rows)


def both(kb: Knowledge, use_index: bool = True) -> tuple[bytes, str, str]:
    document = kb.memory_report_document(use_index=use_index)
    text = kb.memory_report_text(use_index=use_index)
    return dumps(document.value), text.text, text.warnings


def test_a_kept_report_is_the_report_made_again(root: Path) -> None:
    with Knowledge.open(root, tuning=PLAIN) as kb:
        first = both(kb)
        assert kept(root) == [("episodes/", "json/1", 5), ("episodes/", "text/1", 5)]
        assert isinstance(kb.memory_report_document().value, Printed)  # read back, not made
        assert both(kb) == first == both(kb, use_index=False)
        assert "warning: missing episode_id in episodes/no-id.md" in first[2]


def test_any_row_change_drops_the_kept_reports(root: Path) -> None:
    with Knowledge.open(root, tuning=PLAIN) as kb:
        both(kb)
        kb.write("episodes/run-9.md", "---\nmemory_kind: episodic\nepisode_id: e-9\n---\nz\n")
        assert kept(root) == []
        after_write = both(kb)
        assert after_write == both(kb, use_index=False)
    episode(root, "episodes/run-1.md", "e-1-renamed")  # behind kiwifs's back
    with Knowledge.open(root, tuning=PLAIN) as kb:
        assert both(kb) == both(kb, use_index=False) != after_write
    # a row changed by another connection (another process, an older kiwifs) drops them too
    with sqlite3.connect(root / ".kiwi" / "state" / "index.db") as conn:
        conn.execute("UPDATE files SET covered = covered WHERE path = 'page.md'")
    assert kept(root) == []


def test_only_the_whole_report_is_kept(root: Path) -> None:
    with Knowledge.open(root, tuning=PLAIN) as kb:
        kb.memory_report_document(limit=2)
        kb.memory_report_text(offset=1)
        kb.memory_report_document(path_prefix="episodes/")
        assert kept(root) == []
        kb.claim_episodes("worker-1", limit=1)
        claimed = both(kb)
        assert kept(root) == []  # a live claim marks the report: made each time
        assert claimed == both(kb, use_index=False)


def test_a_report_older_than_a_commit_is_not_kept(root: Path) -> None:
    index = Index(root, tuning=PLAIN)
    try:
        with index.reader() as conn:
            seen = printed.version(conn)
            conn.execute("SELECT count(*) FROM files").fetchone()
            with sqlite3.connect(root / ".kiwi" / "state" / "index.db") as other:
                other.execute("UPDATE files SET mtime_ns = mtime_ns + 1 WHERE path = 'page.md'")
            made = (b"{}", b"", 0)
            assert not printed.keep(index, conn, seen, "episodes/", printed.JSON, made)
            assert printed.keep(index, conn, printed.version(conn), "x/", printed.JSON, made)
    finally:
        index.close()
    assert kept(root) == [("x/", "json/1", 0)]


def test_a_rebuild_keeps_the_report_for_the_next_command(root: Path) -> None:
    with Knowledge.open(root, tuning=PLAIN) as kb:
        kb.reindex_or_reconcile()
    assert kept(root) == [("episodes/", "json/1", 5), ("episodes/", "text/1", 5)]
    command = [sys.executable, "-m", "kiwifs", "memory", "report", "--root", str(root)]
    for extra in ([], ["--json"]):
        kept_run = subprocess.run([*command, *extra], capture_output=True, check=True)
        scanned = subprocess.run([*command, *extra, "--no-index"], capture_output=True, check=True)
        assert kept_run.stdout == scanned.stdout
        assert kept_run.stderr == scanned.stderr


def test_off_the_report_is_made_each_time_and_the_same(root: Path) -> None:
    with Knowledge.open(root, tuning=PLAIN.but(kept_reports=False)) as kb:
        made = both(kb)
        kb.reindex_or_reconcile()
        assert kept(root) == []
    with Knowledge.open(root, tuning=PLAIN) as kb:
        assert both(kb) == made == both(kb)
    assert kept(root) != []


def test_a_small_report_is_not_kept(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(printed, "MIN_BYTES", 1 << 20)
    with Knowledge.open(root, tuning=PLAIN) as kb:
        assert both(kb) == both(kb, use_index=False)
    assert kept(root) == []


def test_a_row_whose_stat_alone_changed_keeps_the_report(root: Path) -> None:
    """A reconcile that finds a file holding its row's bytes stores only its new stat."""
    with Knowledge.open(root, tuning=PLAIN) as kb:
        made = both(kb)
    with sqlite3.connect(root / ".kiwi" / "state" / "index.db") as conn:
        conn.execute("UPDATE files SET sig = sig + 1, mtime_ns = mtime_ns + 1")
    assert kept(root) != []
    with sqlite3.connect(root / ".kiwi" / "state" / "index.db") as conn:
        conn.execute("UPDATE files SET sig = sig + 1, covered = covered WHERE path = 'page.md'")
    assert kept(root) == []  # any other column named: dropped
    with Knowledge.open(root, tuning=PLAIN) as kb:
        assert both(kb) == made
