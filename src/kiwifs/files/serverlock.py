"""The server lock: one ``kiwifs serve`` per root.

Two servers on one root would each run a watcher, a commit process and background loops over the
same index and history. The lock is an ``flock`` on :data:`SERVER_LOCK`, which the kernel drops
when the holding process exits however it ends, so a crashed server never blocks the next one.
The file holds the holder's process id, for a person wondering who has it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from kiwifs.errors import Locked

SERVER_LOCK = ".kiwi/server.lock"


def acquire_server_lock(root: Path) -> int:
    """Take the root's server lock; returns the descriptor holding it (kept open until exit).

    Raises :class:`~kiwifs.errors.Locked` when another process holds it.
    """
    path = root / SERVER_LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise Locked(f"another kiwifs server already serves {root}") from exc
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd
