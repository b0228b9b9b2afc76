"""Folder fsyncs beside the file's: writers of one folder share one that has not started yet."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kiwifs.files.foldersync import FolderSyncs


def test_a_fsync_not_started_is_shared_and_a_started_one_is_not(tmp_path: Path) -> None:
    syncs = FolderSyncs()
    pool = ThreadPoolExecutor(1)
    syncs._pool = pool
    gate = threading.Event()
    pool.submit(gate.wait)  # the one worker is busy: what is submitted now waits
    a, b = os.open(tmp_path, os.O_RDONLY), os.open(tmp_path, os.O_RDONLY)
    other = tmp_path / "other"
    other.mkdir()
    c = os.open(other, os.O_RDONLY)
    try:
        first = syncs.submit(a)
        assert syncs.submit(b) is first  # same folder, not started: shared
        assert syncs.submit(c) is not first  # another folder: its own
        gate.set()
        first.result(timeout=30)
        assert syncs.submit(a) is not first  # done: a rename made now needs a new one
    finally:
        for fd in (a, b, c):
            os.close(fd)
        pool.shutdown()


def test_the_future_is_done_once_the_folder_is_fsynced(tmp_path: Path) -> None:
    syncs = FolderSyncs()
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        future = syncs.submit(fd)
        assert future.result(timeout=30) is None
    finally:
        os.close(fd)
