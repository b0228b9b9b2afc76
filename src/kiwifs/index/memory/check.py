"""The rows ``memory check`` reads, answered by the index (the rules stay in ``memory/check``).

Indexed reads only, no file opened: the episodes of the prefix (path, id, modification time and
``created``, kept parsed in its own column), the files whose ``merged-from`` has
entries (``refs > 0``, that list only) and, for the paths those entries name, which exist.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from kiwifs.base.paths import normalize_ref_path
from kiwifs.base.walk import walk
from kiwifs.index.record import path_key, py_text, read_record
from kiwifs.index.report import _EPISODES as EPISODES
from kiwifs.index.report import prefix_range, snapshot
from kiwifs.index.texts import frontmatter_sql
from kiwifs.memory.check import EpisodeRow, PageRow
from kiwifs.memory.rules import MERGED_FROM, is_episodic

EPISODE_COLS = "key, path, episode_id, created, mtime_ns, superseded"
PAGES = (
    f"SELECT path, json_extract({frontmatter_sql()}, '$.\"{MERGED_FROM}\"') FROM files"
    " WHERE refs > 0 ORDER BY key"
)


def check_rows(
    conn: sqlite3.Connection, prefix: str
) -> tuple[list[EpisodeRow], list[PageRow], set[str]]:
    """The episodes (walk order), the pages with ``merged-from`` entries (walk order) and the
    paths those entries cite that name a file."""
    lo, hi = prefix_range(prefix)
    with snapshot(conn):
        rows = conn.execute(EPISODES.format(cols=EPISODE_COLS, extra="") + " ORDER BY 1", (lo, hi))
        episodes = [
            EpisodeRow(py_text(path), py_text(eid), created, mtime_ns / 1e9, bool(gone))
            for _, path, eid, created, mtime_ns, gone in rows
        ]
        pages: list[PageRow] = []
        for path, text in conn.execute(PAGES):
            value: Any = json.loads(text) if text is not None else None
            if isinstance(value, list):
                pages.append(PageRow(py_text(path), value))
        existing = {p for p in _cited_paths(pages) if _exists(conn, p)}
    return episodes, pages, existing


def _cited_paths(pages: list[PageRow]) -> set[str]:
    cited: set[str] = set()
    for page in pages:
        for item in page.merged_from:
            if isinstance(item, dict) and isinstance(item.get("path"), str):
                norm = normalize_ref_path(item["path"])
                if norm:
                    cited.add(norm)
    return cited


def _exists(conn: sqlite3.Connection, rel: str) -> bool:
    key = path_key(rel)
    if key is None:
        return False
    return conn.execute("SELECT 1 FROM files WHERE key = ?", (key,)).fetchone() is not None


def scan_rows(root: Path, prefix: str) -> tuple[list[EpisodeRow], list[PageRow], set[str]]:
    """The same rows read from the files (no index): for roots that have none, and to prove the
    two equal. Each file is parsed exactly as the index parses it (:func:`read_record`)."""
    episodes: list[EpisodeRow] = []
    pages: list[PageRow] = []
    seen: set[str] = set()
    for entry in walk(root):
        seen.add(entry.rel)
        key = path_key(entry.rel)
        if entry.error is not None or key is None:
            continue
        record = read_record(key, entry.rel, entry.path)
        if record is None or record.facts.unreadable:
            continue
        facts = record.facts
        if is_episodic(entry.rel, facts.memory_kind, prefix):
            mtime = record.mtime_ns / 1e9
            row = EpisodeRow(entry.rel, facts.episode_id, record.created, mtime, facts.superseded)
            episodes.append(row)
        if facts.refs > 0:
            cited = json.loads(record.frontmatter).get(MERGED_FROM)
            if isinstance(cited, list):
                pages.append(PageRow(entry.rel, cited))
    existing = {p for p in _cited_paths(pages) if p in seen}
    return episodes, pages, existing
