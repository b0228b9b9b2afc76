"""Waiting for something another thread or process will do, without a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(check: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Whether ``check`` came true within ``timeout`` seconds (polled; asked once more at the
    end, so a slow machine that starves the loop still gets its answer)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def running(pid: int) -> bool:
    """True while ``pid`` runs (an exited process not yet reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
