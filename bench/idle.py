"""An idle server: the CPU ``kiwifs serve`` uses on the 100k-episode root while nobody asks
anything, and how soon it finds a change whose file event was lost.

    python bench/idle.py [--episodes 100000] [--seconds 120] [--rounds 2]

Two variants, interleaved round by round (A, B, then B, A):

* ``adaptive`` (as shipped): the watcher's periodic reconcile waits twice as long after each
  one that found nothing the events had missed, up to 60 s;
* ``fixed`` (the A/B baseline, ``Tuning(reconcile_max=5)`` handed to the server): a reconcile
  every 5 s, as before.

Each round starts the server, waits for ``/readyz`` and 10 s more (start-up work: the MCP SDK's
import, the timeline's first replay, the first check), then reads the CPU seconds of the server
and its children from ``/proc`` over ``--seconds``. Then it plants a lost event: a page's
bytes rewritten through a hard link outside the root (inotify reports a change to the folder
the file was opened through, so the root's watches hear nothing), and times how long until a
keyword search finds the new word.

Give it the CPUs on a shared machine (see ``bench/fast_paths.py``)::

    setsid --wait sh -c 'echo -15 > /proc/self/autogroup; exec nice -n -15 \\
        python bench/idle.py'
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from startup import free_port, status  # noqa: E402
from write_throughput import Changes, kiwifs_command, process_cpu  # noqa: E402

from index import corpus  # noqa: E402

VARIANTS: dict[str, Changes] = {"adaptive": {}, "fixed": {"reconcile_max": 5.0}}  # Tuning's
SETTLE_S = 10.0


def found(base: str, word: str) -> bool:
    url = base + "/api/kiwi/search?" + urllib.parse.urlencode({"q": word})
    with urllib.request.urlopen(url, timeout=30) as r:
        return bool(json.load(r)["results"])


def one_round(root: Path, tuning: Changes, seconds: float, page: Path) -> tuple[float, float]:
    """(% of a core used while idle, seconds until a change without an event is found)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*kiwifs_command(tuning), "serve", "--root", str(root), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while status(base + "/readyz") != 200:
            if proc.poll() is not None:
                raise RuntimeError("kiwifs serve exited")
            time.sleep(0.05)
        time.sleep(SETTLE_S)
        before = process_cpu(proc.pid)
        time.sleep(seconds)
        used = (process_cpu(proc.pid) - before) / seconds * 100
        word = f"lostevent{time.time_ns()}"
        with tempfile.TemporaryDirectory(dir=root.parent) as outside:
            link = Path(outside) / "link.md"
            os.link(page, link)
            with open(link, "ab") as f:
                f.write(f"\n{word}\n".encode())
            start = time.perf_counter()
            while not found(base, word):
                time.sleep(0.1)
            return used, time.perf_counter() - start
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    root = corpus(args.episodes, args.seed)
    page = next(p for p in sorted((root / "concepts").iterdir()) if p.suffix == ".md")
    original = page.read_bytes()
    cpu: dict[str, list[float]] = {}
    lag: dict[str, list[float]] = {}
    load_before = os.getloadavg()
    try:
        for n in range(args.rounds):
            for name in VARIANTS if n % 2 == 0 else reversed(VARIANTS):
                used, seen = one_round(root, VARIANTS[name], args.seconds, page)
                cpu.setdefault(name, []).append(round(used, 2))
                lag.setdefault(name, []).append(round(seen, 2))
    finally:
        page.write_bytes(original)  # the corpus as it was (the next start reconciles it)
    print(
        json.dumps(
            {
                "seconds": args.seconds,
                "load_average": [load_before, os.getloadavg()],
                "idle_cpu_percent": cpu,
                "lost_event_found_after_s": lag,
                "median_idle_cpu_percent": {k: statistics.median(v) for k, v in cpu.items()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
