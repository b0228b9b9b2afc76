"""The cheap half of a reconcile: list every knowledge file with a stat signature, reading nothing.

:func:`stat_walk` finds exactly the entries :func:`storage.walk` yields (same hidden, suffix,
symlink and error rules; a test holds them equal) but works on bytes and does not sort, because
here only the set matters and this walk runs before every CLI answer. :func:`probe` answers the
same question for one path, for the write pipeline's hook and the watcher.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from .filerecord import error_sig, path_key, raw_sig

MD = b".md"
DOT = 46  # ord(".")


@dataclass
class WalkState:
    """Signature per sort key, and the error text of the entries that are errors."""

    sigs: dict[bytes, int] = field(default_factory=dict)
    errors: dict[bytes, str] = field(default_factory=dict)

    def add_error(self, key: bytes, error: str) -> None:
        self.sigs[key] = error_sig(error)
        self.errors[key] = error


def stat_walk(root: str | os.PathLike[str]) -> WalkState:
    """Every knowledge file under ``root`` with its signature (no file is opened)."""
    base = os.fsencode(os.fspath(root))
    state = WalkState()
    _walk(os.path.realpath(base), base, b"", state)
    return state


def _walk(real_root: bytes, abs_dir: bytes, key_dir: bytes, state: WalkState) -> None:
    try:
        it = os.scandir(abs_dir)
    except OSError as exc:
        state.add_error(key_dir, f"cannot list folder: {_why(exc)}")
        return
    sep = key_dir + b"\0" if key_dir else b""
    sigs = state.sigs
    with it:
        for entry in it:
            name = entry.name
            if name[0] == DOT:
                continue
            key = sep + name
            try:
                is_link = entry.is_symlink()
                is_dir = not is_link and entry.is_dir(follow_symlinks=False)
            except OSError as exc:
                if name.endswith(MD):
                    state.add_error(key, f"cannot read: {_why(exc)}")
                continue
            if is_dir:
                _walk(real_root, entry.path, key, state)
            elif name.endswith(MD):
                if is_link:
                    problem = _link_problem(real_root, entry.path)
                    if problem:
                        state.add_error(key, problem)
                        continue
                try:
                    sigs[key] = raw_sig(entry.stat())
                except OSError as exc:
                    state.add_error(key, f"cannot read: {_why(exc)}")


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
