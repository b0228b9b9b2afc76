"""The integrity of consolidation: lineage by path or episode id, and ``memory check``.

Both answer from the index when it answers reports, else by reading the files (the same rows,
the same rules). The check's problems for the configured prefix are also kept stored in the
index by a :class:`~kiwifs.index.memory.checkcache.CheckKeeper` (what the dashboard shows): a server
runs it again in the background after files change and announces each new result as a
``check`` event; elsewhere it runs when asked, if files changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kiwifs.base.paths import canonical
from kiwifs.errors import InvalidPath, NotFound, UsageError
from kiwifs.files.storage import Storage
from kiwifs.index.memory.checkcache import QUIET_SECONDS, CheckKeeper
from kiwifs.index.upkeep import IndexKeeper
from kiwifs.writes.events import CHECK_STORED, Event, EventBus

# The check's rules are imported by the calls that run it, not by every command that opens a
# root.
if TYPE_CHECKING:
    from kiwifs.memory.check import MemoryCheck
    from kiwifs.memory.lineage import Lineage
    from kiwifs.memory.problems import Problem

EpisodesPrefix = Callable[[str | None], str]  # the prefix in force for an optional argument
FirstAdded = Callable[[Sequence[str]], Mapping[str, float]]
Head = Callable[[], str | None]  # the commit HEAD names, every returned write in it


class Integrity:
    """Lineage and the check of one root."""

    def __init__(
        self,
        storage: Storage,
        indexing: IndexKeeper,
        events: EventBus,
        first_added: FirstAdded,
        episodes_prefix: EpisodesPrefix,
        head: Head,
    ) -> None:
        self.storage = storage
        self.root: Path = storage.root
        self.indexing = indexing
        self.events = events
        self.first_added = first_added  # git's log: the whole history walked
        self.episodes_prefix = episodes_prefix
        self.head = head

    def lineage(self, path: str, prefix: str | None = None) -> Lineage:
        """Both directions of a file's lineage (docs/memory.md)."""
        return self.indexing.answers.lineage(
            canonical(path, reading=True), self.episodes_prefix(prefix)
        )

    def lineage_of(self, path_or_id: str, prefix: str | None = None) -> Lineage:
        """:meth:`lineage` of a file given by path, or of the one episode with that id."""
        rel = _as_path(path_or_id)
        if rel is not None and self.storage.exists(rel):
            return self.lineage(rel, prefix)
        return self.episode_lineage(path_or_id, prefix)

    def lineage_by(
        self, path: str | None, episode_id: str | None, prefix: str | None = None
    ) -> Lineage:
        """:meth:`lineage` of the file at ``path`` or of the episode ``episode_id``: exactly one
        of the two (REST and MCP take them as two arguments, unlike the CLI's one)."""
        if path is not None and episode_id is None:
            return self.lineage(path, prefix)
        if episode_id is not None and path is None:
            return self.episode_lineage(episode_id, prefix)
        raise UsageError("give either path or episode_id")

    def find_lineage(
        self,
        path: str | None,
        episode_id: str | None,
        path_or_id: str | None,
        prefix: str | None = None,
    ) -> Lineage:
        """The lineage :meth:`Knowledge.lineage` answers: by ``path_or_id`` alone (the CLI's
        one argument), else by exactly one of ``path`` and ``episode_id``."""
        if path_or_id is not None and path is None and episode_id is None:
            return self.lineage_of(path_or_id, prefix)
        if path_or_id is not None:
            raise UsageError("give either path_or_id or path or episode_id")
        return self.lineage_by(path, episode_id, prefix)

    def episode_lineage(self, episode_id: str, prefix: str | None = None) -> Lineage:
        """:meth:`lineage` of the one episode whose id is ``episode_id``."""
        ident = episode_id.strip() if isinstance(episode_id, str) else ""
        if not ident:
            raise UsageError("give a file path or an episode id")
        paths = self.indexing.answers.episode_paths(ident, self.episodes_prefix(prefix))
        if not paths:
            raise NotFound(f"no file at {ident} and no episode with id {ident!r}")
        if len(paths) > 1:
            raise UsageError(f"episode id {ident!r} names {len(paths)} episodes: give a path")
        return self.lineage(paths[0], prefix)

    def check(self, prefix: str | None = None, use_index: bool = True) -> MemoryCheck:
        """``memory check`` for ``prefix``: from the index when it answers, else a scan."""
        from kiwifs.index.memory.check import scan_rows
        from kiwifs.memory.check import build_check

        prefix = self.episodes_prefix(prefix)
        rows = self.indexing.answers.check_rows(prefix) if use_index else None
        episodes, pages, existing = rows if rows is not None else scan_rows(self.root, prefix)
        first_added = self._first_added if rows is not None else self.first_added
        return build_check(prefix, episodes, pages, existing.__contains__, first_added, time.time())

    def _first_added(self, paths: Sequence[str]) -> Mapping[str, float]:
        """When each path was first committed: from the history the index replayed, when it
        reaches HEAD (a lookup per path), else from git's log, which walks the whole history
        (minutes on a root of tens of thousands of commits)."""
        kept = self.indexing.answers.first_added(paths, self.head())
        return kept if kept is not None else self.first_added(paths)

    def checker(self) -> CheckKeeper:
        """The keeper of the stored check (made on first use)."""
        return self.indexing.checker(self.problems_now, self._announce)

    def start_checking(self, quiet: float = QUIET_SECONDS) -> None:
        """Run the stored check again ``quiet`` seconds after files change, in the background."""
        self.checker()
        self.indexing.start_checking(quiet)

    def stop_checking(self) -> None:
        """Stop the background check (a later :meth:`start_checking` starts it again)."""
        self.indexing.stop_checking()

    def problems_now(self) -> tuple[str, list[Problem]]:
        """The check's problems for the configured prefix (what the dashboard caches)."""
        from kiwifs.index.memory.check import scan_rows
        from kiwifs.memory.problems import problems_in

        prefix = self.episodes_prefix(None)
        found = self.indexing.answers.check_problems(prefix)
        if found is None:
            found = problems_in(prefix, *scan_rows(self.root, prefix))
        return prefix, found

    def _announce(self) -> None:
        self.events.publish(Event(CHECK_STORED))


def _as_path(value: str) -> str | None:
    try:
        return canonical(value)
    except InvalidPath:
        return None
