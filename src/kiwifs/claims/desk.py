"""Claims on a root: the consolidation queue's memory claims, KiwiFS's file claims and
``kiwi_eligible``, and the guards every change and merge is handed (rules:
:mod:`kiwifs.memory.queue`; store: :mod:`kiwifs.claims.store`; the guards, which hold the store
transaction across the write pipeline: :mod:`kiwifs.claims.guards`).

Every decision is made inside one ``BEGIN IMMEDIATE`` transaction of the claims store, so two
workers (threads or processes) never decide on the same state. Memory claims touch only the
store. File claims also write ``claimed-by``, ``claimed-at`` and ``lease-expires`` into the file
through the write pipeline (one commit), with the store transaction held across the write. A
merge holds the store transaction from its check until its commit, so no claim can be handed
out on an episode between "nobody holds it" and "a page cites it".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kiwifs.base.paths import canonical
from kiwifs.base.text import check_text
from kiwifs.claims.guards import ChangeGuard, FileClaimGuard, MergeGuard
from kiwifs.claims.store import ClaimStore
from kiwifs.errors import Conflict, NotFound, UsageError
from kiwifs.files.storage import Storage
from kiwifs.frontmatter.edit import edit_frontmatter, scalar
from kiwifs.frontmatter.provenance import library_actor
from kiwifs.frontmatter.reader import read_frontmatter, split
from kiwifs.git.repo import blob_id
from kiwifs.index.record import path_key
from kiwifs.index.upkeep import IndexKeeper
from kiwifs.memory.leases import FILE, MEMORY, Claim, check_holder, lease_seconds, rfc3339
from kiwifs.memory.queue import (
    DEFAULT_FILE_LEASE,
    DEFAULT_LEASE,
    MAX_LIMIT,
    WRITE,
    ClaimBatch,
    ClaimedEpisode,
    change_refusal,
    fresh_episodes,
    renewable,
)
from kiwifs.memory.rules import ClaimMark, MergeEntry, episode_identity, is_episodic
from kiwifs.writes.pipeline import Pipeline

CLAIM_KEYS = ("claimed-by", "claimed-at", "lease-expires")
ELIGIBLE_MAX = 200


@dataclass(frozen=True)
class Task:
    """A file ``kiwi_eligible`` lists: a task no live claim holds."""

    path: str
    title: str
    priority: Any

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "title": self.title, "priority": self.priority}


class ClaimsDesk:
    """The claims of one root and the operations on them."""

    def __init__(
        self,
        storage: Storage,
        pipeline: Pipeline,
        indexing: IndexKeeper,
        prefix: Callable[[str | None], str],
    ) -> None:
        self.storage = storage
        self.pipeline = pipeline
        self.indexing = indexing
        self.prefix = prefix
        self.store = ClaimStore(storage.root)
        self.clock: Callable[[], float] = time.time

    def close(self) -> None:
        self.store.close()

    # -- reading ----------------------------------------------------------------------------

    def live(self) -> list[Claim]:
        """Every live claim (memory and file), by path."""
        return sorted(self.store.read(self.clock()), key=lambda c: c.path)

    def marks(self) -> dict[str, ClaimMark]:
        """Live claims as the memory report marks them."""
        return {c.path: ClaimMark(c.holder, c.lease_expires) for c in self.store.read(self.clock())}

    # -- memory claims ----------------------------------------------------------------------

    def claim_episodes(
        self,
        worker: str,
        limit: int = 20,
        lease: Any = None,
        prefix: str | None = None,
        with_content: bool = False,
    ) -> ClaimBatch:
        """Claim up to ``limit`` unmerged episodes no live claim holds, in report order; the
        worker's own live claims are renewed and count in the batch (``limit=0`` only renews)."""
        holder = check_holder(worker, "worker")
        if isinstance(limit, bool) or not 0 <= limit <= MAX_LIMIT:
            raise UsageError(f"limit must be between 0 and {MAX_LIMIT}, got {limit}")
        seconds = lease_seconds(lease, DEFAULT_LEASE)
        episodes = self.prefix(prefix)
        with self.store.transaction() as tx:
            now = self.clock()
            live = tx.live(now)
            mine = renewable(live, holder)
            wanted = limit + len(live) if limit > len(mine) else 0  # enough to skip the claimed
            still, head = self.indexing.answers.claim_candidates(
                [c.path for c in mine], episodes, wanted
            )
            kept = [c for c in mine if c.path in still]
            tx.delete(c.path for c in mine if c.path not in still)
            fresh = fresh_episodes(head, live, limit - len(kept))
            expires = now + seconds
            rows = [replace(c, expires=expires) for c in kept]
            rows += [Claim(e.path, holder, MEMORY, e.episode_id, now, expires) for e in fresh]
            rows.sort(key=lambda c: path_key(c.path) or b"")
            claimed, gone = self._handed_out(rows, with_content)
            tx.delete(gone)
            tx.put(c for c in rows if c.path not in gone)
        return ClaimBatch(holder, rfc3339(expires), tuple(claimed))

    def _handed_out(
        self, rows: list[Claim], with_content: bool
    ) -> tuple[list[ClaimedEpisode], list[str]]:
        """The claimed episodes as handed out (ETag, content); files gone meanwhile are not."""
        claimed: list[ClaimedEpisode] = []
        gone: list[str] = []
        for c in rows:
            data = self.storage.read_optional(c.path)
            if data is None:
                gone.append(c.path)
                continue
            text = data.decode("utf-8", errors="replace") if with_content else None
            etag, until = blob_id(data), rfc3339(c.expires)
            claimed.append(ClaimedEpisode(c.path, c.episode_id, etag, until, text))
        return claimed, gone

    def release_episodes(self, worker: str, paths: Sequence[str] | None = None) -> list[str]:
        """End the worker's memory claims early (all of them when ``paths`` is empty)."""
        holder = check_holder(worker, "worker")
        rels = [canonical(p) for p in paths or ()]
        with self.store.transaction() as tx:
            now = self.clock()
            if not rels:
                mine = [c for c in tx.held_by(holder) if c.kind == MEMORY]
                released = [c.path for c in mine if c.live(now)]
                if not released:
                    raise NotFound(f"worker {holder} holds no live claims")
                tx.delete(c.path for c in mine)
            else:
                released = [self._releasable(tx.get(rel), rel, holder, now) for rel in rels]
                tx.delete(released)
        return sorted(set(released), key=lambda p: path_key(p) or b"")

    @staticmethod
    def _releasable(claim: Claim | None, rel: str, holder: str, now: float) -> str:
        if claim is None or not claim.live(now):
            raise NotFound(f"no live claim on {rel}")
        if claim.holder != holder:
            raise Conflict(f"{rel} is claimed by {claim.holder}, not {holder}")
        if claim.kind != MEMORY:
            raise UsageError(f"{rel} is a file claim: release it as a file claim (kiwi_release)")
        return rel

    # -- the guard of a merge ---------------------------------------------------------------

    def merge_guard(
        self,
        page: str,
        entries: Sequence[MergeEntry],
        worker: str | None,
        force: bool = False,
        actor: str = "",
    ) -> MergeGuard:
        holder = check_holder(worker, "worker") if worker is not None else None
        return MergeGuard(self, canonical(page), list(entries), holder, force, actor)

    # -- changes to claimed paths (writes, renames, deletes, forgets) ------------------------

    def change_guard(
        self,
        action: str,
        paths: Sequence[str],
        actor: str,
        to: str | None = None,
        moves: Mapping[str, str] | None = None,
    ) -> ChangeGuard:
        """The guard a change of ``paths`` by ``actor`` holds under the write lock (rules:
        :func:`~kiwifs.memory.queue.change_refusal`); a rename names its target ``to`` (one
        file) or ``moves`` (old path to new path: a folder), and the claims follow."""
        if to is not None:
            moves = {canonical(paths[0]): canonical(to)}
        return ChangeGuard(self, action, [canonical(p) for p in paths], actor, moves)

    def prepare_write(self, path: str, data: bytes, actor: str) -> tuple[bytes, Callable[[], None]]:
        """A whole-file write's bytes and the check it runs under the write lock.

        A write by anyone but the holder of a live file claim is refused (in the check). The
        holder's write keeps the claim keys in the frontmatter, put back when its content
        dropped them, so the file and the store never disagree; should the claim change between
        this call and the check (a claim or release of the file in between), the write is
        refused and may be sent again."""
        rel = canonical(path)
        seen = self._file_claim(rel)
        if seen is not None and seen.holder == actor.strip():
            data = edit_frontmatter(data, lambda doc: _set_claim_keys(doc, seen))

        def check() -> None:
            now = self._file_claim(rel)
            if now is not None:
                reason = change_refusal(now, WRITE, actor, self.clock())
                if reason is not None:
                    raise Conflict(reason)
            if now != seen:
                raise Conflict(f"the claim on {rel} changed during this write; send it again")

        return data, check

    def _file_claim(self, rel: str) -> Claim | None:
        claim = self.store.read_path(rel)
        return (
            claim if claim is not None and claim.kind == FILE and claim.live(self.clock()) else None
        )

    # -- file claims (KiwiFS's generic claims) ----------------------------------------------

    def claim_file(self, path: str, holder: str, lease: Any = None) -> Claim:
        """Claim one file for ``holder``: it must be free, expired, or already ``holder``'s (a
        renewal). The claim is written into the file's frontmatter (one commit)."""
        rel = canonical(path)
        who = check_holder(holder, "holder")
        seconds = lease_seconds(lease, DEFAULT_FILE_LEASE, "lease_duration")
        guard = FileClaimGuard(self.store.transaction(), self.clock)
        episodes = self.prefix(None)

        def change(current: bytes | None) -> bytes | None:
            if current is None:
                raise NotFound(f"file not found: {rel}")
            before = guard.tx.get(rel)
            if before is not None and before.live(guard.now) and before.holder != who:
                raise Conflict(f"{rel} is claimed by {before.holder} until {before.lease_expires}")
            same = before is not None and before.holder == who and before.live(guard.now)
            taken = before.claimed_at if same and before is not None else guard.now
            fm = read_frontmatter(current).data
            kind = fm.get("memory_kind") if isinstance(fm.get("memory_kind"), str) else ""
            ident = episode_identity(fm) if is_episodic(rel, str(kind), episodes) else ""
            guard.row = Claim(rel, who, FILE, ident, taken, guard.now + seconds)
            return edit_frontmatter(current, lambda doc: _set_claim_keys(doc, guard.row))

        author = library_actor(who)  # the holder as a commit can name it (no "<", ">")
        self.pipeline.edit(rel, change, author, message=f"{who}: claim {rel}", guard=guard)
        assert guard.row is not None
        return guard.row

    def release_file(self, path: str, holder: str) -> str:
        """Release ``holder``'s claim on one file (live or expired) and remove its frontmatter
        keys (one commit). Another holder's live claim is a conflict."""
        rel = canonical(path)
        who = check_holder(holder, "holder")
        guard = FileClaimGuard(self.store.transaction(), self.clock, release=True)

        def change(current: bytes | None) -> bytes | None:
            claim = guard.tx.get(rel)
            if claim is None or (claim.holder != who and not claim.live(guard.now)):
                raise NotFound(f"no claim on {rel} by {who}")
            if claim.kind != FILE:
                raise UsageError(
                    f"{rel} is held by a memory claim of {claim.holder}, not a file claim:"
                    " memory claims end with memory release (kiwi_memory_release) or a merge"
                )
            if claim.holder != who:
                raise Conflict(f"{rel} is claimed by {claim.holder}, not {who}")
            guard.row = claim
            if current is None:
                return None
            return _without_claim_keys(current)

        if self.storage.exists(rel):
            author = library_actor(who)
            self.pipeline.edit(rel, change, author, message=f"{who}: release {rel}", guard=guard)
        else:
            with guard:
                change(None)
        return rel

    def eligible(self, limit: int = 10, path_prefix: str | None = None) -> list[Task]:
        """Tasks (``status: todo``) under ``path_prefix`` that no live claim holds, lowest
        ``priority`` first (no priority last), then in walk order."""
        if isinstance(limit, bool) or not 1 <= limit <= ELIGIBLE_MAX:
            raise UsageError(f"limit must be between 1 and {ELIGIBLE_MAX}, got {limit}")
        start = check_text(path_prefix or "", "path_prefix").lstrip("/")
        if any(ord(c) < 0x20 for c in start):
            raise UsageError("path_prefix must not contain control characters")
        held = {c.path for c in self.store.read(self.clock())}
        found = [t for t in self.indexing.answers.todo_files(start) if t.path not in held]
        ranked = sorted(enumerate(found), key=lambda it: (_rank(it[1].priority), it[0]))
        return [Task(t.path, _title(t.title), t.priority) for _, t in ranked[:limit]]


def _set_claim_keys(doc: Any, claim: Claim | None) -> bool:
    assert claim is not None
    values = (claim.holder, rfc3339(claim.claimed_at), claim.lease_expires)
    changed = False
    for key, value in zip(CLAIM_KEYS, values, strict=True):
        if doc.get(key) != value:
            doc[key] = scalar(value)
            changed = True
    return changed


def _without_claim_keys(data: bytes) -> bytes:
    """``data`` without the claim keys; a block left empty is removed (the claim made it)."""
    emptied = False

    def drop(doc: Any) -> bool:
        nonlocal emptied
        present = [k for k in CLAIM_KEYS if k in doc]
        for key in present:
            del doc[key]
        emptied = bool(present) and len(doc) == 0
        return bool(present)

    edited = edit_frontmatter(data, drop)
    return split(edited)[1] if emptied else edited


def _rank(priority: Any) -> tuple[int, float]:
    if isinstance(priority, bool) or priority is None:
        return (1, 0.0)
    try:
        return (0, float(priority))
    except (TypeError, ValueError):
        return (1, 0.0)


def _title(value: Any) -> str:
    return value if isinstance(value, str) else ""
