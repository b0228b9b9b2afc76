"""Reading a file ahead: only a file the cache can hold, read to its end, never an error."""

from __future__ import annotations

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


@pytest.mark.parametrize(
    ("size", "share", "available", "read"),
    [
        (100, 0.5, 1000, True),
        (500, 0.5, 1000, True),
        (501, 0.5, 1000, False),  # more than the share: it would push other files out
        (100, 0.0, 1000, False),  # turned off
        (100, 0.5, None, False),  # the memory not known
        (0, 0.5, 1000, False),  # nothing to read
    ],
)
def test_a_file_is_read_ahead_only_when_the_cache_can_hold_it(
    size: int, share: float, available: int | None, read: bool
) -> None:
    assert pagecache.worth_reading(size, share, available) is read


def test_the_whole_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "index.db"
    path.write_bytes(b"x" * (pagecache.CHUNK * 2 + 17))
    assert pagecache._read(path) == pagecache.CHUNK * 2 + 17
    thread = pagecache.read_ahead(path, 1.0)
    assert thread is not None and thread.daemon
    thread.join(30)
    assert not thread.is_alive()


def test_nothing_is_read_when_off_or_missing(tmp_path: Path) -> None:
    path = tmp_path / "index.db"
    path.write_bytes(b"x" * 100)
    assert pagecache.read_ahead(path, 0.0) is None
    assert pagecache.read_ahead(tmp_path / "absent.db", 1.0) is None
    assert pagecache._read(tmp_path / "absent.db") == 0  # a file gone meanwhile: no error
