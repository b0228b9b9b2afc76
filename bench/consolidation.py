"""The drain benchmark: many consolidation workers, one ``kiwifs serve``, two of them killed.

    python bench/consolidation.py [--episodes 10000] [--workers 8] [--kill 2] [--batch 50]
                                  [--lease 1m] [--modes claims,plain] [--keep]

For each mode it builds a fresh root of ``--episodes`` episodes (100 per day folder, each with
``created`` and one tag; a day's episodes share a topic), indexes it, starts ``kiwifs serve`` and
launches ``--workers`` worker processes, then SIGKILLs ``--kill`` of them mid-batch once a
quarter of the episodes are merged.

* ``claims``: the shipped worker, ``kiwifs memory worker --until-empty``: it claims a batch,
  appends one line per episode to its topic page and merges citing the batch with its worker
  name. The killed workers' leases expire (the lease is the 1 minute minimum, so the run waits
  out up to a minute for them) and the survivors take their episodes.
* ``plain``: the same worker loop, but its batches come from the plain memory report (the first
  ``--batch`` unmerged episodes, re-read every round) and it merges without claims.

Each worker writes its own pages (``concepts/<worker>/<topic>.md``), as independent
consolidation jobs (LLM calls) would: an episode that two workers take ends up in two pages.
Afterwards, with the server stopped: the memory report must list no unmerged episode, ``memory
check`` counts double merges and dangling refs, every episode is counted by the number of
``merged-from`` entries citing it (exactly once is the goal), and ``git fsck --strict`` must be
clean. It prints episodes/s for both runs side by side.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from kiwifs.frontmatter.reader import read_frontmatter
from kiwifs.knowledge import Knowledge
from kiwifs.worker.client import KiwiClient
from kiwifs.worker.loop import Worker
from kiwifs.worker.steps import TagRule

TOPICS = [f"topic-{n:02d}" for n in range(16)]
PER_DAY = 100


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kiwifs() -> str:
    return shutil.which("kiwifs") or str(Path(sys.executable).with_name("kiwifs"))


def git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)


# -- the corpus ------------------------------------------------------------------------------------


def make_root(root: Path, episodes: int) -> None:
    """Episodes under ``episodes/2026-MM-DD/``, committed in one commit, then indexed."""
    Knowledge.init(root, "blank")
    start = time.mktime((2026, 1, 1, 12, 0, 0, 0, 0, 0))
    for n in range(episodes):
        day_no = n // PER_DAY
        day = time.strftime("%Y-%m-%d", time.gmtime(start + day_no * 86400))
        folder = root / "episodes" / day
        folder.mkdir(parents=True, exist_ok=True)
        topic = TOPICS[day_no % len(TOPICS)]
        created = f"{day}T{(n % PER_DAY) // 6:02d}:{(n * 7) % 60:02d}:00Z"
        (folder / f"ep-{n:05d}.md").write_text(
            f'---\nmemory_kind: episodic\nepisode_id: ep-{n:05d}\ncreated: "{created}"\n'
            f"tags: [{topic}]\n---\n# Run {n}: {topic} observation\n\nDetails of run {n}.\n"
        )
    git(root, "add", "-A")
    done = git(root, "commit", "-q", "-m", f"{episodes} episodes")
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    with Knowledge.open(root) as kb:
        kb.reindex()


# -- the plain worker (no claims) ---------------------------------------------------------------


class ReportClient(KiwiClient):
    """A worker's client that takes its batches from the plain report and merges without
    claims: what consolidation jobs did before the queue."""

    def claim_episodes(
        self,
        worker: str,
        limit: int,
        lease: str | float,
        prefix: str | None = None,
        with_content: bool = True,
    ) -> dict[str, Any]:
        claimed = []
        if limit > 0:
            for item in self.report(prefix, limit=limit)["unmerged"]:
                found = self.read(item["path"])
                if found is not None:
                    text, etag = found
                    claimed.append(
                        {
                            "path": item["path"],
                            "episode_id": item.get("episode_id", ""),
                            "etag": etag,
                            "content": text,
                        }
                    )
        return {"worker": worker, "lease_expires": "", "claimed": claimed}

    def release_episodes(self, worker: str, paths: list[str] | None = None) -> list[str]:
        return []

    def merge(
        self, page: str, entries: list[dict[str, str]], worker: str | None = None
    ) -> dict[str, Any]:
        return super().merge(page, entries, None)


def plain_worker(url: str, name: str, batch: int) -> None:
    """The body of a ``plain`` worker process."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with ReportClient(url, actor=name) as client:
        Worker(
            client,
            name,
            TagRule(f"concepts/{name}"),
            batch=batch,
            lease="1m",
            until_empty=True,
            poll=0.2,
            stop=stop,
        ).run()


# -- one run -------------------------------------------------------------------------------------


@dataclass
class Run:
    mode: str
    episodes: int
    workers: int
    killed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    lease_wait: float = 0.0
    unmerged: int = -1
    double_merges: int = -1
    dangling: int = -1
    cited_once: int = 0
    cited_more: int = 0
    extra_citations: int = 0
    fsck: str = ""
    pages: int = 0

    @property
    def rate(self) -> float:
        return self.episodes / self.seconds if self.seconds else 0.0

    @property
    def working_rate(self) -> float:
        """Episodes/s over the time the queue was not waiting for dead workers' leases."""
        busy = self.seconds - self.lease_wait
        return self.episodes / busy if busy > 0 else 0.0


def worker_command(mode: str, url: str, name: str, batch: int, lease: str) -> list[str]:
    if mode == "claims":
        return [
            kiwifs(),
            "memory",
            "worker",
            "--url",
            url,
            "--worker",
            name,
            "--batch",
            str(batch),
            "--lease",
            lease,
            "--folder",
            f"concepts/{name}",
            "--until-empty",
            "--poll",
            "0.2",
        ]
    return [sys.executable, __file__, "--plain-worker", url, name, str(batch)]


def holders(http: httpx.Client) -> dict[str, str]:
    return {c["path"]: c["holder"] for c in http.get("/api/kiwi/claims").json()["claims"]}


def unmerged(http: httpx.Client) -> int:
    return int(http.get("/api/kiwi/memory/report", params={"limit": 0}).json()["unmerged_count"])


def drain(args: argparse.Namespace, mode: str, root: Path, logs: Path) -> Run:
    run = Run(mode, args.episodes, args.workers)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(logs / f"serve-{mode}.log", "wb") as out:
        server = subprocess.Popen(
            [kiwifs(), "serve", "--root", str(root), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    http = httpx.Client(base_url=url, timeout=120)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for _ in range(600):
            try:
                if http.get("/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        names = [f"w{n}" for n in range(args.workers)]
        started = time.perf_counter()
        for name in names:
            with open(logs / f"{mode}-{name}.log", "wb") as out:
                procs[name] = subprocess.Popen(
                    worker_command(mode, url, name, args.batch, args.lease),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
        run.killed = kill_mid_batch(args, mode, http, procs)
        run.lease_wait = watch(http, procs, run.killed)
        run.seconds = time.perf_counter() - started
        failed = [n for n in names if n not in run.killed and procs[n].returncode != 0]
        if failed:
            raise SystemExit(f"workers failed: {failed}; see {logs}")
    finally:
        http.close()
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    verify(run, root)
    return run


def watch(
    http: httpx.Client, procs: dict[str, subprocess.Popen[bytes]], killed: list[str]
) -> float:
    """Wait for the surviving workers to finish; returns how long the queue stood still with
    only the killed workers' (leased) episodes left."""
    stall_start = stall_end = None
    while any(p.poll() is None for n, p in procs.items() if n not in killed):
        left = unmerged(http)
        held = holders(http)
        dead_only = bool(held) and all(h in killed for h in held.values())
        now = time.perf_counter()
        if stall_start is None and left and dead_only and left <= len(held):
            stall_start = now
        elif stall_start is not None and stall_end is None and (not left or not dead_only):
            stall_end = now
        time.sleep(0.2)
    if stall_start is None:
        return 0.0
    return (stall_end or time.perf_counter()) - stall_start


def kill_mid_batch(
    args: argparse.Namespace,
    mode: str,
    http: httpx.Client,
    procs: dict[str, subprocess.Popen[bytes]],
) -> list[str]:
    """Once a quarter of the episodes are merged, SIGKILL ``--kill`` workers that hold a batch
    (claims mode) or are busy (plain mode)."""
    while unmerged(http) > args.episodes * 3 // 4:
        time.sleep(0.1)
    if mode == "claims":
        busy: list[str] = []
        while len(busy) < args.kill:
            busy = sorted(set(holders(http).values()))
            time.sleep(0.05)
        victims = busy[: args.kill]
    else:
        victims = sorted(procs)[: args.kill]
    for name in victims:
        procs[name].send_signal(signal.SIGKILL)
        procs[name].wait()
    return victims


def verify(run: Run, root: Path) -> None:
    with Knowledge.open(root) as kb:
        run.unmerged = kb.memory_report(limit=0).unmerged_count
        check = kb.memory_check()
        run.double_merges = len(check.double_merges)
        run.dangling = len(check.dangling)
        citations: Counter[str] = Counter()
        pages = 0
        for page in (root / "concepts").rglob("*.md"):
            pages += 1
            fm = read_frontmatter(page.read_bytes()).data
            for entry in fm.get("merged-from") or []:
                if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                    citations[entry["path"]] += 1
        run.pages = pages
        episodes = [str(p.relative_to(root)) for p in (root / "episodes").rglob("*.md")]
        run.cited_once = sum(1 for e in episodes if citations[e] == 1)
        run.cited_more = sum(1 for e in episodes if citations[e] > 1)
        run.extra_citations = sum(max(0, citations[e] - 1) for e in episodes)
    fsck = git(root, "fsck", "--strict")
    run.fsck = "clean" if fsck.returncode == 0 and not fsck.stderr.strip() else fsck.stderr[:200]


# -- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--plain-worker":
        plain_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--kill", type=int, default=2)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--lease", default="1m")
    parser.add_argument("--modes", default="claims,plain")
    parser.add_argument("--keep", action="store_true", help="Keep the roots and the logs.")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="kiwifs-drain-"))
    runs = []
    try:
        for mode in args.modes.split(","):
            root = base / mode / "kb"
            root.parent.mkdir(parents=True)
            t0 = time.perf_counter()
            make_root(root, args.episodes)
            print(
                f"{mode}: root of {args.episodes} episodes made and indexed in"
                f" {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
            run = drain(args, mode, root, root.parent)
            runs.append(run)
            print(
                json.dumps(run.__dict__ | {"episodes_per_second": round(run.rate, 1)}), flush=True
            )
    finally:
        if args.keep:
            print(f"kept: {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    print_table(runs)
    bad = [
        r
        for r in runs
        if r.mode == "claims"
        and (r.unmerged or r.double_merges or r.dangling or r.cited_more or r.fsck != "clean")
    ]
    return 1 if bad else 0


def print_table(runs: list[Run]) -> None:
    print()
    print(
        "| mode | workers (killed) | wall time | episodes/s | lease wait | unmerged after |"
        " double merges | dangling | cited exactly once | extra citations | git fsck |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in runs:
        print(
            f"| {r.mode} | {r.workers} ({', '.join(r.killed)}) | {r.seconds:.1f} s |"
            f" {r.rate:.1f} | {r.lease_wait:.1f} s | {r.unmerged} | {r.double_merges} |"
            f" {r.dangling} | {r.cited_once:,} of {r.episodes:,} | {r.extra_citations:,} |"
            f" {r.fsck} |"
        )


if __name__ == "__main__":
    raise SystemExit(main())
