"""A guard for tests that put a FIFO where kiwifs might read a file."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def fifo_valve(*fifos: Path, every: float = 2.0) -> Iterator[None]:
    """Unblock whoever got stuck opening one of ``fifos`` for reading.

    kiwifs must never open a FIFO; when it does (the defect), the open blocks forever and the
    test would hang instead of failing. This thread opens the write end now and then (which
    succeeds only while a reader waits) and closes it, so a stuck reader gets end-of-file.
    """
    stop = threading.Event()

    def release() -> None:
        while not stop.wait(every):
            for fifo in fifos:
                try:
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass  # ENXIO: nobody is waiting, as it should be

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
