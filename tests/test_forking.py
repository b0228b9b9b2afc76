"""When kiwifs may fork: Linux, one thread — counted by the kernel, not only by ``threading``."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from kiwifs.forking import fork_is_safe, usable_cpus

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks on Linux")


@linux_only
def test_a_fresh_single_threaded_process_may_fork() -> None:
    code = "from kiwifs.forking import fork_is_safe; print(fork_is_safe())"
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
        "from kiwifs.forking import fork_is_safe\n"
        "_thread.start_new_thread(time.sleep, (5,))\n"
        "time.sleep(0.2)\n"
        "print(threading.active_count(), fork_is_safe())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "False"]


def test_usable_cpus_is_at_least_one() -> None:
    assert usable_cpus() >= 1


def test_kiwifs_workers_caps_the_worker_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    from kiwifs.index.walk import worker_count

    cpus = usable_cpus()
    monkeypatch.setenv("KIWIFS_WORKERS", "1")
    assert usable_cpus() == 1
    assert worker_count() == 0  # the stat walk stays in this process
    monkeypatch.setenv("KIWIFS_WORKERS", "64")
    assert usable_cpus() == cpus  # a cap, never more than the CPUs
    monkeypatch.setenv("KIWIFS_WORKERS", "many")
    assert usable_cpus() == cpus  # not a number: ignored
