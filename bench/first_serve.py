#!/usr/bin/env python3
"""A server's first minutes on a large root: how soon it is ready, its first report, its first
searches, and (``--unversioned``) while it imports the root's files into git.

    python bench/first_serve.py ROOT [--base REV] [--rounds R] [--unversioned [--no-import-wait]]

``ROOT`` is a root whose index is current (``kiwifs reindex`` run on it, for instance a
``bench/corpus.py`` root of a million episodes). Each round starts ``kiwifs serve`` in a fresh
process, as shipped and then with the ``src`` of ``--base`` (exported with ``git archive``; the
A/B baseline, default none), and measures:

* ``ready_s``: process start to the first 200 of ``/readyz``;
* ``first_report_ms``: the first ``GET /api/kiwi/memory/report?limit=100`` after that;
* ``first30``: the first 30 searches (:data:`QUERIES`, natural-language questions and words)
  after it, p50 and max in ms, as an agent asking at once would see them;
* ``later30``: the same 30 searches once more (each word's ranking data made by then);
* ``steady``: the same 30 searches :data:`STEADY_ROUNDS` times more, p50 and p99; and
  ``rss_mb``: the server's resident memory after them (Linux; ``None`` elsewhere);
* ``import_s`` (``--unversioned``): the root's ``.git`` and import marker are removed before
  each start, so the server makes the first import; process start to the marker's removal
  (the import committed), and ``after_import`` the same 30 searches again
  (``--no-import-wait``: neither; once the searches are done the server is stopped and its
  import, a process of its own that would go on, is stopped too, with its ``git`` children).

Prints one JSON object. Needs nothing outside the repository; the root is used in place (with
``--unversioned`` its ``.git`` is deleted: use a root you generated for this).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
STEADY_ROUNDS = 4
MARKER = Path(".kiwi") / "state" / "git-import"
QUERIES = [
    "what went wrong with the deploy",
    "rollback canary",
    "which tool failed during migration",
    "snapshot pipeline latency",
    "review token budget",
    "how did we fix the replica lag",
    "incident alert dashboard",
    "schema lint error",
    "vector embedding cache",
    "session trace header",
    "release process traced",
    "queue worker retry",
    "frontmatter parser",
    "lease shard context",
    "memory report",
    "search index window",
    "what did alice change",
    "config route client",
    "merged summary",
    "event request call",
    "budget",
    "metric",
    "graph query heading",
    "server note store",
    "why was the build reverted",
    "checked verified patch",
    "prompt chunk response",
    "endpoint observed",
    "markdown link",
    "episode page",
]


def export_source(rev: str, target: Path) -> Path:
    archive = subprocess.run(
        ["git", "archive", rev, "src"], check=True, capture_output=True, cwd=HERE.parent
    ).stdout
    target.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "src"


def searches(client: httpx.Client, rounds: int = 1, each: bool = False) -> dict[str, object]:
    """The :data:`QUERIES` asked ``rounds`` times: p50, p99 and max in ms (``each``: and every
    query's time, in order)."""
    spent = []
    for _ in range(rounds):
        for q in QUERIES:
            start = time.perf_counter()
            r = client.get("/api/kiwi/search", params={"q": q})
            spent.append((time.perf_counter() - start) * 1000)
            r.raise_for_status()
    ranked = sorted(spent)
    out: dict[str, object] = {
        "p50_ms": round(statistics.median(spent), 1),
        "p99_ms": round(ranked[min(len(ranked) - 1, len(ranked) * 99 // 100)], 1),
        "max_ms": round(max(spent), 1),
    }
    if each:
        out["each_ms"] = [round(t, 1) for t in spent]
    return out


def rss_mb(pid: int) -> float | None:
    """The resident memory of process ``pid`` in MB, from ``/proc`` (``None`` without it)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    m = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    return None if m is None else round(int(m.group(1)) / 1024, 1)


def stop_import(root: Path) -> None:
    """Stop the first import into git of ``root`` left running by a server (Linux: found in
    ``/proc``), and the processes it started, so that the next start begins afresh."""
    found: dict[int, tuple[int, str]] = {}  # pid -> (parent pid, command line)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        found[int(entry.name)] = (parent, cmdline)
    doomed = {pid for pid, (_, cmd) in found.items() if f"kiwifs.git.adoption {root}" in cmd}
    doomed |= {pid for pid, (parent, _) in found.items() if parent in doomed}
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.5 if doomed else 0)


def serve(root: Path, src: Path | None) -> tuple[subprocess.Popen[bytes], str]:
    """``kiwifs serve`` on ``root`` in a new process (with ``src`` first on its path, when
    given) and the address it listens on, once it says so."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    cmd = [sys.executable, "-c", "from kiwifs.cli import main; main()", "serve"]
    proc = subprocess.Popen(
        [*cmd, "--root", str(root), "--port", "0"], stderr=subprocess.PIPE, env=env
    )
    assert proc.stderr is not None
    base = None
    while base is None:
        line = proc.stderr.readline().decode()
        if not line:
            raise SystemExit("the server stopped before it listened")
        m = re.search(r" on (http://[^\s/]+:\d+)", line)
        base = m.group(1) if m else None
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
    return proc, base


def wait_ready(client: httpx.Client) -> None:
    """Return once the server answers ``/readyz`` with 200."""
    while True:
        try:
            if client.get("/readyz").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)


def one_start(
    root: Path, src: Path | None, unversioned: bool, each: bool = False, wait_import: bool = True
) -> dict[str, object]:
    if unversioned:
        shutil.rmtree(root / ".git", ignore_errors=True)
        (root / ".gitattributes").unlink(missing_ok=True)  # made with the repository
        (root / MARKER).unlink(missing_ok=True)
    start = time.perf_counter()
    proc, base = serve(root, src)
    out: dict[str, object] = {}
    try:
        with httpx.Client(base_url=base, timeout=900) as client:
            wait_ready(client)
            out["ready_s"] = round(time.perf_counter() - start, 2)
            began = time.perf_counter()
            client.get("/api/kiwi/memory/report", params={"limit": 100}).raise_for_status()
            out["first_report_ms"] = round((time.perf_counter() - began) * 1000, 1)
            out["first30"] = searches(client, each=each)
            out["later30"] = searches(client, each=each)
            out["steady"] = searches(client, rounds=STEADY_ROUNDS)
            out["rss_mb"] = rss_mb(proc.pid)
            if unversioned and wait_import:
                while (root / MARKER).exists() or not (root / ".git").exists():
                    time.sleep(0.5)
                out["import_s"] = round(time.perf_counter() - start, 1)
                out["after_import"] = searches(client)
    finally:
        proc.terminate()
        proc.wait(120)
        if unversioned and not wait_import:
            stop_import(root)
    return out


def interleaved(
    base: str | None, rounds: int, run: Callable[[Path | None], dict[str, object]]
) -> dict[str, list[dict[str, object]]]:
    """``run(src)`` ``rounds`` times for the checkout (``src`` None) and, when ``base`` is
    given, for that revision's exported ``src`` right after each: the A/B of a bench."""
    with tempfile.TemporaryDirectory(prefix="kiwifs-bench-base-") as tmp:
        sides: dict[str, Path | None] = {"checkout": None}
        if base:
            sides["base"] = export_source(base, Path(tmp) / "base")
        runs: dict[str, list[dict[str, object]]] = {side: [] for side in sides}
        for _ in range(rounds):
            for side, src in sides.items():
                runs[side].append(run(src))
    return runs


def ab_arguments(doc: str) -> argparse.ArgumentParser:
    """The arguments of a bench that serves a root in rounds, an A/B with ``--base``: the root,
    the revision and the rounds (:func:`interleaved`); ``doc``'s first line describes it."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--base", help="a git revision to compare with (its src/, exported)")
    ap.add_argument("--rounds", type=int, default=1)
    return ap


def main() -> None:
    ap = ab_arguments(__doc__)
    ap.add_argument("--unversioned", action="store_true", help="delete .git before each start")
    ap.add_argument("--each", action="store_true", help="print every search's time too")
    ap.add_argument(
        "--no-import-wait",
        action="store_true",
        help="with --unversioned: stop the server without waiting for the first import",
    )
    args = ap.parse_args()
    runs = interleaved(
        args.base,
        args.rounds,
        lambda src: one_start(
            args.root.resolve(), src, args.unversioned, args.each, not args.no_import_wait
        ),
    )
    print(json.dumps({"root": str(args.root), "base": args.base, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
