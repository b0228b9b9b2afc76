"""The cheap half of a reconcile: every knowledge file with a stat signature, reading nothing.

The walk finds exactly the entries :func:`storage.walk` yields (same hidden, suffix, symlink and
error rules; a test holds them equal) but works on bytes and per folder. Listing a folder costs
one ``scandir`` (the kernel gives entry types); signing costs one ``lstat`` per file, relative to
the folder's descriptor — ~2 µs of kernel time each, which is what a 100,000-file root spends.

Each folder gets a *digest* of its entries' names and signatures. The index stores the digest it
last reconciled each folder against, so a reconcile compares rows only for folders whose digest
moved. Above :data:`PARALLEL_THRESHOLD` files the walk runs in two forked processes while the
caller goes on (:func:`start_walk` returns at once): the folder tree is cut into sub-trees and
chunks of big folders, balanced by the entry counts the index remembers. :func:`probe` answers
the same question for one path, for the write pipeline's hook and the watcher.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import stat
import threading
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from hashlib import blake2b
from typing import Any

from .filerecord import error_sig, path_key, raw_sig

MD = b".md"
DOT = 46  # ord(".")
PARALLEL_THRESHOLD = 20_000  # expected entries below which forking costs more than it saves
WORKERS = 2
CHUNK = 4096  # names per signing job when a big folder is split between the workers
MAX_SPLITS = 64  # folders listed up front to cut the tree into balanced jobs


@dataclass
class WalkState:
    """Signature per sort key, and the error text of the entries that are errors."""

    sigs: dict[bytes, int] = field(default_factory=dict)
    errors: dict[bytes, str] = field(default_factory=dict)


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


@dataclass
class Folder:
    """One folder being walked: its entry names and what listing it learned."""

    key: bytes  # the folder's sort key; b"" for the root
    path: bytes  # absolute
    names: list[bytes] = field(default_factory=list)
    links: set[bytes] = field(default_factory=set)  # names that are symlinks
    errors: dict[bytes, str] = field(default_factory=dict)  # name -> error found by the listing

    @property
    def name(self) -> bytes:
        return self.key.rpartition(b"\0")[2]

    def entry_key(self, name: bytes) -> bytes:
        return self.key + b"\0" + name if self.key else name

    def add_error(self, name: bytes, error: str) -> None:
        self.names.append(name)
        self.errors[name] = error


@dataclass
class _Result:
    """A walked folder as a worker sends it back (entries only when its digest moved)."""

    key: bytes
    digest: bytes
    count: int
    names: list[bytes] | None = None
    sigs: list[int] | None = None
    errors: dict[bytes, str] | None = None


def stat_walk(root: str | os.PathLike[str]) -> WalkState:
    """Every knowledge file under ``root`` with its signature (no file is opened)."""
    return start_walk(root).result().state


def folder_digest(names: list[bytes], sigs: list[int]) -> bytes:
    """What a folder looked like: its entry names (no name holds ``/``) and their signatures."""
    digest = blake2b(b"/".join(names), digest_size=16)
    digest.update(array("q", sigs).tobytes())
    return digest.digest()


def start_walk(
    root: str | os.PathLike[str],
    expected: Mapping[bytes, bytes | None] | None = None,
    sizes: Mapping[bytes, int] | None = None,
    parallel: bool = True,
) -> PendingWalk:
    """Begin walking ``root``; entries are kept for folders whose digest is not ``expected``.

    ``sizes`` (entries per folder, from the last walk) only guides how the work is split.
    The walk runs in worker processes when it is large and the process may fork; otherwise
    :meth:`PendingWalk.result` does it in this process.
    """
    base = os.fsencode(os.fspath(root))
    return PendingWalk(base, expected or {}, sizes or {}, parallel)


# -- the plan: folders listed up front, then jobs --------------------------------------------


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
    ) -> None:
        self.base = base
        self.real_root = os.path.realpath(base)
        self.expected = expected
        self.listed, self.jobs = _plan(base, sizes, split=parallel and bool(sizes))
        estimate = sum(job.size for job in self.jobs)
        self._workers: list[tuple[int, int, list[int]]] = []  # pid, read fd, job numbers
        self._outputs: dict[int, Any] = {}
        self.forked = False  # True when worker processes do the walk (the caller's core is free)
        if parallel and estimate >= PARALLEL_THRESHOLD and _can_fork():
            self._fork()

    def _fork(self) -> None:
        for numbers in _balance(self.jobs, WORKERS):
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
            return _sign_names(job.folder, self.real_root, job.names)
        results: list[_Result] = []
        error = _walk_tree(job.folder, self.real_root, self.expected, results)
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
        signed: dict[bytes, tuple[list[int], dict[bytes, str]]] = {}
        for n, job in enumerate(self.jobs):
            output = self._outputs[n]
            if isinstance(job, _SignJob):
                sigs, errors = signed.setdefault(job.folder.key, ([], {}))
                sigs.extend(output[0])
                errors.update(output[1])
                continue
            results, error = output
            if error is not None:
                job.owner.add_error(job.folder.name, error)
            for result in results:
                _add(walk, result)
        for folder in self.listed:
            sigs, errors = signed.get(folder.key, ([], {}))
            by_name = dict(zip(_signed_names(self.jobs, folder), sigs, strict=True))
            for name in folder.names:
                if name not in by_name:  # an error entry added after the plan was made
                    by_name[name] = error_sig(folder.errors[name])
                    errors[name] = folder.errors[name]
            names = sorted(by_name)
            ordered = [by_name[n] for n in names]
            _add(walk, _result(folder, names, ordered, errors, self.expected))
        return walk


def _signed_names(jobs: list[_Job], folder: Folder) -> list[bytes]:
    """The names of ``folder`` its sign jobs covered, in job order."""
    out: list[bytes] = []
    for job in jobs:
        if isinstance(job, _SignJob) and job.folder is folder:
            out.extend(job.names)
    return out


def _add(walk: FolderWalk, result: _Result) -> None:
    walk.digests[result.key] = result.digest
    walk.counts[result.key] = result.count
    if result.names is None or result.sigs is None:
        return
    walk.changed.append(result.key)
    errors = result.errors or {}
    prefix = result.key + b"\0" if result.key else b""
    for name, sig in zip(result.names, result.sigs, strict=True):
        key = prefix + name
        walk.state.sigs[key] = sig
        if name in errors:
            walk.state.errors[key] = errors[name]


def _result(
    folder: Folder,
    names: list[bytes],
    sigs: list[int],
    errors: dict[bytes, str],
    expected: Mapping[bytes, bytes | None],
) -> _Result:
    digest = folder_digest(names, sigs)
    if expected.get(folder.key) == digest:
        return _Result(folder.key, digest, len(names))
    return _Result(folder.key, digest, len(names), names, sigs, errors)


def _plan(base: bytes, sizes: Mapping[bytes, int], split: bool) -> tuple[list[Folder], list[_Job]]:
    """List the root (and, to balance the workers, the biggest sub-trees); make the jobs."""
    root = Folder(b"", base)
    try:
        subs = _list(root)
    except OSError as exc:
        root.add_error(b"", _cannot_list(exc))
        return [root], [_SignJob(root, [])]
    totals = _subtree_sizes(sizes)
    listed = [root]
    trees = [_TreeJob(sub, root, totals.get(sub.key, 0)) for sub in subs]
    for _ in range(MAX_SPLITS if split else 0):
        total = sum(t.size for t in trees) + sum(len(f.names) for f in listed)
        biggest = max(trees, key=lambda t: t.size, default=None)
        if biggest is None or biggest.size * WORKERS * 2 <= total:
            break
        try:
            subs = _list(biggest.folder)
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


def _can_fork() -> bool:
    """Fork only a single-threaded process (a thread's locks do not survive it) with two CPUs."""
    if not hasattr(os, "fork") or threading.active_count() != 1:
        return False
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return cpus > 1


def _unpickle(data: bytes, status: int, count: int) -> list[Any] | None:
    if os.waitstatus_to_exitcode(status) != 0:
        return None
    try:
        outputs = pickle.loads(data)
    except Exception:
        return None
    return outputs if isinstance(outputs, list) and len(outputs) == count else None


# -- listing and signing ------------------------------------------------------------------------


def _list(folder: Folder) -> list[Folder]:
    """Fill ``folder`` from one ``scandir`` (no stat); returns its sub-folders to enter."""
    subs: list[Folder] = []
    with os.scandir(folder.path) as it:
        for entry in it:
            name = entry.name
            if name[0] == DOT:
                continue
            try:
                is_link = entry.is_symlink()
                is_dir = not is_link and entry.is_dir(follow_symlinks=False)
            except OSError as exc:
                if name.endswith(MD):
                    folder.add_error(name, f"cannot read: {_why(exc)}")
                continue
            if is_dir:
                subs.append(Folder(folder.entry_key(name), entry.path))
            elif name.endswith(MD):
                folder.names.append(name)
                if is_link:
                    folder.links.add(name)
    return subs


def _walk_tree(
    top: Folder, real_root: bytes, expected: Mapping[bytes, bytes | None], out: list[_Result]
) -> str | None:
    """Walk the sub-tree at ``top`` into ``out``; the error text if ``top`` cannot be listed.

    Iterative and post-order: a folder is signed after its sub-folders, because one that cannot
    be listed is an error entry of its parent.
    """
    try:
        stack = [(top, iter(_list(top)))]
    except OSError as exc:
        return _cannot_list(exc)
    while stack:
        folder, subs = stack[-1]
        for sub in subs:
            try:
                stack.append((sub, iter(_list(sub))))
            except OSError as exc:
                folder.add_error(sub.name, _cannot_list(exc))
                continue
            break
        else:
            stack.pop()
            folder.names.sort()
            sigs, errors = _sign_names(folder, real_root, folder.names)
            out.append(_result(folder, folder.names, sigs, errors, expected))
    return None


def _sign_names(
    folder: Folder, real_root: bytes, names: list[bytes]
) -> tuple[list[int], dict[bytes, str]]:
    """The signatures of ``names`` in ``folder``, and the error text of those that are errors.

    Files are stat'ed relative to the folder's descriptor, which spares the kernel the lookup of
    every parent folder on each call.
    """
    sigs: list[int] = []
    errors: dict[bytes, str] = {}
    fd = _open_folder(folder.path) if names else None
    try:
        for name in names:
            error = folder.errors.get(name)
            if error is None:
                try:
                    if name in folder.links:
                        path = folder.path + b"/" + name
                        error = _link_problem(real_root, path)
                        if error is None:
                            sigs.append(raw_sig(os.stat(path)))
                            continue
                    else:
                        sigs.append(raw_sig(_lstat(folder.path, name, fd)))
                        continue
                except OSError as exc:
                    error = f"cannot read: {_why(exc)}"
            errors[name] = error
            sigs.append(error_sig(error))
    finally:
        if fd is not None:
            os.close(fd)
    return sigs, errors


_DIR_FD = os.stat in os.supports_dir_fd and os.stat in os.supports_follow_symlinks
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def _open_folder(path: bytes) -> int | None:
    if not _DIR_FD:
        return None
    try:
        return os.open(path, os.O_RDONLY | _O_DIRECTORY)
    except OSError:
        return None


def _lstat(folder: bytes, name: bytes, fd: int | None) -> os.stat_result:
    if fd is None:
        return os.stat(folder + b"/" + name, follow_symlinks=False)
    return os.stat(name, dir_fd=fd, follow_symlinks=False)


def _cannot_list(exc: OSError) -> str:
    return f"cannot list folder: {_why(exc)}"


def _link_problem(real_root: bytes, path: bytes) -> str | None:
    """The walk's verdict on a symlinked ``.md`` file (``None`` when it may be read)."""
    target = os.path.realpath(path)
    if not (target == real_root or target.startswith(real_root.rstrip(b"/") + b"/")):
        return "symlink points outside the root"
    if not os.path.isfile(target):
        return "broken symlink"
    return None


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


@dataclass(frozen=True)
class Probe:
    """What the walk would say about one path: absent, a file to read, or an error entry."""

    key: bytes
    rel: str
    exists: bool
    error: str | None = None


def probe(root: str | os.PathLike[str], rel: str) -> Probe | None:
    """The walk's view of canonical ``rel`` without walking; ``None`` when it is no knowledge file.

    A file under a symlinked or missing folder is absent (the walk does not descend symlinked
    folders); a symlinked file is checked like the walk checks it.
    """
    key = path_key(rel)
    segments = rel.split("/")
    if key is None or not rel.endswith(".md") or any(s.startswith(".") for s in segments):
        return None
    base = os.fsencode(os.fspath(root))
    current = base
    for seg in segments[:-1]:
        current = current + b"/" + os.fsencode(seg)
        try:
            st = os.lstat(current)
        except OSError:
            return Probe(key, rel, False)
        if not stat.S_ISDIR(st.st_mode):
            return Probe(key, rel, False)
    path = current + b"/" + os.fsencode(segments[-1])
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return Probe(key, rel, False)
    except OSError as exc:
        return Probe(key, rel, True, f"cannot read: {_why(exc)}")
    if stat.S_ISDIR(st.st_mode):
        return Probe(key, rel, False)
    if stat.S_ISLNK(st.st_mode):
        problem = _link_problem(os.path.realpath(base), path)
        if problem:
            return Probe(key, rel, True, problem)
    return Probe(key, rel, True)


def abs_path(root: str | os.PathLike[str], key: bytes) -> bytes:
    """The absolute path (bytes) of the entry with sort key ``key``."""
    base = os.fsencode(os.fspath(root))
    return base + b"/" + key.replace(b"\0", b"/") if key else base
