"""Generated commits for the property tests of git trees: steps that leave a path on disk as a
file, an executable, a link or nothing, and the bytes a commit is asked to make of it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from hypothesis import strategies as st

# (path, how, bytes): "write" (bytes given to the commit), "delete" (None given), or a "disk-*"
# state the commit reads from the disk: a file, an executable, a link, nothing
Step = tuple[str, str, bytes]


def steps_of(names: list[str], hows: list[str]) -> st.SearchStrategy[list[Step]]:
    """Batches of 1–6 steps on paths of 1–3 of ``names``, each done one of ``hows``."""
    paths = st.lists(st.sampled_from(names), min_size=1, max_size=3).map("/".join)
    step = st.tuples(paths, st.sampled_from(hows), st.sampled_from([b"one\n", b"two\n"]))
    return st.lists(step, min_size=1, max_size=6)


def settle_disk(root: Path, rel: str, how: str, data: bytes) -> None:
    """Leave the disk as ``how`` says for ``rel``, whatever stood in the way: a file where a
    folder is needed is removed, and so is a folder where a file goes (kinds that change)."""
    parts = rel.split("/")
    for i in range(1, len(parts)):
        above = root.joinpath(*parts[:i])
        if above.is_symlink() or above.is_file():
            above.unlink()
    full = root / rel
    full.parent.mkdir(parents=True, exist_ok=True)
    if full.is_symlink() or full.is_file():
        full.unlink()
    elif full.is_dir():
        shutil.rmtree(full)
    if how in ("write", "disk-file", "disk-exec"):
        full.write_bytes(data)
        if how == "disk-exec":
            full.chmod(0o755)
    elif how == "disk-link":
        os.symlink("target.md", full)


def settle_batch(root: Path, batch: list[Step]) -> tuple[dict[str, bytes | None], list[str]]:
    """Do ``batch`` on disk; returns what a commit is given (bytes, or None for a deletion)
    and the paths it must read from the disk."""
    taken: dict[str, bytes | None] = {}
    on_disk: list[str] = []
    for rel, how, data in batch:
        settle_disk(root, rel, how, data)
        if how == "write":
            taken[rel] = data
        elif how == "delete":
            taken[rel] = None
        else:
            on_disk.append(rel)
    return taken, on_disk
