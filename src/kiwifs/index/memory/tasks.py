"""Task files answered by the index: files whose frontmatter ``status`` is ``todo``.

KiwiFS's ``kiwi_eligible`` lists tasks (``status: todo``) that no live claim holds, best
``priority`` first; this reads the candidates (the claims and the ranking are the caller's).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from kiwifs.index.record import py_text
from kiwifs.index.texts import frontmatter_sql

TODO = (
    "SELECT path, json_extract(fm, '$.title'), json_extract(fm, '$.priority')"
    f" FROM (SELECT path, key, unreadable, {frontmatter_sql()} AS fm FROM files)"
    " WHERE unreadable = 0 AND lower(trim(json_extract(fm, '$.status'))) = 'todo'"
    " AND substr(path, 1, ?) = ? ORDER BY key"
)


@dataclass(frozen=True)
class TodoFile:
    path: str
    title: Any
    priority: Any


def todo_files(conn: sqlite3.Connection, path_prefix: str) -> list[TodoFile]:
    """Task files whose path starts with ``path_prefix``, in walk order."""
    rows = conn.execute(TODO, (len(path_prefix), path_prefix))
    return [TodoFile(py_text(path), title, priority) for path, title, priority in rows]
