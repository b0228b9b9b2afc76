"""The full scan: read every knowledge file of a root and turn it into :class:`FileFacts`.

This is the path with no index: it must be right for every file and fast for 100,000 of them.
Three things make it fast, none of which may change an answer:

* only the frontmatter is read (one small read; more only when the block runs on, and never
  past :data:`~kiwifs.frontmatter.reader.FRONTMATTER_WINDOW`: a file over the size limit is not read
  at all, :data:`~kiwifs.base.limits.MAX_READ_BYTES`);
* :mod:`.fastkeys` reads ordinary frontmatter without a YAML parse, and anything it cannot
  prove simple goes through :func:`kiwifs.frontmatter.reader.parse_yaml` as before;
* above :data:`PARALLEL_THRESHOLD` files, batches of paths are read by worker processes (one per
  CPU) while this process walks and folds; the facts come back in walk order.
"""

from __future__ import annotations

import errno
import gc
import os
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import chain, islice
from pathlib import Path
from typing import TYPE_CHECKING

from kiwifs.base.forking import exit_with_parent, fork_is_safe, usable_cpus
from kiwifs.base.limits import MAX_READ_BYTES, TOO_LARGE
from kiwifs.base.paths import open_regular
from kiwifs.base.walk import WalkEntry, WalkRow, walk_rows
from kiwifs.errors import os_error_text
from kiwifs.frontmatter.reader import FRONTMATTER_WINDOW, Block, find_block, head_block, parse_yaml
from kiwifs.memory.fastkeys import relevant_frontmatter
from kiwifs.memory.rules import FileFacts, file_facts, unreadable_facts

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor
    from multiprocessing.context import BaseContext

HEAD_BYTES = 8 * 1024
PARALLEL_THRESHOLD = 3000
CHUNK_FILES = 500
_CHUNKS_IN_FLIGHT_PER_WORKER = 3

# What travels between processes: plain tuples pickle several times faster than dataclasses.
Job = WalkRow  # rel, path, symlink, walk error
# A row is FileFacts without its path: the parent still has the path (the very same string).
# Every other field travels, in FileFacts's order: a field left out (``superseded`` once was)
# would silently take its default in the parent.
FactsRow = tuple[str, str, int, tuple[str, ...], tuple[str, ...], tuple[str, ...], bool, bool]


def read_head(path: str) -> bytes:
    """The file's bytes through the end of its frontmatter block (all of it when unterminated)."""
    return _read_block(path)[0]


def _read_block(path: str) -> tuple[bytes, Block | None]:
    """:func:`read_head` and the block located in it.

    One ``os.read`` on a raw descriptor (a buffered ``open()`` costs twice as much per small
    file); more of the file only when that first read does not decide the block, up to one byte
    past the window the block is looked for in (:func:`~kiwifs.frontmatter.reader.head_block`). A
    file over the size limit is refused on the ``fstat`` the open makes anyway: an ``OSError``, as
    for a file that cannot be read.
    """
    fd, st = open_regular(path)  # a FIFO named *.md is refused, never waited on
    try:
        if st.st_size > MAX_READ_BYTES:
            raise OSError(errno.EFBIG, TOO_LARGE)
        head = os.read(fd, HEAD_BYTES)
        block = find_block(head)
        if _decided_by(head, block):
            return head, block
        chunks = [head]
        got = len(head)
        while got <= FRONTMATTER_WINDOW:
            chunk = os.read(fd, min(1 << 20, FRONTMATTER_WINDOW + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data, head_block(data)


def _decided_by(head: bytes, block: Block | None) -> bool:
    """True when the block (or its absence) is the same whatever bytes follow ``head``.

    The first line must be complete, and a closing delimiter must end with its newline inside
    ``head``: ``---`` at the very end could still be the start of ``----``.
    """
    if block is None:
        return b"\n" in head
    return block.terminated and head[block.body_start - 1 : block.body_start] == b"\n"


def facts_of_bytes(rel: str, data: bytes) -> FileFacts:
    """Facts of a file whose bytes (at least through its frontmatter) are ``data``."""
    return _facts_of_block(rel, head_block(data))


def _facts_of_block(rel: str, block: Block | None) -> FileFacts:
    if block is None:
        return file_facts(rel, {})
    if not block.terminated:
        return file_facts(rel, {}, block.problem)
    simple = relevant_frontmatter(block.yaml)
    if simple is not None:
        return file_facts(rel, simple)
    fm = parse_yaml(block.yaml)
    return file_facts(rel, fm.data, fm.problem)


def facts_of_entry(entry: WalkEntry) -> FileFacts:
    """Facts of one walked file; unreadable files become a warning, never an exception."""
    return _facts_of_job((entry.rel, entry.path, entry.symlink, entry.error))


def _facts_of_job(job: Job) -> FileFacts:
    rel, path, _, error = job
    if error is not None:
        return unreadable_facts(rel, error)
    try:
        _, block = _read_block(path)
    except OSError as exc:
        return unreadable_facts(rel, os_error_text(exc))
    return _facts_of_block(rel, block)


def _rows_of_chunk(jobs: list[Job]) -> list[FactsRow]:
    """Worker side: the facts of a batch of files, as rows."""
    rows: list[FactsRow] = []
    for job in jobs:
        f = _facts_of_job(job)
        # interned: one "episodic" per chunk crosses the pipe (pickle shares equal objects)
        rows.append(
            (sys.intern(f.memory_kind), f.episode_id, f.refs)
            + (f.id_keys, f.path_keys, f.warnings, f.unreadable, f.superseded)
        )
    return rows


def walk_jobs(root: Path | str) -> Iterator[Job]:
    """The files of ``root`` in walk order, as the jobs the readers take."""
    return walk_rows(os.fspath(root))


def scan_facts(
    root: Path, workers: int | None = None, cap: int | None = None
) -> Iterator[FileFacts]:
    """Facts of every knowledge file under ``root``, in walk order.

    ``workers`` is the number of reading processes; by default one per usable CPU (at most
    ``cap``, ``Tuning.workers``) once the root has :data:`PARALLEL_THRESHOLD` files (a small
    root is faster in one process). The answer does not depend on it.
    """
    jobs = walk_jobs(root)
    count = usable_cpus(cap) if workers is None else workers
    if count <= 1:
        yield from map(_facts_of_job, jobs)
        return
    if workers is None:
        first = list(islice(jobs, PARALLEL_THRESHOLD))
        if len(first) < PARALLEL_THRESHOLD:
            yield from map(_facts_of_job, first)
            return
        jobs = chain(first, jobs)
    yield from parallel_facts(jobs, count)


def parallel_facts(
    jobs: Iterable[Job],
    workers: int,
    context: BaseContext | None = None,
    chunk_files: int = CHUNK_FILES,
) -> Iterator[FileFacts]:
    """Facts of ``jobs`` read by ``workers`` processes, yielded in the order of ``jobs``.

    At most a few chunks per worker are in flight, so memory stays flat however large the
    root. If the pool cannot start or breaks (a worker killed), the chunks it owed are read
    here instead: the report always comes back.
    """
    # imported here, as in pool_context: a command that never scans in parallel (every
    # `kiwifs memory report` answered from the index) would pay ~7 ms at start-up
    from concurrent.futures import ProcessPoolExecutor

    chunks = _chunked(jobs, chunk_files)
    context = context or pool_context()
    if context is None:
        yield from _sequential(chunks)
        return
    # Forked workers share this process's heap until they write to it, and a garbage
    # collection pass writes to every object it visits: frozen objects are not visited.
    freeze = context.get_start_method() == "fork" and gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        pool = ProcessPoolExecutor(  # a killed scan leaves no worker behind
            max_workers=workers,
            mp_context=context,
            initializer=exit_with_parent,
            initargs=(os.getpid(),),
        )
        first = next(chunks, None)
        pending: deque[tuple[list[Job], Future[list[FactsRow]] | None]] = deque()
        if first is not None:
            pending.append((first, _submit(pool, first)))  # fork-based pools fork here
    except OSError:
        yield from _sequential(chunks)
        return
    finally:
        if freeze:
            gc.unfreeze()
    limit = workers * _CHUNKS_IN_FLIGHT_PER_WORKER
    try:
        for chunk in chunks:
            pending.append((chunk, _submit(pool, chunk)))
            if len(pending) >= limit:
                yield from _collect(*pending.popleft())
        while pending:
            yield from _collect(*pending.popleft())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def pool_context() -> BaseContext | None:
    """How to start readers: ``None`` when no start method is both cheap and safe here.

    ``fork`` on Linux when this process has one thread (nothing is re-imported). Forking a
    threaded process can deadlock the child (and warns from Python 3.12), and macOS system
    libraries do not survive a fork, so those get a fork server that imports only this module.
    Where there is none (Windows), the scan stays in this process.
    """
    import multiprocessing

    if fork_is_safe():
        return multiprocessing.get_context("fork")
    if "forkserver" in multiprocessing.get_all_start_methods():
        return forkserver_context()
    return None


def forkserver_context() -> BaseContext:
    """The ``forkserver`` context, its server preloading this module rather than ``__main__``."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


def _submit(pool: ProcessPoolExecutor, chunk: list[Job]) -> Future[list[FactsRow]] | None:
    from concurrent.futures.process import BrokenProcessPool

    try:
        return pool.submit(_rows_of_chunk, chunk)
    except (BrokenProcessPool, RuntimeError, OSError):
        return None


def _collect(chunk: list[Job], future: Future[list[FactsRow]] | None) -> Iterator[FileFacts]:
    from concurrent.futures.process import BrokenProcessPool

    try:
        rows = future.result() if future is not None else None
    except (BrokenProcessPool, OSError):
        rows = None
    if rows is None:
        yield from map(_facts_of_job, chunk)
        return
    for job, row in zip(chunk, rows, strict=True):
        yield FileFacts(job[0], *row)


def _sequential(chunks: Iterable[list[Job]]) -> Iterator[FileFacts]:
    for chunk in chunks:
        yield from map(_facts_of_job, chunk)


def _chunked(jobs: Iterable[Job], size: int) -> Iterator[list[Job]]:
    it = iter(jobs)
    while chunk := list(islice(it, size)):
        yield chunk
