"""Handing the C heap's memory back: the calls reach glibc where it is there (this suite runs on
Linux with glibc; elsewhere both are quietly nothing)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kiwifs.base import heap

glibc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")

# A child that starts threads which each allocate from the C heap, then counts glibc's arenas
# (malloc_info's XML has one <heap> a arena), with or without the limit set first.
ARENAS = """
import ctypes, sys, tempfile, threading
from kiwifs.base import heap
if sys.argv[1] == "limited":
    assert heap.limit_arenas(1)
def work():
    kept = [bytearray(300_000) for _ in range(20)]
threads = [threading.Thread(target=work) for _ in range(6)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
with tempfile.NamedTemporaryFile() as out:
    f = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(f))
    libc.fclose(ctypes.c_void_p(f))
    print(open(out.name).read().count("<heap nr="))
"""


def arenas(how: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", ARENAS, how], check=True, capture_output=True, text=True
    )
    return int(done.stdout)


@glibc
def test_the_arena_limit_holds_for_threads_started_after_it() -> None:
    assert arenas("limited") == 1
    assert arenas("free") > 1


@glibc
def test_free_memory_is_released_without_error() -> None:
    heap.release_free_memory()
    assert heap._malloc_trim() is not None
