"""The walk of a whole root: the entries the walk rules give, per-folder digests, forked.

The forked walk runs in a fresh interpreter (``fork`` is only used by a single-threaded process,
and the test process may have threads), with the size threshold at zero and tiny signing
chunks so that even a small root is cut into sub-trees, big-folder chunks and two workers.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kiwifs.base.walk import walk
from kiwifs.index.walk import start_walk, stat_walk, worker_count

SEGMENT = "d" * 250  # 20 nested: the deep end is longer than PATH_MAX, so it cannot be listed


def build_tree(root: Path) -> bytes:
    """A root with every kind of entry; returns the key of the folder that cannot be listed."""
    files = {"index.md": "x", "notes.txt": "not knowledge", ".hidden/h.md": "hidden"}
    for year in ("2023", "2024"):
        for month in ("01", "02", "03"):
            for i in range(7):
                files[f"episodes/{year}/{month}/run-{i}.md"] = f"run {i}"
    files.update({f"flat/f-{i:02}.md": "f" * i for i in range(30)})
    files.update({"d/.e.md": "hidden", "g.md/h.md": "a folder named .md", "real/i.md": "x"})
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    os.symlink(root / "index.md", root / "flat/link-in.md")
    os.symlink("/etc/hostname", root / "flat/link-out.md")
    os.symlink(root / "missing.md", root / "link-broken.md")
    os.symlink(root / "real", root / "linked-dir")
    os.symlink(root / ".hidden/h.md", root / "flat/link-hidden.md")
    os.symlink(".hidden", root / "hidden-dir")
    os.mkfifo(root / "flat/fifo.md")
    (root / "deep").mkdir()
    fd = os.open(root / "deep", os.O_RDONLY)
    try:
        for _ in range(20):
            os.mkdir(SEGMENT, dir_fd=fd)
            inner = os.open(SEGMENT, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    depth = next(n for n in range(21) if len(str(root / "deep") + f"/{SEGMENT}" * n) > 4096)
    return b"\0".join([b"deep", *[SEGMENT.encode()] * depth])


def key(rel: str) -> bytes:
    return rel.replace("/", "\0").encode()


def test_walk_finds_every_knowledge_file_and_names_what_it_cannot_use(tmp_path: Path) -> None:
    """Hidden names, other suffixes and symlinked folders are skipped; symlinked files are
    checked; a folder that cannot be listed is an entry of its own."""
    unlistable = build_tree(tmp_path)
    files = ["index.md", "link-broken.md", "g.md/h.md", "real/i.md"]
    files += ["flat/link-in.md", "flat/link-out.md", "flat/link-hidden.md", "flat/fifo.md"]
    files += [f"flat/f-{i:02}.md" for i in range(30)]
    files += [
        f"episodes/{y}/{m}/run-{i}.md"
        for y in ("2023", "2024")
        for m in ("01", "02", "03")
        for i in range(7)
    ]
    errors = {
        key("flat/link-out.md"): "symlink points outside the root",
        key("flat/link-hidden.md"): "symlink points to a hidden path",
        key("link-broken.md"): "broken symlink",
        unlistable: "cannot list folder: File name too long",
    }
    expected = {key(rel): None for rel in files} | errors
    walked = stat_walk(tmp_path)
    assert {k: walked.errors.get(k) for k in walked.sigs} == expected
    assert walked.errors == errors
    assert {key(e.rel): e.error for e in walk(tmp_path)} == expected  # the scan's walk


def test_a_root_that_is_not_a_folder_is_one_error_entry(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    walked = stat_walk(tmp_path / "file")
    assert walked.errors == {b"": "cannot list folder: Not a directory"}


def test_digests_keep_only_the_folders_that_moved(tmp_path: Path) -> None:
    build_tree(tmp_path)
    first = start_walk(tmp_path).result()
    again = start_walk(tmp_path, first.digests).result()
    assert again.changed == [] and again.state.sigs == {}
    assert again.digests == first.digests and again.files == first.files
    (tmp_path / "episodes/2023/02/run-3.md").write_text("longer text now")
    (tmp_path / "flat/new.md").write_text("new")
    moved = start_walk(tmp_path, first.digests).result()
    assert sorted(moved.changed) == [b"episodes\x002023\x0002", b"flat"]
    assert b"flat\0new.md" in moved.state.sigs
    assert b"episodes\x002023\x0002\x00run-3.md" in moved.state.sigs
    assert b"index.md" not in moved.state.sigs


FORKED = """
import json, os, sys
from kiwifs.index import walk

root, unlistable = sys.argv[1], bytes.fromhex(sys.argv[2])
serial = walk.start_walk(root, parallel=False).result()
walk.PARALLEL_THRESHOLD = 0
walk.CHUNK = 4
walk.worker_count = lambda cap=None: 2  # whatever this machine's CPUs
sizes = dict(serial.counts)
sizes[unlistable] = 10**6  # so the plan lists its way down to it and it is a job of its own
pending = walk.start_walk(root, sizes=sizes)
forked = pending.result()
workers = len(forks)
again = walk.start_walk(root, serial.digests, sizes=sizes)
steady = again.result()
walk.worker_count = lambda cap=None: 3
del forks[:]
three = walk.start_walk(root, sizes=sizes).result()
three_workers = len(forks)
walk.worker_count = lambda cap=None: 2
cancelled = walk.start_walk(root, sizes=sizes)
cancelled.cancel()
try:
    os.waitpid(-1, os.WNOHANG)
    reaped = False
except ChildProcessError:
    reaped = True

def state(w):
    return {
        "sigs": {k.hex(): v for k, v in w.state.sigs.items()},
        "errors": {k.hex(): v for k, v in w.state.errors.items()},
        "digests": {k.hex(): v.hex() for k, v in w.digests.items()},
        "counts": {k.hex(): v for k, v in w.counts.items()},
    }

print(json.dumps({
    "serial": state(serial),
    "forked": state(forked),
    "workers": workers,
    "steady_forked": again.forked,
    "steady_changed": [k.hex() for k in steady.changed],
    "listed": len(pending.listed),
    "three": state(three),
    "three_workers": three_workers,
    "cancel_forked": cancelled.forked,
    "cancel_reaped": reaped,
}))
"""


def test_forked_walk_equals_the_serial_walk(
    tmp_path: Path, run_counting_forks: Callable[..., Any]
) -> None:
    unlistable = build_tree(tmp_path)
    result = run_counting_forks(FORKED, str(tmp_path), unlistable.hex())
    assert result["workers"] == 2
    assert result["listed"] > 3, "the plan must have cut the tree below the root"
    assert result["forked"] == result["serial"]
    assert result["three_workers"] == 3 and result["three"] == result["serial"]
    errors = result["serial"]["errors"]
    assert errors[unlistable.hex()] == "cannot list folder: File name too long"
    assert result["steady_forked"] and result["steady_changed"] == []
    assert result["cancel_forked"] and result["cancel_reaped"], "cancel leaves no child behind"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_walk_in_a_threaded_process_does_not_fork(tmp_path: Path) -> None:
    import threading

    build_tree(tmp_path)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert worker_count() == 0
        sizes = start_walk(tmp_path).result().counts
        pending = start_walk(tmp_path, sizes={k: v * 10**6 for k, v in sizes.items()})
        assert not pending.forked
        assert pending.result().state == stat_walk(tmp_path)
    finally:
        stop.set()
        thread.join()
