"""When kiwifs may fork worker processes: on Linux, from a process with a single thread.

The full scan and the large stat walk fork workers, which inherit the parent's memory instead of
re-importing anything. A forked child of a threaded process can deadlock on a lock some other
thread held (Python 3.12 warns about it), and that counts threads started by C libraries too, so
the check asks the kernel, not only :mod:`threading`. macOS system libraries do not survive a
fork; there the callers use another start method or stay in one process.
"""

from __future__ import annotations

import os
import sys
import threading
import time


def fork_is_safe() -> bool:
    """True on Linux when this process runs exactly one thread."""
    if not sys.platform.startswith("linux") or threading.active_count() != 1:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return True


def usable_cpus(cap: int | None = None) -> int:
    """CPUs this process may run on, at most ``cap`` when given (``Tuning.workers``, which
    ``KIWIFS_WORKERS`` sets).

    A cap of 1 keeps a command in one process: the benchmarks use it to measure the worker
    processes against none, and a user can use it to leave the other CPUs alone.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, cap)) if cap is not None else cpus


PARENT_POLL_SECONDS = 1.0


def exit_with_parent(parent: int) -> None:
    """In a pool's worker process: exit once ``parent`` (the pid that made the pool) is gone.

    A parent that stops cleanly shuts its pool down; one killed (``kill -9``, a crash) cannot,
    and its workers then wait forever on their task queue, whose write end each of them holds
    itself, so none ever sees the end of it. A thread that sees the worker handed to another
    parent ends it instead. ``parent`` is passed in rather than read here: a worker still
    starting when its parent died has already been handed on.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(0)

    threading.Thread(target=watch, name="kiwifs-parent-watch", daemon=True).start()


BACKGROUND_NICENESS = 10  # how far a background worker's priority is lowered


def yield_the_cpu() -> None:
    """Lower this process's priority (:data:`BACKGROUND_NICENESS`): a background worker (the
    memory check, the first import into git) then takes only what a server's requests leave of
    the CPU, so on a machine of two cores its work cannot make the first searches wait."""
    try:
        os.nice(BACKGROUND_NICENESS)
    except OSError:  # not allowed here: the worker then simply competes as an equal
        pass
