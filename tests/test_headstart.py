"""The head start of ``kiwifs memory report``'s stat walk (``index.headstart``).

The command starts the walk before it imports the core; the index takes that walk only when it
would have started the same one, else stops it and walks anew. Either way the answer is the
scan's. Each case runs in a fresh interpreter (the walk forks only from a single-threaded
process), on a small root with the walk forced into worker processes as on two CPUs: two for the
index's own walk, one for the head start (the command's own process is the other).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kiwifs.index import db, headstart
from kiwifs.knowledge import Knowledge

SCRIPT = r"""
import json, os, sys
from click.testing import CliRunner
from kiwifs.index import headstart, walk

walk.PARALLEL_THRESHOLD = 0
walk.worker_count = lambda: 2  # whatever this machine's CPUs
root, mode = sys.argv[1], sys.argv[2]
headstart.ENABLED = mode != "off"
taken = []
_take = headstart.take
def take(*args):
    early = headstart._early
    pending = _take(*args)
    taken.append(early is not None and pending is early.walk)
    return pending
headstart.take = take

with open(os.path.join(root, "episodes/new.md"), "w") as fh:  # behind the index's back
    fh.write("---\nepisode_id: e-9\n---\n")
if mode == "stale":  # the stored digests move after the walk began: it is not the right one
    import sqlite3
    headstart.begin(root)
    conn = sqlite3.connect(os.path.join(root, ".kiwi/state/index.db"))
    with conn:
        conn.execute("DELETE FROM dirs WHERE key = ?", (b"concepts",))
    conn.close()

from kiwifs.cli import cli
from kiwifs.knowledge import Knowledge

printed = CliRunner().invoke(cli, ["memory", "report", "--json", "--root", root])
assert printed.exit_code == 0, printed.output
with Knowledge.open(root) as kb:
    scan = json.dumps(kb.memory_report(use_index=False).to_json(), indent=2, ensure_ascii=False)
try:
    os.waitpid(-1, os.WNOHANG)
    left = True
except ChildProcessError:
    left = False
print(json.dumps({"printed": printed.output, "scan": scan + "\n", "forks": len(forks),
                  "taken": taken, "children_left": left}))
"""


@pytest.fixture
def indexed_root(make_root: Callable[..., Path]) -> Path:
    files = {f"episodes/e{i}.md": f"---\nepisode_id: e-{i}\n---\n" for i in range(6)}
    root = make_root({**files, "concepts/c.md": "---\nmerged-from: [{type: run, id: e-2}]\n---\n"})
    with Knowledge.open(root) as kb:
        kb.reindex()
    return root


@pytest.mark.parametrize(
    ("mode", "taken", "forks"),
    [("on", [True], 1), ("off", [False], 2), ("stale", [False], 3)],
)
def test_the_report_takes_the_walk_begun_early_only_when_it_is_the_same_walk(
    indexed_root: Path,
    run_counting_forks: Callable[..., Any],
    mode: str,
    taken: list[bool],
    forks: int,
) -> None:
    result = run_counting_forks(SCRIPT, str(indexed_root), mode)
    assert (result["taken"], result["forks"]) == (taken, forks)
    assert result["printed"] == result["scan"]
    assert '"e-9"' in result["printed"].split('"unmerged"')[1]  # the edit made before it ran
    assert not result["children_left"]  # an early walk not taken was stopped and reaped


DISCARD = r"""
import json, os, sys
from kiwifs.index import headstart, walk

walk.PARALLEL_THRESHOLD = 0
walk.worker_count = lambda: 2
headstart.begin(sys.argv[1])
began = len(forks)
headstart.discard()  # the command failed before the index took it (also run at exit)
try:
    os.waitpid(-1, os.WNOHANG)
    left = True
except ChildProcessError:
    left = False
print(json.dumps({"began": began, "children_left": left}))
"""


def test_a_walk_begun_early_and_never_taken_is_stopped(
    indexed_root: Path, run_counting_forks: Callable[..., Any]
) -> None:
    assert run_counting_forks(DISCARD, str(indexed_root)) == {"began": 1, "children_left": False}


def test_no_head_start_without_an_index(tmp_path: Path) -> None:
    (tmp_path / "episodes").mkdir()
    headstart.begin(tmp_path)  # nothing to read the digests from: no walk, no error
    assert headstart._early is None
    assert not (tmp_path / headstart.INDEX_PATH).exists()  # and no index file made


def test_the_head_start_reads_the_index_where_the_index_lives() -> None:
    assert headstart.INDEX_PATH == os.path.join(db.STATE_DIR, db.INDEX_FILE)
