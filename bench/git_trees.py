"""A commit's cost by the size of the folder it writes into: trees written from kept entries
(:mod:`kiwifs.git.trees`, the default) against libgit2's tree builder (``Tuning.kept_trees``
off: a ``Git`` made with ``kept_trees=False``).

For each folder size, two repositories get the same folder of N files (one commit), then the
same ``--commits`` commits, each adding one file to that folder (``episodes/2026/11/``, three
levels deep, as an agent's episode is written); the two take turns commit by commit, in this
process, so both see the same machine. Prints the median time of ``Git.commit_objects`` (the
commit without the git index file's upkeep) for each and their ratio, and checks that both
repositories end with the same tree.

    python bench/git_trees.py [--sizes 250,1500,4300] [--commits 300]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from kiwifs.git.repo import Git  # noqa: E402

FOLDER = "episodes/2026/11"
MODES = {"entries": True, "builder": False}  # mode: Tuning.kept_trees


def start(root: Path, size: int, kept_trees: bool) -> Git:
    git = Git(root, kept_trees)
    git.init()
    files = {f"{FOLDER}/{i:05d}-run.md": f"episode {i}\n".encode() for i in range(size)}
    files["index.md"] = b"# index\n"
    git.commit_objects(list(files), "bench", "start", None, files)
    return git


def commit(git: Git, i: int) -> float:
    """One commit of one new file in the folder, timed."""
    rel = f"{FOLDER}/{i:05d}-new.md"
    started = time.perf_counter()
    git.commit_objects([rel], "bench", f"write {rel}", None, {rel: f"new {i}\n".encode()})
    return time.perf_counter() - started


def run(size: int, commits: int, tmp: Path) -> None:
    repos = {name: start(tmp / name, size, kept) for name, kept in MODES.items()}
    times: dict[str, list[float]] = {name: [] for name in MODES}
    for i in range(commits):
        order = list(MODES) if i % 2 == 0 else list(MODES)[::-1]
        for name in order:
            times[name].append(commit(repos[name], i))
    trees = {str(g.repo.head.peel().tree_id) for g in repos.values()}
    same = "same trees" if len(trees) == 1 else "TREES DIFFER"
    med = {name: statistics.median(t) * 1000 for name, t in times.items()}
    print(
        f"{size:>6} files: entries {med['entries']:.3f} ms, builder {med['builder']:.3f} ms"
        f" a commit ({med['builder'] / med['entries']:.2f}x), {same}"
    )
    for git in repos.values():
        git.close()
    if len(trees) != 1:
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="250,1500,4300")
    parser.add_argument("--commits", type=int, default=300)
    args = parser.parse_args()
    spent = []
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            spent.append(Path(tempfile.mkdtemp(prefix="kiwifs-trees-")))
            run(size, args.commits, spent[-1])
    finally:
        # deleted at the end, not between sizes: on ext4 without a journal, files created in
        # the minutes after a deletion pay a scan past the inodes it freed
        for tmp in spent:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
