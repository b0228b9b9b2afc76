"""The write lock of a root (``kiwifs.writes.lock``): one thread lock per root in this process,
shared by every writer of that root, and let go once none of them is left."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

from kiwifs.knowledge import Knowledge
from kiwifs.writes import lock


def test_writers_of_one_root_share_its_thread_lock(root: Path) -> None:
    with Knowledge.open(root) as first, Knowledge.open(root / "." / "") as second:
        first.write("a.md", "a\n", actor="t")
        seen: list[bool] = []
        shared = lock._root_locks[os.path.realpath(root)]
        with shared:  # held here: the other root's writer must wait for it
            writer = threading.Thread(
                target=lambda: seen.append(bool(second.write("b.md", "b\n", actor="t")))
            )
            writer.start()
            writer.join(0.3)
            assert writer.is_alive() and not seen
        writer.join(10)
        assert seen == [True]


def test_a_closed_roots_thread_lock_is_let_go(tmp_path: Path) -> None:
    """A server opens and closes many roots (its spaces): each root's lock must go with it, not
    stay in the process's table for good."""
    roots = [tmp_path / f"kb{i}" for i in range(3)]
    for path in roots:
        Knowledge.init(path)
        with Knowledge.open(path) as kb:
            kb.write("n.md", "x\n", actor="t")
            assert os.path.realpath(path) in lock._root_locks
        del kb
    gc.collect()
    assert not {os.path.realpath(p) for p in roots} & set(lock._root_locks)
