"""A bulk write: several files in one commit, or none of them.

The whole intent (every file's new and previous content) is recorded in
``.kiwi/state/bulk.journal`` (:mod:`kiwifs.writes.journal`) before the first file is touched. A bulk
write commits alone, under the pipeline's lock, after what is queued, so that a failed commit
can still put the previous contents back (:func:`kiwifs.writes.journal.restore`): no later write can
have touched them. Should the process die midway, the next write or open finishes or undoes it
(:func:`kiwifs.writes.journal.finish`), never leaving it committed in part. It calls the pipeline;
the pipeline never calls it (:class:`~kiwifs.knowledge.Knowledge` does).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from kiwifs.base.limits import MAX_BULK_BYTES
from kiwifs.base.paths import canonical
from kiwifs.errors import KiwiError, PayloadTooLarge, StorageError, UsageError, os_error_text
from kiwifs.frontmatter.provenance import Provenance
from kiwifs.git.messages import commit_subject, commit_trailer
from kiwifs.git.repo import blob_id
from kiwifs.writes import journal
from kiwifs.writes.events import Event
from kiwifs.writes.pipeline import Pipeline, WriteResult, prepared_content


def bulk_write(
    pipeline: Pipeline,
    files: list[tuple[str, bytes]],
    actor: str,
    provenance: Provenance | None = None,
    message: str | None = None,
    precondition: Callable[[], None] | None = None,
) -> list[WriteResult]:
    """Write every file in one commit, or none of them.

    Synchronous: committed alone, under the lock, after what is queued, so that a failed commit
    can still put the previous contents back (no later write can have touched them).
    ``precondition`` runs under the lock before anything is written and refuses by raising.
    """
    if not files:
        raise UsageError("files must not be empty")
    rels = [canonical(p) for p, _ in files]
    if len(set(rels)) != len(rels):
        raise UsageError("bulk write names the same path twice")
    total = sum(len(content) for _, content in files)
    if total > MAX_BULK_BYTES:  # each file's own limit is checked as it is prepared
        raise PayloadTooLarge(
            f"the files are {total} bytes together, over the {MAX_BULK_BYTES >> 20} MiB limit "
            "for a bulk write"
        )
    with pipeline.locked():
        if precondition is not None:
            precondition()
        prepared = [
            (rel, _with_path(rel, functools.partial(prepared_content, c, provenance, actor)))
            for rel, (_, c) in zip(rels, files, strict=True)
        ]
        text = commit_subject(message or "") or f"{actor}: bulk write \u2014 {len(rels)} files"
        _apply(pipeline, dict(prepared), actor, text, provenance)
    return [WriteResult(rel, blob_id(data)) for rel, data in prepared]


def apply_changes(
    pipeline: Pipeline,
    changes: dict[str, bytes | None],
    actor: str,
    text: str,
    known: Mapping[str, bytes | None] | None = None,
) -> None:
    """Write and remove files (``None``: removed) in one commit, or change none of them: a move
    of files, with the links to them rewritten (:mod:`kiwifs.services.moving`). The contents
    are taken as they are (no provenance is added: a moved file keeps its bytes); the caller
    has checked them, and may hold the lock already. ``known``: paths' current contents the
    caller read under the lock it still holds (``None``: absent), not read again."""
    with pipeline.locked():
        _apply(pipeline, changes, actor, text, None, known or {})


def _apply(
    pipeline: Pipeline,
    changes: dict[str, bytes | None],
    actor: str,
    text: str,
    provenance: Provenance | None,
    known: Mapping[str, bytes | None] | None = None,
) -> None:
    """Journal, write and commit ``changes`` alone, the lock held; undone if any step fails.
    ``known``: current contents already read under this lock (the rest is read here)."""
    storage = pipeline.storage
    rels = list(changes)
    known = known or {}
    before = {rel: known[rel] if rel in known else storage.read_optional(rel) for rel in rels}
    intent = journal.BulkIntent(
        actor,
        text,
        commit_trailer(provenance),
        tuple(journal.BulkFile(rel, data, before[rel]) for rel, data in changes.items()),
    )
    pipeline.journal(rels)  # may refuse the write: before the bulk is journaled
    if not pipeline.asynchronous:
        pipeline.drain()  # may fail too, before anything is written
    try:
        journal.write(pipeline.state, intent)  # before the first target is touched
    except OSError as exc:
        raise StorageError(f"cannot journal the bulk write: {os_error_text(exc)}") from exc
    try:
        for rel, data in changes.items():
            if data is None:
                if before[rel] is not None:
                    storage.delete(rel)
            else:
                storage.write(rel, data)
        alone = not pipeline.asynchronous
        pipeline.commit(dict(changes), actor, text, provenance, alone=alone)
    except BaseException:
        if journal.restore(storage, before):
            journal.discard(pipeline.state)
        # else the journal stays, and the next write (or open) finishes or undoes it
        if pipeline.committer is None:
            pipeline.clear_journal()  # else emptied once nothing is pending
        raise
    journal.discard(pipeline.state)
    pipeline.events.publish(Event("bulk", paths=tuple(rels), actor=actor))


def _with_path(rel: str, make: Callable[[], bytes]) -> bytes:
    """Run ``make`` and prefix any error with the path it concerns (bulk writes)."""
    try:
        return make()
    except KiwiError as exc:
        exc.message = f"{rel}: {exc.message}"
        raise
