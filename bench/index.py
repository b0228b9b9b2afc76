"""Benchmark of the SQLite index on a generated episodic corpus (default 100,000 episodes).

    python bench/index.py [--episodes N] [--seed S] [--queries 100] [--skip-build]

Measures, in one run and on the same corpus:

(a) ``kiwifs memory report --json`` (a subprocess, index up to date) against
    ``bench/naive_report.py --loader csafe``, and checks both print the same JSON;
(b) a running ``kiwifs serve`` answering ``GET /api/kiwi/memory/report?limit=100`` (median over
    repeated requests), and that an out-of-band edit made 2 s earlier shows in the answer;
(c) search latency p50 / p99 over ``--queries`` queries;
(d) the time to build the index from scratch and its size on disk.

Corpora are generated with the repository's corpus generator (``bench/corpus.py``) into
``bench/.corpora/ep<N>-seed<S>`` only when missing (``bench/memory_report.py`` shares them), with
their ground truth beside them (``ep<N>-seed<S>.truth.json``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import corpus as corpusgen  # bench/corpus.py

from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
KIWIFS = str(Path(PYTHON).with_name("kiwifs"))


def private_copy(source: Path, target: Path) -> Path:
    """``source`` hard-linked into ``target``, but for what kiwifs or git write in place (the
    index database, git's index file and logs), which are copied: the shared corpus is never
    written to. Files an older kiwifs committed into the corpus's history although they are
    its own (the server lock, a state file) are untracked, so ``git status`` shows only what a
    run writes."""
    subprocess.run(["cp", "-al", str(source), str(target)], check=True)
    for rel in (".git/logs", ".git/index", ".kiwi/state"):
        path = target / rel
        if path.is_dir():
            shutil.rmtree(path)
            shutil.copytree(source / rel, path)
        elif path.exists():
            path.unlink()
            shutil.copy2(source / rel, path)
    tracked = subprocess.run(
        ["git", "-C", str(target), "ls-files", ".kiwi/server.lock", ".kiwi/state"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    if tracked:
        git = ["git", "-C", str(target), "-c", "user.name=bench", "-c", "user.email=b@x"]
        subprocess.run([*git, "rm", "-q", "--cached", *tracked], check=True)
        subprocess.run([*git, "commit", "-qm", "bench: untrack kiwifs state"], check=True)
    return target


def versioned_corpus(episodes: int, seed: int) -> Path:
    """The corpus with a git history, as a served root has one: made once beside the corpus
    (``ep<N>-seed<S>-git``) from hard links and a ``kiwifs init`` that commits every file, the
    index database copied first so that the corpus itself is never written to. The write
    benchmarks serve private copies of it (:func:`private_copy`)."""
    source = corpus(episodes, seed)
    root = source.with_name(source.name + "-git")
    if (root / ".git").is_dir():
        return root
    building = source.with_name(source.name + "-git.tmp")
    shutil.rmtree(building, ignore_errors=True)
    subprocess.run(["cp", "-al", str(source), str(building)], check=True)
    state = building / ".kiwi" / "state"
    if state.is_dir():
        shutil.rmtree(state)
        shutil.copytree(source / ".kiwi" / "state", state)
    subprocess.run(
        [KIWIFS, "init", "--template", "blank", "--root", str(building)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    building.rename(root)
    return root


def corpus(episodes: int, seed: int) -> Path:
    """The corpus folder, generated if missing (an older ``ep<N>`` of the same seed is reused)."""
    base = HERE / ".corpora"
    root = base / f"ep{episodes}-seed{seed}"
    if root.is_dir():
        return root
    legacy = base / f"ep{episodes}"
    summary = base / f"ep{episodes}.summary.json"
    if legacy.is_dir() and summary.is_file() and json.loads(summary.read_text())["seed"] == seed:
        return legacy
    return corpusgen.cached(base, episodes, seed)


def timed(cmd: list[str]) -> tuple[float, bytes]:
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE).stdout
    return time.perf_counter() - start, out


def best_of(n: int, cmd: list[str]) -> tuple[float, bytes]:
    runs = [timed(cmd) for _ in range(n)]
    return min(t for t, _ in runs), runs[-1][1]


# The build's A/B switches (``--variants``): each names what it turns off.
VARIANTS = {
    "bulk": [],  # everything on: what `kiwifs reindex` does
    "rows": ["--row-by-row"],  # the row-by-row path a reconcile uses
    "nodict": ["--no-dictionary"],  # texts compressed without a trained dictionary
    "page4k": ["--page-size", "4096"],  # SQLite's default page size
    "ftshash1m": ["--fts-hash", str(1 << 20)],  # FTS5's default hash during the load
    "coverupdate": ["--cover-after"],  # coverage by one UPDATE of every row after the load
}


def build(
    root: Path, bulk: bool = True, keep: bool = False, tuning: object | None = None
) -> dict[str, float]:
    """Build the index from scratch in this process: ``bulk`` is the A/B switch between the
    parallel bulk rebuild (``kiwifs reindex``) and the row-by-row path a reconcile uses;
    ``tuning`` (a :class:`~kiwifs.tuning.Tuning`) is handed to the root when given.
    The index is deleted first, unless ``keep``: then the build replaces it, as ``kiwifs
    reindex`` does on a root that has one."""
    state = root / ".kiwi/state"
    if not keep:
        for name in ("index.db", "index.db-wal", "index.db-shm"):
            (state / name).unlink(missing_ok=True)
    start = time.perf_counter()
    handed = {"tuning": tuning} if tuning is not None else {}  # an older kiwifs (--base) has none
    with Knowledge.open(root, **handed) as kb:
        kb.indexing._open().rebuild(bulk=bulk)
        kb.indexing._open().checkpoint()
        seconds = time.perf_counter() - start
        size = kb.indexing._open().size_bytes()
    own = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "answers": answers_digest(state / "index.db"),
        "seconds": round(seconds, 2),
        "size_mb": round(size / 1e6, 1),
        "cpu_main_s": round(own.ru_utime + own.ru_stime, 2),
        "cpu_workers_s": round(workers.ru_utime + workers.ru_stime, 2),
        "peak_rss_mb": round(own.ru_maxrss / 1024, 1),
        "worker_peak_rss_mb": round(workers.ru_maxrss / 1024, 1),
    }


JSON_COLUMNS = {"frontmatter", "id_keys", "path_keys", "warnings"}
CHECK_QUERIES = ["run", "memory cache", "timeout*", '"deploy error"', "schema OR latency"]


def answers_digest(db: Path) -> str:
    """A digest of what the text index answers (ids, BM25 scores, counts) and of the file
    rows: every variant of a build must give the same."""
    digest = hashlib.sha1()
    conn = sqlite3.connect(db)
    try:
        for query in CHECK_QUERIES:
            sql = "SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? ORDER BY 2, 1 LIMIT 200"
            digest.update(repr(conn.execute(sql, (query,)).fetchall()).encode())
            count = "SELECT count(*) FROM fts WHERE fts MATCH ?"
            digest.update(repr(conn.execute(count, (query,)).fetchall()).encode())
        rows = conn.execute("SELECT * FROM files ORDER BY id")
        names = [d[0] for d in rows.description]
        for row in rows:  # JSON columns as values (their text may be written differently)
            values = [
                json.loads(v) if name in JSON_COLUMNS and v is not None else v
                for name, v in zip(names, row, strict=True)
            ]
            digest.update(repr(values).encode())
    finally:
        conn.close()
    return digest.hexdigest()[:16]


def build_ab(
    root: Path, rounds: int, variants: list[str], base: Path | None, over: bool = False
) -> dict[str, object]:
    """Interleaved builds, each in a fresh process (so peak RSS is the build's own); ``base``
    is a source tree of an older kiwifs whose bulk build runs in the same rounds; ``over``
    builds over the index the last build left instead of deleting it first."""
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    if base is not None:
        runs["base"] = []
    for _ in range(rounds):
        for mode in runs:
            if mode == "base" and base is not None:  # this benchmark, running the old code
                cmd = [PYTHON, __file__, "--build-only", "bulk"]
                env = {**os.environ, "PYTHONPATH": str(base / "src")}
            else:
                cmd = [PYTHON, __file__, "--build-only", "bulk", *VARIANTS[mode]]
                env = dict(os.environ)
            cmd += ["--root", str(root), *(["--keep-index"] if over else [])]
            out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, env=env).stdout
            runs[mode].append(json.loads(out))
    answers = {str(r.pop("answers")) for m in runs for r in runs[m]}
    medians = {m: {k: statistics.median(r[k] for r in runs[m]) for k in runs[m][0]} for m in runs}
    return {"identical_answers": len(answers) == 1, "runs": runs, "medians": medians}


def switches(args: argparse.Namespace) -> object | None:
    """Turn off what the variant's flags name: module constants the build reads, and the
    :class:`~kiwifs.tuning.Tuning` returned for the build (``None``: the defaults). Each module
    is imported only when asked for, so an older source tree (``--base``) runs too."""
    if args.no_dictionary:
        from kiwifs.index import texts

        texts.MIN_SAMPLES = 1 << 60  # never enough samples: no dictionary
    if args.page_size:
        from kiwifs.index import connections

        connections.PAGE_SIZE = args.page_size
    if args.fts_hash:
        from kiwifs.index import build as bulk

        bulk.FTS_HASH = args.fts_hash
    if args.cover_after:
        from kiwifs.tuning import Tuning

        return Tuning.from_env().but(cover_while_loading=False)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> tuple[float, bytes]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as resp:
        body = resp.read()
    return time.perf_counter() - start, body


def serve_bench(root: Path, requests: int) -> dict[str, object]:
    """(b): median latency of the report route and freshness after an out-of-band edit."""
    port = free_port()
    proc = subprocess.Popen(
        [KIWIFS, "serve", "--root", str(root), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/api/kiwi/memory/report?limit=100"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                get(f"http://127.0.0.1:{port}/health")
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("kiwifs serve did not start") from None
                time.sleep(0.2)
        get(url)
        time.sleep(3)  # let the watcher finish its first reconcile
        before = json.loads(get(url)[1])
        latencies = [get(url)[0] for _ in range(requests)]
        probe = root / "episodes/zz-bench-probe.md"
        probe.write_text("---\nmemory_kind: episodic\nepisode_id: bench-probe\n---\nprobe\n")
        time.sleep(2)
        after = json.loads(get(url)[1])
        probe.unlink()
        time.sleep(2)
        gone = json.loads(get(url)[1])
        fresh = (
            after["episodic_count"] == before["episodic_count"] + 1
            and after["unmerged_count"] == before["unmerged_count"] + 1
            and gone["episodic_count"] == before["episodic_count"]
        )
    finally:
        proc.terminate()
        proc.wait(30)
    return {
        "median_ms": statistics.median(latencies) * 1000,
        "p99_ms": sorted(latencies)[int(0.99 * (len(latencies) - 1))] * 1000,
        "requests": requests,
        "fresh_after_2s": fresh,
    }


COMMON = ["run", "episode", "error", "timeout", "deploy", "agent", "memory", "merge", "cache"]
COMMON += ["latency", "schema", "pipeline", "retry", "session", "config", "index", "release"]
MODES: dict[str, dict[str, bool]] = {  # mode: the fields of kb's Tuning it changes
    "columns": {},
    "window": {"term_columns": False},
    "full": {"term_columns": False, "search_top_k": False},
}


def switch(kb: Knowledge, changes: dict[str, bool]) -> None:
    """Search ``kb`` with its :class:`~kiwifs.tuning.Tuning` so changed from here on (its index
    reads it at each search)."""
    kb.indexing._open().tuning = kb.tuning.but(**changes)


def rare_words(root: Path, rng: random.Random, count: int) -> list[str]:
    """Words found in a handful of files: the hash part of sampled episode ids."""
    files = sorted((root / "episodes").rglob("*.md"))
    found = []
    for path in rng.sample(files, count):
        for line in path.read_text().splitlines():
            if line.startswith("episode_id:"):
                found.append(line.rsplit("-", 1)[-1].strip().strip("\"'"))
                break
    return found


def search_queries(root: Path, n: int, seed: int) -> list[tuple[str, str, str | None]]:
    """``n`` queries as ``(class, query, scope)``: one to three common words (most queries an
    agent sends here: nearly every word of this corpus is in most files), a common word with a
    rare one, a rare word alone, an episode id (a phrase), FTS5 syntax, and a few queries
    scoped to a scope no page has (the filter must answer fast and empty)."""
    rng = random.Random(seed)
    rare = rare_words(root, rng, n)
    classes = [("1 common", 30), ("2 common", 25), ("3 common", 5), ("common+rare", 15)]
    classes += [("rare", 5), ("id phrase", 5), ("syntax", 5), ("scoped", 10)]
    out: list[tuple[str, str, str | None]] = []
    for name, share in classes:
        for _ in range(round(n * share / 100)):
            words = rng.sample(COMMON, 3)
            if name == "common+rare":
                query = f"{words[0]} {rare.pop()}"
            elif name == "rare":
                query = rare.pop()
            elif name == "id phrase":
                query = f"run-{rare.pop()}"
            elif name == "syntax":
                query = rng.choice([f"{words[0][:4]}*", f'"{words[0]} {words[1]}"'])
            else:
                query = " ".join(words[: {"2 common": 2, "3 common": 3}.get(name, 1)])
                if name == "scoped":
                    query = " ".join(words[: rng.choice((1, 2))])
            out.append((name, query, "ops" if name == "scoped" else None))
    rng.shuffle(out)
    return out[:n]


def percentiles(spent: list[float]) -> dict[str, float]:
    spent = sorted(spent)
    return {
        "p50_ms": round(spent[len(spent) // 2] * 1000, 1),
        "p99_ms": round(spent[int(0.99 * (len(spent) - 1))] * 1000, 1),
    }


def search_bench(root: Path, n: int, seed: int, prefix: str = "episodes/") -> dict[str, object]:
    """(c): ``n`` realistic queries (:func:`search_queries`), ``path_prefix`` and the superseded
    filter on (a scope on some), limit 20, each run in three modes interleaved (the index's
    :class:`~kiwifs.tuning.Tuning`, ``term_columns`` and ``search_top_k``): the term columns,
    the BM25 window, and the full ranking. The
    first run of each query (which makes the term columns of its words, once per process) is
    timed apart; answers must be identical in every mode."""
    queries = search_queries(root, n, seed)
    times: dict[str, dict[str, list[float]]] = {m: {} for m in MODES}
    cold: list[float] = []
    same = True
    with Knowledge.open(root) as kb:
        Serving(kb).start_watching()  # as in `serve`: no reconcile per query
        while not kb.ready():
            time.sleep(0.05)
        for _, query, scope in queries:
            start = time.perf_counter()
            kb.search(query, limit=20, path_prefix=prefix, scope=scope)
            cold.append(time.perf_counter() - start)
        for turn, (name, query, scope) in enumerate(queries):
            answers = []
            order = list(MODES)[turn % len(MODES) :] + list(MODES)[: turn % len(MODES)]
            for mode in order:
                switch(kb, MODES[mode])
                start = time.perf_counter()
                found = kb.search(query, limit=20, path_prefix=prefix, scope=scope)
                answers.append(found.to_json())
                times[mode].setdefault(name, []).append(time.perf_counter() - start)
            same = same and all(a == answers[0] for a in answers)
        switch(kb, MODES["columns"])
        Serving(kb).stop_watching()
    out: dict[str, object] = {"identical": same, "path_prefix": prefix, "queries": len(queries)}
    out["first_run_ms"] = {"max": round(max(cold) * 1000, 1), "sum": round(sum(cold) * 1000)}
    for mode, by_class in times.items():
        out[mode] = {"all": percentiles([t for spent in by_class.values() for t in spent])}
        plain = [t for name, spent in by_class.items() if name != "syntax" for t in spent]
        out[mode]["all but syntax"] = percentiles(plain)
        out[mode].update({name: percentiles(spent) for name, spent in by_class.items()})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3, help="CLI runs per measurement (best)")
    ap.add_argument("--skip-build", action="store_true", help="reuse an existing index.db")
    ap.add_argument("--build-rounds", type=int, default=1, help="interleaved A/B builds")
    ap.add_argument("--only-search", action="store_true", help="measure search and stop")
    ap.add_argument("--only-build", action="store_true", help="measure the builds and stop")
    ap.add_argument(
        "--variants",
        default="rows,bulk",
        help=f"builds to interleave, of {','.join(VARIANTS)}",
    )
    ap.add_argument("--base", type=Path, help="source tree of an older kiwifs to build too")
    ap.add_argument(
        "--over-existing",
        action="store_true",
        help="build over the index instead of deleting it first (what `kiwifs reindex` does)",
    )
    ap.add_argument("--build-only", choices=("rows", "bulk"), help=argparse.SUPPRESS)
    ap.add_argument("--row-by-row", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-dictionary", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--page-size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--fts-hash", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--cover-after", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--keep-index", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build_only:
        tuning = switches(args)
        bulk = args.build_only == "bulk" and not args.row_by_row
        print(json.dumps(build(args.root, bulk=bulk, keep=args.keep_index, tuning=tuning)))
        return
    root = corpus(args.episodes, args.seed)
    out: dict[str, object] = {"corpus": str(root), "episodes": args.episodes}

    if not args.skip_build or not (root / ".kiwi/state/index.db").exists():
        variants = args.variants.split(",")
        out["build"] = build_ab(root, args.build_rounds, variants, args.base, args.over_existing)
    if args.only_build:
        print(json.dumps(out, indent=2))
        return
    if args.only_search:
        out["search"] = search_bench(root, args.queries, args.seed)
        print(json.dumps(out, indent=2))
        return

    naive_s, naive_out = timed(
        [PYTHON, str(HERE / "naive_report.py"), str(root), "--loader", "csafe"]
    )
    report_cmd = [KIWIFS, "memory", "report", "--json", "--root", str(root)]
    timed(report_cmd)  # brings the index up to date
    index_s, index_out = best_of(args.repeat, report_cmd)
    noindex_s, noindex_out = timed([*report_cmd, "--no-index"])
    mine, naive = json.loads(index_out), json.loads(naive_out)
    out["report"] = {
        "naive_csafe_s": round(naive_s, 3),
        "kiwifs_index_s": round(index_s, 3),
        "kiwifs_no_index_s": round(noindex_s, 3),
        "speedup_vs_naive": round(naive_s / index_s, 1),
        "identical_to_no_index": index_out == noindex_out,
        # kiwifs adds warnings the naive scan has not; everything else must agree
        "same_as_naive_but_warnings": all(mine[k] == naive[k] for k in naive if k != "warnings"),
    }
    out["search"] = search_bench(root, args.queries, args.seed)
    if (
        shutil.which(KIWIFS)
        and "serve" in subprocess.run([KIWIFS, "--help"], capture_output=True, text=True).stdout
    ):
        serve = serve_bench(root, args.requests)
        serve["ratio_naive_over_median"] = round(naive_s / (serve["median_ms"] / 1000), 1)  # type: ignore[operator]
        out["serve"] = serve
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
