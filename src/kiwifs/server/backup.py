"""``[backup]``: a server pushes each root's branch to a git remote on a timer and when it stops.

A root whose config has ``[backup] remote`` gets a :class:`Pusher` when its server starts
(:meth:`kiwifs.server.lifecycle.Serving.start_backup`); a root without one gets nothing, no
thread, no timer. Every pusher of the process shares one thread, :data:`SCHEDULER`'s, started
with the first pusher and ended with the last: a server with a hundred backed-up spaces runs one
backup thread, and pushes one root at a time (a slow remote delays the others' pushes, never a
write). A push is :func:`kiwifs.git.backup.push_branch`: git's own command, never forced.

The first push is made as soon as the root is served, then one every ``interval`` (when the
branch has moved since the last push that succeeded, or the last attempt failed). Stopping the
server makes a last push of what the final commits added, bounded by :data:`STOP_WAIT` seconds so
that an unreachable remote never holds a shutdown up for long.

Failures never reach a write: they are kept in the pusher's status, shown by ``GET /health``
(:func:`status_of`), and logged once each time the state changes (failing, diverged, working
again), not at every attempt. A replica does not push (its primary does), but a replica
promoted to primary does from its next push on.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kiwifs.config import BackupConfig, duration_seconds
from kiwifs.errors import KiwiError

log = logging.getLogger("kiwifs.backup")

STOP_WAIT = 10.0  # seconds the last push at shutdown may take, waiting for one in flight included


def _now() -> str:
    """Now as RFC 3339, in UTC, to the second."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class Pusher:
    """The backup of one root: its config, its status, one push at a time (:meth:`push`).

    ``active``: whether the root may push now (False on a replica); ``timeout``: the seconds
    a push in the background may take.
    """

    def __init__(
        self,
        root: Path,
        config: BackupConfig,
        active: Callable[[], bool] = lambda: True,
        timeout: float | None = None,
    ) -> None:
        from kiwifs.git.backup import TIMEOUT, redact  # servers with a [backup] only

        self.root = Path(root)
        self.config = config
        self.active = active
        self.interval = duration_seconds(config.interval)
        self.timeout = TIMEOUT if timeout is None else timeout
        self.remote = redact(config.remote.strip())
        self.due = 0.0  # monotonic time of the next scheduled push (the scheduler's)
        self._lock = threading.Lock()  # one push at a time: the timer's or the last one
        self.stopped = False  # the last push is made or being made: no timed push after it
        self._state = "pending"
        self._branch = config.branch.strip()
        self._last_attempt: str | None = None
        self._last_push: str | None = None
        self._pushed: str | None = None
        self._error: str | None = None
        self._diverged: str | None = None

    # -- pushing ------------------------------------------------------------------------------

    def push(self, timeout: float | None = None) -> None:
        """Push now (waiting for a push in flight first); the outcome goes to the status."""
        with self._lock:
            self._push(self.timeout if timeout is None else timeout)

    def timed_push(self) -> None:
        """The scheduler's push: only while the root is served, and only when
        :meth:`needs_push`."""
        with self._lock:
            if not self.stopped and self.needs_push():
                self._push(self.timeout)

    def push_within(self, seconds: float) -> bool:
        """The last push: made only if a push in flight ends within ``seconds``, and bounded by
        what is left of them; no timed push follows it. False when it could not be made in
        time."""
        self.stopped = True
        deadline = time.monotonic() + seconds
        if not self._lock.acquire(timeout=max(seconds, 0.0)):
            return False
        try:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._push(left)
            return True
        finally:
            self._lock.release()

    def _push(self, timeout: float) -> None:
        from kiwifs.git.backup import push_branch

        if not self.active():
            self._note("paused", None)
            return
        self._last_attempt = _now()
        try:
            outcome = push_branch(
                self.root,
                self.config.remote.strip(),
                self.config.branch,
                fetch_first=self.config.rebase_before_push,
                timeout=timeout,
            )
        except KiwiError as exc:
            self._note("failing", exc.message)
            return
        except Exception as exc:  # a backup must never take its thread down
            log.exception("backup of %s to %s failed", self.root, self.remote)
            self._note("failing", f"backup failed: {exc}")
            return
        self._branch = outcome.branch
        if outcome.state == "diverged":
            self._diverged = outcome.remote
            self._note(
                "diverged",
                f"the remote's {outcome.branch} ({outcome.remote}) has commits this root lacks:"
                " kept at refs/kiwifs/backup-diverged, not overwritten; nothing pushed",
            )
            return
        self._diverged = None
        if outcome.state != "empty":
            self._pushed = outcome.local
            self._last_push = _now()
        self._note("ok", None)

    def needs_push(self) -> bool:
        """Whether a timed push has anything to do: the last one failed or diverged, or the
        branch moved since (read from the ref, no network)."""
        if self._state != "ok":
            return True
        from kiwifs.git.backup import current_branch
        from kiwifs.git.repo import load_pygit2

        try:
            repo = load_pygit2().Repository(str(self.root))
            ref = repo.references.get(f"refs/heads/{self._branch or current_branch(self.root)}")
        except Exception:  # unreadable now: let the push say what is wrong
            return True
        return ref is not None and str(ref.target) != self._pushed

    def _note(self, state: str, error: str | None) -> None:
        """Record the outcome; log it when the state or the error changed (once, not at every
        failed attempt)."""
        changed = (state, error) != (self._state, self._error)
        was = self._state
        self._state, self._error = state, error
        if not changed:
            return
        if state in ("failing", "diverged"):
            log.warning("backup of %s to %s: %s", self.root, self.remote, error)
        elif state == "ok" and was in ("failing", "diverged"):
            log.warning("backup of %s to %s works again", self.root, self.remote)

    # -- status -------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What ``GET /health`` shows under ``backup``."""
        return {
            "remote": self.remote,
            "branch": self._branch or None,
            "interval": self.config.interval,
            "state": self._state,
            "last_attempt": self._last_attempt,
            "last_push": self._last_push,
            "pushed_commit": self._pushed,
            "last_error": self._error,
            "diverged_commit": self._diverged,
        }


class Scheduler:
    """One thread pushing every registered root when it is due (see the module's docstring)."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, name: str = "kiwifs-backup"
    ) -> None:
        self.clock = clock
        self.name = name  # its thread's
        self._pushers: dict[Path, Pusher] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, pusher: Pusher) -> None:
        """Push ``pusher``'s root from now on, the first time at once."""
        with self._cond:
            pusher.due = self.clock()
            self._pushers[pusher.root.resolve()] = pusher
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def remove(self, pusher: Pusher) -> None:
        """No more timed pushes of ``pusher``'s root (one in flight ends as it would)."""
        with self._cond:
            key = pusher.root.resolve()
            if self._pushers.get(key) is pusher:
                del self._pushers[key]
            self._cond.notify_all()

    def status_of(self, root: Path) -> dict[str, Any] | None:
        with self._cond:
            pusher = self._pushers.get(Path(root).resolve())
        return None if pusher is None else pusher.status()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._pushers:
                        self._thread = None  # the next add starts another
                        return
                    pusher = min(self._pushers.values(), key=lambda p: p.due)
                    wait = pusher.due - self.clock()
                    if wait <= 0:
                        break
                    self._cond.wait(wait)
                pusher.due = self.clock() + pusher.interval
            try:
                pusher.timed_push()
            except Exception:  # never let one root's failure end every root's backups
                log.exception("backup of %s failed", pusher.root)


SCHEDULER = Scheduler()  # the process's one backup thread, shared by every root it serves


def status_of(root: Path) -> dict[str, Any] | None:
    """The backup status of ``root`` while its server pushes it; ``None`` without a backup."""
    return SCHEDULER.status_of(root)


def start(
    root: Path, config: BackupConfig, active: Callable[[], bool] = lambda: True
) -> Pusher | None:
    """Back ``root`` up as ``config`` says (nothing, and no thread, without a remote)."""
    if not config.enabled:
        return None
    pusher = Pusher(root, config, active)
    SCHEDULER.add(pusher)
    return pusher


def stop(pusher: Pusher, wait: float = STOP_WAIT) -> None:
    """No more timed pushes; then the last push, of what the final commits added, if it can be
    made within ``wait`` seconds (logged when it cannot)."""
    SCHEDULER.remove(pusher)
    if not pusher.push_within(wait):
        log.warning("backup of %s: no last push, %.0f s were not enough", pusher.root, wait)
