"""Write throughput of ``kiwifs serve``: PUTs with ``X-Provenance``, each committed on return.

Starts ``kiwifs serve`` on a fresh ``kiwifs init`` root in a temporary folder, then does
``--writes`` PUTs from one client (httpx, keep-alive) and the same number from ``--clients``
concurrent clients (one thread each), printing writes/s and p50/p99 latency for each run.
Afterwards it checks that every write is in git (one commit per PUT with synchronous commits;
every path in ``git log`` with batched asynchronous commits), that ``git status`` is clean and that
``git fsck`` is clean. ``--mode both`` (the default) runs ``serve --sync-commit`` and then
``serve --async-commit`` on fresh roots.

    python bench/write_throughput.py [--writes 2000] [--clients 4] [--mode both] [--keep]

Goal (issue): at least 200 writes/s from one client, every write committed when the call
returns (sync) or journaled and committed in the background (async).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

GOAL_WRITES_PER_SECOND = 200.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kiwifs_command() -> list[str]:
    exe = shutil.which("kiwifs") or str(Path(sys.executable).with_name("kiwifs"))
    return [exe]


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout


def wait_ready(base: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"kiwifs serve exited early with status {proc.returncode}")
        try:
            if httpx.get(base + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise SystemExit("kiwifs serve did not become ready")


def put_many(base: str, paths: list[str], run_id: str, latencies: list[float]) -> int:
    """PUT each path once on one keep-alive connection; returns the number of failures."""
    failures = 0
    with httpx.Client(base_url=base, timeout=30.0) as client:
        for i, path in enumerate(paths):
            body = f"# {path}\n\nwrite {i} of run {run_id}\n".encode()
            t0 = time.perf_counter()
            resp = client.put(
                "/api/kiwi/file",
                params={"path": path},
                content=body,
                headers={"X-Provenance": f"run:{run_id}", "X-Actor": "bench"},
            )
            latencies.append(time.perf_counter() - t0)
            if resp.status_code != 200:
                failures += 1
    return failures


def report(label: str, count: int, elapsed: float, latencies: list[float]) -> float:
    rate = count / elapsed
    ordered = sorted(latencies)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    print(
        f"{label:<12} {count:>6} writes in {elapsed:6.2f} s  {rate:8.1f} writes/s  "
        f"p50 {p50:6.2f} ms  p99 {p99:6.2f} ms"
    )
    return rate


def run_single(base: str, writes: int) -> tuple[float, int]:
    latencies: list[float] = []
    paths = [f"bench/one/file-{i:05d}.md" for i in range(writes)]
    t0 = time.perf_counter()
    failures = put_many(base, paths, "bench-1", latencies)
    return report("1 client", writes, time.perf_counter() - t0, latencies), failures


def run_concurrent(base: str, writes: int, clients: int) -> tuple[float, int]:
    latencies: list[float] = []
    failures = [0] * clients
    per_client = [
        [f"bench/many/c{c}/file-{i:05d}.md" for i in range(c, writes, clients)]
        for c in range(clients)
    ]

    def worker(c: int) -> None:
        failures[c] = put_many(base, per_client[c], f"bench-{clients}-{c}", latencies)

    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rate = report(f"{clients} clients", writes, time.perf_counter() - t0, latencies)
    return rate, sum(failures)


def run_mode(mode: str, writes: int, clients: int, keep: bool) -> tuple[bool, float]:
    """A fresh root served with ``--sync-commit`` or ``--async-commit``; True if checks pass."""
    tmp = Path(tempfile.mkdtemp(prefix="kiwifs-bench-"))
    root = tmp / "root"
    env = dict(os.environ)
    gitconfig = tmp / "gitconfig"
    gitconfig.write_text("")
    env.update(GIT_CONFIG_GLOBAL=str(gitconfig), GIT_CONFIG_NOSYSTEM="1")
    os.environ.update(GIT_CONFIG_GLOBAL=str(gitconfig), GIT_CONFIG_NOSYSTEM="1")
    subprocess.run(
        [*kiwifs_command(), "init", "--root", str(root)],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    commits_before = int(git(root, "rev-list", "--count", "HEAD"))

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    flag = "--async-commit" if mode == "async" else "--sync-commit"
    proc = subprocess.Popen(
        [*kiwifs_command(), "serve", "--root", str(root), "--port", str(port), flag], env=env
    )
    print(f"== {mode} commits ({flag})")
    try:
        wait_ready(base, proc)
        rate1, fail1 = run_single(base, writes)
        rate_n, fail_n = run_concurrent(base, writes, clients)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    ok = True
    failures = fail1 + fail_n
    if failures:
        print(f"FAIL: {failures} PUTs did not return 200")
        ok = False
    commits = int(git(root, "rev-list", "--count", "HEAD")) - commits_before
    expected = 2 * writes - failures
    committed = {line for line in git(root, "log", "--format=", "--name-only").splitlines() if line}
    missing = [p for p in written_paths(writes, clients) if p not in committed]
    if mode == "sync":
        print(f"commits: {commits} (one per write: {expected})")
        ok = ok and commits == expected
    else:
        print(f"commits: {commits} for {expected} writes (batched)")
    if missing:
        print(f"FAIL: {len(missing)} written paths are not in git log, e.g. {missing[:3]}")
        ok = False
    # .kiwi/ holds runtime state (the server lock); only knowledge files must be committed
    dirty = git(root, "status", "--porcelain", "--", ".", ":(exclude).kiwi")
    if dirty.strip():
        print("FAIL: uncommitted changes left on disk:\n" + dirty)
        ok = False
    fsck = subprocess.run(
        ["git", "-C", str(root), "fsck", "--strict"], capture_output=True, text=True
    )
    if fsck.returncode != 0:
        print("FAIL: git fsck:\n" + fsck.stdout + fsck.stderr)
        ok = False
    verdict = "meets" if rate1 >= GOAL_WRITES_PER_SECOND else "BELOW"
    print(
        f"{mode}: single client {rate1:.1f} writes/s {verdict} the goal of "
        f"{GOAL_WRITES_PER_SECOND:.0f}; {clients} clients {rate_n:.1f} writes/s"
    )
    if keep:
        print(f"root kept at {root}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return ok, rate1


def written_paths(writes: int, clients: int) -> list[str]:
    one = [f"bench/one/file-{i:05d}.md" for i in range(writes)]
    many = [f"bench/many/c{i % clients}/file-{i:05d}.md" for i in range(writes)]
    return one + many


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=2000, help="PUTs per run (default 2000)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients (default 4)")
    parser.add_argument(
        "--mode", choices=("sync", "async", "both"), default="both", help="commit mode(s)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary roots")
    args = parser.parse_args()
    modes = ("sync", "async") if args.mode == "both" else (args.mode,)
    results = [run_mode(m, args.writes, args.clients, args.keep) for m in modes]
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
