"""A daemon thread that loops until stopped and can be woken early.

The index keeps three such loops while a server runs (the embedder, the history timeline and
the memory check); they share this start/stop/wake protocol so that each holds only its own
round of work, and the wait before the first round of the two that take a core for seconds on a
large root (:meth:`BackgroundLoop._settle`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

# A root of this many files or more gets its first round of the heavy loops (the memory check,
# the history replay) only ``settle`` seconds after the server is ready: each takes a core for
# seconds to minutes at a million files (the check ~20 s, a first replay of a million files'
# commit ~2 min), which the agents asking their first questions would otherwise share.
SETTLE_FILES = 100_000
READY_POLL = 0.2  # seconds between looks at whether the index is ready


class BackgroundLoop:
    """Runs :meth:`_run` on one daemon thread; :meth:`_run` loops while ``_stop`` is unset and
    waits on ``_wake`` between rounds, so :meth:`wake` starts the next round at once."""

    thread_name = "kiwifs-background"

    def __init__(self) -> None:
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        self._wake.set()
        thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        raise NotImplementedError

    def _settle(self, ready: Callable[[], bool], settle: float, files: Callable[[], int]) -> None:
        """Wait until ``ready()`` (the server's index is current with the files), then, when
        ``settle`` is positive and the root holds :data:`SETTLE_FILES` files or more
        (``files()``), ``settle`` seconds more; returns at once when the loop is stopped."""
        while not ready():
            if self._stop.wait(READY_POLL):
                return
        if settle <= 0:
            return
        try:
            count = files()
        except Exception:  # noqa: BLE001 - the round itself reports what is wrong
            return
        if count >= SETTLE_FILES:
            self._stop.wait(settle)
