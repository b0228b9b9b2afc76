"""A root's history as callers ask for it: versions of a file, one version, a diff, the changes.

History comes from git, yet its paths obey the same rules as a read: a path that leads through
a symlink into ``.git`` or out of the root is refused on every route. Every query first waits
for the commits still pending (``--async-commit``), so it sees every write that returned.
A root that is not a git repository has no history: lists are empty, a version is not found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .errors import NotFound
from .limits import CHANGES_LIMIT
from .paths import canonical
from .pipeline import Pipeline
from .storage import Storage
from .versioning import Git

if TYPE_CHECKING:
    from .gitlog import Change, Version


class History:
    """The history reads of one root, through the write pipeline's git (set once versioned)."""

    def __init__(self, storage: Storage, pipeline: Pipeline) -> None:
        self.storage = storage
        self.pipeline = pipeline

    def versions(self, path: str) -> list[Version]:
        rel = self._path(path)
        git = self._git()
        return git.versions(rel) if git else []

    def version(self, path: str, rev: str) -> bytes:
        rel = self._path(path)
        return self._repository().show(rel, rev)

    def diff(self, path: str, rev_from: str, rev_to: str) -> str:
        rel = self._path(path)
        return self._repository().diff(rel, rev_from, rev_to)

    def changes(self, since: str | None = None, limit: int | None = None) -> list[Change]:
        """Commits since ``since``, newest first; ``limit`` defaults to 50 and is capped at 500
        (as KiwiFS: a missing or non-positive value is the default)."""
        from .gitlog import check_sequence  # history reads only: not part of a report's start-up

        check_sequence(since)
        git = self._git()
        return git.changes(since, CHANGES_LIMIT(limit)) if git else []

    def first_added(self, paths: Sequence[str]) -> Mapping[str, float]:
        """When each path was first committed (what ``memory check`` ages episodes by)."""
        git = self._git()
        return git.first_added(paths) if git else {}

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
