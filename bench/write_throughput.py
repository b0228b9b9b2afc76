"""Write throughput of ``kiwifs serve``: PUTs with ``X-Provenance``, each committed on return.

Starts ``kiwifs serve`` on a fresh ``kiwifs init`` root in a temporary folder, then does
``--writes`` PUTs from one client (keep-alive) and the same number from ``--clients``
concurrent clients, printing writes/s and p50/p99 latency for each run.
Afterwards it checks that every write is in git (every path in ``git log``; one commit per PUT
when commits are not shared), that ``git status`` is clean and that ``git fsck`` is clean.

The modes (``--modes``, run in this order, then reversed, for ``--rounds`` rounds). Each is a
serve flag and the :class:`~kiwifs.tuning.Tuning` the server is handed (the defaults with some
fields changed, :data:`MODES`): the server runs as ``cli.main([...], obj=tuning)``
(:func:`kiwifs_command`), so a plain path is compared with the fast one in the same run.

- ``per-write``: ``serve --sync-commit`` with ``group_commit=False, strict_fsync=True``:
  each write committed alone under the write lock, journal, file and folder fsynced under it
  (the code before group commit: the A side of the A/B);
- ``group``: ``serve --sync-commit``, the default: each write waits for a commit that holds it,
  concurrent writers share commits (group commit), the file fsynced outside the lock;
- ``async-strict``: ``serve --async-commit`` with ``strict_fsync=True`` (async before);
- ``async``: ``serve --async-commit``: a write returns once on disk and journaled;
- ``group-strict`` and ``per-write-late`` separate the two changes: group commit with the
  fsyncs under the lock, and per-write commits with the file fsynced outside it;
  ``group-nowait``: group commit without the wait for writers on their way
  (``group_wait=0``);
- ``group-before``: the group commit's waits before 05:20 UTC on 2026-12-01 (2 ms for writers
  waiting for the lock, none for the writers the last commit released:
  ``group_wait=0.002, group_return=0``); ``group-noreturn``, ``group-wait2``,
  ``group-wait10``: one of the two waits changed (the default: 5 ms and 4 ms);
- ``group-inproc`` / ``async-inproc``: commits made in the server's process
  (``commit_process=False``) instead of its commit process;
- ``group-watchall`` / ``async-watchall``: the file watcher on the whole root, recursively
  (``watch_folders=False``, as before 2026-12-01), instead of on each visible folder;
- ``group-indexnow`` / ``async-indexnow``: each write's index rows updated inside the write,
  under the write lock (``index_writeback=False``, as before), instead of by the writeback
  thread in batches; ``group-wb10`` / ``async-wb10``: the writeback's round 10 ms after the
  first path (``writeback_window=0.01``) instead of 50;
- ``group-fixedrec`` / ``async-fixedrec``: the watcher's periodic reconcile every 5 s
  (``reconcile_max=5``, as before 2026-12-01 06:30 UTC) instead of backing off to 60 s
  while it finds nothing the events missed;
- ``group-fulldiff`` / ``async-fulldiff``: the timeline's replay reads each commit's changes by
  one libgit2 diff of the whole trees (``timeline_by_folder=False``, as before 2026-12-01
  07:10 UTC) instead of only the folders whose trees differ;
- ``group-readback`` / ``async-readback``: the timeline's replay reads the changes of the
  server's own commits back from git (``timeline_known=False``, as before 2026-12-02)
  instead of taking those the commit noted as it was made;
- ``group-newroot`` / ``async-newroot``: a folder that comes gets a reconcile of the whole root
  (``walk_new_folders=False``, as before 2026-12-02) instead of a walk of that folder alone;
- ``group-builder`` / ``async-builder``: each commit's trees built by libgit2's tree builder
  (``kept_trees=False``, as before 2026-12-02 10:45 UTC) instead of written from
  the entries kept from the last commit (:mod:`kiwifs.git.trees`);
- ``group-fullrows`` / ``async-fullrows``: a reconcile stores the whole row again for a file
  whose bytes its row holds already (``stat_only=False``, as before 2026-12-02 17:30 UTC)
  instead of only its new stat;
- ``group-textsnow``: each file's words go into the text index as its row is stored
  (``texts_last=False``, as before 2026-12-02 19:30 UTC), so FTS5 writes out a segment for
  each file, instead of the round's words last, as one segment; ``group-ftsdefault``: FTS5's
  default merge settings (``fts_merge=False``, as before then) instead of 64 segments a
  level; ``group-ftsbefore`` / ``async-ftsbefore``: both.

``--corpus 100000`` serves a private copy of the 100k-episode corpus (``bench/index.py``'s,
files hard-linked) instead of a fresh root: what a write costs on a big root. ``--copy-of ROOT``
serves a private copy of any versioned root the same way (a 1M root, once ``kiwifs serve`` has
imported it into git). Hard links change each file's ctime, ROOT's too: the next server on ROOT
reads every file once again to confirm its row (minutes at 1M). ``--into FOLDER``
writes every file straight into FOLDER (``episodes/2024/05``: a month of 4,300 episodes, where
an agent's next episode goes) instead of into new folders of their own.

Before timing, each server finishes starting (``/readyz``, 20 writes, its CPU quiet); each run
prints the server's CPU per write (``serve`` and its commit process, from ``/proc``), the
clients' own, and a probe of the disk (the median fsync of a new small file). The clients
(``--client``): ``raw`` (default), one process each on one keep-alive ``http.client``
connection; ``httpx``, one thread each in this process, with httpx (as before).

    python bench/write_throughput.py [--writes 2000] [--clients 4] [--rounds 3]
                                     [--modes per-write,group,async-strict,async] [--keep]
                                     [--core] [--client raw|httpx]

``--core`` leaves HTTP out: a child process opens the root with ``Knowledge.open`` and writes
from one thread, then from ``--clients`` threads (what the core can do; the same checks after).

Goals (issue): group commit ≥ 150 writes/s from one client and ≥ 400 from four; async ≥ 300
from one client; every acknowledged write in git.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing import Queue
from pathlib import Path
from urllib.parse import urlencode

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from index import private_copy, versioned_corpus  # noqa: E402

CORPUS = 0  # --corpus: the episodes of the corpus copied for each run (0: a fresh root)
COPY_OF: Path | None = None  # --copy-of: a versioned root copied for each run instead
Changes = dict[str, object]  # Tuning's fields changed from their defaults
MODES: dict[str, tuple[str, Changes]] = {  # mode: (serve flag, the Tuning's changed fields)
    "per-write": ("--sync-commit", {"group_commit": False, "strict_fsync": True}),
    "group": ("--sync-commit", {}),
    "async-strict": ("--async-commit", {"strict_fsync": True}),
    "async": ("--async-commit", {}),
    "group-strict": ("--sync-commit", {"strict_fsync": True}),
    "per-write-late": ("--sync-commit", {"group_commit": False}),
    "group-nowait": ("--sync-commit", {"group_wait": 0.0}),
    "group-inproc": ("--sync-commit", {"commit_process": False}),
    "async-inproc": ("--async-commit", {"commit_process": False}),
}
# more modes: a mode of MODES with more of its Tuning changed
VARIANTS: dict[str, tuple[str, Changes]] = {
    "group-watchall": ("group", {"watch_folders": False}),
    "async-watchall": ("async", {"watch_folders": False}),
    "group-indexnow": ("group", {"index_writeback": False}),
    "async-indexnow": ("async", {"index_writeback": False}),
    "group-wb10": ("group", {"writeback_window": 0.01}),
    "async-wb10": ("async", {"writeback_window": 0.01}),
    "group-before": ("group", {"group_wait": 0.002, "group_return": 0.0}),
    "group-noreturn": ("group", {"group_return": 0.0}),
    "group-wait2": ("group", {"group_wait": 0.002}),
    "group-wait10": ("group", {"group_wait": 0.01}),
    "group-fixedrec": ("group", {"reconcile_max": 5.0}),
    "async-fixedrec": ("async", {"reconcile_max": 5.0}),
    "group-fulldiff": ("group", {"timeline_by_folder": False}),
    "async-fulldiff": ("async", {"timeline_by_folder": False}),
    "group-readback": ("group", {"timeline_known": False}),
    "async-readback": ("async", {"timeline_known": False}),
    "group-newroot": ("group", {"walk_new_folders": False}),
    "async-newroot": ("async", {"walk_new_folders": False}),
    "group-builder": ("group", {"kept_trees": False}),
    "async-builder": ("async", {"kept_trees": False}),
    "group-fullrows": ("group", {"stat_only": False}),
    "async-fullrows": ("async", {"stat_only": False}),
    "group-textsnow": ("group", {"texts_last": False}),
    "group-ftsdefault": ("group", {"fts_merge": False}),
    "group-ftsbefore": ("group", {"texts_last": False, "fts_merge": False}),
    "async-ftsbefore": ("async", {"texts_last": False, "fts_merge": False}),
}
MODES.update(
    {name: (MODES[base][0], {**MODES[base][1], **more}) for name, (base, more) in VARIANTS.items()}
)
DEFAULT_MODES = "per-write,group,async-strict,async"
GOALS = {"group": (150.0, 400.0), "async": (300.0, 0.0)}  # (1 client, N clients) writes/s
GOALS.update({"group-inproc": GOALS["group"], "async-inproc": GOALS["async"]})
WARM_UP = 20  # writes before the timed ones
QUIET = 3.0  # seconds of a server's CPU under 10 % before timing (its replays wait a second first)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ``kiwifs`` with a Tuning handed to it: the defaults and the user's knobs from the
# environment, with the fields of argv[1] (JSON) changed
TUNED_KIWIFS = (
    "import json, sys; from kiwifs.cli import cli; from kiwifs.tuning import Tuning;"
    " cli.main(sys.argv[2:], prog_name='kiwifs',"
    " obj=Tuning.from_env().but(**json.loads(sys.argv[1])))"
)


def kiwifs_command(tuning: Changes | None = None) -> list[str]:
    """The ``kiwifs`` command; with ``tuning`` (fields of :class:`~kiwifs.tuning.Tuning`), one
    that runs with them changed (``serve`` takes the context's Tuning)."""
    if tuning:
        return [sys.executable, "-c", TUNED_KIWIFS, json.dumps(tuning)]
    exe = shutil.which("kiwifs") or str(Path(sys.executable).with_name("kiwifs"))
    return [exe]


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout


def fsync_probe(folder: Path, count: int = 20) -> float:
    """The disk's state now: median ms of a new small file's fsync (the floor of a durable
    write's latency; other jobs' writes on the same disk move it)."""
    times = []
    for i in range(count):
        path = folder / f".probe-{i}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"probe\n")
            t0 = time.perf_counter()
            os.fsync(fd)
            times.append(time.perf_counter() - t0)
        finally:
            os.close(fd)
            path.unlink()
    return statistics.median(times) * 1000


def warm_up(base: str, server: int, timeout: float = 60.0) -> None:
    """Let the server finish starting before anything is timed: its index built (``/readyz``),
    :data:`WARM_UP` writes made (the commit process started, the first commit's objects
    read), then quiet until its CPU use stays under 10 % for :data:`QUIET` seconds (the background
    reconcile and replays that the first writes woke done: on a root of a million files, the
    history's first replay reads every file's row, a minute or more), or ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(base + "/readyz", timeout=5.0).status_code == 200:
            break
        time.sleep(0.1)
    with httpx.Client(base_url=base, timeout=30.0) as client:
        for i in range(WARM_UP):
            client.put("/api/kiwi/file", params={"path": f"bench/warm/w{i}.md"}, content=b"w\n")
    while time.monotonic() < deadline:
        before = process_cpu(server)
        time.sleep(QUIET)
        if process_cpu(server) - before < 0.1 * QUIET:
            return


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
    """PUT each path once on one keep-alive httpx connection; returns the number of failures."""
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


def put_raw(
    port: int, paths: list[str], run_id: str, out: Queue[tuple[list[float], int, float]]
) -> None:
    """The ``raw`` client: the same PUTs on one keep-alive ``http.client`` connection, in a
    process of its own; puts (latencies, failures, CPU seconds) on ``out``."""
    cpu0 = sum(os.times()[:2])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30.0)
    latencies: list[float] = []
    failures = 0
    headers = {"X-Provenance": f"run:{run_id}", "X-Actor": "bench"}
    for i, path in enumerate(paths):
        body = f"# {path}\n\nwrite {i} of run {run_id}\n".encode()
        t0 = time.perf_counter()
        try:
            conn.request("PUT", "/api/kiwi/file?" + urlencode({"path": path}), body, headers)
            resp = conn.getresponse()
            resp.read()
            status = resp.status
        except (OSError, http.client.HTTPException):  # a timeout, a dropped connection:
            conn.close()  # a failed write (the run then fails its checks), not a hung bench
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30.0)
            status = 0
        latencies.append(time.perf_counter() - t0)
        failures += status != 200
    conn.close()
    out.put((latencies, failures, sum(os.times()[:2]) - cpu0))


Figures = tuple[float, float, float, float]  # writes/s, p50 ms, p99 ms, server CPU ms/write


def report(
    label: str, count: int, elapsed: float, latencies: list[float], cpu: float = 0.0
) -> Figures:
    """Print and return a run's figures; ``cpu``: the server's CPU seconds in the run."""
    rate = count / elapsed
    ordered = sorted(latencies)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    per_write = cpu / count * 1000
    print(
        f"{label:<12} {count:>6} writes in {elapsed:6.2f} s  {rate:8.1f} writes/s  "
        f"p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  server CPU {per_write:.2f} ms/write"
    )
    return rate, p50, p99, per_write


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by ``pid`` and its live children (the commit
    process of ``serve``, started by any of its threads), from ``/proc``; 0 where there is no
    ``/proc``."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    children: list[int] = []
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                children.extend(int(c) for c in fh.read().split())
    except (OSError, ValueError, IndexError):
        return total
    return total + sum(process_cpu(child) for child in children)


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of ``pid`` (``/proc/PID/task``); {} where there is none."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            out[int(task)] = (int(fields[11]) + int(fields[12])) / tick
    except (OSError, ValueError, IndexError):
        pass
    return out


def thread_split(pid: int, before: dict[int, float], writes: int) -> str:
    """The server's own threads' CPU per write in a run: the event loop (the main thread),
    the busiest others, and their sum (what one interpreter lock serialises)."""
    after = thread_cpu(pid)
    used = {tid: cpu - before.get(tid, 0.0) for tid, cpu in after.items()}
    loop = used.pop(pid, 0.0)
    others = sorted(used.values(), reverse=True)
    top = " ".join(f"{cpu / writes * 1000:.2f}" for cpu in others[:6])
    total = (loop + sum(others)) / writes * 1000
    return (
        f"server threads {total:.2f} ms/write: event loop {loop / writes * 1000:.2f},"
        f" busiest others {top}"
    )


def run_clients(
    base: str, per_client: list[list[str]], run_id: str, label: str, client: str, server: int
) -> tuple[Figures, int]:
    """The PUTs of ``per_client`` from one client each, all at once; ``client`` is ``raw``
    (a process per client, ``http.client``) or ``httpx`` (a thread per client, httpx)."""
    latencies: list[float] = []
    failures = 0
    cpu0 = process_cpu(server)
    threads0 = thread_cpu(server)
    t0 = time.perf_counter()
    if client == "raw":
        port = int(base.rsplit(":", 1)[1])
        out: Queue[tuple[list[float], int, float]] = multiprocessing.Queue()
        procs = [
            multiprocessing.Process(target=put_raw, args=(port, paths, f"{run_id}-{c}", out))
            for c, paths in enumerate(per_client)
        ]
        for p in procs:
            p.start()
        client_cpu = 0.0
        for _ in procs:
            lat, failed, cpu = out.get()
            latencies.extend(lat)
            failures += failed
            client_cpu += cpu
        for p in procs:
            p.join()
    else:
        counts = [0] * len(per_client)

        def worker(c: int) -> None:
            counts[c] = put_many(base, per_client[c], f"{run_id}-{c}", latencies)

        threads = [threading.Thread(target=worker, args=(c,)) for c in range(len(per_client))]
        before = sum(os.times()[:2])
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        client_cpu = sum(os.times()[:2]) - before
        failures = sum(counts)
    elapsed = time.perf_counter() - t0
    writes = sum(len(p) for p in per_client)
    figures = report(label, writes, elapsed, latencies, process_cpu(server) - cpu0)
    print(f"{'':<12} clients' own CPU {client_cpu / writes * 1000:.2f} ms/write ({client})")
    print(f"{'':<12} {thread_split(server, threads0, writes)}")
    return figures, failures


def run_single(base: str, writes: int, client: str, server: int) -> tuple[Figures, int]:
    paths = [one_path(i) for i in range(writes)]
    return run_clients(base, [paths], "bench-1", "1 client", client, server)


def run_concurrent(
    base: str, writes: int, clients: int, client: str, server: int
) -> tuple[Figures, int]:
    per_client = [[many_path(c, i) for i in range(c, writes, clients)] for c in range(clients)]
    return run_clients(base, per_client, f"bench-{clients}", f"{clients} clients", client, server)


def core_writes(root: str, asynchronous: bool, writes: int, clients: int, tuning: Changes) -> None:
    """The ``--core`` child: the same writes through ``Knowledge.write`` in threads."""
    from kiwifs.knowledge import Knowledge
    from kiwifs.server.lifecycle import Serving
    from kiwifs.tuning import Tuning

    kb = Knowledge.open(root, tuning=Tuning.from_env().but(**tuning))
    if asynchronous:
        Serving(kb).enable_async_commit()

    def run(per_client: list[list[str]], run_id: str, label: str) -> Figures:
        latencies: list[float] = []

        def worker(c: int) -> None:
            for i, path in enumerate(per_client[c]):
                t0 = time.perf_counter()
                body = f"# {path}\n\nwrite {i} of run {run_id}-{c}\n"
                kb.write(path, body, actor="bench", provenance=f"run:{run_id}-{c}")
                latencies.append(time.perf_counter() - t0)

        threads = [threading.Thread(target=worker, args=(c,)) for c in range(len(per_client))]
        cpu0 = sum(os.times()[:2])
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cpu = sum(os.times()[:2]) - cpu0
        return report(label, writes, time.perf_counter() - t0, latencies, cpu)

    one = run([[one_path(i) for i in range(writes)]], "bench-1", "1 thread")
    many = run(
        [[many_path(c, i) for i in range(c, writes, clients)] for c in range(clients)],
        f"bench-{clients}",
        f"{clients} threads",
    )
    kb.close()
    print("FIGURES " + json.dumps([one, many]))


def run_core(cmd: list[str], env: dict[str, str]) -> tuple[Figures, Figures]:
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    figures = json.loads(out.rsplit("FIGURES ", 1)[1])
    print(out.rsplit("FIGURES ", 1)[0], end="")
    one, many = (tuple(f) for f in figures)
    return one, many


def run_mode(
    mode: str, writes: int, clients: int, keep: bool, core: bool = False, client: str = "raw"
) -> tuple[bool, Figures, Figures]:
    """A fresh root served in ``mode`` (see :data:`MODES`); True if the checks pass."""
    tmp = Path(tempfile.mkdtemp(prefix="kiwifs-bench-"))
    root = tmp / "root"
    env = dict(os.environ)
    gitconfig = tmp / "gitconfig"
    gitconfig.write_text("")
    env.update(GIT_CONFIG_GLOBAL=str(gitconfig), GIT_CONFIG_NOSYSTEM="1")
    flag, tuning = MODES[mode]
    shown = ", ".join(f"{k}={v}" for k, v in tuning.items()) or "the defaults"
    os.environ.update(GIT_CONFIG_GLOBAL=str(gitconfig), GIT_CONFIG_NOSYSTEM="1")
    if COPY_OF is not None:
        private_copy(COPY_OF, root)
    elif CORPUS:
        private_copy(versioned_corpus(CORPUS, 1), root)
    else:
        subprocess.run(
            [*kiwifs_command(), "init", "--root", str(root)],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
        )
    commits_before = int(git(root, "rev-list", "--count", "HEAD"))

    if core:
        print(f"== {mode} (core): {shown}")
        child = [sys.executable, __file__, "--core-child", str(root), flag]
        one, many = run_core([*child, str(writes), str(clients), json.dumps(tuning)], env)
        return check(mode, root, tmp, commits_before, writes, clients, 0, keep, one, many)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*kiwifs_command(tuning), "serve", "--root", str(root), "--port", str(port), flag],
        env=env,
    )
    print(f"== {mode}: serve {flag}, tuning: {shown}")
    try:
        wait_ready(base, proc)
        warm_up(base, proc.pid, 900.0 if COPY_OF or CORPUS else 60.0)  # a big root starts longer
        print(f"disk: a small file's fsync takes {fsync_probe(tmp):.2f} ms (median of 20)")
        commits_before = int(git(root, "rev-list", "--count", "HEAD"))
        one, fail1 = run_single(base, writes, client, proc.pid)
        many, fail_n = run_concurrent(base, writes, clients, client, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    failures = fail1 + fail_n
    return check(mode, root, tmp, commits_before, writes, clients, failures, keep, one, many)


def check(
    mode: str,
    root: Path,
    tmp: Path,
    commits_before: int,
    writes: int,
    clients: int,
    failures: int,
    keep: bool,
    one: Figures,
    many: Figures,
) -> tuple[bool, Figures, Figures]:
    """Every write in git, ``git status`` and ``git fsck`` clean; the root removed."""
    ok = True
    per_write = MODES[mode][1].get("group_commit") is False
    if failures:
        print(f"FAIL: {failures} PUTs did not return 200")
        ok = False
    commits = int(git(root, "rev-list", "--count", "HEAD")) - commits_before
    expected = 2 * writes - failures
    committed = {line for line in git(root, "log", "--format=", "--name-only").splitlines() if line}
    missing = [p for p in written_paths(writes, clients) if p not in committed]
    if per_write:
        print(f"commits: {commits} (one per write: {expected})")
        ok = ok and commits == expected
    else:
        print(f"commits: {commits} for {expected} writes (shared)")
        for label, folder in (("1 client", ONE), (f"{clients} clients", MANY)):
            sizes = commit_sizes(root, commits, folder)
            SHARING.setdefault(mode, {}).setdefault(folder, []).append(len(sizes))
            print(f"writes per commit, {label}: {histogram(sizes)}")
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
    if keep:
        print(f"root kept at {root}")
    else:
        SPENT.append(tmp)
    return ok, one, many


# Roots of finished runs, deleted when the benchmark ends rather than between runs: deleting a
# root frees its ~10,000 inodes, and ext4 without a journal (this machine's disk) skips every
# inode freed in the last minutes when it allocates one, so each file the next run creates paid
# a scan past them (up to ~0.5 ms a file, a third of the CPU of a run; see docs/benchmarks.md).
SPENT: list[Path] = []


def delete_spent() -> None:
    for tmp in SPENT:
        shutil.rmtree(tmp, ignore_errors=True)
    SPENT.clear()


SHARING: dict[str, dict[str, list[int]]] = {}  # mode: folder: commits of each run


def commit_sizes(root: Path, commits: int, folder: str) -> list[int]:
    """The writes (files under ``folder``) of each of the last ``commits`` commits that hold
    any: how many writes shared a commit."""
    log = git(root, "log", f"-{commits}", "--format=tformat:@", "--name-only")
    sizes: list[int] = []
    for entry in log.split("@\n"):
        count = sum(1 for line in entry.splitlines() if line.startswith(folder))
        if count:
            sizes.append(count)
    return sizes


def histogram(sizes: list[int]) -> str:
    """``writes: commits`` for each commit size, and the mean (the group commit's sharing)."""
    counts: dict[int, int] = {}
    for size in sizes:
        counts[size] = counts.get(size, 0) + 1
    bars = ", ".join(f"{size}: {counts[size]}" for size in sorted(counts))
    mean = sum(sizes) / len(sizes) if sizes else 0.0
    return f"{bars} (mean {mean:.2f} writes per commit, {len(sizes)} commits)"


# Where the writes go: new files in folders of their own (bench/one/, bench/many/c<N>/), or with
# --into FOLDER all beside the files of FOLDER (a month of the 100k corpus's episodes: 4,300
# files), names telling the runs and clients apart. ONE and MANY start the paths of each run.
INTO = ""
ONE, MANY = "bench/one/", "bench/many/"


def one_path(i: int) -> str:
    return f"{ONE}file-{i:05d}.md"


def many_path(c: int, i: int) -> str:
    return f"{MANY}c{c}-file-{i:05d}.md" if INTO else f"{MANY}c{c}/file-{i:05d}.md"


def written_paths(writes: int, clients: int) -> list[str]:
    one = [one_path(i) for i in range(writes)]
    many = [many_path(i % clients, i) for i in range(writes)]
    return one + many


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=2000, help="PUTs per run (default 2000)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients (default 4)")
    parser.add_argument(
        "--modes", default=DEFAULT_MODES, help=f"comma-separated, of {', '.join(MODES)}"
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds (order reversed each)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary roots")
    parser.add_argument("--core", action="store_true", help="through the core, no HTTP")
    parser.add_argument(
        "--corpus",
        type=int,
        default=0,
        metavar="EPISODES",
        help="serve a private copy of bench/index.py's corpus of EPISODES episodes (100000:"
        " the 100k root) instead of a fresh root",
    )
    parser.add_argument(
        "--copy-of",
        type=Path,
        metavar="ROOT",
        help="serve a private copy of ROOT, a versioned root (hard links: ROOT is never"
        " written to), instead of a fresh root: the 1M root of bench/first_serve.py once a"
        " server has imported it into git",
    )
    parser.add_argument(
        "--into",
        metavar="FOLDER",
        help="write every file straight into FOLDER, beside its files (with --corpus 100000:"
        " episodes/2024/05, a month of 4,300 episodes) instead of into new folders",
    )
    parser.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="raw: a process per client, http.client (default); httpx: a thread per client",
    )
    if len(sys.argv) == 7 and sys.argv[1] == "--core-child":
        root, flag, writes, clients, tuning = sys.argv[2:]
        core_writes(root, flag == "--async-commit", int(writes), int(clients), json.loads(tuning))
        return 0
    args = parser.parse_args()
    global CORPUS, COPY_OF, INTO, ONE, MANY
    CORPUS = args.corpus
    if args.copy_of is not None:
        if args.corpus:
            parser.error("--copy-of and --corpus each name the root to copy: give one")
        if not (args.copy_of / ".git").is_dir():
            parser.error(f"{args.copy_of} is not versioned (serve it once to import it)")
        COPY_OF = args.copy_of.resolve()
    if args.into:
        if args.core:
            parser.error("--into goes with kiwifs serve, not --core")
        INTO = args.into.strip("/")
        ONE, MANY = f"{INTO}/bench-one-", f"{INTO}/bench-many-"
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if unknown := [m for m in modes if m not in MODES]:
        parser.error(f"unknown mode(s): {', '.join(unknown)}")
    runs: dict[str, list[tuple[Figures, Figures]]] = {m: [] for m in modes}
    ok = True
    try:
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                passed, one, many = run_mode(
                    mode, args.writes, args.clients, args.keep, args.core, args.client
                )
                ok = ok and passed
                runs[mode].append((one, many))
    finally:
        delete_spent()
    print(f"\n== medians of {args.rounds} round(s), load average {os.getloadavg()[0]:.1f}")
    for mode, figures in runs.items():
        med1 = [statistics.median(f[0][i] for f in figures) for i in range(4)]
        med_n = [statistics.median(f[1][i] for f in figures) for i in range(4)]
        goal1, goal_n = GOALS.get(mode, (0.0, 0.0))
        verdict = "" if not goal1 else (" meets" if med1[0] >= goal1 else " BELOW") + " the goals"
        if goal1 and goal_n and (med1[0] < goal1 or med_n[0] < goal_n):
            verdict = " BELOW the goals"
        print(
            f"{mode:<10} 1 client {med1[0]:6.1f} writes/s (p50 {med1[1]:.2f} ms, p99 {med1[2]:.2f}"
            f" ms); {args.clients} clients {med_n[0]:6.1f} writes/s (p50 {med_n[1]:.2f} ms, p99"
            f" {med_n[2]:.2f} ms){verdict}; server CPU {med1[3]:.2f} / {med_n[3]:.2f} ms/write"
        )
        if shared := SHARING.get(mode, {}).get(MANY):
            per_commit = args.writes / statistics.median(shared)
            print(f"{'':<10} {args.clients} clients: {per_commit:.2f} writes per commit (median)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
