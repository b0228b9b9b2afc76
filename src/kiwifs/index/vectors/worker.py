"""The background embedder of a running server: empties the vector queue as writes fill it.

Writes (through kiwifs, or out of band and seen by the watcher or a reconcile) queue their
content in the same transaction as their row; :meth:`EmbedWorker.wake` is called after them so
the worker starts at once, and it also looks every ``idle`` seconds, so a missed wake-up costs
at most that. A failing embedder is retried when its entries come due (backoff in
:mod:`kiwifs.index.vectors.store`); vectors of content no file has any more are collected now and
then.
"""

from __future__ import annotations

import logging
import time

from kiwifs.index.background import BackgroundLoop
from kiwifs.index.vectors.store import VectorStore

log = logging.getLogger(__name__)

IDLE_SECONDS = 2.0
GC_SECONDS = 300.0
MIN_WAIT = 0.05


class EmbedWorker(BackgroundLoop):
    """One daemon thread running embedding rounds until stopped."""

    thread_name = "kiwifs-embedder"

    def __init__(self, store: VectorStore, idle: float = IDLE_SECONDS) -> None:
        self.store = store
        self.idle = idle
        super().__init__()

    def _run(self) -> None:
        last_gc = 0.0
        while not self._stop.is_set():
            try:
                if self.store.embed_ready().attempted:
                    continue
                if time.monotonic() - last_gc >= GC_SECONDS:
                    self.store.collect_garbage()
                    last_gc = time.monotonic()
                wait = self._wait_seconds()
            except Exception:  # noqa: BLE001 - the worker must outlive any one failure
                log.exception("embedding round failed; retrying")
                wait = self.idle
            self._wake.wait(wait)
            self._wake.clear()

    def _wait_seconds(self) -> float:
        due = self.store.next_due()
        if due is None:
            return self.idle
        return min(self.idle, max(MIN_WAIT, due - self.store.clock()))
