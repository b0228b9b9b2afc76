"""Keeps the index current while a server runs: filesystem events plus a periodic reconcile.

Agents also write with ``cat`` and ``echo``. A background thread listens to ``watchfiles``
(inotify and friends) and refreshes just the markdown files an event names; anything it cannot map
to files one by one (a folder moved or deleted) triggers a full reconcile. Events can be lost
(overflowing queues, network filesystems), so a reconcile also runs every ``period`` seconds.

While the events keep the index current, a periodic reconcile finds nothing they had not
already told: each such reconcile doubles the wait before the next, up to ``reconcile_max``
(:class:`~kiwifs.tuning.Tuning`, 60 s), and one that finds a change whose event was lost
(:attr:`ReconcileStats.missed`) brings the wait back to ``period``. Walking a 100k-file root
every 5 s kept an idle server at ~7 % of a core; the lost event a longer wait could leave unseen
is seen within a minute (docs/dev/benchmarks-log.md; a cap of 5 keeps the fixed period).
Without events (the watcher could not start or died) the period stays fixed.

Only the visible folders are watched, each on its own (not the root recursively): the server's
own ``.git`` and ``.kiwi`` take dozens of writes per write of a page (git's objects, refs and
logs, the index database's WAL), each an event the inotify thread reads and the loop then drops
(0.8 ms of CPU per write, measured). A folder that comes or goes has the watches set up again;
then a folder that came is walked (alone), so a file written in it before its watch existed is
still found, and one that went (or was moved) gets a reconcile of the whole root, the one way to
tell which rows it took along.
``Tuning.watch_folders`` off watches the root recursively (the plain path), and
``walk_new_folders`` off reconciles the whole root for a folder that came.

A name that is not UTF-8 is one watchfiles cannot hand over: an event naming one raises from its
generator and ends it. The watches are then set up again at once and the root reconciled (the
events of that batch are lost; the reconcile finds them; at most one such reconcile a second),
so one such file cannot leave the server on the periodic reconcile alone. A folder whose name
is not UTF-8 cannot be watched at all (watchfiles refuses the path): it is left out of the
watches, and what changes in it is found by the periodic reconcile; a recursive watch of a root
holding one cannot even start, so the watcher then watches each folder instead.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kiwifs.base.text import undecodable
from kiwifs.base.walk import list_folder
from kiwifs.tuning import Tuning

if TYPE_CHECKING:
    import watchfiles

    from kiwifs.index.core import ReconcileStats

log = logging.getLogger(__name__)

DEFAULT_PERIOD = 5.0
TICK_MS = 250
LISTEN_ATTEMPTS = 3  # a folder may go between the walk and its watch: walk again
# seconds: after batches of events lost (watchfiles raised), at most one reconcile this often,
# so a name that is not UTF-8 changing all the time does not keep the root being walked
RECOVER_GAP = 1.0


class Watcher:
    """One background thread calling ``refresh(paths)`` on events and ``reconcile()`` regularly."""

    def __init__(
        self,
        root: Path,
        refresh: Callable[[list[str]], object],
        reconcile: Callable[[], ReconcileStats | None],
        period: float = DEFAULT_PERIOD,
        tuning: Tuning | None = None,
        on_ready: Callable[[], object] | None = None,
    ) -> None:
        tuned = tuning or Tuning()
        # called once, after the first reconcile that succeeds and before ``ready`` is set:
        # what a server loads so that its first answers are as fast as the next ones
        self._on_ready = on_ready
        self.root = Path(root)
        self._real_root = os.path.realpath(self.root)
        self._refresh = refresh
        self._reconcile = reconcile
        self.period = period
        self.interval = period  # the wait before the next periodic reconcile
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()  # a reconcile succeeded: the index is current
        self._first_pass = threading.Event()  # the first reconcile ended, well or not
        self._per_folder = tuned.watch_folders
        self._new_alone = tuned.walk_new_folders  # folders that came walked alone, not the root
        self.max_period = tuned.reconcile_max  # the longest wait while events miss nothing
        self._duty = tuned.reconcile_share  # the share of the time reconciles may take at most
        self._took = 0.0  # how long the last reconcile took
        self._watched: list[str] = []  # the folders the last watch was set up on

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kiwifs-watcher", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        thread.join(timeout)
        self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait_ready(self, poll: float = 0.5) -> bool:
        """Wait for the first reconcile; True when the index is current.

        False when that reconcile failed (a busy or damaged database: the caller reconciles
        itself, and gets the error or the repair) or the watcher stopped before it ended.
        """
        while not self._first_pass.wait(poll):
            if not self.running:
                break
        return self.ready.is_set()

    def _run(self) -> None:
        changes = self._listen()
        if self._stop.is_set():
            return
        self._reconciled()
        self._first_pass.set()
        self.interval = self._at_least_its_share(self.interval)
        last = time.monotonic()
        owed = False  # a batch of events was lost: a reconcile must find what it held
        recovered = -RECOVER_GAP  # when the last such reconcile ran
        try:
            while changes is not None:
                if owed and time.monotonic() - recovered >= RECOVER_GAP:
                    self._reconciled()
                    owed, recovered = False, time.monotonic()
                    last = recovered
                try:
                    batch = next(changes, None)
                except Exception as exc:  # noqa: BLE001 - e.g. a name that is not UTF-8
                    log.warning("file watcher lost a batch of events (%s); watching again", exc)
                    changes, owed = self._listen(), True
                    continue
                if batch is None:
                    return  # stopped
                wanted = [(change, path) for change, path in batch if self._wanted(change, path)]
                if wanted and self._per_folder and any(self._folder_event(p) for _, p in wanted):
                    came = self._folders_that_came(wanted)
                    changes.close()
                    # the new folders watched first, then walked: a file written meanwhile is
                    # seen by one or the other
                    if came is not None and self._new_alone:
                        changes = self._listen(self._watched_with(came))
                        self._safely(functools.partial(self._walk_new, came, wanted))
                        continue
                    changes = self._listen()
                    self._reconciled()
                    last = time.monotonic()
                    continue
                if wanted:
                    self._safely(functools.partial(self._on_changes, wanted))
                if time.monotonic() - last >= self.interval:
                    self.interval = self._next_interval(self._reconciled())
                    last = time.monotonic()
        except Exception:  # the watcher dies; the periodic loop below keeps the index right
            log.exception("file watcher failed; falling back to periodic reconcile")
            changes = None
        if changes is None:
            while not self._stop.wait(self.period):
                self._reconciled()

    def _reconciled(self) -> bool:
        """Reconcile; the index is current (``ready``) from the first one that succeeds.

        True when it found changes whose events were lost, or failed (or cannot tell: no
        stats)."""
        began = time.monotonic()
        try:
            stats = self._reconcile()
        except Exception:
            log.exception("index update failed")
            return True
        finally:
            self._took = time.monotonic() - began
        if not self.ready.is_set() and self._on_ready is not None:
            try:
                self._on_ready()
            except Exception:  # a warm-up is never a reason not to serve
                log.exception("warming up the index's answers failed")
        self.ready.set()
        return stats is None or stats.missed > 0

    def _next_interval(self, missed: bool) -> float:
        """The wait after a periodic reconcile: back to ``period`` when it found what the events
        missed, else twice the last one, up to :attr:`max_period`."""
        if missed:
            return self._at_least_its_share(self.period)
        return self._at_least_its_share(max(self.period, min(self.interval * 2, self.max_period)))

    def _at_least_its_share(self, wait: float) -> float:
        """``wait``, made long enough that the last reconcile took at most its share of the
        time (:attr:`Tuning.reconcile_share`): walking a million files takes seconds of a
        core, and a search answered meanwhile waits for the interpreter lock.

        Not before ``ready``: no answer is served from the index until a reconcile succeeds, so
        a failed first one (eight minutes for a first fill of a million files) is tried again
        after ``wait``, not after twenty times its duration."""
        if self._duty <= 0 or not self.ready.is_set():
            return wait
        return max(wait, self._took / self._duty)

    def _listen(
        self, folders: list[str] | None = None
    ) -> Generator[set[tuple[watchfiles.Change, str]], None, None] | None:
        """File events from here on, or ``None`` when they cannot be had (periodic only).
        ``folders``: the folders to watch, when known (else the root is walked for them; and
        again when a folder went before its watch was set up).

        The watches are in place when this returns, before the first reconcile starts: a file
        changed while that reconcile walks the root is then either walked after the change or
        heard as an event, never neither (setting them up on a 100k-file root takes ~0.6 s).
        """
        import watchfiles  # here, not at the top: one-shot commands never watch

        for attempt in range(LISTEN_ATTEMPTS):
            if not self._per_folder:
                folders = [os.fspath(self.root)]
            elif folders is None or attempt > 0:
                folders = self._folders()
            self._watched = folders
            # every change is yielded, hidden ones too (filtered by the loop): with a filter here
            # the generator would not yield while only hidden files change (the index database
            # being written, git), so neither this first step nor the periodic reconcile would come
            changes = watchfiles.watch(
                *folders,
                watch_filter=None,
                stop_event=self._stop,
                rust_timeout=TICK_MS,
                yield_on_timeout=True,
                debounce=50,
                step=10,
                raise_interrupt=False,
                ignore_permission_denied=True,
                recursive=not self._per_folder,
            )
            try:
                next(changes)  # sets the watches up; what it yields predates the reconcile
            except StopIteration:
                return None  # stopped meanwhile
            except Exception as exc:  # noqa: BLE001 - a folder went between the walk and its
                # watch, or an event already named a file whose name is not UTF-8: again
                if not self._per_folder:  # a recursive watch of a root holding a folder whose
                    # name is not UTF-8 cannot be set up: each visible folder is watched instead
                    log.warning("recursive file watch failed (%s); watching each folder", exc)
                    self._per_folder = True
                if attempt + 1 < LISTEN_ATTEMPTS:
                    continue
                log.exception("file watcher failed; falling back to periodic reconcile")
                return None
            return changes
        return None

    def _folders(self, under: Sequence[str] | None = None) -> list[str]:
        """The root (or the folders ``under``) and every folder below that the walk enters
        (:func:`list_folder`'s rule: not hidden, not a symbolic link), so the watches cover what
        the index keeps. A folder that cannot be listed is watched but not entered. A folder whose
        name is not UTF-8 is left out, and so is what it holds: watchfiles cannot take its path
        (the periodic reconcile finds its changes)."""
        folders: list[str] = []
        todo = list(under) if under is not None else [os.fspath(self.root)]
        while todo:
            folder = todo.pop()
            folders.append(folder)
            try:
                names = list_folder(folder).folders
            except OSError:
                continue
            todo.extend(f"{folder}/{name}" for name in names if not undecodable(name))
        return folders

    def _watched_with(self, came: list[str]) -> list[str]:
        """The folders watched now, and those that came with every folder under them: listing
        only the new ones, not the whole root again (each folder's listing reads all its
        entries: a million files took ~1 s a new folder)."""
        known = set(self._watched)
        # each folder once, should one that came also lie under another that came
        new = dict.fromkeys(f for f in self._folders(came) if f not in known)
        return self._watched + list(new)

    def _folder_event(self, path: str) -> bool:
        """Whether the event at ``path`` is about a folder (one that came, or went)."""
        rel = self._relative(path)
        if rel is None or self._markdown(path) is not None:
            return False
        return os.path.isdir(path) or "." not in rel.rsplit("/", 1)[-1]

    def _folders_that_came(self, events: list[tuple[watchfiles.Change, str]]) -> list[str] | None:
        """The folders these events added, when folders only came (each one there now, a real
        folder); ``None`` when one went or changed otherwise: then only a reconcile of the
        whole root can tell which rows to drop."""
        import watchfiles

        came: list[str] = []
        for change, path in events:
            if not self._folder_event(path):
                continue
            if change != watchfiles.Change.added or os.path.islink(path) or not os.path.isdir(path):
                return None
            came.append(path)
        return came

    def _walk_new(self, folders: list[str], events: list[tuple[watchfiles.Change, str]]) -> None:
        """Refresh what new folders hold (their files may predate their watches) and the files
        the same events named: the walk's rules, only under those folders."""
        rels = [rel for _, path in events if (rel := self._markdown(path)) is not None]
        todo = list(folders)
        while todo:
            folder = todo.pop()
            try:
                listing = list_folder(folder)
            except OSError:
                continue  # gone again, or unreadable: as the walk would skip it
            todo.extend(f"{folder}/{name}" for name in listing.folders)
            rels.extend(
                rel for name in listing.files if (rel := self._relative(f"{folder}/{name}"))
            )
        if rels:
            self._refresh(sorted(set(rels)))

    def _markdown(self, path: str) -> str | None:
        """``path`` relative to the root when it names a markdown file (not a folder)."""
        rel = self._relative(path)
        if rel is None or not rel.endswith(".md") or os.path.isdir(path):
            return None
        return rel

    def _wanted(self, change: watchfiles.Change, path: str) -> bool:
        rel = self._relative(path)
        return rel is not None and not any(seg.startswith(".") for seg in rel.split("/"))

    def _relative(self, path: str) -> str | None:
        for base in (os.fspath(self.root), self._real_root):
            if path.startswith(base.rstrip("/") + "/"):
                return path[len(base.rstrip("/")) + 1 :]
        return None

    def _on_changes(self, changes: Iterable[tuple[watchfiles.Change, str]]) -> None:
        rels: list[str] = []
        for _change, path in changes:
            if (md := self._markdown(path)) is not None:
                rels.append(md)
            elif self._folder_event(path):
                self._reconcile()  # a folder came or went: its files have no events of their own
                return
        if rels:
            self._refresh(sorted(set(rels)))

    def _safely(self, action: Callable[[], object]) -> bool:
        try:
            action()
        except Exception:
            log.exception("index update failed")
            return False
        return True
