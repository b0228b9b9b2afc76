"""Replication: how far a replica trails its primary, and what following costs the primary.

    python bench/replication.py [--rates 10,100,max] [--seconds 10] [--clients 4] [--seed 200]
                                [--rounds 3] [--cost-seconds 5] [--ryw 100] [--no-acks]
                                [--poll-rate 10] [--no-trace] [--source REV]

Real processes on loopback, roots in a temporary folder (deleted at the end): a primary
``kiwifs serve --root P --port 0`` on a ``kiwifs init`` root given ``--seed`` files (PUTs)
before a replica ``kiwifs serve --root R --port 0 --replica-of http://PRIMARY`` starts on an
empty folder R (it clones first); each server's URL is read from its start-up line. Then:

* **clone**: the replica's start → its first ``/readyz`` 200 with the primary's HEAD applied;
* **lag**, for each rate of ``--rates`` (writes/s offered, or ``max``: ``--clients`` clients
  writing as fast as they can) for ``--seconds``: ``PUT /api/kiwi/file?path=bench/rR/wNNNNN.md``
  on the primary from ``--clients`` client processes (writes due on a fixed schedule, so a slow
  answer does not lower the rate offered). A write's lag is from the primary's answer to the
  moment the replica publishes the path on its own event stream (``GET /api/kiwi/events``, read
  by a process of its own, timestamped as each line comes: no polling bias); every tenth path
  is then read on the replica (``GET /api/kiwi/file`` must answer 200 with that body). p50,
  p95, p99, max and the writes/s achieved; the goal: p99 ≤ 1 s at ~100 writes/s.
  The replica runs traced (its ``Follower`` and ``kiwifs.git.follow`` functions wrapped with
  timers by :data:`TRACED_KIWIFS`, the code itself unchanged), which splits each lag into the
  wait before the fetch that brought it, that fetch-and-apply, and the event's delivery, and
  each catch-up into ``git ls-remote``, ``git fetch``, the fast-forward, the acknowledgement
  sent to the primary and the rest (index, events). A path whose event the stream dropped
  (a subscriber holds 256 events; a catch-up may apply more) is found by a read and timed by
  the trace (``events_lost_by_the_stream``);
* **lag with the primary's event stream down** (``--poll-rate``, 10 writes/s): the replica
  restarted with its listener to the primary's stream turned off (by the trace wrapper), so
  it fetches on its 1 s poll alone;
* **read-your-writes**: one client, ``--ryw`` writes to the replica (forwarded to the primary,
  answered once applied on the replica, then read back on the replica at once, which must match)
  alternating with as many straight to the primary: latency p50 / p99 of each;
* **cost**: ``--clients`` clients writing as fast as they can to the primary for
  ``--cost-seconds``, with no replica, with one following, and (when the primary's ``GET
  /api/replication`` shows ``acks``, unless ``--no-acks``) with one following a primary of
  ``[replication] acks = 1``: writes/s, latency p50 / p99 and the CPU per write of the primary
  (its process tree, the ``git http-backend`` children the replica's fetches start included)
  and of the replica (same machine: its CPU is taken from the primary's), in
  ``--rounds`` interleaved rounds (A, B, C, then C, B, A); the replica is stopped for the rounds
  without one. Only figures of one run are compared.

Every write must answer 2xx and be seen on the replica within 30 s, or the bench exits 1. The
load average and the disk's fsync time are recorded before and after (the machine may be
shared). JSON on stdout, a table on stderr. Give it the CPUs on a shared machine (see
``bench/fast_paths.py``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

HERE = Path(__file__).resolve().parent
KIWIFS = shutil.which("kiwifs") or str(Path(sys.executable).with_name("kiwifs"))
ANNOUNCED = re.compile(r" on (http://(?:\[[^\]]+\]|[^\s/:]+):\d+)")
SEEN_WITHIN = 30.0  # seconds a write may take to show on the replica before the bench fails
CONFIRM_EVERY = 10  # every n-th path is read back on the replica once its event came
GOAL_P99 = 1.0  # seconds, at GOAL_RATE writes/s
GOAL_RATE = 100
RUN = str(time.time_ns())
SERVER_ENV: dict[str, str] = dict(os.environ)  # with --source: PYTHONPATH to that revision's src

# ``kiwifs`` with the replica's follow path timed (argv[1]: the trace file; argv[2:]: the
# command). Each wrapped function appends {"fn", "t0", "t1", ...} (time.monotonic, the same
# clock as this process's) as a JSON line; a function that is not there is left alone. With
# KIWIFS_BENCH_NO_STREAM set, the follower never listens to the primary's event stream.
TRACED_KIWIFS = r"""
import json, os, sys, threading, time
from kiwifs.git import follow
from kiwifs.server import replica
if os.environ.get("KIWIFS_BENCH_NO_STREAM"):  # the primary's event stream "down": poll only
    replica.Follower._listen = lambda self: None
out, lock = open(sys.argv[1], "a", buffering=1), threading.Lock()
def note(**kw):
    with lock:
        out.write(json.dumps(kw) + "\n")
def timed(owner, name, describe=lambda a, r: {}):
    inner = getattr(owner, name, None)
    if not callable(inner):
        return
    def wrapper(*a, **k):
        t0, r = time.monotonic(), None
        try:
            r = inner(*a, **k)
            return r
        finally:
            note(fn=name, t0=t0, t1=time.monotonic(), **describe(a, r))
    setattr(owner, name, wrapper)
timed(follow, "_run", lambda a, r: {"git": a[0][0]})
timed(follow, "fast_forward", lambda a, r: {"paths": [c.path for c in r or []]})
for name in ("catch_up", "_report", "_applied_now"):
    timed(replica.Follower, name)
nudge = getattr(replica.Follower, "nudge", None)
if nudge is not None:
    def nudged(self):
        note(fn="nudge", t0=time.monotonic(), thread=threading.current_thread().name)
        nudge(self)
    replica.Follower.nudge = nudged
from kiwifs.cli import cli
cli.main(sys.argv[2:], prog_name="kiwifs")
"""


class Failure(Exception):
    """A request, a check or a server failed: the bench exits 1."""


# -- servers -----------------------------------------------------------------------------------


class Node:
    """``kiwifs serve ARGS --port 0`` (traced into ``trace`` when given), its URL read from
    its start-up line on standard error, ready once ``/readyz`` answers 200."""

    def __init__(
        self,
        args: list[str],
        log: Path,
        trace: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.log = log
        self.started = time.monotonic()
        cmd = [sys.executable, "-c", TRACED_KIWIFS, str(trace)] if trace else [KIWIFS]
        start = log.stat().st_size if log.exists() else 0
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [*cmd, "serve", *args, "--port", "0"], stderr=out, env={**SERVER_ENV, **(env or {})}
            )
        deadline = time.monotonic() + 120
        while not (found := ANNOUNCED.search(log.read_bytes()[start:].decode(errors="replace"))):
            self._alive()
            if time.monotonic() > deadline:
                self.stop()
                raise Failure(f"kiwifs never said where it listens: {self._tail()}")
            time.sleep(0.02)
        self.base = found.group(1)
        self.port = int(urlsplit(self.base).port or 0)
        while status(self.base + "/readyz") != 200:
            self._alive()
            if time.monotonic() > deadline:
                self.stop()
                raise Failure(f"{self.base} never ready: {self._tail()}")
            time.sleep(0.02)
        self.ready_s = time.monotonic() - self.started

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]

    def _alive(self) -> None:
        if self.proc.poll() is not None:
            raise Failure(f"kiwifs serve exited ({self.proc.returncode}): {self._tail()}")

    def json(self, path: str) -> Any:
        self._alive()
        code, body, _ = request(self.port, "GET", path)
        if code != 200:
            raise Failure(f"GET {path} on {self.base}: {code} {body[:200]!r}")
        return json.loads(body)

    def head(self) -> str:
        return str(self.json("/api/replication")["applied_commit"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def status(url: str) -> int | None:
    split = urlsplit(url)
    try:
        return request(int(split.port or 80), "GET", split.path)[0]
    except OSError:
        return None


def request(
    port: int, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body, {"Content-Type": "text/markdown"} if body else {})
        resp = conn.getresponse()
        return resp.status, resp.read(), {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def file_url(path: str) -> str:
    return "/api/kiwi/file?" + urlencode({"path": path})


def body_of(path: str) -> bytes:
    return f"# {path}\n\nreplication bench, run {RUN}\n".encode()


def caught_up(replica: Node, primary: Node, timeout: float = SEEN_WITHIN) -> float:
    """Seconds until the replica has applied the primary's HEAD (bounded)."""
    t0 = time.monotonic()
    want = primary.head()
    while replica.head() != want:
        if time.monotonic() - t0 > timeout:
            raise Failure(f"the replica did not reach the primary's {want} in {timeout:.0f} s")
        time.sleep(0.02)
    return time.monotonic() - t0


def fsync_ms(folder: Path, count: int = 20) -> float:
    """The disk now: median ms of a new small file's fsync (a replica's fast-forward writes
    each file as a write does: the file and its folder fsynced)."""
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
    return round(statistics.median(times) * 1000, 2)


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid``, its reaped children (``git http-backend``, ``git fetch``) and
    its live descendants (the commit process), from ``/proc``."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        total = sum(int(x) for x in f[11:15]) / tick
        children: list[int] = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                children.extend(int(c) for c in fh.read().split())
    except (OSError, ValueError, IndexError):
        return 0.0
    return total + sum(tree_cpu(c) for c in children)


# -- clients -----------------------------------------------------------------------------------

Answer = tuple[str, float, float, int]  # path, sent, answered (time.monotonic), status


def writer(port: int, jobs: list[tuple[float, str]], until: float, prefix: str, out: Any) -> None:
    """One client process on one keep-alive connection: each (due, path) of ``jobs`` sent at
    ``due`` (or at once when late); with no jobs, new paths under ``prefix`` one after the
    other until ``until``. Puts its answers on ``out``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    answers: list[Answer] = []
    todo: Iterable[tuple[float, str]] = jobs or ((0.0, f"{prefix}{i:05d}.md") for i in range(10**6))
    for due, path in todo:
        if not jobs and time.monotonic() >= until:
            break
        if (wait := due - time.monotonic()) > 0:
            time.sleep(wait)
        sent = time.monotonic()
        try:
            conn.request("PUT", file_url(path), body_of(path), {"X-Actor": "bench"})
            resp = conn.getresponse()
            resp.read()
            code = resp.status
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            code = 0
        answers.append((path, sent, time.monotonic(), code))
    conn.close()
    out.put(answers)


def clients(
    port: int, jobs: list[list[tuple[float, str]]], until: float, prefix: str
) -> list[Answer]:
    """``len(jobs)`` writer processes at once; all their answers."""
    out: Any = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(target=writer, args=(port, j, until, f"{prefix}c{c}-", out))
        for c, j in enumerate(jobs)
    ]
    for p in procs:
        p.start()
    answers = [a for _ in procs for a in out.get()]
    for p in procs:
        p.join()
    bad = [a for a in answers if not 200 <= a[3] < 300]
    if bad:
        raise Failure(f"{len(bad)} writes not answered 2xx, e.g. {bad[0][0]}: {bad[0][3]}")
    return answers


def listen(port: int, out: Any) -> None:
    """The replica's event stream, in a process of its own: (path, when) of each write event."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    conn.request("GET", "/api/kiwi/events")
    resp = conn.getresponse()
    out.put(("", float(resp.status)))
    while line := resp.readline():
        if line.startswith(b"data:"):
            when = time.monotonic()
            event = json.loads(line[5:])
            if event.get("op") == "write":
                out.put((str(event.get("path")), when))
            elif event.get("op") == "bulk":  # a big catch-up is published as one event
                for path in event.get("paths", []):
                    out.put((str(path), when))
    out.put(("", -1.0))


class Seen:
    """The replica's events as they come (from :func:`listen`), every :data:`CONFIRM_EVERY`-th
    bench path read back on the replica once its event came."""

    def __init__(self, replica: Node) -> None:
        self.replica = replica
        self.events: Any = multiprocessing.Queue()
        self.proc = multiprocessing.Process(target=listen, args=(replica.port, self.events))
        self.proc.start()
        if self.events.get(timeout=30) != ("", 200.0):
            raise Failure("the replica's event stream did not open")
        self.when: dict[str, float] = {}
        self.confirm_ms: list[float] = []
        self.errors: list[str] = []
        self.count = 0
        self.ended = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            path, when = self.events.get()
            if not path:
                self.ended = True
                return
            with self._lock:
                self.when.setdefault(path, when)
            if path.startswith("bench/") and self.count % CONFIRM_EVERY == 0:
                code, body, _ = request(self.replica.port, "GET", file_url(path))
                if code != 200 or body != body_of(path):
                    self.errors.append(f"{path} on the replica: {code} {body[:80]!r}")
                else:
                    self.confirm_ms.append((time.monotonic() - when) * 1000)
            self.count += path.startswith("bench/")

    def wait_all(
        self, answers: list[Answer], settled: Callable[[], bool]
    ) -> tuple[dict[str, float], set[str]]:
        """When each answered path was published on the replica, and the paths whose event
        this stream lost (a subscriber's buffer holds 256 events: a catch-up that applies more
        at once drops the oldest), found on the replica by a read once it ``settled`` (then
        timed by that read, an upper bound); a Failure past SEEN_WITHIN."""
        dropped: set[str] = set()
        while True:
            with self._lock:
                missing = [a for a in answers if a[0] not in self.when]
            if self.errors:
                raise Failure(self.errors[0])
            if not missing:
                return {a[0]: self.when[a[0]] for a in answers}, dropped
            if self.ended:
                raise Failure("the replica's event stream ended")
            now = time.monotonic()
            if all(now - a[2] > 2.0 for a in missing) and settled():
                for path, *_ in missing:
                    code, body, _ = request(self.replica.port, "GET", file_url(path))
                    if code == 200 and body == body_of(path):
                        with self._lock:
                            self.when.setdefault(path, time.monotonic())
                        dropped.add(path)
                continue
            late = [a for a in missing if now - a[2] > SEEN_WITHIN]
            if late:
                path = late[0][0]
                code, body, _ = request(self.replica.port, "GET", file_url(path))
                raise Failure(
                    f"{len(late)} writes not seen on the replica within 30 s, e.g. {path}:"
                    f" {code} {body[:80]!r}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.join()


# -- figures -----------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def ms(values: list[float]) -> dict[str, float]:
    """p50, p95, p99 and max of ``values`` (seconds), in ms."""
    return {
        "p50_ms": round(statistics.median(values) * 1000, 1),
        "p95_ms": round(pct(values, 0.95) * 1000, 1),
        "p99_ms": round(pct(values, 0.99) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1),
    }


def achieved(answers: list[Answer]) -> float:
    first = min(a[1] for a in answers)
    last = max(a[2] for a in answers)
    return len(answers) / (last - first)


def read_trace(trace: Path, t0: float, t1: float) -> list[dict[str, Any]]:
    out = []
    for line in trace.read_text().splitlines():
        rec = json.loads(line)
        if t0 <= rec["t0"] <= t1:
            out.append(rec)
    return out


def catch_ups(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The replica's traced catch-ups, each with its records (``parts``) and the paths it
    applied (``paths``), in order."""
    out = []
    for cu in sorted((r for r in records if r["fn"] == "catch_up"), key=lambda r: r["t0"]):
        parts = [r for r in records if r is not cu and cu["t0"] <= r["t0"] <= cu["t1"]]
        paths = [p for r in parts if r["fn"] == "fast_forward" for p in r.get("paths", [])]
        out.append({**cu, "parts": parts, "applied": paths})
    return out


def applied_at(records: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Each path the replica applied: (its catch-up's start, the moment its events were
    published: the end of ``_applied_now``, or of the catch-up)."""
    out: dict[str, tuple[float, float]] = {}
    for cu in catch_ups(records):
        applies = [r for r in cu["parts"] if r["fn"] == "_applied_now"]
        done = applies[0]["t1"] if applies else cu["t1"]
        for p in cu["applied"]:
            out.setdefault(p, (cu["t0"], done))
    return out


def breakdown(
    records: list[dict[str, Any]], answers: list[Answer], seen: dict[str, float]
) -> dict[str, Any]:
    """Where the lag went, from the replica's trace: per write, the wait before the catch-up
    that applied it, that catch-up, and the event's delivery (means, ms); per catch-up that
    applied something, its parts (medians, ms), the paths applied, and what started it (a
    nudge of the primary's event stream since the last one began, or the poll)."""
    cus = catch_ups(records)
    if not cus:
        return {"traced": False}
    parts: dict[str, list[float]] = {
        k: [] for k in ("total", "ls_remote", "fetch", "fast_forward", "ack", "index_events")
    }
    sizes: list[int] = []
    started_by: dict[str, int] = {}
    nudges = sorted(r["t0"] for r in records if r["fn"] == "nudge")
    last = -1.0
    for cu in cus:
        prior = [n for n in nudges if last < n <= cu["t0"]]
        last = cu["t0"]
        if not cu["applied"]:
            continue
        kind = "event stream" if prior else "poll or restart"
        started_by[kind] = started_by.get(kind, 0) + 1
        sizes.append(len(cu["applied"]))
        parts["total"].append(cu["t1"] - cu["t0"])
        for r in cu["parts"]:
            took = r.get("t1", r["t0"]) - r["t0"]
            if r["fn"] == "_run" and r.get("git") in ("ls-remote", "fetch"):
                parts[str(r["git"]).replace("-", "_")].append(took)
            elif r["fn"] == "fast_forward":
                parts["fast_forward"].append(took)
            elif r["fn"] == "_report":
                parts["ack"].append(took)
        applies = [r for r in cu["parts"] if r["fn"] == "_applied_now"]
        acks = [r["t1"] - r["t0"] for r in cu["parts"] if r["fn"] == "_report"]
        if applies:
            parts["index_events"].append(applies[0]["t1"] - applies[0]["t0"] - sum(acks))
    by_path = applied_at(records)
    waits, within, delivery = [], [], []
    for path, _, answered, _ in answers:
        if path in by_path:
            start, done = by_path[path]
            waits.append(max(0.0, start - answered))
            within.append(done - max(answered, start))
            delivery.append(seen[path] - done)

    def mean_ms(v: list[float]) -> float | None:
        return round(statistics.fmean(v) * 1000, 1) if v else None

    def median_ms(v: list[float]) -> float | None:
        return round(statistics.median(v) * 1000, 1) if v else None

    return {
        "traced": True,
        "writes_traced": len(waits),
        "lag_mean_ms": {
            "wait_before_its_catch_up": mean_ms(waits),
            "its_catch_up": mean_ms(within),
            "event_delivery": mean_ms(delivery),
        },
        "catch_ups": len(sizes),
        "paths_per_catch_up": {
            "median": statistics.median(sizes) if sizes else 0,
            "max": max(sizes, default=0),
        },
        "catch_up_started_by": started_by,
        "catch_up_median_ms": {k: median_ms(v) for k, v in parts.items()},
        "catch_up_max_ms": round(max(parts["total"], default=0.0) * 1000, 1),
        "fast_forward_ms_per_path": round(sum(parts["fast_forward"]) * 1000 / sum(sizes), 2)
        if sizes
        else None,
    }


# -- the phases --------------------------------------------------------------------------------


def schedule(
    rate: str, seconds: float, n: int, start: float, name: str
) -> tuple[list[list[tuple[float, str]]], float]:
    """The writes of one rate, dealt to ``n`` clients: (due, path) each; ``max``: none (the
    clients write until the time returned)."""
    if rate == "max":
        return [[] for _ in range(n)], start + seconds
    r = float(rate)
    jobs: list[list[tuple[float, str]]] = [[] for _ in range(n)]
    for i in range(int(r * seconds)):
        jobs[i % n].append((start + i / r, f"bench/{name}/w{i:05d}.md"))
    return jobs, 0.0


def lag_phase(
    primary: Node,
    replica: Node,
    seen: Seen,
    trace: Path | None,
    rate: str,
    args: Any,
    name: str = "",
) -> dict[str, Any]:
    name = name or f"r{rate}"
    confirmed = len(seen.confirm_ms)
    start = time.monotonic() + 0.5
    jobs, until = schedule(rate, args.seconds, args.clients, start, name)
    answers = clients(primary.port, jobs, until, f"bench/{name}/")
    when, dropped = seen.wait_all(answers, lambda: replica.head() == primary.head())
    records = read_trace(trace, start - 1, time.monotonic()) if trace else []
    applied = applied_at(records)
    for path in dropped & applied.keys():
        when[path] = applied[path][1]  # published then: the stream lost it
    lags = [when[a[0]] - a[2] for a in answers]
    out: dict[str, Any] = {
        "rate": rate,
        "name": name,
        "writes": len(answers),
        "achieved_writes_per_s": round(achieved(answers), 1),
        "write_latency_p50_ms": round(statistics.median(a[2] - a[1] for a in answers) * 1000, 1),
        "lag": ms(lags),
        "lag_min_ms": round(min(lags) * 1000, 1),
        "events_lost_by_the_stream": len(dropped),
    }
    if dropped:
        out["lost_events_timed_by"] = "the replica's trace" if applied else "a read (upper bound)"
    time.sleep(0.2)  # the last read-backs
    gets = seen.confirm_ms[confirmed:]
    out["read_back_on_replica"] = {
        "paths": len(gets),
        "ms_after_event_p50": round(statistics.median(gets), 1) if gets else None,
    }
    if trace is not None:
        out["breakdown"] = breakdown(records, answers, when)
    return out


def ryw_phase(primary: Node, replica: Node, writes: int) -> dict[str, Any]:
    """One client: a write to the replica (read back there at once), then one to the primary."""
    lat: dict[str, list[float]] = {"replica": [], "primary": []}
    for i in range(writes):
        for side, node in (("replica", replica), ("primary", primary))[:: 1 if i % 2 else -1]:
            path = f"bench/ryw/{side}-{i:05d}.md"
            t0 = time.monotonic()
            code, body, _ = request(node.port, "PUT", file_url(path), body_of(path))
            lat[side].append(time.monotonic() - t0)
            if not 200 <= code < 300:
                raise Failure(f"PUT {path} on the {side}: {code} {body[:200]!r}")
            if side == "replica":
                code, body, _ = request(replica.port, "GET", file_url(path))
                if code != 200 or body != body_of(path):
                    raise Failure(f"{path} not read back on the replica: {code} {body[:80]!r}")
    return {side: ms(v) for side, v in lat.items()}


def cost_round(
    primary: Node, follower: Node | None, n: int, seconds: float, label: str
) -> dict[str, Any]:
    cpu0 = tree_cpu(primary.proc.pid)
    fcpu0 = tree_cpu(follower.proc.pid) if follower else 0.0
    answers = clients(primary.port, [[] for _ in range(n)], time.monotonic() + seconds, label)
    cpu = tree_cpu(primary.proc.pid) - cpu0
    fcpu = tree_cpu(follower.proc.pid) - fcpu0 if follower else 0.0
    lat = [a[2] - a[1] for a in answers]
    return {
        "writes": len(answers),
        "writes_per_s": achieved(answers),
        "p50_ms": statistics.median(lat) * 1000,
        "p99_ms": pct(lat, 0.99) * 1000,
        "primary_cpu_ms_per_write": cpu / len(answers) * 1000,
        "replica_cpu_ms_per_write": fcpu / len(answers) * 1000,
    }


def seed_primary(root: Path, files: int, log: Path) -> Node:
    """``kiwifs init`` on ``root``, served, given ``files`` files (PUTs)."""
    subprocess.run(
        [KIWIFS, "init", "--root", str(root), "--template", "blank"],
        check=True,
        stdout=subprocess.DEVNULL,
        env=SERVER_ENV,
    )
    node = Node(["--root", str(root)], log)
    try:
        for i in range(files):
            path = f"seed/{i // 50:02d}/s{i:04d}.md"
            code, body, _ = request(node.port, "PUT", file_url(path), body_of(path))
            if code != 200:
                raise Failure(f"seeding {path}: {code} {body[:200]!r}")
    except BaseException:
        node.stop()
        raise
    return node


def cost_phase(
    primary: Node, replica_root: Path, tmp: Path, args: Any, with_acks: bool, nodes: list[Node]
) -> dict[str, Any]:
    """Interleaved rounds: no replica, one following, and one following an acks = 1 primary
    (each replica started for its round and stopped after; ``nodes``: the servers to stop)."""
    variants = ["alone", "replica"]
    pairs = {"replica": (primary, replica_root)}
    if with_acks:
        variants.append("acks1")
        # seeded and cloned first (with acks = 1 no write is acknowledged before a replica
        # holds it), then restarted with acks = 1 in its configuration
        q = seed_primary(tmp / "Q", args.seed, tmp / "q.log")
        nodes.append(q)
        first = Node(["--root", str(tmp / "RQ"), "--replica-of", q.base], tmp / "rq.log")
        try:
            caught_up(first, q)
        finally:
            first.stop()
        q.stop()
        with (tmp / "Q" / ".kiwi" / "config.toml").open("a") as fh:
            fh.write("\n[replication]\nacks = 1\n")
        q = Node(["--root", str(tmp / "Q")], tmp / "q.log")
        nodes.append(q)
        if q.json("/api/replication").get("acks") != 1:
            raise Failure("[replication] acks = 1 in the config, but the primary shows otherwise")
        pairs["acks1"] = (q, tmp / "RQ")
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for r in range(args.rounds):
        for v in variants if r % 2 == 0 else list(reversed(variants)):
            target, root = pairs.get(v, (primary, replica_root))
            follower = None
            if v != "alone":  # the primary's URL given again: a restarted primary has a new port
                follower = Node(["--root", str(root), "--replica-of", target.base], tmp / "f.log")
            try:
                if follower is not None:
                    caught_up(follower, target)
                time.sleep(1.0)  # the start's own work settles
                label = f"bench/cost/{v}{r}/"
                results[v].append(
                    cost_round(target, follower, args.clients, args.cost_seconds, label)
                )
                if follower is not None:
                    caught_up(follower, target)
            finally:
                if follower is not None:
                    follower.stop()
    out: dict[str, Any] = {}
    for v, rounds in results.items():
        out[v] = {
            k: round(statistics.median(x[k] for x in rounds), 2)
            for k in (
                "writes_per_s",
                "p50_ms",
                "p99_ms",
                "primary_cpu_ms_per_write",
                "replica_cpu_ms_per_write",
            )
        }
        out[v]["rounds_writes_per_s"] = [round(x["writes_per_s"], 1) for x in rounds]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="10,100,max", help="writes/s offered, or max")
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds per rate")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seed", type=int, default=200, help="files on the primary before the clone")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the cost")
    ap.add_argument("--cost-seconds", type=float, default=5.0, help="seconds per cost round")
    ap.add_argument("--ryw", type=int, default=100, help="writes each way for read-your-writes")
    ap.add_argument("--no-acks", action="store_true", help="skip the acks = 1 variant")
    ap.add_argument(
        "--poll-rate",
        type=int,
        default=10,
        help="writes/s of the lag with the primary's event stream down (0: not measured)",
    )
    ap.add_argument("--no-trace", action="store_true", help="run the replica untraced")
    ap.add_argument(
        "--source",
        metavar="REV",
        help="serve the src/ of git revision REV (exported to the temporary folder) instead of"
        " the checkout's, which others may be editing",
    )
    args = ap.parse_args()
    multiprocessing.set_start_method("fork")
    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="kiwifs-replication-"))
    fsync_before = fsync_ms(tmp)
    if args.source:
        SERVER_ENV["PYTHONPATH"] = str(export_source(args.source, tmp / "source"))
    doc: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "source": source_state(args.source),
        "settings": {k: v for k, v in vars(args).items()},
    }
    failed = ""
    nodes: list[Node] = []
    seen: Seen | None = None
    try:
        primary = seed_primary(tmp / "P", args.seed, tmp / "p.log")
        nodes.append(primary)
        trace = None if args.no_trace else tmp / "trace.jsonl"
        replica = Node(
            ["--root", str(tmp / "R"), "--replica-of", primary.base], tmp / "r.log", trace
        )
        nodes.append(replica)
        ready = replica.ready_s
        clone = caught_up(replica, primary)
        seed_files = sum(1 for _ in (tmp / "R" / "seed").rglob("*.md"))
        if seed_files != args.seed:
            raise Failure(f"the replica cloned {seed_files} seed files, not {args.seed}")
        doc["clone"] = {
            "seed_files": args.seed,
            "start_to_ready_s": round(ready, 2),
            "start_to_caught_up_s": round(ready + clone, 2),
        }
        if trace is not None:
            clones = [r for r in read_trace(trace, 0, time.monotonic()) if r.get("git") == "clone"]
            if clones:
                doc["clone"]["git_clone_s"] = round(clones[0]["t1"] - clones[0]["t0"], 2)
        seen = Seen(replica)
        doc["lag"] = []
        for rate in args.rates.split(","):
            doc["lag"].append(lag_phase(primary, replica, seen, trace, rate.strip(), args))
            time.sleep(1.0)
        doc["read_your_writes"] = ryw_phase(primary, replica, args.ryw)
        seen.stop()
        seen = None
        replica.stop()
        if trace is not None and args.poll_rate:
            # the primary's event stream "down": the replica restarted, fetching on its poll only
            no_stream = {"KIWIFS_BENCH_NO_STREAM": "1"}
            args_r = ["--root", str(tmp / "R"), "--replica-of", primary.base]
            replica = Node(args_r, tmp / "r.log", trace, no_stream)
            nodes.append(replica)
            caught_up(replica, primary)
            seen = Seen(replica)
            rate = str(args.poll_rate)
            doc["lag"].append(lag_phase(primary, replica, seen, trace, rate, args, f"r{rate}-poll"))
            seen.stop()
            seen = None
            replica.stop()
        built = "acks" in primary.json("/api/replication")
        doc["cost"] = cost_phase(primary, tmp / "R", tmp, args, built and not args.no_acks, nodes)
        if not built or args.no_acks:
            why = "--no-acks" if built else "the primary's /api/replication shows no acks"
            doc["cost"]["acks1"] = f"not measured: {why}"
    except Failure as exc:
        failed = str(exc)
    finally:
        if seen is not None:
            seen.stop()
        for node in reversed(nodes):
            node.stop()
        fsync_after = fsync_ms(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    doc["load_average"] = [load_before, os.getloadavg()]
    doc["fsync_ms_median"] = [fsync_before, fsync_after]
    doc["goal"] = verdict(doc.get("lag", []))
    if failed:
        doc["failure"] = failed
    print(json.dumps(doc, indent=2))
    table(doc)
    if failed:
        print(f"FAILED: {failed}", file=sys.stderr)
        raise SystemExit(1)


def git_out(*a: str) -> str:
    done = subprocess.run(["git", *a], capture_output=True, text=True, cwd=HERE.parent, check=False)
    return done.stdout.strip()


def export_source(rev: str, target: Path) -> Path:
    """The ``src`` folder of revision ``rev``, exported (no checkout, no git state)."""
    target.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", rev, "src"], check=True, capture_output=True, cwd=HERE.parent
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "src"


def source_state(rev: str | None) -> str:
    """The code measured: REV's, or the checkout's (and whether its ``src/`` had edits)."""
    if rev:
        return git_out("rev-parse", "--short", rev) + " (exported)"
    dirty = git_out("status", "--porcelain", "--", "src")
    return git_out("rev-parse", "--short", "HEAD") + (
        " + uncommitted edits in src/" if dirty else ""
    )


def verdict(lags: list[dict[str, Any]]) -> dict[str, Any]:
    """The goal, p99 ≤ 1 s, read at the rate offered nearest GOAL_RATE."""
    near = [x for x in lags if x["rate"] != "max" and x["name"] == f"r{x['rate']}"]
    if not near:
        return {"p99_le_1s_at_100_per_s": None}
    x = min(near, key=lambda x: abs(float(x["rate"]) - GOAL_RATE))
    p99 = x["lag"]["p99_ms"] / 1000
    return {
        "rate": x["rate"],
        "p99_s": round(p99, 3),
        "met": p99 <= GOAL_P99,
        "missed_by_s": round(max(0.0, p99 - GOAL_P99), 3),
    }


def table(doc: dict[str, Any]) -> None:
    def say(text: str) -> None:
        print(text, file=sys.stderr)

    if "clone" in doc:
        c = doc["clone"]
        say(
            f"clone of {c['seed_files']} files: ready {c['start_to_ready_s']} s,"
            f" caught up {c['start_to_caught_up_s']} s"
        )
    say(
        f"{'rate':>8} {'writes':>6} {'w/s':>7} {'p50':>7} {'p95':>7} {'p99':>7} {'max':>7}"
        "  (lag, ms)   wait / catch-up / delivery (mean ms)   catch-up: ls-remote fetch ff ack"
    )
    for x in doc.get("lag", []):
        lag, b = x["lag"], x.get("breakdown", {})
        parts = b.get("lag_mean_ms", {})
        cu = b.get("catch_up_median_ms", {})
        say(
            f"{x['name']:>8} {x['writes']:>6} {x['achieved_writes_per_s']:>7} {lag['p50_ms']:>7}"
            f" {lag['p95_ms']:>7} {lag['p99_ms']:>7} {lag['max_ms']:>7}"
            f"  {parts.get('wait_before_its_catch_up', '-')} / {parts.get('its_catch_up', '-')}"
            f" / {parts.get('event_delivery', '-')}   {cu.get('total', '-')}:"
            f" {cu.get('ls_remote', '-')} {cu.get('fetch', '-')} {cu.get('fast_forward', '-')}"
            f" {cu.get('ack', '-')}"
        )
    if "read_your_writes" in doc:
        for side, f in doc["read_your_writes"].items():
            say(f"write to the {side:<8} p50 {f['p50_ms']} ms, p99 {f['p99_ms']} ms")
    for v, f in doc.get("cost", {}).items():
        if isinstance(f, dict):
            say(
                f"cost {v:<8} {f['writes_per_s']:>7} w/s  p50 {f['p50_ms']} ms  p99 {f['p99_ms']}"
                f" ms  CPU/write: primary {f['primary_cpu_ms_per_write']} ms,"
                f" replica {f['replica_cpu_ms_per_write']} ms"
            )
        else:
            say(f"cost {v:<8} {f}")
    g = doc["goal"]
    loads = " → ".join("/".join(f"{x:.2f}" for x in la) for la in doc["load_average"])
    say(f"goal p99 ≤ {GOAL_P99:.0f} s at ~{GOAL_RATE} writes/s: {g}; load average {loads}")
    say(f"fsync of a small new file, median: {doc['fsync_ms_median']} ms (before, after)")


if __name__ == "__main__":
    main()
