"""Walking folders without reading files: list, stat, and a digest of what a folder holds.

Folders are listed by :func:`base.walk.list_folder`, the rules every walk follows (hidden names,
the ``.md`` suffix, symlinks), on bytes: one ``scandir`` each, the kernel gives entry types.
Signing costs one ``lstat`` per file, relative to the folder's descriptor — ~2 µs of kernel time
each, which is what a 100,000-file root spends.

Each folder gets a *digest* of its entries' names and signatures, so that a reconcile can skip
the rows of folders that did not move. :mod:`index.walk` runs these pieces over a whole root
(in worker processes when it is large); :func:`probe` answers the same question for one path,
for the write pipeline's hook and the watcher.
"""

from __future__ import annotations

import os
import stat
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from hashlib import blake2b

from kiwifs.base import walk
from kiwifs.base.walk import cannot_list, cannot_read, link_problem
from kiwifs.index.record import error_sig, path_key, raw_sig


@dataclass
class WalkState:
    """Signature per sort key, and the error text of the entries that are errors."""

    sigs: dict[bytes, int] = field(default_factory=dict)
    errors: dict[bytes, str] = field(default_factory=dict)


def entry_key(folder_key: bytes, name: bytes) -> bytes:
    """The sort key of entry ``name`` in the folder with sort key ``folder_key``."""
    return folder_key + b"\0" + name if folder_key else name


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
        return entry_key(self.key, name)

    def add_error(self, name: bytes, error: str) -> None:
        self.names.append(name)
        self.errors[name] = error


@dataclass
class FolderResult:
    """A walked folder (entries only when its digest moved)."""

    key: bytes
    digest: bytes
    count: int
    names: list[bytes] | None = None
    sigs: list[int] | None = None
    errors: dict[bytes, str] | None = None


def folder_digest(names: list[bytes], sigs: list[int]) -> bytes:
    """What a folder looked like: its entry names (no name holds ``/``) and their signatures."""
    digest = blake2b(b"/".join(names), digest_size=16)
    digest.update(array("q", sigs).tobytes())
    return digest.digest()


def folder_result(
    folder: Folder,
    names: list[bytes],
    sigs: list[int],
    errors: dict[bytes, str],
    expected: Mapping[bytes, bytes | None],
) -> FolderResult:
    digest = folder_digest(names, sigs)
    if expected.get(folder.key) == digest:
        return FolderResult(folder.key, digest, len(names))
    return FolderResult(folder.key, digest, len(names), names, sigs, errors)


def list_folder(folder: Folder) -> list[Folder]:
    """Fill ``folder`` from :func:`base.walk.list_folder`; returns its sub-folders to enter."""
    listing = walk.list_folder(folder.path)
    folder.names, folder.links, folder.errors = listing.files, listing.links, listing.errors
    parent = os.path.join(folder.path, b"")
    return [Folder(folder.entry_key(name), parent + name) for name in listing.folders]


def walk_tree(
    top: Folder, real_root: bytes, expected: Mapping[bytes, bytes | None], out: list[FolderResult]
) -> str | None:
    """Walk the sub-tree at ``top`` into ``out``; the error text if ``top`` cannot be listed.

    Iterative and post-order: a folder is signed after its sub-folders, because one that cannot
    be listed is an error entry of its parent.
    """
    try:
        stack = [(top, iter(list_folder(top)))]
    except OSError as exc:
        return cannot_list(exc)
    while stack:
        folder, subs = stack[-1]
        for sub in subs:
            try:
                stack.append((sub, iter(list_folder(sub))))
            except OSError as exc:
                folder.add_error(sub.name, cannot_list(exc))
                continue
            break
        else:
            stack.pop()
            folder.names.sort()
            sigs, errors = sign_names(folder, real_root, folder.names)
            out.append(folder_result(folder, folder.names, sigs, errors, expected))
    return None


def sign_names(
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
                    error = cannot_read(exc)
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


def _link_problem(real_root: bytes, path: bytes) -> str | None:
    """:func:`base.walk.link_problem` for the walk's byte paths (symlinks are rare)."""
    return link_problem(os.fsdecode(real_root), os.fsdecode(path))


@dataclass(frozen=True)
class Probe:
    """What the walk would say about one path: absent, a file to read, or an error entry."""

    key: bytes
    rel: str
    exists: bool
    error: str | None = None


def entered_folder(base: bytes, names: list[bytes]) -> bytes | None:
    """The path of the folder ``names`` leads to from ``base`` when the walk enters it: every
    name on the way not hidden and a real folder (not a symlink, not missing); else ``None``."""
    path = base
    for name in names:
        if name.startswith(b"."):
            return None
        path = path + b"/" + name
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return None
        except OSError:
            return None
    return path


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
    current = entered_folder(base, [os.fsencode(seg) for seg in segments[:-1]])
    if current is None:
        return Probe(key, rel, False)
    path = current + b"/" + os.fsencode(segments[-1])
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return Probe(key, rel, False)
    except OSError as exc:
        return Probe(key, rel, True, cannot_read(exc))
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
