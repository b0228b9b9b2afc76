"""The rules of a memory's life that need no disk: what a new episode is called and looks like,
what forgetting and restoring a page change in its frontmatter, what a merge adds to a page.

:meth:`kiwifs.services.memorywrites.MemoryWriter.remember` writes what :func:`new_episode`
describes, through the write pipeline, after checking under its lock that no other episode has the
id. The rules:

* the id is the caller's (one safe path segment: letters, digits, ``.``, ``_``, ``-``, starting
  with a letter or digit, at most 128 characters) or a new UUID4;
* the file is ``<episodes prefix><YYYY-MM-DD>/<episode_id>.md``, the date in UTC;
* its frontmatter says ``memory_kind: episodic``, ``episode_id``, ``created`` (RFC 3339, UTC,
  seconds) and ``scope``, ``tags`` and ``title`` when given; its body is the content. Content that
  starts with a frontmatter block of its own keeps those keys; the identity keys are set over
  them, since an episode that named another kind or id would drop out of the memory report.

Forgetting (:func:`forget_frontmatter`) marks a page ``memory_status: superseded`` with
``valid_until`` (RFC 3339, UTC, seconds) and, when given, ``superseded_reason`` and
``superseded_by``; restoring (:func:`restore_frontmatter`) removes those four keys. Both edit only
the frontmatter (the round-trip editor keeps the other keys, their order and comments, and the
body byte for byte) and both are idempotent: a page already forgotten is not forgotten again (its
first reason and date stand), a live page has nothing to restore.

Recording a merge (:func:`record_merge`) adds to a page's ``merged-from`` the entries it does not
cite yet (by :meth:`~kiwifs.memory.rules.MergeEntry.key`, so a worker that retries after a lost
answer changes nothing), each stamped with the merge's time and actor unless it carries its own.
A page that does not exist yet is created as a semantic page holding just those entries. When
the existing list allows it the entries are appended as text (the rest of the file byte for
byte); otherwise the round-trip editor adds them.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kiwifs.base.paths import canonical
from kiwifs.base.text import check_text
from kiwifs.errors import InvalidPath, UsageError
from kiwifs.frontmatter.edit import append_entries, appended_entries, edit_frontmatter, scalar
from kiwifs.frontmatter.reader import read_frontmatter
from kiwifs.memory.rules import MERGED_FROM, MergeEntry, existing_merge_keys
from kiwifs.memory.status import MEMORY_STATUS, SUPERSEDED, is_superseded

if TYPE_CHECKING:
    from ruamel.yaml.comments import CommentedMap

EPISODE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
EPISODIC = "episodic"
VALID_UNTIL = "valid_until"
SUPERSEDED_REASON = "superseded_reason"
SUPERSEDED_BY = "superseded_by"
FORGET_KEYS = (MEMORY_STATUS, VALID_UNTIL, SUPERSEDED_REASON, SUPERSEDED_BY)


@dataclass(frozen=True)
class NewEpisode:
    """An episode about to be written: its id, its path and the file's bytes."""

    episode_id: str
    path: str
    data: bytes
    chosen_id: bool  # the caller named it (so it may already be taken)


def new_episode_id() -> str:
    """A fresh id: a random UUID4, unique without coordination between agents."""
    return str(uuid.uuid4())


def check_episode_id(episode_id: str) -> str:
    """An episode id becomes a file name, so it must be one safe segment (no ``/``, no ``.``)."""
    ident = episode_id.strip()
    if not EPISODE_ID_RE.match(ident):
        raise UsageError(
            f"invalid episode_id {episode_id!r}: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (no '/')"
        )
    return ident


def rfc3339(moment: dt.datetime) -> str:
    """``2026-11-30T17:04:05Z``: RFC 3339 in UTC, to the second."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def episode_path(prefix: str, moment: dt.datetime, episode_id: str) -> str:
    """``<prefix><YYYY-MM-DD>/<episode_id>.md`` (UTC date; the prefix ends in ``/``)."""
    return f"{prefix}{moment.astimezone(dt.UTC).strftime('%Y-%m-%d')}/{episode_id}.md"


def new_episode(
    content: str,
    prefix: str,
    moment: dt.datetime,
    episode_id: str | None = None,
    scope: str | None = None,
    tags: Sequence[str] | None = None,
    title: str | None = None,
) -> NewEpisode:
    """Check the arguments and compose the episode written at ``moment``."""
    if not content.strip():
        raise UsageError("content is required")
    if tags is not None and not all(isinstance(t, str) and t.strip() for t in tags):
        raise UsageError("tags must be non-empty strings")
    chosen = bool(episode_id and episode_id.strip())  # blank means "not given"
    ident = check_episode_id(episode_id) if episode_id and chosen else new_episode_id()
    scope = scope.strip() if scope and scope.strip() else None
    title = title.strip() if title and title.strip() else None

    def mutate(doc: CommentedMap) -> bool:
        doc["memory_kind"] = EPISODIC
        doc["episode_id"] = scalar(ident)
        doc["created"] = scalar(rfc3339(moment))
        if scope is not None:
            doc["scope"] = scalar(scope)
        if tags:
            from ruamel.yaml.comments import CommentedSeq  # ruamel only where a file is edited

            seq = CommentedSeq([scalar(t.strip()) for t in tags])
            seq.fa.set_flow_style()
            doc["tags"] = seq
        if title is not None:
            doc["title"] = scalar(title)
        return True

    data = edit_frontmatter(check_text(content, "content").encode("utf-8"), mutate)
    return NewEpisode(ident, episode_path(prefix, moment, ident), data, chosen)


def forget_frontmatter(
    data: bytes, moment: dt.datetime, reason: str | None = None, superseded_by: str | None = None
) -> bytes | None:
    """``data`` with the page marked superseded at ``moment``; ``None`` when it already is.

    Whether it is superseded is decided on the frontmatter as every reader sees it (the same
    parse as the index and the report). ``superseded_by`` must already be a canonical path (the
    caller checks it against the root). Raises :class:`~kiwifs.errors.InvalidFrontmatter` for
    frontmatter that cannot be edited.
    """
    if is_superseded(read_frontmatter(data).data):
        return None
    why = reason.strip() if reason and reason.strip() else None

    def mutate(doc: CommentedMap) -> bool:
        for key in (VALID_UNTIL, SUPERSEDED_REASON, SUPERSEDED_BY):
            doc.pop(key, None)  # leftovers of an earlier life; this forgetting says its own
        doc[MEMORY_STATUS] = SUPERSEDED
        doc[VALID_UNTIL] = scalar(rfc3339(moment))
        if why is not None:
            doc[SUPERSEDED_REASON] = scalar(why)
        if superseded_by:
            doc[SUPERSEDED_BY] = scalar(superseded_by)
        return True

    return edit_frontmatter(data, mutate)


def successor_path(superseded_by: str | None, rel: str) -> str | None:
    """``superseded_by`` of the page ``rel`` as a canonical path of the root (``None`` when
    blank), never the page itself."""
    if superseded_by is None or not superseded_by.strip():
        return None
    try:
        successor = canonical(superseded_by)
    except InvalidPath as exc:
        raise InvalidPath(f"superseded_by: {exc.message}") from None
    if successor == rel:
        raise UsageError(f"superseded_by must name another page, not {rel} itself")
    return successor


def restore_frontmatter(data: bytes) -> bytes | None:
    """``data`` without the four keys forgetting set; ``None`` when the page is not superseded."""
    if not is_superseded(read_frontmatter(data).data):
        return None

    def mutate(doc: CommentedMap) -> bool:
        for key in FORGET_KEYS:
            doc.pop(key, None)
        return True

    return edit_frontmatter(data, mutate)


NEW_PAGE = b"---\nmemory_kind: semantic\n---\n"


def record_merge(
    current: bytes | None, wanted: Sequence[MergeEntry], stamp: str, actor: str
) -> tuple[bytes | None, tuple[MergeEntry, ...]]:
    """``current`` (``None``: no page yet) with the ``wanted`` entries it does not cite yet:
    the page's new bytes (``None`` when an existing page is left as it is) and those entries."""
    data = current if current is not None else NEW_PAGE
    keys = existing_merge_keys(read_frontmatter(data).data) if current else set()
    added: list[MergeEntry] = []
    for entry in wanted:
        if entry.key() in keys:
            continue
        keys.add(entry.key())
        added.append(stamped(entry, stamp, actor))
    if not added:
        return (None if current is not None else data), ()
    return _with_entries(data, current is not None, added), tuple(added)


def stamped(entry: MergeEntry, stamp: str, actor: str) -> MergeEntry:
    """``entry`` with the merge's date and actor where it names none."""
    return MergeEntry(
        type=entry.type,
        id=entry.id,
        path=entry.path,
        date=entry.date or stamp,
        actor=entry.actor or actor,
        note=entry.note,
    )


def _with_entries(data: bytes, existing: bool, added: Sequence[MergeEntry]) -> bytes:
    fields = [e.to_yaml_fields() for e in added]
    if existing:
        fast = appended_entries(data, MERGED_FROM, fields, read_frontmatter(data).data)
        if fast is not None:
            return fast

    def mutate(doc: CommentedMap) -> bool:
        append_entries(doc, MERGED_FROM, fields)
        return True

    return edit_frontmatter(data, mutate)
