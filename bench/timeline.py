"""The timeline's replay of history: the CPU to read one commit's changes on a big root.

    python bench/timeline.py [--episodes 100000] [--commits 200] [--rounds 3]

A private copy of the 100k-episode corpus (files hard-linked, the repository's own state
copied) gets ``--commits`` commits of one new page each, in a folder of its own, the way
``kiwifs serve`` commits a write; then :meth:`GitHistory.changes` reads each commit's changes,
in a fresh reader per round, both ways interleaved:

* ``pruned`` (as shipped): only the folders whose tree ids differ are read;
* ``full`` (the A/B baseline, ``Tuning.timeline_by_folder`` off: a ``GitHistory`` made with
  ``by_folder=False``): one libgit2 diff of the whole trees per commit, as before.

Both must give the same changes. A server replays every commit it makes (the dashboard's
timeline), on a thread that holds the interpreter lock through libgit2's diff.

Give it the CPUs on a shared machine (see ``bench/fast_paths.py``)::

    setsid --wait sh -c 'echo -15 > /proc/self/autogroup; exec nice -n -15 \\
        python bench/timeline.py'
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from index import private_copy, versioned_corpus  # noqa: E402
from kiwifs.git.replay import CommitInfo, GitHistory  # noqa: E402
from kiwifs.git.repo import Git  # noqa: E402


def timed(root: Path, commits: list[CommitInfo], full: bool) -> tuple[float, list[object]]:
    history = GitHistory(root, by_folder=not full)
    start = time.process_time()
    changes = [history.changes(c.id, c.parent) for c in commits]
    used = time.process_time() - start
    history.close()
    return used / len(commits), changes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    source = versioned_corpus(args.episodes, args.seed)
    with tempfile.TemporaryDirectory(dir=HERE / ".corpora") as scratch:
        root = private_copy(source, Path(scratch) / "root")
        git = Git(root)
        for n in range(args.commits):
            rel = f"bench/timeline/page-{n:05d}.md"
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(f"# page {n}\n")
            git.commit([rel], "bench", f"bench: {rel}")
        git.close()
        commits, _ = GitHistory(root).first_parents(lambda c: False)
        commits = commits[: args.commits]
        cpu: dict[str, list[float]] = {"pruned": [], "full": []}
        answers: dict[str, list[object]] = {}
        for n in range(args.rounds):
            for name in ("pruned", "full") if n % 2 == 0 else ("full", "pruned"):
                used, answers[name] = timed(root, commits, name == "full")
                cpu[name].append(round(used * 1000, 3))
        assert answers["pruned"] == answers["full"], "the two ways differ"
    medians = {k: statistics.median(v) for k, v in cpu.items()}
    print(
        json.dumps(
            {
                "commits": len(commits),
                "cpu_ms_per_commit": cpu,
                "median_ms": medians,
                "gain": round(medians["full"] / medians["pruned"], 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
