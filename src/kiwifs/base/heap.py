"""Handing memory a large piece of work freed back to the operating system.

C libraries called from Python (libgit2 through pygit2 above all) allocate with the C library's
``malloc``. glibc keeps what they free for the process's later allocations and returns it to the
system only from the top of a heap: the ~200 MB of a million-file git index, read and dropped
once, stayed in a server's resident memory for good. ``malloc_trim(0)`` releases every free page
of every heap. It costs a few milliseconds, so it is asked only after such a piece of work.

Elsewhere (another C library, another system) it does nothing.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here: a one-shot command that never trims does not load it

    try:
        # the symbols this process has loaded, the C library's among them
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    return trim


def release_free_memory() -> None:
    """Return the C heap's free pages to the system (glibc; elsewhere nothing)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


# glibc's mallopt parameter for the most arenas (malloc.h: M_ARENA_MAX)
_M_ARENA_MAX = -8
SERVER_ARENAS = 2


def limit_arenas(count: int = SERVER_ARENAS) -> bool:
    """Let the C heap keep at most ``count`` arenas from now on (glibc; elsewhere nothing);
    True when glibc took it.

    glibc gives threads that contend for the heap arenas of their own, up to eight per core,
    and each keeps what its threads freed. A server's threads (requests, the writeback, the
    watcher, the search's summing, the replay, SQLite and numpy underneath) each touch large
    transient allocations, so at a million files the arenas held ~100–160 MB more than two
    would after two minutes of mixed load (``bench/mixed_load.py``: 686–742 MB against 583 MB
    at the end). Called once by the long-lived commands (``serve``, ``mcp``) as they start."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        mallopt: Callable[[int, int], int] = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    return bool(mallopt(_M_ARENA_MAX, count))
