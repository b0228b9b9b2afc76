"""A daemon thread that loops until stopped and can be woken early.

The index keeps three such loops while a server runs (the embedder, the history timeline and
the memory check); they share this start/stop/wake protocol so that each holds only its own
round of work.
"""

from __future__ import annotations

import threading


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
