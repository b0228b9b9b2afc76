"""Navigation reads for the interfaces: a page's peek and one of its sections, and the context an
agent reads first. They need no index: each reads one file (or the root's few context files) and
hands the text to the rules of :mod:`kiwifs.memory.navigation`.

:class:`NavigationReads` is the facade's part: ``Knowledge`` inherits its one-line methods, so
the facade module stays the size it is. A peek's backlinks come from the link index
(:meth:`~kiwifs.services.linking.LinkReads.backlinks`); nothing here scans the root for them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from kiwifs.base.paths import open_regular
from kiwifs.errors import NotFound, UsageError
from kiwifs.services.linking import LinkReads

if TYPE_CHECKING:
    from kiwifs.memory.navigation import Context, Peek, Section
    from kiwifs.services.reading import Reading

# the root's context files, as KiwiFS reads them: root-relative parts
SCHEMA = "SCHEMA.md"
INDEX = "index.md"
PLAYBOOK = (".kiwi", "playbook.md")
RULES = (".kiwi", "rules.md")

Backlinks = Callable[[str], Sequence[str]]


class Navigation:
    """The navigation reads of one root, over its reads (``reading``)."""

    def __init__(self, root: Path, reading: Reading, episodes_prefix: Callable[[], str]) -> None:
        self.root = root
        self.reading = reading
        self.episodes_prefix = episodes_prefix

    def _parts(self, path: str) -> tuple[str, str, dict[str, object], int]:
        """Canonical path, body text, JSON-safe frontmatter and the file line the body starts
        on: one read of the file."""
        page = self.reading.page(path)
        data = page.file.content
        first_line = data[: len(data) - len(page.body)].count(b"\n") + 1
        return page.file.path, page.text, page.frontmatter, first_line

    def peek(self, path: str, backlinks: Backlinks | None = None) -> Peek:
        from kiwifs.memory.navigation import peek

        rel, body, fm, _ = self._parts(path)
        return peek(rel, body, fm, backlinks(rel) if backlinks is not None else ())

    def section(self, path: str, heading: str | None = None, index: int | None = None) -> Section:
        from kiwifs.memory.navigation import find_section

        rel, body, _, first_line = self._parts(path)
        return find_section(rel, body, heading, index, first_line)

    def context(self) -> Context:
        from kiwifs.memory.navigation import Context

        return Context(
            schema=self._root_file(SCHEMA),
            playbook=self._own_file(*PLAYBOOK),
            index=self._root_file(INDEX),
            rules=self._own_file(*RULES),
            episodes_prefix=self.episodes_prefix(),
        )

    def _root_file(self, name: str) -> str:
        """A knowledge file at the root, read as every read is (confined), ``""`` if absent."""
        from kiwifs.memory.navigation import bounded

        try:
            return bounded(self.reading.read(name).content)
        except (NotFound, UsageError):
            return ""  # absent, a folder, or a link the reads refuse: no schema to show

    def _own_file(self, folder: str, name: str) -> str:
        """A file of ``.kiwi/`` (hidden from every knowledge read, so read here), ``""`` when it
        is absent or is not a regular file reached without a symbolic link (whose target could
        be anywhere)."""
        from kiwifs.memory.navigation import CONTEXT_DOC_BYTES, bounded

        place = os.path.join(self.root, folder)
        path = os.path.join(place, name)
        try:
            if stat.S_ISLNK(os.lstat(place).st_mode) or stat.S_ISLNK(os.lstat(path).st_mode):
                return ""
            fd, st = open_regular(path)
        except OSError:
            return ""
        with os.fdopen(fd, "rb") as file:
            data = file.read(CONTEXT_DOC_BYTES + 1)  # the start is all a bounded answer shows
        return bounded(data, total=max(st.st_size, len(data)))


class NavigationReads(LinkReads):
    """The facade's navigation reads (inherited by ``Knowledge``, whose :class:`Wiring` sets
    ``root``, ``reading`` and ``episodes_prefix``)."""

    root: Path
    reading: Reading
    episodes_prefix: Callable[..., str]

    @cached_property
    def navigation(self) -> Navigation:
        return Navigation(self.root, self.reading, self.episodes_prefix)

    def peek(self, path: str, prefix: str = "") -> Peek:
        """A ~200-token glance at a page (rules: :mod:`kiwifs.memory.navigation`); its
        ``links_in`` from the link index, only sources under ``prefix`` (a scoped key's)."""
        return self.navigation.peek(path, lambda rel: [b.path for b in self.backlinks(rel, prefix)])

    def section(self, path: str, heading: str | None = None, index: int | None = None) -> Section:
        """One heading's section of a page, by heading text (first match) or 0-based index."""
        return self.navigation.section(path, heading, index)

    def context(self) -> Context:
        """SCHEMA.md, the playbook, index.md, .kiwi/rules.md and the memory conventions."""
        return self.navigation.context()
