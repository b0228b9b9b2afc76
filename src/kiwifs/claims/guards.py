"""The guards a change holds across the write pipeline, each with the claims store's
``BEGIN IMMEDIATE`` transaction open from its check until the change is on disk (or committed).

Kept apart from :mod:`kiwifs.claims.desk`, which decides who holds what and hands these out:
a guard is the other half of that decision, the part that runs under the write lock inside
:meth:`~kiwifs.writes.pipeline.Pipeline.edit`, where a claim check and the write it allows must
see one state of the store. :class:`FileClaimGuard` keeps a file claim or release and its
frontmatter edit together, :class:`ChangeGuard` keeps the claims on paths a change touches in
step with the change, and :class:`MergeGuard` keeps a merge's claim check until its commit.
The guards read the desk through :class:`Desk`, so this module does not import the one that
imports it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from types import TracebackType
from typing import Protocol

from kiwifs.claims.store import ClaimStore, Tx
from kiwifs.errors import Conflict
from kiwifs.index.upkeep import IndexKeeper
from kiwifs.memory.leases import FILE, MEMORY, Claim
from kiwifs.memory.queue import (
    FORGET,
    RENAME,
    WRITE,
    MergeFindings,
    change_refusal,
    cited_claims,
    merge_refusal,
    merged_refusal,
    released_by_merge,
)
from kiwifs.memory.rules import MergeEntry


class Desk(Protocol):
    """What a guard reads of :class:`~kiwifs.claims.desk.ClaimsDesk`, read through the desk as
    the guard runs (the clock once it is entered), as it was when the guards lived beside it."""

    @property
    def store(self) -> ClaimStore: ...

    @property
    def indexing(self) -> IndexKeeper: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def prefix(self) -> Callable[[str | None], str]: ...


class FileClaimGuard:
    """The store transaction of a file claim or release, held across the pipeline's write."""

    def __init__(
        self,
        transaction: contextlib.AbstractContextManager[Tx],
        clock: Callable[[], float],
        release: bool = False,
    ) -> None:
        self._transaction = transaction
        self._clock = clock
        self._release = release
        self.row: Claim | None = None
        self.now = 0.0
        self._tx: Tx | None = None

    @property
    def tx(self) -> Tx:
        assert self._tx is not None
        return self._tx

    def __enter__(self) -> FileClaimGuard:
        self._tx = self._transaction.__enter__()
        self.now = self._clock()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        if kind is None and self.row is not None:
            if self._release:
                self.tx.delete([self.row.path])
            else:
                self.tx.put([self.row])
        return self._transaction.__exit__(kind, exc, tb)


class ChangeGuard:
    """Held by a change of paths (a write, rename, delete or forget) from its claims check to
    its write, under the write lock, with the store transaction open across the write: a claim
    cannot be handed out, nor a path change hands, in between.

    Refuses while another holder's live claim holds a path (:func:`change_refusal`). Once the
    change is on disk the claims follow it: a rename carries the source's claim (live or not)
    to the target, a delete ends the path's claims, a forget ends the memory claim on the
    episode (it leaves the queue). Without a claims store there is nothing to do."""

    def __init__(
        self,
        desk: Desk,
        action: str,
        paths: list[str],
        actor: str,
        moves: Mapping[str, str] | None,
    ) -> None:
        self.desk = desk
        self.action = action
        self.paths = paths
        self.actor = actor
        self.moves = dict(moves or {})  # a rename's old paths to new ones
        self._transaction: contextlib.AbstractContextManager[Tx] | None = None
        self._tx: Tx | None = None
        self._rows: list[Claim] = []

    @property
    def waits_for_commit(self) -> bool:
        """Whether the write must be committed before the guard is left: only when the claims
        follow the change (a content write leaves them be, so it shares commits as usual)."""
        return self.action != WRITE

    def __enter__(self) -> ChangeGuard:
        if not self.desk.store.exists():
            return self
        self._transaction = self.desk.store.transaction()
        self._tx = self._transaction.__enter__()
        try:
            now = self.desk.clock()
            self._rows = [c for p in self.paths if (c := self._tx.get(p)) is not None]
            for claim in self._rows:
                reason = change_refusal(claim, self.action, self.actor, now)
                if reason is not None:
                    raise Conflict(reason)
        except BaseException as exc:
            self._transaction.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        if self._transaction is None or self._tx is None:
            return None
        if kind is None:
            self._follow(self._tx)
        return self._transaction.__exit__(kind, exc, tb)

    def _follow(self, tx: Tx) -> None:
        """The claims after the change: moved, ended, or (a content write) left alone."""
        if self.action == WRITE:
            return
        if self.action == FORGET:
            tx.delete(c.path for c in self._rows if c.kind == MEMORY)
            return
        tx.delete(c.path for c in self._rows)
        if self.action == RENAME and self.moves:
            moves = self.moves
            tx.put(replace(c, path=moves[c.path]) for c in self._rows if c.path in moves)


class MergeGuard:
    """Held by a merge from its claim check to its commit (see :meth:`Pipeline.edit`).

    Under the write lock, no other merge can commit between the check of what the entries cite
    (claims, and the pages that already merged those episodes) and this merge's commit, so the
    index it asks is the state the commit builds on. ``warnings`` are the entries that cite
    nothing, known once the guard is entered."""

    def __init__(
        self,
        desk: Desk,
        page: str,
        entries: list[MergeEntry],
        worker: str | None,
        force: bool = False,
        actor: str = "",
    ) -> None:
        self.desk = desk
        self.page = page
        self.entries = entries
        self.worker = worker
        self.force = force
        self.actor = actor
        self.warnings: tuple[str, ...] = ()
        self._transaction = desk.store.transaction()
        self._cited: list[Claim] = []
        self._now = 0.0
        self._tx: Tx | None = None

    def __enter__(self) -> MergeGuard:
        self._tx = self._transaction.__enter__()
        try:
            self._now = self.desk.clock()
            held = self._tx.get(self.page)  # the page itself, under another's file claim
            if held is not None and held.kind == FILE:
                reason = change_refusal(held, WRITE, self.actor, self._now)
                if reason is not None:
                    raise Conflict(reason)
            self._cited = cited_claims(self.entries, self._tx.all())
            findings = self.desk.indexing.answers.merge_findings(
                self.page, self.entries, self.desk.prefix(None)
            )
            self.warnings = findings.warnings
            if not self.force:
                self._refuse(findings)
        except BaseException as exc:
            self._transaction.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def _refuse(self, findings: MergeFindings) -> None:
        """Raise :class:`Conflict` when a claim holds a cited episode or another page has
        merged one already."""
        for claim in self._cited:
            reason = merge_refusal(claim, self.worker, self._now)
            if reason is not None:
                raise Conflict(reason)
        reason = merged_refusal(findings, self.page)
        if reason is not None:
            raise Conflict(reason)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        if kind is None and self._tx is not None:
            # another process may answer claims from the index: it must see this page first
            self.desk.indexing.refresh_shared([self.page])
            ended = released_by_merge(self._cited, self.worker, self._now, self.force)
            self._tx.delete(ended)
        return self._transaction.__exit__(kind, exc, tb)
