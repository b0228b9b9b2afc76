"""The tree of a folder, as ``kiwi_tree`` and ``/tree`` show it.

Hidden entries (a name starting with ``.``) are never listed, and neither is a symlink that leads
out of the root or into a hidden path: it could not be read either, so listing it would only
show a name that every read refuses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiwifs.base.paths import canonical_dir, refusal
from kiwifs.errors import NotFound, UsageError
from kiwifs.files.storage import Storage


@dataclass(frozen=True)
class TreeNode:
    path: str
    name: str
    is_dir: bool
    size: int | None = None
    children: tuple[TreeNode, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "name": self.name, "isDir": self.is_dir}
        if not self.is_dir:
            out["size"] = self.size
        else:
            out["children"] = [c.to_json() for c in self.children]
        return out


def folder_tree(storage: Storage, path: str | None, depth: int) -> TreeNode:
    """The folder at ``path`` (the root when empty) with ``depth`` levels of entries."""
    rel = canonical_dir(path, reading=True)
    base = storage.abspath(rel)
    if not os.path.isdir(base):
        if os.path.exists(base):
            raise UsageError(f"{rel} is a file, not a folder")
        raise NotFound(f"folder not found: {rel or '/'}")
    name = rel.rsplit("/", 1)[-1] if rel else "/"
    children = _children(base, rel, depth, storage.real_root())
    return TreeNode(rel + "/" if rel else "", name, True, None, children)


def _children(base: Path, rel: str, depth: int, real_root: str) -> tuple[TreeNode, ...]:
    """The entries of a folder, in byte order of their names."""
    if depth <= 0:
        return ()
    nodes: list[TreeNode] = []
    try:
        entries = sorted(os.scandir(base), key=lambda e: os.fsencode(e.name))
    except OSError:
        return ()
    for entry in entries:
        if entry.name.startswith("."):
            continue
        if entry.is_symlink() and refusal(real_root, os.path.realpath(entry.path)):
            continue
        child_rel = f"{rel}/{entry.name}" if rel else entry.name
        if entry.is_dir(follow_symlinks=False):
            kids = _children(Path(entry.path), child_rel, depth - 1, real_root)
            nodes.append(TreeNode(child_rel + "/", entry.name, True, None, kids))
        else:
            try:
                size = entry.stat().st_size
            except OSError:
                continue
            nodes.append(TreeNode(child_rel, entry.name, False, size))
    return tuple(nodes)
