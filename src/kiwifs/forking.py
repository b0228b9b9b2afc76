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


def fork_is_safe() -> bool:
    """True on Linux when this process runs exactly one thread."""
    if not sys.platform.startswith("linux") or threading.active_count() != 1:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return True


WORKERS_VARIABLE = "KIWIFS_WORKERS"


def usable_cpus() -> int:
    """CPUs this process may run on, capped by ``KIWIFS_WORKERS`` when it is set.

    ``KIWIFS_WORKERS=1`` keeps a command in one process: the benchmarks use it to measure the
    worker processes against none, and a user can use it to leave the other CPUs alone.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    cap = os.environ.get(WORKERS_VARIABLE, "").strip()
    return max(1, min(cpus, int(cap))) if cap.isdigit() else cpus
