"""Start-up: how soon ``kiwifs serve`` answers ``/health``, and the one-shot CLI report.

    python bench/startup.py [--episodes 100000] [--rounds 3]

On the 100k-episode corpus of ``bench/index.py`` (index built and current), interleaved rounds:

* ``serve``: from process start to the first 200 from ``GET /health``, as shipped (the MCP SDK
  loads in a thread after start-up);
* ``serve, MCP eager`` (the A/B baseline): the same with the MCP SDK imported before the server
  starts, as it was before;
* ``memory report``: ``kiwifs memory report --json`` wall time (goal ≤ 0.5 s).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from index import KIWIFS, PYTHON, corpus  # noqa: E402

EAGER = "import kiwifs.mcp.server; from kiwifs.cli import main; main()"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until_healthy(cmd: list[str], port: int) -> float:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        return time.perf_counter() - start
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("kiwifs serve exited") from None
                time.sleep(0.01)
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    root = str(corpus(args.episodes, args.seed))
    subprocess.run(
        [KIWIFS, "memory", "report", "--json", "--root", root],
        check=True,
        stdout=subprocess.DEVNULL,
    )  # the index is current from here on
    runs: dict[str, list[float]] = {"serve": [], "serve_mcp_eager": [], "memory_report": []}
    for _ in range(args.rounds):
        port = free_port()
        serve = ["serve", "--root", root, "--port", str(port)]
        runs["serve"].append(until_healthy([KIWIFS, *serve], port))
        port = free_port()
        serve = ["serve", "--root", root, "--port", str(port)]
        runs["serve_mcp_eager"].append(until_healthy([PYTHON, "-c", EAGER, *serve], port))
        start = time.perf_counter()
        subprocess.run(
            [KIWIFS, "memory", "report", "--json", "--root", root],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        runs["memory_report"].append(time.perf_counter() - start)
    medians = {k: round(statistics.median(v), 3) for k, v in runs.items()}
    out = {
        "runs": {k: [round(x, 3) for x in v] for k, v in runs.items()},
        "median_s": medians,
        "gain": round(medians["serve_mcp_eager"] / medians["serve"], 2),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
