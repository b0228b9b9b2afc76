"""The git repository of a test root, read with the real ``git`` command.

conftest isolates git from the user's configuration for the whole session.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def git(root: Path, *args: str) -> str:
    """The output of ``git -C root args``, exactly as printed (fails the test on an error)."""
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout


def git_line(root: Path, *args: str) -> str:
    """:func:`git` without the surrounding whitespace, for one-line answers."""
    return git(root, *args).strip()


def commit_count(root: Path) -> int:
    return int(git(root, "rev-list", "--count", "HEAD"))


def break_object_store_for(root: Path, data: bytes) -> tuple[Path, bytes]:
    """Make git unable to store a blob: its object fan-out folder becomes a file.

    libgit2 then fails to create the folder whoever runs it (root too), as on a full disk;
    deleting the returned file repairs the repository. The content returned is ``data``, or a
    variant of it whose fan-out folder holds no object yet: replacing a folder that holds one
    (say HEAD's commit) would corrupt the history the test goes on to read.
    """
    from kiwifs.git.repo import blob_id

    content, n = data, 0
    while (root / ".git" / "objects" / blob_id(content)[:2]).exists():
        n += 1
        content = data + f"<!-- {n} -->\n".encode()
    fan = root / ".git" / "objects" / blob_id(content)[:2]
    fan.write_text("not a folder")
    return fan, content


def consistent(files: dict[str, T]) -> dict[str, T]:
    """``files`` without the paths that sit under another path's file (a tree cannot hold
    both ``x`` as a file and ``x/…``): generated trees made possible."""
    kept: dict[str, T] = {}
    for path in sorted(files, key=lambda p: (p.count("/"), p)):
        parts = path.split("/")
        if any("/".join(parts[:i]) in kept for i in range(1, len(parts))):
            continue
        if any(other.startswith(path + "/") for other in kept):
            continue
        kept[path] = files[path]
    return kept
