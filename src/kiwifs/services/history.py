"""A root's history as callers ask for it: versions of a file, one version, a diff, the changes.

History comes from git, yet its paths obey the same rules as a read: a path that leads through
a symlink into ``.git`` or out of the root is refused on every route. Every query first waits
for the commits still pending (``--async-commit``), so it sees every write that returned.
A root that is not a git repository has no history: lists are empty, a version is not found.
The reads themselves are :mod:`kiwifs.git.log`'s, imported by the first one (a memory report
loads neither it nor ``subprocess``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from kiwifs.base.limits import CHANGES_LIMIT
from kiwifs.base.paths import canonical
from kiwifs.base.text import check_text
from kiwifs.errors import NotFound
from kiwifs.files.storage import Storage
from kiwifs.git.repo import Git
from kiwifs.writes.pipeline import Pipeline

if TYPE_CHECKING:
    from kiwifs.git.log import BlameLine, Change, Version


class History:
    """The history reads of one root, through the write pipeline's git (set once versioned)."""

    def __init__(self, storage: Storage, pipeline: Pipeline) -> None:
        self.storage = storage
        self.pipeline = pipeline

    def versions(self, path: str) -> list[Version]:
        from kiwifs.git import log

        rel = self._path(path)
        git = self._git()
        return log.versions(git, rel) if git else []

    def version(self, path: str, rev: str) -> bytes:
        from kiwifs.git import log

        rel = self._path(path)
        return log.show(self._repository(), rel, rev)

    def diff(self, path: str, rev_from: str, rev_to: str) -> str:
        from kiwifs.git import log

        rel = self._path(path)
        return log.diff(self._repository(), rel, rev_from, rev_to)

    def blame(self, path: str) -> tuple[list[BlameLine], int]:
        """Who last changed each line of ``path`` (as committed), and its number of lines:
        only the first :data:`~kiwifs.git.log.BLAME_LINES` are blamed. A file that is not
        there is :class:`NotFound`; one never committed (or an unversioned root) has no lines."""
        from kiwifs.git import log

        rel = self._path(path)
        if not self.storage.exists(rel):
            raise NotFound(f"file not found: {rel}")
        git = self._git()
        return log.blame(git, rel) if git else ([], 0)

    def changes(
        self, since: str | None = None, limit: int | None = None, path_prefix: str | None = None
    ) -> list[Change]:
        """Commits since ``since``, newest first; ``limit`` defaults to 50 and is capped at 500
        (as KiwiFS: a missing or non-positive value is the default). ``path_prefix`` (a leading
        ``/`` ignored): only commits whose every changed path starts with it, counted before
        ``limit`` cuts."""
        from kiwifs.git import log

        log.check_sequence(since)
        prefix = check_text(path_prefix or "", "path prefix").lstrip("/")
        git = self._git()
        return log.changes(git, since, CHANGES_LIMIT(limit), prefix or None) if git else []

    def head(self) -> str | None:
        """The commit HEAD names once every write that returned is in it (``None``: not
        versioned, or no commit yet)."""
        git = self._git()
        return git.head() if git is not None else None

    def first_added(self, paths: Sequence[str]) -> Mapping[str, float]:
        """When each path was first committed (what ``memory check`` ages episodes by)."""
        git = self._git()
        if git is None:
            return {}
        from kiwifs.git import log

        return log.first_added(git, paths)

    def _path(self, path: str) -> str:
        """The canonical path of a history query, refused like a read would refuse it."""
        rel = canonical(path, reading=True)
        self.storage.abspath(rel)
        return rel

    def _git(self) -> Git | None:
        """The repository once every write that returned is in it (``None``: not versioned)."""
        self.pipeline.flush()
        return self.pipeline.git

    def _repository(self) -> Git:
        git = self._git()
        if git is None:
            raise NotFound("version not found (the root is not a git repository)")
        return git
