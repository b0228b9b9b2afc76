"""When kiwifs may fork: Linux, one thread — counted by the kernel, not only by ``threading``."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kiwifs.base.forking import BACKGROUND_NICENESS, fork_is_safe, usable_cpus
from kiwifs.tuning import Tuning
from waiting import running, wait_for

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks on Linux")


@linux_only
def test_a_fresh_single_threaded_process_may_fork() -> None:
    code = "from kiwifs.base.forking import fork_is_safe; print(fork_is_safe())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_a_python_thread_forbids_forking() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not fork_is_safe()
    finally:
        stop.set()
        thread.join()


@linux_only
def test_a_thread_threading_does_not_know_forbids_forking() -> None:
    """A thread started below ``threading`` (as C libraries do) is seen by the kernel."""
    code = (
        "import _thread, threading, time\n"
        "from kiwifs.base.forking import fork_is_safe\n"
        "_thread.start_new_thread(time.sleep, (5,))\n"
        "time.sleep(0.2)\n"
        "print(threading.active_count(), fork_is_safe())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "False"]


def test_usable_cpus_is_at_least_one() -> None:
    assert usable_cpus() >= 1


def test_kiwifs_workers_caps_the_worker_processes() -> None:
    from kiwifs.index.walk import worker_count

    cpus = usable_cpus()
    one = Tuning.from_env({"KIWIFS_WORKERS": "1"}).workers
    assert usable_cpus(one) == 1
    assert worker_count(one) == 0  # the stat walk stays in this process
    assert usable_cpus(Tuning.from_env({"KIWIFS_WORKERS": "64"}).workers) == cpus  # a cap only
    assert Tuning.from_env({"KIWIFS_WORKERS": "many"}).workers is None  # not a number: ignored


# A process that starts a pool of forked workers, prints their pids and dies by SIGKILL, as a
# killed `kiwifs reindex` or report does: it gets no chance to shut the pool down.
KILLED_WHILE_PARSING = """
import glob, os, signal, sys
from pathlib import Path
root = sys.argv[1]
for i in range(40):
    Path(root, f"e{i}.md").write_text(f"---\\nepisode_id: e{i}\\n---\\nbody {i}\\n")
if sys.argv[2] == "reindex":
    from kiwifs.index.build import parsed
    keys = [f"e{i}.md".encode() for i in range(40)]
    rows = parsed(root, root, keys, {}, workers=2, threshold=1)
else:
    from kiwifs.memory.scan import parallel_facts, walk_jobs
    rows = parallel_facts(walk_jobs(root), 2, chunk_files=1)
assert next(rows) is not None
tasks = glob.glob(f"/proc/{os.getpid()}/task/*/children")
print(" ".join(pid for task in tasks for pid in open(task).read().split()), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@linux_only
@pytest.mark.parametrize("pool", ["reindex", "scan"])
def test_workers_leave_when_the_process_that_forked_them_is_killed(
    tmp_path: Path, pool: str
) -> None:
    """Each worker holds the write end of its own task queue, so without a watch on its parent
    it would wait on that queue forever once the parent is killed."""
    out = tmp_path / "children.txt"  # a file, not a pipe: a stuck worker would hold a pipe open
    (tmp_path / "root").mkdir()
    with out.open("w") as stdout:
        command = [sys.executable, "-c", KILLED_WHILE_PARSING, str(tmp_path / "root"), pool]
        assert subprocess.run(command, stdout=stdout, check=False).returncode == -9
    workers = [int(pid) for pid in out.read_text().split()]
    assert len(workers) == 2
    assert wait_for(lambda: not any(running(pid) for pid in workers), timeout=60)


def test_a_background_worker_runs_at_a_lower_priority() -> None:
    """yield_the_cpu lowers the calling process's priority (in a child: a test process keeps its
    own), as the memory check's worker and the first import into git do."""
    code = (
        "import os\n"
        "from kiwifs.base.forking import yield_the_cpu\n"
        "before = os.nice(0)\n"
        "yield_the_cpu()\n"
        "print(before, os.nice(0))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = map(int, out.stdout.split())
    assert after == min(19, before + BACKGROUND_NICENESS)
