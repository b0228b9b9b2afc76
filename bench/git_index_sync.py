"""The git index file's reconcile after a burst of writes into one folder.

kiwifs commits without the git index file and brings it up to date after a quiet moment
(``kiwifs.git.indexfile``): every path a burst committed differs, and the reconcile needs HEAD's
entry of each. It now takes it from the tree-to-index diff; the baseline (``lookup``, as before
2026-12-02) looked each path up in HEAD's tree, which inflates and parses every folder on the
way once per path (libgit2 caches no tree over 4 KiB).

    python bench/git_index_sync.py [--writes 1000,3000] [--rounds 3]

For each size: a fresh root, that many writes to ``burst/`` (each its own commit, the index file
left behind), then the reconcile timed both ways on copies of the lagging index file, and
``git status`` checked clean after each.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kiwifs.git import indexfile
from kiwifs.knowledge import Knowledge
from kiwifs.tuning import Tuning


def lookup_heads(tree: object, index: object) -> dict[str, indexfile.Entry]:
    """The baseline: the differing paths, each looked up in HEAD's tree."""
    paths: set[str] = set()
    for delta in tree.diff_to_index(index).deltas:  # type: ignore[attr-defined]
        paths.update((delta.old_file.path, delta.new_file.path))
    return {p: indexfile._tree_entry(tree, p) for p in sorted(paths)}  # type: ignore[arg-type]


def lagging_root(base: Path, writes: int) -> Path:
    root = base / f"root-{writes}"
    Knowledge.init(root, "blank")
    with Knowledge.open(root, tuning=Tuning(group_commit=False)) as kb:  # a commit per write
        assert kb.git is not None
        kb.git._index_syncer.poke = lambda: True  # type: ignore[method-assign]
        for i in range(writes):
            kb.write(f"burst/f{i:05d}.md", f"# {i}\n", actor="bench")
        kb.git._index_stale = False  # closing must not reconcile: the copy below stays behind
    shutil.copy2(root / ".git" / "index", base / f"index-{writes}")
    return root


def timed(root: Path, lagging: Path, differing: Callable[..., dict[str, indexfile.Entry]]) -> float:
    shutil.copy2(lagging, root / ".git" / "index")
    import pygit2

    saved = indexfile._differing
    indexfile._differing = differing  # type: ignore[assignment]
    try:
        index_file = indexfile.IndexFile(root, lambda: pygit2.Repository(str(root)))
        start = time.perf_counter()
        assert index_file.reconcile()
        seconds = time.perf_counter() - start
        index_file.close()
    finally:
        indexfile._differing = saved  # type: ignore[assignment]
    status = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True
    ).stdout
    assert status == "", status
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", default="1000,3000", help="comma-separated burst sizes")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        for writes in (int(w) for w in args.writes.split(",")):
            root = lagging_root(base, writes)
            lagging = base / f"index-{writes}"
            now: list[float] = []
            before: list[float] = []
            for r in range(args.rounds):  # alternated
                order = [(now, indexfile._differing), (before, lookup_heads)]
                for sink, differing in order if r % 2 == 0 else reversed(order):
                    sink.append(timed(root, lagging, differing))
            a, b = statistics.median(now), statistics.median(before)
            print(
                f"{writes:6d} paths: from the diff {a * 1e3:8.1f} ms, looked up {b * 1e3:8.1f} ms"
                f"  ({b / a:.1f}x; medians of {args.rounds})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
