"""The last ``memory check`` kept in the index, and the background loop that keeps it current.

``memory check`` reads every episode and every citing page (1.5–2 s at 100,000 episodes): far
too slow for a dashboard that must answer in a few hundred milliseconds. So while a server runs,
:class:`CheckKeeper` runs it on its own thread after the file rows change and stores the problems
(:mod:`kiwifs.memory.problems`): the first :data:`SHOWN` one row each in ``check_problems``, and
the prefix, the time and the count of all in ``check_meta``. A request only reads those rows
(:func:`read_state`): a few milliseconds, however many files or problems there are.

The check is pure Python over 100,000 rows: run on a thread of the server, it would hold the
interpreter lock for seconds and slow every request meanwhile. So when the machine has more than
one CPU (and ``KIWIFS_WORKERS`` allows it) it runs in one worker process of its own
(:class:`CheckWorker`, started fresh with ``spawn``, never forked from the threaded server, at a
lower priority), which reads the rows from the index file and hands back the problems.

The table is derived, like the rest of the index: deleting the database loses nothing, and a
result for another episodes prefix is never shown.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kiwifs.base.forking import exit_with_parent, usable_cpus, yield_the_cpu
from kiwifs.index.background import BackgroundLoop
from kiwifs.index.connections import BUSY_TIMEOUT
from kiwifs.index.core import Index

# The check itself (its rules and the rows it reads) is imported where it runs: opening a root
# makes a keeper, and most commands never run the check.
if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

    from kiwifs.memory.problems import CheckState, Problem

log = logging.getLogger(__name__)

SHOWN = 100  # problems a dashboard lists, and the index keeps (the count covers them all)
QUIET_SECONDS = 1.0  # after a wake-up: a burst of writes ends before the check runs
PERIOD = 5.0  # a look at the rows even without a wake-up


def store(index: Index, prefix: str, problems: Sequence[Problem], computed_at: float) -> None:
    """Replace the stored result with ``problems`` (one transaction: a reader sees the old result
    or the new one, never a mix). Only the first :data:`SHOWN` are kept, with the count of all:
    a dashboard shows no more, and at a million files all of them took 10 MB of the index."""
    rows = [(p.kind, p.path, p.message, json.dumps(list(p.related))) for p in problems[:SHOWN]]
    meta = {"prefix": prefix, "computed_at": repr(computed_at), "total": str(len(problems))}
    with index.transaction() as conn:
        conn.execute("DELETE FROM check_problems")
        conn.executemany(
            "INSERT INTO check_problems (kind, path, message, related) VALUES (?, ?, ?, ?)", rows
        )
        conn.execute("DELETE FROM check_meta")
        conn.executemany("INSERT INTO check_meta (key, value) VALUES (?, ?)", meta.items())


def read_state(conn: sqlite3.Connection, prefix: str, current: bool) -> CheckState | None:
    """The stored result for ``prefix`` (its first :data:`SHOWN` problems), or ``None`` when
    none is stored for it yet. ``current`` says whether the rows changed since (the caller
    knows)."""
    from kiwifs.memory.problems import CheckState, Problem

    meta = dict(conn.execute("SELECT key, value FROM check_meta").fetchall())
    if meta.get("prefix") != prefix:
        return None
    shown = tuple(
        Problem(kind, path, message, tuple(json.loads(related)))
        for kind, path, message, related in conn.execute(
            "SELECT kind, path, message, related FROM check_problems ORDER BY seq LIMIT ?",
            (SHOWN,),
        )
    )
    return CheckState(float(meta["computed_at"]), int(meta["total"]), shown, current)


Compute = Callable[[], "tuple[str, list[Problem]]"]  # -> (episodes prefix, problems)


def problems_from_file(index_path: str, prefix: str) -> list[Problem]:
    """The problems read from the index database at ``index_path`` (in the worker process)."""
    from kiwifs.index.memory.check import check_rows
    from kiwifs.index.texts import register
    from kiwifs.memory.problems import problems_in

    conn = sqlite3.connect(index_path, timeout=BUSY_TIMEOUT)
    register(conn)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
        return problems_in(prefix, *check_rows(conn, prefix))
    finally:
        conn.close()


def _start_worker(server: int) -> None:
    """The worker process's initializer: lower its priority and tie its life to ``server``'s
    (the pid is the server's own, passed in: a server killed while the worker was still starting
    has already left it to another parent)."""
    yield_the_cpu()
    exit_with_parent(server)


class CheckWorker:
    """One worker process that runs the check away from the server's interpreter lock; ``None``
    from :meth:`problems` when it cannot (one CPU, or the process failed: the caller then runs the
    check in its own thread)."""

    def __init__(self, cap: int | None = None) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self.enabled = usable_cpus(cap) > 1  # cap: Tuning.workers

    def problems(self, index_path: str, prefix: str) -> list[Problem] | None:
        # imported here: multiprocessing and the process pool are ~7 ms that a command which
        # never checks (every `kiwifs memory report`) would pay at start-up
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        with self._lock:
            if not self.enabled:
                return None
            if self._pool is None:
                context = multiprocessing.get_context("spawn")
                self._pool = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=context,
                    initializer=_start_worker,
                    initargs=(os.getpid(),),
                )
            pool = self._pool
        try:
            return pool.submit(problems_from_file, index_path, prefix).result()
        except (BrokenProcessPool, OSError, RuntimeError):
            log.warning("the check's worker process failed; checking in the server", exc_info=True)
            self.close()
            with self._lock:
                self.enabled = False
            return None

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


class CheckKeeper(BackgroundLoop):
    """Runs the check again whenever the file rows changed since the last run, and stores it.

    Woken by writes and by the watcher (through :meth:`wake`), and it looks every ``period``
    seconds anyway. A wake-up is followed by a quiet second (a burst of writes ends first), and
    the loop pauses at least as long as the last check took, so that on a root written to without
    a pause the check uses at most about half of one core. After each stored result
    ``announce`` is called (the server tells the dashboards).
    """

    thread_name = "kiwifs-check"

    def __init__(
        self,
        index: Callable[[], Index],
        compute: Compute,
        announce: Callable[[], None],
        ready: Callable[[], bool] = lambda: True,
        period: float = PERIOD,
    ) -> None:
        self._index = index
        self._ready = ready
        self._compute = compute
        self._announce = announce
        self.period = period
        self.quiet = QUIET_SECONDS
        self.settle = 0.0  # seconds a large root's first check waits after ready
        self._done: tuple[int, int] | None = None  # the rows' stamp the stored result is for
        self.last_seconds = 0.0
        super().__init__()

    def _stamp(self) -> tuple[int, int]:
        index = self._index()
        return id(index), index.rows_generation

    @property
    def current(self) -> bool:
        """True when the stored result is for the rows as they are now."""
        return self._done is not None and self._done == self._stamp()

    def run_once(self) -> bool:
        """Check and store now if the rows changed since the last run; True when it ran.

        Not before ``ready()``: a server's watcher first brings the index up to date with the
        files, and a check of the rows before that would be stale at once."""
        if not self._ready():
            return False
        stamp = self._stamp()
        if stamp == self._done:
            return False
        started = time.monotonic()
        try:
            prefix, problems = self._compute()
            store(self._index(), prefix, problems, time.time())
            self._done = stamp
        finally:
            self.last_seconds = time.monotonic() - started
        self._announce()
        return True

    def _run(self) -> None:
        self._settle(self._ready, self.settle, lambda: self._index().file_count())
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # a background thread must not die; the next round retries
                log.exception("memory check failed; retrying later")
            self._wake.wait(self.period)
            self._wake.clear()
            self._stop.wait(max(self.quiet, self.last_seconds))
