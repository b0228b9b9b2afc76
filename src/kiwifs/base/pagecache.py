"""Reading a file ahead into the operating system's page cache.

A server's first searches on a large root read pages of its index at random: the rows and texts
of each hit, the words the feedback counts. When the index is not in the page cache (the machine
restarted, or other files pushed it out) each of those reads waits on the disk, and a search
that takes 15 ms with a warm cache takes 20-25 ms. Reading the whole file once, in order, costs
a few seconds of disk time at a million files (2.2 GB) and makes every later random read a
memory copy. ``posix_fadvise(WILLNEED)`` would ask the kernel to do it, but it is only advice
(ext4 on a virtual disk ignored it), so the file is read.

**In a process of its own.** The file is an SQLite database this process has open, and POSIX
record locks belong to a process and a file: closing *any* descriptor of the file drops every
lock the process holds on it, SQLite's included (a write then went unseen by the server's
other connections). A child process reading it holds no lock of ours, so its ``close`` takes
none away.
"""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

log = logging.getLogger(__name__)

CHUNK = 1 << 20  # bytes read at a time
MEMINFO = Path("/proc/meminfo")
READ_FROM = 64 << 20  # a smaller file is not worth a process: its pages come in with use
# the reader: the standard library only, so the child starts in a few tens of milliseconds
READER = f"""import sys
b = bytearray({CHUNK})
with open(sys.argv[1], "rb", buffering=0) as f:
    while f.readinto(b):
        pass
"""


def available_memory() -> int | None:
    """The memory the kernel can give without swapping (``MemAvailable``), in bytes; ``None``
    where that is not known (no ``/proc``)."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def worth_reading(size: int, share: float, available: int | None) -> bool:
    """Whether a file of ``size`` bytes is read ahead: when it is at least :data:`READ_FROM`
    and at most ``share`` of the available memory (a file the cache cannot hold would only push
    other files out)."""
    return share > 0 and available is not None and READ_FROM <= size <= share * available


def read_ahead(path: Path, share: float) -> threading.Thread | None:
    """Read ``path`` once from start to end in a child process, when it is at most ``share`` of
    the available memory; a daemon thread that waits for the child (started), or ``None`` when
    the file is not read."""
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if not worth_reading(size, share, available_memory()):
        return None
    import subprocess  # servers only: a one-shot command's start-up imports none of it

    try:
        child = subprocess.Popen(
            [sys.executable, "-c", READER, str(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError as exc:  # a cache left cold is slower, never wrong
        log.debug("reading %s ahead did not start: %s", path, exc)
        return None
    thread = threading.Thread(target=child.wait, name="kiwifs-read-ahead", daemon=True)
    thread.start()
    return thread
