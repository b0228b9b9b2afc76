#!/usr/bin/env python3
"""Benchmark: ``kiwifs memory report`` (full scan, no index) against the naive sequential scan.

    python bench/memory_report.py [--sizes 10000,100000] [--repeat 3] [--corpus ROOT]

For each size it builds (once; cached under ``bench/.corpora/``, which git ignores) a corpus with
``bench/corpus.py`` (or takes the existing root ``--corpus``), then times back to back,
alternating, in this one run:

* ``kiwifs memory report --json --no-index --root R`` -- the installed command, reading every
  file (a kiwifs without ``--no-index`` gets ``.kiwi/state`` deleted before each run instead);
* ``python bench/naive_report.py R --loader csafe`` -- one process, PyYAML's C loader.

The OS page cache cannot be dropped without root, so both are measured *warm*: one unmeasured
warm-up run of each comes first, and then both read every byte from memory.

Memory is sampled every 10 ms from ``/proc`` over the whole process tree (the command and every
descendant, so kiwifs's worker processes count): ``tree PSS`` is the sum of proportional set sizes
(a page shared by n processes counts 1/n in each, so forked workers are not counted twice) and
``tree RSS`` the sum of resident set sizes (shared pages counted in every process: an upper
bound). ``max RSS`` is the kernel's peak RSS of the single largest process (``wait4`` in a small
launcher, so that this process's memory is not counted in it), which sampling cannot miss.
CPU time (user + system, children included) is printed too: it is less disturbed than wall time
by other work on the machine. The check compares both answers' sorted unmerged paths and counts
(warnings are not compared: the naive scan words some reasons its own way).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import corpus  # bench/corpus.py, beside this script

HERE = Path(__file__).resolve().parent
SAMPLE_SECONDS = 0.01


@dataclasses.dataclass(frozen=True)
class Run:
    """One measured run of one command."""

    seconds: float
    cpu_seconds: float
    tree_pss_kib: int
    tree_rss_kib: int
    max_rss_kib: int
    output: bytes


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    kiwifs = args.kiwifs or shutil.which("kiwifs", path=str(Path(sys.executable).parent))
    if not kiwifs:
        sys.exit("kiwifs is not installed next to this Python; pass --kiwifs")
    naive = HERE / "naive_report.py"
    no_index = ["--no-index"] if _supports_no_index(kiwifs) else []
    ok = True
    for size, root in roots(args).items():
        commands = {
            "kiwifs": [kiwifs, "memory", "report", "--json", *no_index, "--root", str(root)],
            "naive": [args.python, str(naive), str(root), "--loader", "csafe"],
        }
        runs: dict[str, list[Run]] = {"kiwifs": [], "naive": []}
        for command in commands.values():  # warm-up, not measured
            measure(command, root, drop_index=not no_index)
        for _ in range(args.repeat):
            for name, command in commands.items():
                if runs[name]:  # keep only the last answer: a big parent would skew nothing
                    runs[name][-1] = dataclasses.replace(runs[name][-1], output=b"")
                runs[name].append(measure(command, root, drop_index=not no_index))
        ok = check_same(size, runs["kiwifs"][-1].output, runs["naive"][-1].output) and ok
        print_size(size, runs)
    return 0 if ok else 1


def roots(args: argparse.Namespace) -> dict[str, Path]:
    """The roots to measure by label: ``--corpus`` as given, else one generated per size."""
    if args.corpus:
        return {args.corpus.name: args.corpus}
    return {f"{s}": ensure_corpus(args.corpora, s, args.seed) for s in args.sizes}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000", help="episode counts, comma-separated")
    ap.add_argument("--repeat", type=int, default=3, help="measured runs of each (after warm-up)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--corpus", type=Path, help="an existing root to measure (one size)")
    ap.add_argument("--corpora", type=Path, default=HERE / ".corpora", help="corpus cache")
    ap.add_argument("--kiwifs", help="the kiwifs command (default: next to this Python)")
    ap.add_argument("--python", default=sys.executable, help="Python for the naive scan")
    args = ap.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    return args


def _supports_no_index(kiwifs: str) -> bool:
    help_text = subprocess.run(
        [kiwifs, "memory", "report", "--help"], capture_output=True, text=True, check=True
    ).stdout
    return "--no-index" in help_text


def ensure_corpus(corpora: Path, size: int, seed: int) -> Path:
    """The corpus for ``size`` episodes (``bench/corpus.py``), generated unless cached."""
    print(f"corpus of {size} episodes under {corpora} ...", file=sys.stderr, flush=True)
    return corpus.cached(corpora, size, seed)


# A small launcher between this process and the command. The kernel's peak RSS of a child
# includes the memory it had between fork and exec -- a copy of (or, with vfork, the peak of) the
# parent -- so the command must be started by a process that is small and stays small.
_LAUNCHER = """
import json, os, sys, time
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - start
code = os.waitstatus_to_exitcode(status)
cpu = usage.ru_utime + usage.ru_stime
print(json.dumps([code, seconds, cpu, usage.ru_maxrss]), file=sys.stderr)
"""


def measure(command: list[str], root: Path, drop_index: bool) -> Run:
    """Run ``command`` on ``root``; time it and sample its tree's memory.

    ``drop_index`` deletes ``.kiwi/state`` first, for a kiwifs without ``--no-index``. Time,
    CPU and the kernel's peak RSS come from the launcher's ``wait4`` on the command.
    """
    if drop_index:
        shutil.rmtree(root / ".kiwi" / "state", ignore_errors=True)
    sampler = TreeSampler()
    proc = subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    sampler.start(proc.pid)
    output, report = proc.communicate()
    sampler.stop()
    code, seconds, cpu, max_rss = json.loads(report.decode().strip().splitlines()[-1])
    if proc.returncode != 0 or code != 0:
        sys.exit(f"{command[0]} exited with {code}")
    return Run(seconds, cpu, sampler.peak_pss, sampler.peak_rss, max_rss, output)


class TreeSampler(threading.Thread):
    """Peak sums of PSS and RSS over a process and its descendants, polled from /proc."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_pss = 0
        self.peak_rss = 0
        self._done = threading.Event()
        self._pid = 0

    def start(self, pid: int = 0) -> None:  # type: ignore[override]
        self._pid = pid
        super().start()

    def stop(self) -> None:
        self._done.set()
        self.join()

    def run(self) -> None:
        while not self._done.is_set():
            pss = rss = 0
            for pid in _tree(self._pid)[1:]:  # the launcher itself is not measured
                p, r = _memory_kib(pid)
                pss += p
                rss += r
            self.peak_pss = max(self.peak_pss, pss)
            self.peak_rss = max(self.peak_rss, rss)
            self._done.wait(SAMPLE_SECONDS)


def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        todo.extend(_children(current))
    return pids


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.extend(int(c) for c in fh.read().split())
    except OSError:
        pass
    return out


def _memory_kib(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of one process in KiB; zeros once it has exited."""
    pss = rss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1])
    except (OSError, ValueError):
        pass
    return pss, rss


def check_same(size: str, kiwifs_out: bytes, naive_out: bytes) -> bool:
    """Both give the same unmerged set and counts (warnings differ by design)."""
    a: dict[str, Any] = json.loads(kiwifs_out)
    b: dict[str, Any] = json.loads(naive_out)

    def key(report: dict[str, Any]) -> tuple[Any, ...]:
        return (
            sorted(e["path"] for e in report["unmerged"] or []),
            report.get("unmerged_count"),
            report["episodic_count"],
            report["merged_from_refs"],
        )

    same = key(a) == key(b)
    verdict = "same" if same else "DIFFERENT"
    print(f"[{size}] unmerged {a.get('unmerged_count')} vs {b.get('unmerged_count')}: {verdict}")
    return same


def print_size(size: str, runs: dict[str, list[Run]]) -> None:
    k, n = runs["kiwifs"], runs["naive"]

    def med(rs: list[Run], attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in rs)

    print(f"[{size}] runs (s):  kiwifs {_fmt([r.seconds for r in k])}  naive {_fmt(n)}")
    time_ratio = med(n, "seconds") / med(k, "seconds")
    print(
        f"[{size}] median time: kiwifs {med(k, 'seconds'):.2f} s, "
        f"naive {med(n, 'seconds'):.2f} s -> kiwifs is {time_ratio:.2f}x faster"
    )
    print(
        f"[{size}] median CPU (user+sys, with children): kiwifs {med(k, 'cpu_seconds'):.2f} s, "
        f"naive {med(n, 'cpu_seconds'):.2f} s"
    )
    for attr, label in (
        ("tree_pss_kib", "tree PSS"),
        ("tree_rss_kib", "tree RSS"),
        ("max_rss_kib", "max RSS"),
    ):
        kv, nv = med(k, attr), med(n, attr)
        print(
            f"[{size}] peak {label}: kiwifs {kv / 1024:.0f} MiB, naive {nv / 1024:.0f} MiB "
            f"-> ratio {kv / nv:.2f}"
        )
    sys.stdout.flush()


def _fmt(values: list[Any]) -> str:
    nums = [v.seconds if isinstance(v, Run) else v for v in values]
    return "[" + ", ".join(f"{v:.2f}" for v in nums) + "]"


if __name__ == "__main__":
    raise SystemExit(main())
