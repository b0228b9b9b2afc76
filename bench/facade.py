"""What the ``Knowledge`` facade costs: ``import kiwifs``, and one call of each kind, against a
baseline revision's source.

    python bench/facade.py [--baseline REV] [--rounds 40] [--episodes 2000] [--calls 200]

Written for the split of ``knowledge.py`` into the modules it composes (history, consolidation,
integrity, memory writes, briefing, tree, server lock): every operation keeps its signature and
goes one call deeper, and ``import kiwifs`` loads a few more modules. Both are measured here as
A/B against the source of ``--baseline`` (a git revision exported to ``bench/.baseline/REV``,
run by the same interpreter; see ``bench/startup.py``):

* ``import``: a fresh interpreter per run timing ``import kiwifs`` (CPU and wall), and the sum
  of ``-X importtime``'s self times of ``knowledge.py`` and of the modules it was split into;
  the two sources alternate, the order swapped every run, byte-code compiled beforehand;
* ``calls``: a fresh process per source and round on one small root (``--episodes``, the corpus
  of ``bench/index.py`` in ``bench/.corpora/``, versioned, index current) timing ``read``,
  ``search``, ``brief``, ``memory_report``, ``versions`` and ``tree``; per kind the median of
  ``--calls`` calls, reported as the median over rounds.

Give it the CPUs on a shared machine::

    setsid --wait sh -c 'echo -15 > /proc/self/autogroup; exec nice -n -15 \\
        python bench/facade.py'
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from startup import baseline_source  # noqa: E402

from index import corpus  # noqa: E402

SRC = HERE.parent / "src"
SPLIT = {
    "kiwifs.knowledge",
    "kiwifs.services.history",
    "kiwifs.files.tree",
    "kiwifs.files.serverlock",
    "kiwifs.services.memorywrites",
    "kiwifs.services.integrity",
    "kiwifs.services.consolidation",
    "kiwifs.services.briefing",
}
IMPORT = (
    "import time; c = time.process_time(); w = time.perf_counter(); import kiwifs; "
    "print(time.process_time() - c, time.perf_counter() - w)"
)
CALLS = r"""
import json, statistics, sys, time
from kiwifs import Knowledge
kb = Knowledge.open(sys.argv[1])
kb.reconcile()
paths = [h.path for h in kb.search("kiwi", limit=50).results] or ["index.md"]
calls = {
    "read": lambda i: kb.read(paths[i % len(paths)]),
    "search": lambda i: kb.search("release notes" if i % 2 else "kiwi"),
    "brief": lambda i: kb.brief("kiwi deploy", max_pages=5),
    "memory_report(limit=10)": lambda i: kb.memory_report(limit=10),
    "versions": lambda i: kb.versions(paths[i % len(paths)]),
    "tree(depth=1)": lambda i: kb.tree(None, 1),
}
out = {}
for name, call in calls.items():
    for i in range(5):
        call(i)
    spent = []
    for i in range(int(sys.argv[2])):
        started = time.perf_counter()
        call(i)
        spent.append(time.perf_counter() - started)
    out[name] = statistics.median(spent) * 1000
kb.close()
print(json.dumps(out))
"""


def run(src: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, check=True
    )


def self_times(src: Path, modules: set[str]) -> int:
    """Microseconds ``-X importtime`` gives ``modules`` themselves in one ``import kiwifs``."""
    total = 0
    for line in run(src, "-X", "importtime", "-c", "import kiwifs").stderr.splitlines():
        found = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s+(\S+)$", line)
        if found and found.group(2) in modules:
            total += int(found.group(1))
    return total


def imports(sources: dict[str, Path], rounds: int) -> None:
    cpu: dict[str, list[float]] = {name: [] for name in sources}
    wall: dict[str, list[float]] = {name: [] for name in sources}
    own: dict[str, list[int]] = {name: [] for name in sources}
    for turn in range(rounds):
        order = list(sources) if turn % 2 == 0 else list(reversed(sources))
        for name in order:
            spent_cpu, spent_wall = run(sources[name], "-c", IMPORT).stdout.split()
            cpu[name].append(float(spent_cpu) * 1000)
            wall[name].append(float(spent_wall) * 1000)
            own[name].append(self_times(sources[name], SPLIT))
    for name in sources:
        print(
            f"import kiwifs, {name}: CPU {statistics.median(cpu[name]):.1f} ms, wall "
            f"{statistics.median(wall[name]):.1f} ms; knowledge.py and its split modules "
            f"{statistics.median(own[name]) / 1000:.2f} ms (medians of {rounds})"
        )


def small_root(episodes: int) -> Path:
    """The corpus of ``episodes`` episodes (``bench/index.py``'s), versioned and indexed once."""
    root = corpus(episodes, 1)
    if not (root / ".git").is_dir():
        make = "from kiwifs import Knowledge; kb = Knowledge.open({!r}); kb.ensure_versioned(); "
        run(SRC, "-c", make.format(str(root)) + "kb.reindex(); kb.close()")
    return root


def calls(sources: dict[str, Path], rounds: int, root: Path, count: int) -> None:
    found: dict[str, dict[str, list[float]]] = {name: {} for name in sources}
    for turn in range(rounds):
        order = list(sources) if turn % 2 == 0 else list(reversed(sources))
        for name in order:
            out = json.loads(run(sources[name], "-c", CALLS, str(root), str(count)).stdout)
            for kind, ms in out.items():
                found[name].setdefault(kind, []).append(ms)
    before, after = sources
    for kind in found[before]:
        a = statistics.median(found[before][kind])
        b = statistics.median(found[after][kind])
        print(f"{kind}: {before} {a:.3f} ms, {after} {b:.3f} ms ({(b / a - 1) * 100:+.1f} %)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="main", help="git revision measured as 'before'")
    ap.add_argument("--rounds", type=int, default=40, help="import runs per source")
    ap.add_argument("--call-rounds", type=int, default=6, help="call processes per source")
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--calls", type=int, default=200, help="calls of each kind per process")
    args = ap.parse_args()
    sources = {"before": baseline_source(args.baseline), "after": SRC}
    for src in sources.values():
        compileall.compile_dir(str(src), quiet=1)
    print(f"load average {os.getloadavg()[0]:.1f}, baseline {args.baseline}")
    imports(sources, args.rounds)
    calls(sources, args.call_rounds, small_root(args.episodes), args.calls)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
