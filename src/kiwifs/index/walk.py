"""The stat walk of a whole root, cut into jobs and run by forked workers when it is large.

A one-shot command must find edits made behind kiwifs's back, so it stats every file of the root
(:mod:`index.folders`). Above :data:`PARALLEL_THRESHOLD` files, forked workers (one per CPU) share
that: the root and its biggest sub-trees are listed up front, and the rest becomes jobs —
sub-trees to walk and chunks of big folders to sign — balanced by the entry counts of the last
walk. :func:`start_walk` returns at once, so the caller can compute its answer meanwhile
(:meth:`Index.reconcile_then`).

Only a single-threaded process on Linux forks (:mod:`forking`); a server walks inline.
A worker that fails is not an error: its jobs are done again in this process.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kiwifs.base.forking import fork_is_safe, usable_cpus
from kiwifs.base.walk import cannot_list
from kiwifs.index.folders import (
    Folder,
    FolderResult,
    WalkState,
    entered_folder,
    entry_key,
    folder_result,
    list_folder,
    sign_names,
    walk_tree,
)
from kiwifs.index.record import error_sig

PARALLEL_THRESHOLD = 20_000  # expected entries below which forking costs more than it saves
MAX_WORKERS = 4  # worker processes: one per CPU, at most this many
CHUNK = 4096  # names per signing job when a big folder is split between the workers
MAX_SPLITS = 64  # folders listed up front to cut the tree into balanced jobs


@dataclass
class FolderWalk:
    """A walk summarised per folder; entries are kept only for folders that are not as expected."""

    digests: dict[bytes, bytes] = field(default_factory=dict)  # every folder walked
    counts: dict[bytes, int] = field(default_factory=dict)  # entries per folder
    changed: list[bytes] = field(default_factory=list)  # digest differs from the expected one
    state: WalkState = field(default_factory=WalkState)  # the entries of the changed folders

    @property
    def files(self) -> int:
        return sum(self.counts.values())


def stat_walk(root: str | os.PathLike[str]) -> WalkState:
    """Every knowledge file under ``root`` with its signature (no file is opened)."""
    return start_walk(root).result().state


def start_walk(
    root: str | os.PathLike[str],
    expected: Mapping[bytes, bytes | None] | None = None,
    sizes: Mapping[bytes, int] | None = None,
    parallel: bool = True,
    cap: int | None = None,
) -> PendingWalk:
    """Begin walking ``root``; entries are kept for folders whose digest is not ``expected``.

    ``sizes`` (entries per folder, from the last walk) only guides how the work is split.
    The walk runs in worker processes (at most ``cap``, ``Tuning.workers``) when it is large
    and the process may fork; otherwise :meth:`PendingWalk.result` does it in this process.
    """
    base = os.fsencode(os.fspath(root))
    return PendingWalk(base, expected or {}, sizes or {}, parallel, cap)


@dataclass
class _TreeJob:
    """Walk the sub-tree at ``folder`` (listed by the worker)."""

    folder: Folder
    owner: Folder  # the listed folder holding it; gets the error entry if it cannot be listed
    size: int


@dataclass
class _SignJob:
    """Sign ``names`` of a folder listed up front."""

    folder: Folder
    names: list[bytes]

    @property
    def size(self) -> int:
        return len(self.names)


_Job = _TreeJob | _SignJob


class PendingWalk:
    """A walk under way; :meth:`result` waits for it (or does it, when it was not forked)."""

    def __init__(
        self,
        base: bytes,
        expected: Mapping[bytes, bytes | None],
        sizes: Mapping[bytes, int],
        parallel: bool,
        cap: int | None = None,
    ) -> None:
        self.real_root = os.path.realpath(base)
        self.expected = expected
        workers = worker_count(cap) if parallel else 0
        self.listed, self.jobs = _plan(base, sizes, workers if sizes else 0)
        estimate = sum(job.size for job in self.jobs)
        self._workers: list[tuple[int, int, list[int]]] = []  # pid, read fd, job numbers
        self._outputs: dict[int, Any] = {}
        self.forked = False  # True when worker processes do the walk (the caller's core is free)
        if workers > 1 and estimate >= PARALLEL_THRESHOLD:
            self._fork(workers)

    def _fork(self, workers: int) -> None:
        for numbers in _balance(self.jobs, workers):
            read_fd, write_fd = os.pipe()
            try:
                pid = os.fork()
            except OSError:
                os.close(read_fd)
                os.close(write_fd)
                return  # the jobs of the missing worker run in this process
            if pid == 0:
                self._child(read_fd, write_fd, numbers)
            os.close(write_fd)
            self._workers.append((pid, read_fd, numbers))
            self.forked = True

    def _child(self, read_fd: int, write_fd: int, numbers: list[int]) -> None:
        """In the forked worker: run the jobs, send the outputs, leave without exit handlers."""
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.close(read_fd)
            for _, other_fd, _ in self._workers:
                os.close(other_fd)
            outputs = [self._run(self.jobs[n]) for n in numbers]
            data = pickle.dumps(outputs, pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write_fd, "wb") as pipe:
                pipe.write(data)
            code = 0
        finally:
            os._exit(code)

    def _run(self, job: _Job) -> Any:
        if isinstance(job, _SignJob):
            return sign_names(job.folder, self.real_root, job.names)
        results: list[FolderResult] = []
        error = walk_tree(job.folder, self.real_root, self.expected, results)
        return results, error

    def _collect(self) -> None:
        while self._workers:
            pid, read_fd, numbers = self._workers.pop(0)
            try:
                with os.fdopen(read_fd, "rb") as pipe:
                    data = pipe.read()
            finally:
                _, status = os.waitpid(pid, 0)
            outputs = _unpickle(data, status, len(numbers))
            if outputs is not None:
                self._outputs.update(zip(numbers, outputs, strict=True))

    def cancel(self) -> None:
        """Stop the workers (the caller failed and will not ask for the result)."""
        while self._workers:
            pid, read_fd, _ = self._workers.pop(0)
            os.close(read_fd)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)

    def result(self) -> FolderWalk:
        try:
            self._collect()
        finally:
            self.cancel()
        for n, job in enumerate(self.jobs):
            if n not in self._outputs:
                self._outputs[n] = self._run(job)  # not forked, or a worker failed
        return self._assemble()

    def _assemble(self) -> FolderWalk:
        walk = FolderWalk()
        signed: dict[bytes, tuple[dict[bytes, int], dict[bytes, str]]] = {}
        for n, job in enumerate(self.jobs):
            output = self._outputs[n]
            if isinstance(job, _SignJob):
                sigs, errors = signed.setdefault(job.folder.key, ({}, {}))
                sigs.update(zip(job.names, output[0], strict=True))
                errors.update(output[1])
                continue
            results, error = output
            if error is not None:
                job.owner.add_error(job.folder.name, error)
            for result in results:
                _add(walk, result)
        for folder in self.listed:
            by_name, errors = signed.get(folder.key, ({}, {}))
            for name in folder.names:
                if name not in by_name:  # an error entry added after the plan was made
                    by_name[name] = error_sig(folder.errors[name])
                    errors[name] = folder.errors[name]
            names = sorted(by_name)
            ordered = [by_name[n] for n in names]
            _add(walk, folder_result(folder, names, ordered, errors, self.expected))
        return walk


def _add(walk: FolderWalk, result: FolderResult) -> None:
    walk.digests[result.key] = result.digest
    walk.counts[result.key] = result.count
    if result.names is None or result.sigs is None:
        return
    walk.changed.append(result.key)
    errors = result.errors or {}
    for name, sig in zip(result.names, result.sigs, strict=True):
        key = entry_key(result.key, name)
        walk.state.sigs[key] = sig
        if name in errors:
            walk.state.errors[key] = errors[name]


def _plan(base: bytes, sizes: Mapping[bytes, int], workers: int) -> tuple[list[Folder], list[_Job]]:
    """List the root (and, to balance ``workers``, the biggest sub-trees); make the jobs."""
    root = Folder(b"", base)
    try:
        subs = list_folder(root)
    except OSError as exc:
        root.add_error(b"", cannot_list(exc))
        return [root], [_SignJob(root, [])]
    totals = _subtree_sizes(sizes)
    listed = [root]
    trees = [_TreeJob(sub, root, totals.get(sub.key, 0)) for sub in subs]
    for _ in range(MAX_SPLITS if workers > 1 else 0):
        total = sum(t.size for t in trees) + sum(len(f.names) for f in listed)
        biggest = max(trees, key=lambda t: t.size, default=None)
        if biggest is None or biggest.size * workers * 2 <= total:
            break
        try:
            subs = list_folder(biggest.folder)
        except OSError:
            break  # its worker reports the error
        trees.remove(biggest)
        listed.append(biggest.folder)
        trees.extend(_TreeJob(sub, biggest.folder, totals.get(sub.key, 0)) for sub in subs)
    jobs: list[_Job] = list(trees)
    for folder in listed:
        folder.names.sort()
        for start in range(0, max(len(folder.names), 1), CHUNK):
            jobs.append(_SignJob(folder, folder.names[start : start + CHUNK]))
    return listed, jobs


def _subtree_sizes(sizes: Mapping[bytes, int]) -> dict[bytes, int]:
    """Entries per sub-tree from entries per folder."""
    totals: dict[bytes, int] = {}
    for key, count in sizes.items():
        parts = key.split(b"\0") if key else []
        for depth in range(len(parts) + 1):
            prefix = b"\0".join(parts[:depth])
            totals[prefix] = totals.get(prefix, 0) + (count or 0)
    return totals


def _balance(jobs: list[_Job], workers: int) -> list[list[int]]:
    """Job numbers per worker, biggest job first to the least loaded worker."""
    loads = [0] * workers
    bins: list[list[int]] = [[] for _ in range(workers)]
    for n in sorted(range(len(jobs)), key=lambda n: -jobs[n].size):
        lightest = loads.index(min(loads))
        bins[lightest].append(n)
        loads[lightest] += max(jobs[n].size, 1)
    return [b for b in bins if b]


def worker_count(cap: int | None = None) -> int:
    """Worker processes for a large walk: one per CPU (at most :data:`MAX_WORKERS` and
    ``cap``); 0 when this process must not fork (see :mod:`forking`) or has one CPU."""
    if not fork_is_safe():
        return 0
    cpus = usable_cpus(cap)
    return min(cpus, MAX_WORKERS) if cpus > 1 else 0


def _unpickle(data: bytes, status: int, count: int) -> list[Any] | None:
    if os.waitstatus_to_exitcode(status) != 0:
        return None
    try:
        outputs = pickle.loads(data)
    except Exception:
        return None
    return outputs if isinstance(outputs, list) and len(outputs) == count else None


class FolderJobs:
    """A walk of only some folders (those a change monitor says changed, :mod:`index.monitor`),
    with the full walk's rules and result, for :meth:`Index.reconcile`.

    ``flat`` folders have their own entries signed (not their sub-folders); ``trees`` are walked
    whole. ``expected`` is narrowed to those folders (and, for a tree, every stored folder under
    it), so a folder expected but not found is gone and its rows go. A folder named that cannot
    be listed, or whose path now passes through a symlink or a hidden folder, makes this the full
    walk after all: only that walk gives its parent the error entry or drops what it held.
    """

    forked = False

    def __init__(
        self,
        base: str | os.PathLike[str],
        flat: list[bytes],
        trees: list[bytes],
        expected: Mapping[bytes, bytes | None],
        sizes: Mapping[bytes, int],
        cap: int | None = None,
    ) -> None:
        self.root = base
        self.base = os.fsencode(os.fspath(base))
        self.real_root = os.path.realpath(self.base)
        self.trees = sorted(set(trees))
        self.trees = [t for t in self.trees if not any(_under(t, o) for o in self.trees if o != t)]
        self.flat = sorted({f for f in flat if not any(_under(f, t) for t in self.trees)})
        named = set(self.flat)
        self.expected: Mapping[bytes, bytes | None] = {
            key: digest
            for key, digest in expected.items()
            if key in named or any(_under(key, t) for t in self.trees)
        }
        self._all, self._sizes, self._cap = expected, sizes, cap

    def result(self) -> FolderWalk:
        found = FolderWalk()
        for key in self.trees:
            path = entered_folder(self.base, key.split(b"\0") if key else [])
            if path is None:
                continue  # gone, or no longer part of the walk: its rows go
            results: list[FolderResult] = []
            if walk_tree(Folder(key, path), self.real_root, self.expected, results) is not None:
                return self._fall_back()
            for result in results:
                _add(found, result)
        for key in self.flat:
            path = entered_folder(self.base, key.split(b"\0") if key else [])
            if path is None:
                continue
            folder = Folder(key, path)
            try:
                list_folder(folder)
            except OSError:
                return self._fall_back()
            folder.names.sort()
            sigs, errors = sign_names(folder, self.real_root, folder.names)
            _add(found, folder_result(folder, folder.names, sigs, errors, self.expected))
        return found

    def cancel(self) -> None:
        """Nothing runs in the background."""

    def _fall_back(self) -> FolderWalk:
        self.expected = self._all
        return start_walk(self.root, self._all, self._sizes, cap=self._cap).result()


def folder_key(rel: str) -> bytes:
    """The sort key of the folder at relative path ``rel`` (``""``: the root)."""
    return os.fsencode(rel).replace(b"/", b"\0") if rel else b""


def _under(key: bytes, top: bytes) -> bool:
    """Whether folder ``key`` is ``top`` or lies under it."""
    return not top or key == top or key.startswith(top + b"\0")
