"""The intent log of a bulk write: the whole bulk on disk before any of its files is touched.

A bulk write replaces many files, one atomic rename each; a crash between two renames would leave
part of the bulk on disk. So before the first target is touched, the pipeline writes one file,
``.kiwi/state/bulk.journal``, holding every target's path, new content and previous content (or
"absent"), each with its git blob id. It is written to a temporary file, fsynced and renamed into
place, so it exists either complete or not at all; it is removed once the bulk is committed (or
handed to the background committer, whose own journal then covers it).

At the next open, a journal found there means the bulk was interrupted: :func:`finish` rolls it
*forward* (writes every file whose content is not yet the new one, then commits the bulk as one
commit); should that fail, it rolls *back* to the previous contents (:func:`restore`, which a
bulk write whose commit failed also runs). Either way the bulk ends up wholly committed or
wholly absent, never in part. The recovery at open and every write (the pipeline's lock) call
:func:`finish`; both import this module, which imports neither of them.

Format: the line ``kiwifs-bulk 1``, a line of JSON ``{"actor", "message", "trailer", "files":
[{"path", "new": [size, blob id] | null, "old": [size, blob id] | null}]}``, then the contents,
each file's new bytes followed by its old bytes, in the order of ``files``. A ``null`` new
content is a file the bulk removes (a folder moved: its old paths); a ``null`` old one, a file
it creates.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiwifs.errors import KiwiError, StorageError
from kiwifs.files.atomic import (
    TEMP_PREFIX,
    fsync_dir,
    remove_temp_files,
    temp_file_folders,
    temp_files_in,
)
from kiwifs.git.repo import blob_id

if TYPE_CHECKING:
    from kiwifs.files.storage import Storage
    from kiwifs.git.repo import Git

log = logging.getLogger(__name__)
JOURNAL_NAME = "bulk.journal"
MAGIC = b"kiwifs-bulk 1\n"
_temp_ids = itertools.count()


class DamagedJournal(Exception):
    """The journal cannot be read back as written (it is set aside, never applied)."""


@dataclass(frozen=True)
class BulkFile:
    path: str
    new: bytes | None  # None: the bulk removes the file
    old: bytes | None  # None: there was none


@dataclass(frozen=True)
class BulkIntent:
    actor: str
    message: str
    trailer: str | None
    files: tuple[BulkFile, ...]

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]


def write(state: Path, intent: BulkIntent) -> None:
    """Durably record ``intent`` in ``state`` (temp file, fsync, rename, fsync of the folder)."""
    header = {
        "actor": intent.actor,
        "message": intent.message,
        "trailer": intent.trailer,
        "files": [
            {
                "path": f.path,
                "new": None if f.new is None else _sized(f.new),
                "old": None if f.old is None else _sized(f.old),
            }
            for f in intent.files
        ],
    }
    state.mkdir(parents=True, exist_ok=True)
    tmp = state / f"{TEMP_PREFIX}bulk-{os.getpid()}-{next(_temp_ids)}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(MAGIC)
            fh.write(json.dumps(header).encode("ascii") + b"\n")
            for f in intent.files:
                if f.new is not None:
                    fh.write(f.new)
                if f.old is not None:
                    fh.write(f.old)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, state / JOURNAL_NAME)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(state)


def exists(state: Path) -> bool:
    """Whether a bulk write is journaled (one ``stat``: every write asks)."""
    return os.path.exists(os.path.join(state, JOURNAL_NAME))


def read(state: Path) -> BulkIntent | None:
    """The journaled bulk, ``None`` when there is none; :class:`DamagedJournal` if unreadable."""
    try:
        data = (state / JOURNAL_NAME).read_bytes()
    except FileNotFoundError:
        return None
    if not data.startswith(MAGIC):
        raise DamagedJournal("unknown format")
    line_end = data.find(b"\n", len(MAGIC))
    if line_end < 0:
        raise DamagedJournal("no header")
    try:
        header = json.loads(data[len(MAGIC) : line_end])
        return _parse(header, memoryview(data)[line_end + 1 :])
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise DamagedJournal(str(exc)) from exc


def _parse(header: dict[str, Any], body: memoryview) -> BulkIntent:
    files = []
    offset = 0

    def take(sized: list[Any]) -> bytes:
        nonlocal offset
        size, blob = int(sized[0]), str(sized[1])
        chunk = bytes(body[offset : offset + size])
        offset += size
        if len(chunk) != size or blob_id(chunk) != blob:
            raise ValueError("content does not match its blob id")
        return chunk

    for entry in header["files"]:
        new = None if entry["new"] is None else take(entry["new"])
        old = None if entry["old"] is None else take(entry["old"])
        files.append(BulkFile(str(entry["path"]), new, old))
    if offset != len(body):
        raise ValueError("trailing bytes")
    trailer = header["trailer"]
    return BulkIntent(
        str(header["actor"]),
        str(header["message"]),
        None if trailer is None else str(trailer),
        tuple(files),
    )


def discard(state: Path) -> None:
    """Remove the journal (the bulk is committed or undone) and make the removal durable."""
    try:
        os.unlink(state / JOURNAL_NAME)
    except FileNotFoundError:
        return
    fsync_dir(state)


def set_aside(state: Path) -> Path:
    """Move a damaged journal out of the way, keeping it for inspection."""
    target = state / f"{JOURNAL_NAME}.damaged"
    os.replace(state / JOURNAL_NAME, target)
    return target


def _sized(data: bytes) -> list[Any]:
    return [len(data), blob_id(data)]


def finish(
    state: Path,
    storage: Storage,
    git: Git | None,
    index_hook: Callable[[list[str]], None] | None,
) -> list[str]:
    """Roll the journaled bulk write forward, else back (the write lock held); its paths if
    committed. Every write runs it first when a journal is there (``Pipeline.locked``), and so
    does the recovery at open.

    Raises :class:`StorageError`, keeping the journal, when neither can be done.
    """
    try:
        intent = read(state)
    except DamagedJournal as exc:
        # written to a temp file, fsynced, then renamed: only a damaged disk gets here
        aside = set_aside(state)
        log.error("bulk journal unreadable (%s): set aside as %s, not applied", exc, aside)
        return []
    if intent is None:
        return []
    try:
        for f in intent.files:
            if f.new is None:
                if storage.exists(f.path):
                    storage.delete(f.path)
            elif storage.read_optional(f.path) != f.new:
                storage.write(f.path, f.new)
    except KiwiError as exc:
        log.error("cannot finish an interrupted bulk write (%s): rolling it back", exc)
        if not restore(storage, {f.path: f.old for f in intent.files}):
            raise StorageError(
                f"an interrupted bulk write can be neither finished nor undone ({exc}); "
                f"writes resume once it can (journal: {state / JOURNAL_NAME})"
            ) from exc
        discard(state)
        return []
    if git is not None:
        git.commit(intent.paths, intent.actor, intent.message, intent.trailer)
    if index_hook is not None:
        index_hook(intent.paths)
    discard(state)
    remove_temp_files(temp_files_in(temp_file_folders(storage.root, intent.paths)))  # lock held
    log.warning("finished a bulk write of %d files interrupted earlier", len(intent.files))
    return intent.paths


def restore(storage: Storage, before: dict[str, bytes | None]) -> bool:
    """Put back the previous contents of a failed bulk; False if some could not be."""
    restored = True
    for rel, old in before.items():
        try:
            if old is None:
                if storage.exists(rel):
                    storage.delete(rel)
            elif storage.read_optional(rel) != old:
                storage.write(rel, old)
        except KiwiError:
            log.exception("cannot restore %s after a failed bulk write", rel)
            restored = False
    return restored
