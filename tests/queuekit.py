"""The consolidation queue's test material: a clock the test moves by hand, and episodes to claim.

conftest's ``clock`` fixture is a :class:`Clock` at :data:`T0`; a test hands it to the claims
(``Knowledge.open(root, clock=clock)``) and moves it (``clock.now += 61``), so a lease expires
without waiting for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # conftest imports this module: kiwifs loads with the first test that needs it
    from kiwifs.knowledge import Knowledge
    from kiwifs.memory.leases import Claim

T0 = 1_796_061_419.0  # 2026-11-30T17:56:59Z


class Clock:
    """A clock the test moves by hand: ``now`` until the test changes it."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def episode(ident: str, *extra: str) -> str:
    """The frontmatter of an episodic memory ``ident``, with ``extra`` lines in it."""
    return "\n".join(["---", "memory_kind: episodic", f"episode_id: {ident}", *extra, "---", ""])


def add_episodes(root: Path, count: int) -> Path:
    """``episodes/e0.md`` … ``e{count-1}.md`` under ``root``: episode ``eN`` reads ``episode N``."""
    (root / "episodes").mkdir(exist_ok=True)
    for n in range(count):
        (root / f"episodes/e{n}.md").write_text(episode(f"e{n}") + f"episode {n}\n")
    return root


@contextmanager
def opened_on(root: Path, clock: Clock) -> Iterator[Knowledge]:
    """``root`` opened as a git repository, its claims read ``clock``; closed after."""
    from kiwifs.knowledge import Knowledge

    with Knowledge.open(root, clock=clock) as kb:
        kb.ensure_versioned()
        yield kb


def stored_claims(root: Path, now: float) -> list[Claim]:
    """Every row of ``root``'s claims store, live or not, read through a store of its own."""
    from kiwifs.claims.store import ClaimStore

    store = ClaimStore(root)
    try:
        return store.read(now, live_only=False)
    finally:
        store.close()
