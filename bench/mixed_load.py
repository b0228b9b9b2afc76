#!/usr/bin/env python3
"""A served root under mixed load: writers, a searcher and the report at once, as a busy agent
fleet keeps a server (searches of new questions while episodes are written).

    python bench/mixed_load.py ROOT [--base REV] [--seconds S] [--rounds R]

``ROOT`` is a root whose index is current (a ``bench/corpus.py`` root of a million episodes,
served once so its history is in git). Each round starts ``kiwifs serve`` in a fresh process,
as shipped and then with the ``src`` of ``--base`` (exported with ``git archive``: the A/B
baseline, default none), waits for ``/readyz``, then for ``--seconds`` runs:

* two writers, each putting a new episode under ``bench-load/`` and pausing 50 ms (about 25
  durable writes a second between them, a busy fleet's rate);
* one searcher asking :data:`first_serve.QUERIES` each with a word and a number added (so
  almost every question is new to the server's answer cache), pausing 100 ms, and every
  fiftieth time the memory report (``limit=100``).

Prints one JSON object: per side and round, writes a second, the searches' p50/p99/max in ms,
the reports' p50, and the server's resident memory at ready, its peak, at the end and at each
minute's end (sampled every 5 s; Linux). The root is written to (the episodes stay): use a
root you generated.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from first_serve import QUERIES, ab_arguments, interleaved, rss_mb, serve, wait_ready  # noqa: E402

WRITERS = 2
WRITE_PAUSE = 0.05
SEARCH_PAUSE = 0.1
REPORT_EVERY = 50
SAMPLE_EVERY = 5.0
EXTRA_WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]


def percentile(values: list[float], share: float) -> float:
    ranked = sorted(values)
    return round(ranked[min(len(ranked) - 1, int(len(ranked) * share))], 1) if ranked else 0.0


class Load:
    """The writers and the searcher against one server, and what they measured."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.stop = threading.Event()
        self.writes = 0
        self.failed = 0
        self.statuses: dict[str, int] = {}  # what the failed requests answered
        self.search_ms: list[float] = []
        self.report_ms: list[float] = []

    def fail(self, what: str) -> None:
        self.failed += 1
        self.statuses[what] = self.statuses.get(what, 0) + 1

    def writer(self, k: int) -> None:
        with httpx.Client(base_url=self.base, timeout=120) as client:
            n = 0
            while not self.stop.is_set():
                n += 1
                stamp = time.time_ns()
                body = (
                    f"---\nmemory_kind: episodic\nepisode_id: load-{k}-{stamp}\n---\n"
                    f"load episode {n}: the deploy rolled back after a canary alert\n"
                )
                r = client.put(
                    "/api/kiwi/file",
                    params={"path": f"bench-load/w{k}/e{stamp}.md"},
                    content=body,
                    headers={"X-Actor": "bench"},
                )
                if r.status_code < 300:
                    self.writes += 1
                else:
                    self.fail(f"PUT {r.status_code}")
                time.sleep(WRITE_PAUSE)

    def searcher(self) -> None:
        rng = random.Random(1)
        with httpx.Client(base_url=self.base, timeout=120) as client:
            while not self.stop.is_set():
                extra = f"{rng.choice(EXTRA_WORDS)}{rng.randint(0, 50)}"
                q = f"{rng.choice(QUERIES)} {extra}"
                began = time.perf_counter()
                r = client.get("/api/kiwi/search", params={"q": q})
                self.search_ms.append((time.perf_counter() - began) * 1000)
                if r.status_code >= 300:
                    self.fail(f"search {r.status_code}")
                if len(self.search_ms) % REPORT_EVERY == 0:
                    began = time.perf_counter()
                    r = client.get("/api/kiwi/memory/report", params={"limit": 100})
                    self.report_ms.append((time.perf_counter() - began) * 1000)
                    if r.status_code >= 300:
                        self.fail(f"report {r.status_code}")
                time.sleep(SEARCH_PAUSE)


def one_round(root: Path, src: Path | None, seconds: float) -> dict[str, object]:
    proc, base = serve(root, src)
    with httpx.Client(base_url=base, timeout=900) as client:
        wait_ready(client)
    try:
        ready = rss_mb(proc.pid)
        load = Load(base)
        threads = [threading.Thread(target=load.writer, args=(k,)) for k in range(WRITERS)]
        threads.append(threading.Thread(target=load.searcher))
        began = time.perf_counter()
        for t in threads:
            t.start()
        samples: list[float] = []
        while time.perf_counter() - began < seconds:
            time.sleep(SAMPLE_EVERY)
            rss = rss_mb(proc.pid)
            if rss is not None:
                samples.append(rss)
        load.stop.set()
        for t in threads:
            t.join()
        spent = time.perf_counter() - began
    finally:
        proc.terminate()
        proc.wait(300)
    return {
        "writes_per_s": round(load.writes / spent, 1),
        "failed": load.failed,
        "failed_as": load.statuses,
        "searches": len(load.search_ms),
        "search_p50_ms": percentile(load.search_ms, 0.5),
        "search_p99_ms": percentile(load.search_ms, 0.99),
        "search_max_ms": round(max(load.search_ms, default=0.0), 1),
        "report_p50_ms": round(statistics.median(load.report_ms), 1) if load.report_ms else None,
        "rss_mb": {
            "ready": ready,
            "peak": max(samples, default=None),
            "end": samples[-1] if samples else None,
            "each_minute": samples[int(60 / SAMPLE_EVERY) - 1 :: int(60 / SAMPLE_EVERY)],
        },
    }


def main() -> None:
    ap = ab_arguments(__doc__)
    ap.add_argument("--seconds", type=float, default=120.0)
    args = ap.parse_args()
    runs = interleaved(
        args.base, args.rounds, lambda src: one_round(args.root.resolve(), src, args.seconds)
    )
    print(json.dumps({"root": str(args.root), "base": args.base, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
