#!/usr/bin/env python3
"""Benchmark of the link index: what it adds to ``kiwifs reindex``, and its reads in a server.

    python bench/links.py [--episodes N] [--seed S] [--links K] [--rounds R] [--base REV]
                          [--queries Q] [--skip-reindex] [--skip-reads]

On the corpus of ``bench/corpus.py`` with ``--links K`` wiki links a page (default 4, one in
ten broken; cached under ``bench/.corpora/ep<N>-seed<S>-links<K>``):

* reindex A/B: ``kiwifs reindex`` of revision ``--base`` (default ``3c6954c``, the last one
  without a link index; its ``src/`` exported with ``git archive``) against the checkout's, each
  in a fresh process on a private hard-linked copy of the corpus, interleaved rounds A B B A;
  medians of the wall time and the index's size (``index.db`` with its WAL);
* reads: one long-lived ``Knowledge`` with a watcher (as ``serve`` holds), ``backlinks(path)`` and
  ``peek(path)`` over ``--queries`` random markdown pages (a warm-up pass first), p50 and p99.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus as corpusgen  # noqa: E402  bench/corpus.py

PYTHON = sys.executable
BASE = "3c6954c"  # the revision before the link index (e094e71)


def export_source(rev: str, target: Path) -> Path:
    """The ``src`` folder of revision ``rev``, exported (no checkout, no git state)."""
    target.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", rev, "src"], check=True, capture_output=True, cwd=HERE.parent
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "src"


def index_bytes(root: Path) -> int:
    state = root / ".kiwi" / "state"
    return sum(
        (state / n).stat().st_size for n in ("index.db", "index.db-wal") if (state / n).exists()
    )


def reindex(root: Path, src: Path | None) -> tuple[float, int]:
    """One ``kiwifs reindex`` in a fresh process (``src``: an exported tree, else the
    checkout's), from no index: its wall time and the index's size."""
    state = root / ".kiwi" / "state"
    for name in ("index.db", "index.db-wal", "index.db-shm"):
        (state / name).unlink(missing_ok=True)
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    cmd = [PYTHON, "-c", "from kiwifs.cli import main; main()", "reindex", "--root", str(root)]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start, index_bytes(root)


def reindex_ab(source: Path, base: str, rounds: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="kiwifs-links-") as tmp:
        old = export_source(base, Path(tmp) / "base")
        root = Path(tmp) / "root"
        subprocess.run(["cp", "-al", str(source), str(root)], check=True)
        state = root / ".kiwi" / "state"
        if state.exists():  # written in place: never the shared corpus's
            shutil.rmtree(state)
        runs: dict[str, list[tuple[float, int]]] = {"base": [], "links": []}
        for _ in range(rounds):
            for side in ("base", "links", "links", "base"):
                runs[side].append(reindex(root, old if side == "base" else None))
    out: dict[str, object] = {"base": base, "rounds": rounds}
    for side, got in runs.items():
        out[side] = {
            "seconds": [round(t, 2) for t, _ in got],
            "median_s": round(statistics.median(t for t, _ in got), 2),
            "size_mb": round(statistics.median(b for _, b in got) / 1e6, 1),
        }
    b, n = out["base"], out["links"]
    assert isinstance(b, dict) and isinstance(n, dict)
    out["time_ratio"] = round(n["median_s"] / b["median_s"], 3)
    out["size_ratio"] = round(n["size_mb"] / b["size_mb"], 3)
    return out


def pct(spent: list[float]) -> dict[str, float]:
    s = sorted(spent)
    return {
        "p50_ms": round(1000 * s[len(s) // 2], 2),
        "p99_ms": round(1000 * s[min(len(s) - 1, int(len(s) * 0.99))], 2),
        "max_ms": round(1000 * s[-1], 2),
    }


def reads(source: Path, queries: int, seed: int) -> dict[str, object]:
    from kiwifs import Knowledge
    from kiwifs.server.lifecycle import Serving

    with tempfile.TemporaryDirectory(prefix="kiwifs-links-") as tmp:
        root = Path(tmp) / "root"
        subprocess.run(["cp", "-al", str(source), str(root)], check=True)
        state = root / ".kiwi" / "state"
        if state.exists():
            shutil.rmtree(state)
        subprocess.run(
            [PYTHON, "-c", "from kiwifs.cli import main; main()", "reindex", "--root", str(root)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        pages = sorted(
            str(p.relative_to(root))
            for p in root.rglob("*.md")
            if not any(part.startswith(".") for part in p.relative_to(root).parts)
            and p.name.endswith(".md")
        )
        picked = random.Random(seed).sample(pages, queries)
        out: dict[str, object] = {"pages": len(pages), "queries": queries}
        with Knowledge.open(root) as kb:
            serving = Serving(kb)
            serving.start_watching()  # as in `serve`: a watcher keeps the index, no walk a read
            while not kb.ready():
                time.sleep(0.05)
            for path in picked[:20]:  # warm-up: the first reads open the database
                kb.backlinks(path)
                kb.peek(path)
            found = 0
            for name, call in (("backlinks", kb.backlinks), ("peek", kb.peek)):
                spent = []
                for path in picked:
                    start = time.perf_counter()
                    got = call(path)
                    spent.append(time.perf_counter() - start)
                    if name == "backlinks":
                        found += len(got)  # type: ignore[arg-type]
                out[name] = pct(spent)
            out["backlinks_per_page"] = round(found / queries, 2)
            start = time.perf_counter()
            out["broken_links"] = len(kb.broken_links())
            out["broken_links_s"] = round(time.perf_counter() - start, 2)
            start = time.perf_counter()
            out["orphans"] = len(kb.orphans())
            out["orphans_s"] = round(time.perf_counter() - start, 2)
            serving.stop_watching()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--links", type=int, default=4, help="mean wiki links a page")
    ap.add_argument("--rounds", type=int, default=1, help="A B B A rounds of the reindex A/B")
    ap.add_argument("--base", default=BASE, help="the revision without the link index")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--skip-reindex", action="store_true")
    ap.add_argument("--skip-reads", action="store_true")
    args = ap.parse_args()
    source = corpusgen.cached(HERE / ".corpora", args.episodes, args.seed, args.links)
    out: dict[str, object] = {"corpus": str(source), "load_before": os.getloadavg()}
    if not args.skip_reindex:
        out["reindex"] = reindex_ab(source, args.base, args.rounds)
    if not args.skip_reads:
        out["reads"] = reads(source, args.queries, args.seed)
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
