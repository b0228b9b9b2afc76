"""Reading files for the interfaces: one file with its ETag, its frontmatter as data, a page split
for display.

The frontmatter rules (where a block starts and ends, how its YAML is read, which values JSON can
carry) live below this module; the interfaces get the parts, never the bytes to parse, so that a
web page, a REST answer and an MCP tool show one file one way.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kiwifs.base.paths import canonical
from kiwifs.files.storage import Storage
from kiwifs.frontmatter.reader import read_frontmatter, split
from kiwifs.git.repo import blob_id
from kiwifs.index.record import json_safe


@dataclass(frozen=True)
class FileContent:
    path: str
    content: bytes
    etag: str
    mtime: float

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    @property
    def last_modified(self) -> str:
        """The modification time as an HTTP date (``Last-Modified``)."""
        when = dt.datetime.fromtimestamp(self.mtime, dt.UTC)
        return when.strftime("%a, %d %b %Y %H:%M:%S GMT")


@dataclass(frozen=True)
class Page:
    """A file as a page shows it: the current file (its canonical path and ETag) and, of the
    version shown, the frontmatter as JSON-safe data, the body after it, and the warnings about
    the frontmatter (why it was read as empty, when it was)."""

    file: FileContent
    frontmatter: dict[str, Any]
    body: bytes
    warnings: tuple[str, ...]

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class Reading:
    """The reads of one root; ``version`` reads a file at a revision (the history's)."""

    def __init__(self, storage: Storage, version: Callable[[str, str], bytes]) -> None:
        self.storage = storage
        self.version = version

    def read(self, path: str) -> FileContent:
        rel = canonical(path, reading=True)
        data, st = self.storage.read_with_stat(rel)
        return FileContent(rel, data, blob_id(data), st.st_mtime)

    def frontmatter(self, path: str) -> dict[str, Any]:
        """A file's frontmatter as JSON-safe data (``{}`` when it has none or it is invalid)."""
        data = json_safe(read_frontmatter(self.read(path).content).data)
        return data if isinstance(data, dict) else {}

    def page(self, path: str, rev: str | None = None) -> Page:
        """The current file, and its version ``rev`` (else the current one) split for display.

        ``path`` as asked, not the canonical one, reads the version: a name that is not UTF-8 is
        asked by its shown form.
        """
        current = self.read(path)
        data = self.version(path, rev) if rev else current.content
        block, body = split(data)
        parsed = read_frontmatter(data)
        data_of = json_safe(parsed.data) if block else {}
        warnings = (parsed.problem,) if parsed.problem else ()
        fields = data_of if isinstance(data_of, dict) else {}
        return Page(current, fields, body, warnings)
