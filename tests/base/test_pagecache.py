"""Reading a file ahead: only a file the cache can hold, read to its end by a child process,
never an error, and never a lock of this process's SQLite connections dropped."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kiwifs.base import pagecache


def test_available_memory_is_read_from_meminfo(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  8000 kB\nMemFree:  100 kB\nMemAvailable:  4096 kB\n")
    monkeypatch.setattr(pagecache, "MEMINFO", meminfo)
    assert pagecache.available_memory() == 4096 * 1024
    meminfo.write_text("MemTotal:  8000 kB\n")
    assert pagecache.available_memory() is None
    monkeypatch.setattr(pagecache, "MEMINFO", tmp_path / "absent")
    assert pagecache.available_memory() is None


@pytest.fixture
def any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pagecache, "READ_FROM", 1)


@pytest.mark.parametrize(
    ("size", "share", "available", "read"),
    [
        (100, 0.5, 1000, True),
        (500, 0.5, 1000, True),
        (501, 0.5, 1000, False),  # more than the share: it would push other files out
        (100, 0.0, 1000, False),  # turned off
        (100, 0.5, None, False),  # the memory not known
        (0, 0.5, 1000, False),  # nothing to read
        (9, 0.5, 1000, False),  # too small to be worth a process
    ],
)
def test_a_file_is_read_ahead_only_when_the_cache_can_hold_it(
    monkeypatch: pytest.MonkeyPatch, size: int, share: float, available: int | None, read: bool
) -> None:
    monkeypatch.setattr(pagecache, "READ_FROM", 10)
    assert pagecache.worth_reading(size, share, available) is read


def test_the_whole_file_is_read(tmp_path: Path, any_size: None) -> None:
    path = tmp_path / "index.db"
    path.write_bytes(b"x" * (pagecache.CHUNK * 2 + 17))
    thread = pagecache.read_ahead(path, 1.0)
    assert thread is not None and thread.daemon
    thread.join(30)
    assert not thread.is_alive()
    done = subprocess.run(
        [sys.executable, "-c", pagecache.READER, str(path)], capture_output=True, timeout=30
    )
    assert done.returncode == 0 and not done.stderr


def test_nothing_is_read_when_off_or_missing(tmp_path: Path, any_size: None) -> None:
    path = tmp_path / "index.db"
    path.write_bytes(b"x" * 100)
    assert pagecache.read_ahead(path, 0.0) is None
    assert pagecache.read_ahead(tmp_path / "absent.db", 1.0) is None


LOCKER = """import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=0)
try:
    conn.execute("BEGIN EXCLUSIVE")
except sqlite3.OperationalError as exc:
    print(exc)
"""


def test_reading_ahead_leaves_sqlite_s_locks_alone(tmp_path: Path, any_size: None) -> None:
    """A descriptor of the file opened and closed in this process would drop every POSIX lock
    the process holds on it: a read transaction's would be gone, and another process could
    take the database whole."""
    path = tmp_path / "index.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.execute("BEGIN")
    assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]  # holds a shared lock

    def other_process() -> str:
        done = subprocess.run(
            [sys.executable, "-c", LOCKER, str(path)], capture_output=True, text=True, timeout=30
        )
        return done.stdout.strip()

    assert other_process() == "database is locked"
    thread = pagecache.read_ahead(path, 1.0)
    assert thread is not None
    thread.join(30)
    assert other_process() == "database is locked"  # the shared lock is still ours
    conn.execute("ROLLBACK")
    assert other_process() == ""
    conn.close()
