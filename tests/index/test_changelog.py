"""The index's change logs: appended in order, trimmed, and read back since a position."""

from __future__ import annotations

import sqlite3

import pytest

from kiwifs.index import changelog


@pytest.fixture
def conn() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE log (seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL)")
    return db


def test_keys_since_a_position_are_distinct_and_bounded(conn: sqlite3.Connection) -> None:
    changelog.append(conn, "log", "key", ["a", "b", "a", "c"])
    assert changelog.last(conn, "log") == 4
    assert sorted(changelog.since(conn, "log", "key", 0) or []) == ["a", "b", "c"]
    assert sorted(changelog.since(conn, "log", "key", 2) or []) == ["a", "c"]
    assert changelog.since(conn, "log", "key", 4) == []
    assert changelog.since(conn, "log", "key", 0, most=2) is None  # too many: start afresh
    assert sorted(changelog.since(conn, "log", "key", 0, most=3) or []) == ["a", "b", "c"]


def test_a_log_trimmed_past_a_reader_sends_it_afresh(
    conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(changelog, "KEEP", 5)
    monkeypatch.setattr(changelog, "TRIM_EVERY", 4)
    for i in range(8):
        changelog.append(conn, "log", "key", [f"k{i}"])  # seq 8 is a multiple of 4: trimmed
    assert conn.execute("SELECT min(seq) FROM log").fetchone() == (4,)
    changelog.append(conn, "log", "key", ["k8", "k9"])  # seq 9-10 pass no multiple of 4
    assert conn.execute("SELECT min(seq) FROM log").fetchone() == (4,)
    changelog.append(conn, "log", "key", ["k10", "k11"])  # seq 11-12 pass 12: trimmed
    assert conn.execute("SELECT min(seq), max(seq) FROM log").fetchone() == (8, 12)
    assert changelog.since(conn, "log", "key", 7) == ["k7", "k8", "k9", "k10", "k11"]
    assert changelog.since(conn, "log", "key", 6) is None  # seq 7 is gone: cannot catch up
    assert changelog.last(conn, "log") == 12
