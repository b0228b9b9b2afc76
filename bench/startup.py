"""Start-up: how soon ``kiwifs serve`` answers ``/health`` (and ``/readyz``), and the one-shot
CLI report.

    python bench/startup.py [--episodes 100000] [--rounds 5] [--baseline REV] [--bytecode]

On the 100k-episode corpus of ``bench/index.py`` (index built and current, root versioned),
interleaved rounds (A, B, C, …, then the next round in reverse order):

* ``serve``: from process start to the first 200 from ``GET /health``, as shipped: the probes
  are answered by the start-up app while FastAPI and the routes are built behind the open
  socket (``kiwifs.rest.starting``), and the MCP SDK loads in a thread after that;
* ``serve_before`` (the A/B baseline): the same with the source of ``--baseline`` (a git
  revision, exported to ``bench/.baseline/REV``, run by the same interpreter): there the full
  app is built and its lifespan started before the socket is served;
* ``serve_mcp_eager`` (the earlier A/B): as shipped, with the MCP SDK imported before start;
* for each ``serve`` variant, ``…_ready``: process start to the first 200 from ``/readyz``
  (the index watcher's first reconcile done: requests needing the index answer from then on);
* ``memory_report``: ``kiwifs memory report --json`` wall time (goal ≤ 0.5 s), and
  ``memory_report_before`` with the baseline's source; the report's A/B switches:
  ``memory_report_rows`` (``Tuning(report_in_sql=False)`` handed to the command: one Python
  string per episode, joined in Python) and ``memory_report_eager`` (``urllib.request``,
  ``multiprocessing`` and the process pool imported at start, as before they were imported
  where used) and
  ``memory_report_imports`` (:data:`LATE_IMPORTS` imported at start: PyYAML, ruamel, the
  frontmatter subset reader, search, the brief, the check, … as before the fourth round). CPU
  seconds (user + system, the walk's workers included) are reported for the reports too.

``--only report`` (or ``serve``) runs one half.

``--bytecode`` lets Python cache byte-code, as an installed package has it: where
``PYTHONDONTWRITEBYTECODE`` is set (as on the project's machine) an editable checkout recompiles
kiwifs's own modules at every start, ~0.1 s more per command.

Give it the CPUs on a shared machine (see ``bench/fast_paths.py``)::

    setsid --wait sh -c 'echo -15 > /proc/self/autogroup; exec nice -n -15 \\
        python bench/startup.py'
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from index import KIWIFS, PYTHON, corpus  # noqa: E402

MAIN = "from kiwifs.cli import main; main()"
EAGER = "import kiwifs.mcp.server; " + MAIN


# What the fourth round made the report stop importing (each is imported where it is used): the
# frontmatter parsers and editors, git's subprocess, search, /meta, vectors and the brief, the
# check with its lineage and problems, the dashboard, zstandard, and the servers' socket.
LATE_IMPORTS = [
    "yaml",
    "ruamel.yaml",
    "kiwifs.memory.fastkeys",
    "subprocess",
    "socket",
    "zstandard",
    "kiwifs.index.memory.timeline",
    "kiwifs.index.search.keyword",
    "kiwifs.index.search.meta",
    "kiwifs.index.vectors.hybrid",
    "kiwifs.index.vectors.semantic",
    "kiwifs.index.vectors.store",
    "kiwifs.index.memory.lineage",
    "kiwifs.index.memory.overview",
    "kiwifs.index.memory.tasks",
    "kiwifs.index.memory.check",
    "kiwifs.memory.brief",
    "kiwifs.memory.check",
    "kiwifs.memory.lineage",
    "kiwifs.memory.problems",
    "kiwifs.memory.overview",
]

# The report's A/B switches, each set before the command runs.
REPORT_SWITCHES = {
    "memory_report_rows": "from kiwifs.cli import cli; from kiwifs.tuning import Tuning; "
    "cli.main(prog_name='kiwifs', obj=Tuning.from_env().but(report_in_sql=False))",
    "memory_report_eager": "import urllib.request, multiprocessing, concurrent.futures.process; "
    + MAIN,
    "memory_report_imports": "import " + ", ".join(LATE_IMPORTS) + "; " + MAIN,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status(url: str) -> int | None:
    """The HTTP status of ``GET url``, or ``None`` when nothing answers yet."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def until_ready(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Seconds from process start to the first 200 of ``/health``, then of ``/readyz``."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*cmd, "serve", "--root", ROOT, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        times = []
        for probe in ("/health", "/readyz"):
            while status(base + probe) != 200:
                if proc.poll() is not None:
                    raise RuntimeError("kiwifs serve exited")
                time.sleep(0.005)
            times.append(time.perf_counter() - start)
        return times[0], times[1]
    finally:
        proc.terminate()
        proc.wait(60)


def report(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, bytes, float]:
    """Wall seconds, output and CPU seconds (the command's and its workers') of one report."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(
        [*cmd, "memory", "report", "--json", "--root", ROOT],
        check=True,
        stdout=subprocess.PIPE,
        env=env,
    ).stdout
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return seconds, out, cpu


def baseline_source(rev: str) -> Path:
    """The ``src`` folder of revision ``rev``, exported once (no checkout, no git state)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", rev], check=True, capture_output=True, text=True
    ).stdout.strip()
    target = HERE / ".baseline" / commit
    if not (target / "src" / "kiwifs").is_dir():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", commit, "src"], check=True, capture_output=True, cwd=HERE.parent
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "src"


ROOT = ""


def main() -> None:
    global ROOT
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline", default="78fbe9b", help="git revision measured as 'before'")
    ap.add_argument(
        "--bytecode",
        action="store_true",
        help="cache byte-code as an installed package does (PYTHONDONTWRITEBYTECODE unset)",
    )
    ap.add_argument("--only", choices=["serve", "report"], help="run one half")
    args = ap.parse_args()
    ROOT = str(corpus(args.episodes, args.seed))
    env = dict(os.environ)
    if args.bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    before_env = {**env, "PYTHONPATH": str(baseline_source(args.baseline))}
    serves = {
        "serve": ([KIWIFS], env),
        "serve_before": ([PYTHON, "-c", MAIN], before_env),
        "serve_mcp_eager": ([PYTHON, "-c", EAGER], env),
    }
    reports = {
        "memory_report": ([KIWIFS], env),
        "memory_report_before": ([PYTHON, "-c", MAIN], before_env),
        **{name: ([PYTHON, "-c", code], env) for name, code in REPORT_SWITCHES.items()},
    }
    if args.only == "report":
        serves = {}
    elif args.only == "serve":
        reports = {}
    load_before = os.getloadavg()
    outputs = {name: report(cmd, env)[1] for name, (cmd, env) in reports.items()}  # warm, current
    assert len(set(outputs.values())) <= 1, "the reports differ"
    for cmd, env in serves.values():
        until_ready(cmd, env)  # warm-up: page cache, byte-code
    runs: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    order = [*serves, *reports]
    for n in range(args.rounds):
        for name in order if n % 2 == 0 else reversed(order):
            if name in serves:
                health, ready = until_ready(*serves[name])
                runs.setdefault(name, []).append(health)
                runs.setdefault(name + "_ready", []).append(ready)
            else:
                seconds, out, used = report(*reports[name])
                assert out == outputs[name]
                runs.setdefault(name, []).append(seconds)
                cpu.setdefault(name, []).append(used)
    medians = {k: round(statistics.median(v), 3) for k, v in runs.items()}
    out: dict[str, object] = {
        "baseline": args.baseline,
        "bytecode_cached": "PYTHONDONTWRITEBYTECODE" not in env,
        "load_average": [load_before, os.getloadavg()],
        "runs": {k: [round(x, 3) for x in v] for k, v in runs.items()},
        "median_s": medians,
        "median_cpu_s": {k: round(statistics.median(v), 3) for k, v in cpu.items()},
    }
    if serves:
        out["gain_health"] = round(medians["serve_before"] / medians["serve"], 2)
    if reports:
        out["gain_report"] = round(medians["memory_report_before"] / medians["memory_report"], 2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
