"""The git repository of a test root, read with the real ``git`` command.

conftest isolates git from the user's configuration for the whole session.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


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
