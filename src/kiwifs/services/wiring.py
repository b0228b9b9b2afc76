"""``Wiring``: the parts of one root, built once and handed to each other.

The facade (:class:`kiwifs.knowledge.Knowledge`) is the operations; this is what they run on: the
files, the repository, the change events, the index, the write pipeline, the claims and the
services composed over them, each given the knobs (:class:`Tuning`) read once. Kept apart so that
the facade reads as its operations, and so that a test can hand in a part it built itself (an
:class:`IndexKeeper`, a :class:`Git`, the claims' clock) and watch that very part at work.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Self

from kiwifs.claims.desk import ClaimsDesk
from kiwifs.config import Config, load_config
from kiwifs.errors import RootNotFound
from kiwifs.files.storage import Storage
from kiwifs.frontmatter.provenance import LIBRARY_ACTOR
from kiwifs.git.repo import Git
from kiwifs.index.linkparse import valid_fields
from kiwifs.index.upkeep import IndexKeeper
from kiwifs.memory.rules import resolve_prefix
from kiwifs.services.amending import FileAmendments
from kiwifs.services.briefing import Briefing
from kiwifs.services.consolidation import Consolidation
from kiwifs.services.filewrites import FileWrites
from kiwifs.services.history import History
from kiwifs.services.integrity import Integrity
from kiwifs.services.linking import LinkReads
from kiwifs.services.memorywrites import MemoryWriter
from kiwifs.services.moving import FileMoves, Moves
from kiwifs.services.reading import Reading
from kiwifs.tuning import Tuning
from kiwifs.writes.events import EventBus
from kiwifs.writes.pipeline import Pipeline

if TYPE_CHECKING:
    from kiwifs.services.scaffold import InitResult


class Wiring(LinkReads, FileAmendments, FileMoves):
    """The parts of the root at ``root``; ``index``, ``git`` and ``clock`` (the claims' time)
    replace the ones it would build (tests hand in their own to watch them). The link reads
    (:class:`~kiwifs.services.linking.LinkReads`), the frontmatter patch and the blame
    (:class:`~kiwifs.services.amending.FileAmendments`) come in through here so that the
    facade module, at its size limit, inherits them unchanged."""

    def __init__(
        self,
        root: Path,
        config: Config | None = None,
        tuning: Tuning | None = None,
        *,
        index: IndexKeeper | None = None,
        git: Git | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.root = Path(root)
        self.config = config if config is not None else load_config(self.root)
        # the knobs, read once here and handed to every part that takes one
        self.tuning = tuning if tuning is not None else Tuning.from_env()
        self.storage = Storage(self.root, self.tuning.read_many)
        repo = git if git is not None else self._new_git()
        self.git: Git | None = repo if repo.is_repo() else None
        if self.git is not None:
            self.git.exclude_own_files()  # a repository made without kiwifs ignores them too
        self.events = EventBus()
        self.indexing = index or IndexKeeper(
            self.root, self.config.search.vector, tuning=self.tuning
        )
        self.indexing.link_fields = valid_fields(self.config.links.typed_fields)
        self.pipeline = Pipeline(
            self.storage, self.git, self.events, self.indexing.on_written, self.tuning
        )
        self.claims = ClaimsDesk(self.storage, self.pipeline, self.indexing, self.episodes_prefix)
        if clock is not None:
            self.claims.clock = clock
        self.files = FileWrites(self.pipeline, self.claims)
        self.moves = Moves(self.pipeline, self.claims, self.indexing)
        self.history = History(self.storage, self.pipeline)
        self.reading = Reading(self.storage, self.history.version)
        self.integrity = Integrity(
            self.storage,
            self.indexing,
            self.events,
            self.history.first_added,
            self.episodes_prefix,
            self.history.head,
        )
        self.consolidation = Consolidation(
            self.root,
            self.pipeline,
            self.indexing,
            self.claims,
            self.integrity,
            self.episodes_prefix,
        )
        self.briefing = Briefing(self.storage, self.indexing, self.config.search.vector.enabled)
        self.memory_writes = MemoryWriter(
            self.pipeline, self.indexing, self.claims, self.episodes_prefix
        )

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        sweep: bool = False,
        tuning: Tuning | None = None,
        clock: Callable[[], float] | None = None,
        *,
        index: IndexKeeper | None = None,
        git: Git | None = None,
    ) -> Self:
        """Open an existing root; a missing one is an error, never created silently.

        Repairs what a crash left behind first (:mod:`kiwifs.writes.recovery`); ``sweep`` (servers,
        at start) also removes the temporary files of interrupted writes, a walk of the root.
        ``tuning``: the knobs (default: :meth:`Tuning.from_env`); ``clock``: the time the
        claims' leases are measured by (default :func:`time.time`; tests move their own);
        ``index``, ``git``: parts built by the caller, used instead of new ones.
        """
        path = Path(root)
        if not path.exists():
            raise RootNotFound(f"knowledge root not found: {path} (create it with 'kiwifs init')")
        if not path.is_dir():
            raise RootNotFound(f"knowledge root is not a folder: {path}")
        opened = cls(path, tuning=tuning, clock=clock, index=index, git=git)
        from kiwifs.writes.recovery import recover  # at open only

        recover(opened.pipeline, sweep)
        return opened

    @staticmethod
    def init(root: str | os.PathLike[str], template: str = "knowledge") -> InitResult:
        """Lay out a new root from a template (never overwriting) and commit it."""
        from kiwifs.services.scaffold import scaffold

        return scaffold(Path(root), template)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Commit what is pending, stop the watcher, close the index, write the git index file.

        Safe to call twice; the object stays usable (writes then commit synchronously).
        """
        self.pipeline.close()
        self.claims.close()
        self.indexing.close()
        if self.git is not None:
            self.git.close()

    def ensure_versioned(self, background: bool = False) -> None:
        """Make the root a git repository committing what is there (unless config says none),
        or finish an import cut short. ``background``: the import is made by a child process
        while this one goes on, and this root's commits wait for it (a server, so that it
        answers at once: :mod:`kiwifs.git.adoption`)."""
        from kiwifs.git import adoption  # servers and init only: it loads subprocess

        if not self.config.versioning.uses_git or not adoption.pending(self.root):
            return
        git = self.git if self.git is not None else self._new_git()
        if background:
            adoption.Adoption(git, LIBRARY_ACTOR).start()
        else:
            adoption.adopt_now(git, LIBRARY_ACTOR)
        self.git = git
        self.pipeline.git = git

    def _new_git(self) -> Git:
        """The root's repository, with the tuning's commit and packing knobs."""
        return Git(self.root, self.tuning.kept_trees, self.tuning.pack_loose_objects)

    def episodes_prefix(self, prefix: str | None = None) -> str:
        """The prefix in force: the argument, else ``[memory]`` config, else ``episodes/``."""
        return resolve_prefix(prefix, self.config.memory.episodes_path_prefix)
