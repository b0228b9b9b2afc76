"""A row stored from a read made before a newer write never replaces that write's row.

Files are read outside the index's writer lock (a reconcile reads a thousand at a time), so a
write and its own index refresh can fall between a reconcile's read and its store. These tests
put the write exactly there, by doing it from inside the reconcile's read step.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kiwifs.index.core import Index
from kiwifs.index.folders import WalkState
from kiwifs.index.record import FileRecord, path_key, read_record


def _episode(root: Path, name: str, body: str) -> Path:
    path = root / "episodes" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\nmemory_kind: episodic\nepisode_id: {name[:-3]}\n---\n{body}\n")
    return path


def _words(index: Index, rel: str) -> str:
    with index.reader() as conn:
        row = conn.execute("SELECT etag FROM files WHERE path = ?", (rel,)).fetchone()
    assert row is not None
    return str(row[0])


def _etag_of(path: Path, rel: str) -> str:
    key = path_key(rel)
    assert key is not None
    record = read_record(key, rel, os.fsencode(path))
    assert record is not None
    return record.etag


class _WriteDuringRead(Index):
    """An index whose reconcile, right after reading ``target``, sees it rewritten and the
    rewrite's own refresh stored (what a concurrent write through the pipeline does)."""

    target: bytes = b""
    rewrite: tuple[Path, str] | None = None

    def _record(self, key: bytes, error: str | None) -> FileRecord | None:
        record = super()._record(key, error)
        if key == self.target and self.rewrite is not None:
            path, body = self.rewrite
            self.rewrite = None
            os.utime(path, ns=(1, 1))  # a different stat even inside one timestamp tick
            path.write_text(body)
            self.refresh([key.replace(b"\0", b"/").decode()])
        return record


def test_reconcile_never_stores_a_read_older_than_a_write(tmp_path: Path) -> None:
    root = tmp_path / "root"
    path = _episode(root, "e1.md", "first words")
    index = _WriteDuringRead(root, tmp_path / "index.db")
    index.reconcile()
    _episode(root, "e1.md", "out of band")  # the next reconcile reads e1 again, in full
    os.utime(path, ns=(2, 2))
    index.target = b"episodes\0e1.md"
    newer = "---\nmemory_kind: episodic\nepisode_id: e1\n---\nsecond words\n"
    index.rewrite = (path, newer)
    index.reconcile()
    assert index.rewrite is None  # the write really fell between read and store
    assert _words(index, "episodes/e1.md") == _etag_of(path, "episodes/e1.md")


class _WriteAfterHashing(Index):
    """An index whose reconcile, right after finding ``target`` holding its row's bytes, sees it
    rewritten and the rewrite's own refresh stored."""

    target: bytes = b""
    rewrite: tuple[Path, str] | None = None
    refreshed = True  # the rewrite is a write through the pipeline (False: an editor's)

    def _same_bytes(
        self, keys: list[bytes], walked: WalkState
    ) -> tuple[list[bytes], list[tuple[bytes, str, os.stat_result, int | None]]]:
        found = super()._same_bytes(keys, walked)
        if self.target in {entry[0] for entry in found[1]} and self.rewrite is not None:
            path, body = self.rewrite
            self.rewrite = None
            os.utime(path, ns=(1, 1))
            path.write_text(body)
            if self.refreshed:
                self.refresh([self.target.replace(b"\0", b"/").decode()])
        return found


@pytest.mark.parametrize("refreshed", [True, False], ids=["pipeline", "editor"])
def test_a_file_found_holding_its_rows_bytes_and_written_before_the_store_keeps_the_write(
    tmp_path: Path, refreshed: bool
) -> None:
    """Found holding the bytes its row holds, then written before its new stat is stored: the
    row gets the new bytes, never the old bytes with the new file's stat (which no later
    reconcile would question)."""
    root = tmp_path / "root"
    path = _episode(root, "e1.md", "first words")
    index = _WriteAfterHashing(root, tmp_path / "index.db")
    index.refreshed = refreshed
    index.reconcile()
    os.utime(path, ns=(2, 2))  # the same bytes, a new stat: only the stat to store
    index.target = b"episodes\0e1.md"
    index.rewrite = (path, "---\nmemory_kind: episodic\nepisode_id: e1\n---\nsecond words\n")
    index.reconcile()
    assert index.rewrite is None  # the write really fell between the hash and the store
    assert _words(index, "episodes/e1.md") == _etag_of(path, "episodes/e1.md")
    with index.reader() as conn:
        (hits,) = conn.execute("SELECT count(*) FROM fts WHERE fts MATCH 'second'").fetchone()
    assert hits == 1


def test_apply_of_a_stale_record_keeps_the_newer_row(tmp_path: Path) -> None:
    root = tmp_path / "root"
    path = _episode(root, "e1.md", "first words")
    index = Index(root, tmp_path / "index.db")
    index.reconcile()
    key = b"episodes\0e1.md"
    stale = read_record(key, "episodes/e1.md", os.fsencode(path))
    assert stale is not None
    os.utime(path, ns=(1, 1))
    _episode(root, "e1.md", "second words")
    index.refresh(["episodes/e1.md"])
    index.apply([stale])
    assert _words(index, "episodes/e1.md") == _etag_of(path, "episodes/e1.md") != stale.etag


def test_removal_of_a_file_written_again_keeps_its_row(tmp_path: Path) -> None:
    root = tmp_path / "root"
    path = _episode(root, "e1.md", "first words")
    index = Index(root, tmp_path / "index.db")
    index.reconcile()
    index.apply((), [b"episodes\0e1.md"])  # a walk that missed it: the file is still there
    assert _words(index, "episodes/e1.md") == _etag_of(path, "episodes/e1.md")
    path.unlink()
    index.apply((), [b"episodes\0e1.md"])
    with index.reader() as conn:
        assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 0
