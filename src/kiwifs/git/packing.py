"""When a repository's loose objects are packed: a background packing once they pile up.

libgit2 writes each object of a commit as a file of its own (a *loose* object) and, unlike
git's own commands (``gc --auto``), never packs them. A commit rewrites the tree of every folder
on its path, and the tree of a folder of thousands of files is hundreds of KB: on a root of
100k files, 4,000 writes (about 1,100 commits) added 413-443 MB of loose objects, and a
million-file root served for a day held 1.47M of them, 29 GB. Packed, each tree is stored as a
small delta of the one before (those 443 MB took 2.7 MB; the repository 0.22x), and a file's
versions come 14x as fast with the commit graph (docs/benchmarks.md). The packing itself is
:mod:`kiwifs.git.repack`'s.

:class:`Packer` counts a repository's commits; at the first and then every
:data:`CHECK_EVERY`, it estimates the loose objects as ``git gc --auto`` does, from one of the
256 folders git spreads them over (:func:`loose`). Once there are about ``at`` of them
(``Tuning.pack_loose_objects``, git's own 6,700 by default) or :data:`LOOSE_BYTES` of them, it
starts ``python -m kiwifs.git.repack ROOT``, at a lowered priority, in a process group of its
own: a server that stops (or a one-shot command that exits) leaves it to finish.

A packing waits for the commits of this process to pause for :data:`QUIET` seconds, unless
:data:`BURST` times the thresholds pile up: deleting thousands of loose files beside a server's
fsyncs cost a burst of writes from four clients 5-14 % of its rate (a core's share is not the
cost: the packing runs niced); the same packing a second after the burst left the rate within
the machine's noise (0.96-0.99x).

One packing at a time per repository, whichever process started it: the child holds a lock on
:data:`LOCK` (``flock``) for as long as it runs, and a packer that finds it held waits for its
next check. After a packing that took ``d`` seconds the next one waits ``9 d`` (at most
:data:`MAX_GAP`): a tenth of the time at most, however fast commits come.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

log = logging.getLogger(__name__)

PACK_AT = 6700  # loose objects that start a packing: git's own gc.auto
LOOSE_BYTES = 64 << 20  # ... or their bytes, however few (trees of big folders)
CHECK_EVERY = 8  # commits between two estimates (each lists one folder: ~0.1 ms)
SAMPLE = "17"  # the folder of objects counted, as git counts it: its objects x 256
SAMPLED_AT_LEAST = 2  # objects in it before their bytes count (one big file is not a pile)
DUTY = 0.1  # the share of time packing may take: the next waits (1 / DUTY - 1) x its duration
MAX_GAP = 600.0  # ... but never longer than this, in seconds (and this after a failed packing)
LOCK = "kiwifs-pack.lock"  # in the git folder, held by the packing child
QUIET = 1.0  # seconds with no commit from this process before a packing starts...
BURST = 8  # ... unless the loose objects are this many times the thresholds
LOCKED_AGAIN = 30.0  # seconds before a check that found another process packing looks again


def loose(objects: Path, exact: bool = False) -> tuple[int, int]:
    """The loose objects under ``objects`` (a repository's ``objects`` folder), estimated from
    :data:`SAMPLE` unless ``exact``: their number and bytes. Folders that cannot be read count
    as empty."""
    folders = [f"{n:02x}" for n in range(256)] if exact else [SAMPLE]
    count = size = 0
    for name in folders:
        try:
            with os.scandir(objects / name) as entries:
                for entry in entries:
                    try:
                        size += entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue
                    count += 1
        except OSError:
            continue
    if exact:
        return count, size
    return count * 256, size * 256 if count >= SAMPLED_AT_LEAST else 0


def locked(git_dir: Path) -> bool:
    """Whether a packing holds the repository's lock now."""
    try:
        fd = os.open(git_dir / LOCK, os.O_RDONLY)
    except OSError:
        return False  # never packed, or no such folder
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing lets the lock go too
    return False


class Packer:
    """Starts a packing of ``root``'s repository when its loose objects call for one.

    ``at``: the loose objects that do (``Tuning.pack_loose_objects``); 0 never packs.
    """

    def __init__(self, root: Path, at: int = PACK_AT) -> None:
        self.root = root
        self.at = at
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)  # notified once a packing's child ends
        self._commits = 0
        self._child: subprocess.Popen[bytes] | None = None
        self._not_before = 0.0  # time.monotonic() before which no packing starts
        self._again = False  # a check found a packing running: look again once it has ended
        self._timer: threading.Timer | None = None  # the next look, when one is due
        self._closed = False
        self._last_commit = -QUIET  # time.monotonic() of this process's last commit

    def committed(self) -> None:
        """A commit was made here: every :data:`CHECK_EVERY` commits, the first included,
        start a packing if one is due."""
        if self.at <= 0:
            return
        with self._lock:
            self._commits += 1
            self._last_commit = time.monotonic()
            if (self._commits - 1) % CHECK_EVERY:
                return
        self.check()

    def check(self) -> bool:
        """Start a packing if one is due and none runs; whether one was started. A check that
        had to wait (a packing running, its gap not over, commits still coming) looks again
        when it may: the loose objects of a burst of writes are packed after it, not at the
        next commit."""
        with self._lock:
            if self.at <= 0 or self._closed:
                return False
            if self._child is not None:
                self._again = True
                return False
            now = time.monotonic()
            if now < self._not_before:
                self._look_again(self._not_before - now)
                return False
            git_dir = self.root / ".git"
            count, size = loose(git_dir / "objects", exact=self.at < 256)
            if count < self.at and size < LOOSE_BYTES:
                return False
            busy = QUIET - (now - self._last_commit)
            if busy > 0 and count < self.at * BURST and size < LOOSE_BYTES * BURST:
                self._look_again(busy)  # commits keep coming: pack once they pause
                return False
            if locked(git_dir):  # another process packs: what it leaves is seen later
                self._look_again(LOCKED_AGAIN)
                return False
            import subprocess  # only a packing starts a process: a report never imports it

            argv = [sys.executable, "-m", "kiwifs.git.repack", os.fspath(self.root.absolute())]
            try:
                self._child = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    # a process group of its own: a terminal's Ctrl-C to this process leaves it
                    # to finish. Not a session of its own: with the kernel's autogroups (most
                    # desktops and servers) a new session is scheduled as an equal of this one,
                    # whatever its niceness, and packing took 5-20 % of a server's writes/s
                    process_group=0,
                )
            except OSError as exc:
                log.warning("cannot start packing git objects: %s", exc)
                self._not_before = now + MAX_GAP
                return False
            child = self._child
        threading.Thread(
            target=self._wait, args=(child, now), name="kiwifs-git-pack", daemon=True
        ).start()
        return True

    def close(self) -> None:
        """No more checks (a packing already started finishes on its own)."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _look_again(self, delay: float) -> None:
        """Check again in ``delay`` seconds, unless a check is already set (under the lock)."""
        if self._timer is None and not self._closed:
            self._timer = threading.Timer(delay, self._timed_check)
            self._timer.daemon = True
            self._timer.start()

    def _timed_check(self) -> None:
        with self._lock:
            self._timer = None
        self.check()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the packing this packer started, if one runs, to end (tests)."""
        with self._ended:
            self._ended.wait_for(lambda: self._child is None, timeout)

    def _wait(self, child: subprocess.Popen[bytes], started: float) -> None:
        _, err = child.communicate()
        took = time.monotonic() - started
        if child.returncode:  # a broken repository, no git: tried again after the longest gap
            lines = err.decode("utf-8", "replace").strip().splitlines()
            log.warning("packing git objects failed: %s", lines[-1] if lines else child.returncode)
            gap = MAX_GAP
        else:
            log.info("packed git objects in %.1f s", took)
            gap = min(took * (1 / DUTY - 1), MAX_GAP)
        with self._lock:
            self._child = None
            self._ended.notify_all()
            self._not_before = time.monotonic() + gap
            if self._again:
                self._again = False
                self._look_again(gap)
