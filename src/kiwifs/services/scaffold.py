"""``kiwifs init``: lay out a new knowledge root from a packaged template.

Nothing that exists is ever overwritten: running ``init`` on a folder that already has files adds
only what is missing, so it is safe on an existing knowledge base.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from kiwifs.config import CONFIG_RELPATH
from kiwifs.errors import UsageError
from kiwifs.files.storage import Storage
from kiwifs.frontmatter.provenance import LIBRARY_ACTOR
from kiwifs.git.repo import Git, add_ignores

TEMPLATES = ("knowledge", "blank")


@dataclass(frozen=True)
class InitResult:
    root: Path
    template: str
    created: tuple[str, ...]
    commit: str | None


def _template_files(node: Traversable, prefix: str = "") -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        rel = prefix + child.name
        if child.is_dir():
            out.extend(_template_files(child, rel + "/"))
        else:
            out.append((rel, child.read_bytes()))
    return out


def scaffold(root: Path, template: str = "knowledge", git: bool = True) -> InitResult:
    """Create ``root`` (if needed) with ``template``'s files, config, ``.gitignore`` and git."""
    if template not in TEMPLATES:
        raise UsageError(f"unknown template {template!r} (choose from {', '.join(TEMPLATES)})")
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root} exists and is not a folder")
    root.mkdir(parents=True, exist_ok=True)
    package = resources.files("kiwifs") / "templates"
    created: list[str] = []
    files = _template_files(package / template)
    files.append((CONFIG_RELPATH, (package / "config.toml").read_bytes()))
    storage = Storage(root)
    for rel, data in files:
        target = root / rel
        if os.path.lexists(target):
            continue  # a dangling symlink counts as present: never write through it
        if rel == CONFIG_RELPATH:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        else:
            storage.write(rel, data)  # refuses a folder that is a link into .git or outside
        created.append(rel)
    if _ensure_gitignore(root):
        created.append(".gitignore")
    commit = None
    if git:
        repo = Git(root)
        commit = repo.adopt(LIBRARY_ACTOR, lambda _: f"{LIBRARY_ACTOR}: init ({template} template)")
        repo.close()  # writes the git index file now: `git status` is clean when init returns
    return InitResult(root, template, tuple(created), commit)


def _ensure_gitignore(root: Path) -> bool:
    """Make sure kiwifs's own files are ignored; True when the file was created or changed."""
    path = root / ".gitignore"
    if not path.exists():
        path.write_bytes((resources.files("kiwifs") / "templates" / "gitignore").read_bytes())
        return True
    return add_ignores(path)
