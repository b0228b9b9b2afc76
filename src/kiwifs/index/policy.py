"""What the index's answers and lookups need from the keeper, written once.

:class:`~kiwifs.index.answers.IndexAnswers` and :class:`~kiwifs.index.lookups.IndexLookups` are
handed a :class:`KeeperPolicy` when the keeper builds them, and reach the index only through it:
the policy decides *when* the index may answer (current, repaired once on damage, the scan
preferred where no index lives in the root), they decide *what* to ask it. The keeper
(:class:`~kiwifs.index.upkeep.IndexKeeper`) satisfies this protocol structurally; mypy checks so
where it builds them, and a test can hand them a smaller policy of its own.

It sits in a layer of its own below the answers and lookups and above what it names (the
vector side, the background loops), so both import it without importing the keeper.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from kiwifs.config import VectorConfig
    from kiwifs.index.core import Index
    from kiwifs.index.memory.checkcache import CheckKeeper, CheckWorker
    from kiwifs.index.memory.timeline import TimelineKeeper
    from kiwifs.index.vectors.side import Recall

T = TypeVar("T")


class KeeperPolicy(Protocol):
    """The keeper as its answers and lookups see it."""

    def guarded(self, action: Callable[[Index], T]) -> T:
        """``action`` on a current index, repaired once on real damage."""
        ...

    @property
    def watching(self) -> bool:
        """True while a ready watcher keeps the index current (caches are then worth keeping)."""
        ...

    def answers_reports(self) -> bool:
        """True when the memory report should come from the index rather than the scan."""
        ...

    @property
    def vector(self) -> VectorConfig:
        """The vector settings: whether the semantic side exists at all."""
        ...

    def recall(self) -> Recall:
        """The vector side, built on first use."""
        ...

    @property
    def check_keeper(self) -> CheckKeeper | None:
        """The stored check's keeper, once made (the check's state reads whether it is current)."""
        ...

    @property
    def check_worker(self) -> CheckWorker | None:
        """The check's worker process while the background loop runs."""
        ...

    @property
    def timeline_keeper(self) -> TimelineKeeper | None:
        """The timeline's loop while it runs (the overview wakes it when it is behind)."""
        ...
