"""Task files answered by the index: files whose frontmatter ``status`` is ``todo``.

KiwiFS's ``kiwi_eligible`` lists tasks (``status: todo``) that no live claim holds, best
``priority`` first; this reads the candidates (the claims and the ranking are the caller's).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from kiwifs.index.record import py_text

TODO = (
    "SELECT path, json_extract(frontmatter, '$.title'), json_extract(frontmatter, '$.priority')"
    " FROM files WHERE unreadable = 0"
    " AND lower(trim(json_extract(frontmatter, '$.status'))) = 'todo'"
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
