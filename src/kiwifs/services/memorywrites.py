"""The writes of memory: remembering an episode, forgetting and restoring a page, recording a
merge. Each is one call of the write pipeline (one lock, one commit) applying a pure rule of
:mod:`kiwifs.memory.lifecycle`; what must not race with other
writers is checked under the pipeline's lock:

* a new episode's id is free (one index lookup), so two agents choosing one id cannot both win;
* a merge's claims (:meth:`~kiwifs.claims.desk.ClaimsDesk.merge_guard`): citing an episode another
  worker holds, one whose claim by this worker expired, or one another page already merged,
  writes nothing (unless forced), and the worker's claims on the cited episodes end with the
  commit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kiwifs.base.paths import canonical
from kiwifs.claims.desk import ClaimsDesk
from kiwifs.errors import Conflict, UsageError
from kiwifs.frontmatter.provenance import Provenance, as_provenance, library_actor, now_utc
from kiwifs.index.upkeep import IndexKeeper
from kiwifs.memory.lifecycle import (
    forget_frontmatter,
    new_episode,
    record_merge,
    restore_frontmatter,
    successor_path,
)
from kiwifs.memory.queue import FORGET, WRITE
from kiwifs.memory.rules import MergeEntry, validate_entry
from kiwifs.writes.pipeline import Pipeline


@dataclass(frozen=True)
class MergeResult:
    """A merge's outcome; ``warnings`` name the entries that cite nothing (yet)."""

    path: str
    etag: str
    added: tuple[MergeEntry, ...]
    created: bool
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "etag": self.etag,
            "created": self.created,
            "added": [e.to_yaml_fields() for e in self.added],
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class RememberResult:
    path: str
    episode_id: str
    etag: str


@dataclass(frozen=True)
class StatusResult:
    """After a forget or restore: the page, its ETag, whether this call changed it, and whether
    it is now superseded."""

    path: str
    etag: str
    changed: bool
    superseded: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "etag": self.etag,
            "changed": self.changed,
            "superseded": self.superseded,
        }


class MemoryWriter:
    """The memory writes of one root (``episodes_prefix`` gives the prefix in force)."""

    def __init__(
        self,
        pipeline: Pipeline,
        indexing: IndexKeeper,
        claims: ClaimsDesk,
        episodes_prefix: Callable[[], str],
    ) -> None:
        self.pipeline = pipeline
        self.indexing = indexing
        self.claims = claims
        self.episodes_prefix = episodes_prefix

    def remember(
        self,
        content: str,
        episode_id: str | None = None,
        scope: str | None = None,
        tags: Sequence[str] | None = None,
        actor: str | None = None,
        provenance: str | Provenance | None = None,
        title: str | None = None,
    ) -> RememberResult:
        """Write a new episode; an id already taken anywhere in the root is a :class:`Conflict`."""
        prov = as_provenance(provenance)
        prefix = self.episodes_prefix()
        episode = new_episode(
            content, prefix, dt.datetime.now(dt.UTC), episode_id, scope, tags, title
        )

        def unclaimed() -> None:
            if not episode.chosen_id:
                return  # a fresh UUID4 names nothing yet; the create-only write still guards
            taken = self.indexing.answers.episode_paths(episode.episode_id, prefix)
            if taken:
                raise Conflict(f"episode {episode.episode_id} already exists at {taken[0]}")

        result = self.pipeline.write(
            episode.path, episode.data, library_actor(actor), None, prov, "*", unclaimed
        )
        return RememberResult(result.path, episode.episode_id, result.etag)

    def forget(
        self,
        path: str,
        reason: str | None = None,
        superseded_by: str | None = None,
        actor: str | None = None,
        if_match: str | None = None,
    ) -> StatusResult:
        """Mark a page superseded (unchanged when it already is)."""
        rel = canonical(path)
        successor = successor_path(superseded_by, rel)
        moment = dt.datetime.now(dt.UTC)

        def edit(data: bytes) -> bytes | None:
            return forget_frontmatter(data, moment, reason, successor)

        return self._set_status(rel, FORGET, edit, actor, if_match, superseded=True)

    def restore(
        self, path: str, actor: str | None = None, if_match: str | None = None
    ) -> StatusResult:
        """Undo :meth:`forget` (a page that is not superseded is left as it is)."""
        rel = canonical(path)
        return self._set_status(rel, WRITE, restore_frontmatter, actor, if_match, superseded=False)

    def merge(
        self,
        page: str,
        entries: Iterable[MergeEntry],
        actor: str | None = None,
        if_match: str | None = None,
        worker: str | None = None,
        force: bool = False,
    ) -> MergeResult:
        """Record in ``page``'s ``merged-from`` that it consumed ``entries`` (idempotent);
        ``force`` merges what claims or other pages' merges would refuse."""
        who = library_actor(actor)
        wanted = [validate_entry(e) for e in entries]
        if not wanted:
            raise UsageError("give at least one episode id or path to merge")
        if not isinstance(force, bool):
            raise UsageError("force must be true or false")
        guard = self.claims.merge_guard(page, wanted, worker, force, who)
        stamp = now_utc()
        added: tuple[MergeEntry, ...] = ()
        created = False

        def change(current: bytes | None) -> bytes | None:
            nonlocal added, created
            data, added = record_merge(current, wanted, stamp, who)
            created = current is None
            return data

        result = self.pipeline.edit(page, change, who, if_match, guard=guard)
        return MergeResult(result.path, result.etag, added, created, guard.warnings)

    def _set_status(
        self,
        rel: str,
        verb: str,
        edit: Callable[[bytes], bytes | None],
        actor: str | None,
        if_match: str | None,
        superseded: bool,
    ) -> StatusResult:
        who = library_actor(actor)
        changed = False

        def change(current: bytes | None) -> bytes | None:
            nonlocal changed
            if current is None:
                return None  # the pipeline reports the missing file
            data = edit(current)
            changed = data is not None
            return data

        guard = self.claims.change_guard(verb, [rel], who)
        name = "forget" if verb == FORGET else "restore"
        result = self.pipeline.edit(rel, change, who, if_match, f"{who}: {name} {rel}", guard)
        return StatusResult(result.path, result.etag, changed, superseded)
