"""A real ``kiwifs serve`` for the few tests that need a socket and a separate process.

Most route tests run in process (``asgiclient``); these helpers are for what only a real server
shows: signals, several processes, crashes, a browser.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

KIWIFS = shutil.which("kiwifs") or str(Path(sys.executable).with_name("kiwifs"))


def free_port() -> int:
    """A port free on 127.0.0.1 now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(
    root: Path,
    log: Path | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    probe: str = "/readyz",
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``kiwifs serve`` on a free port until the block ends: ``(base URL, process)``.

    Waits (bounded) until ``probe`` answers 200: ``/readyz`` means the routes are built and the
    index is current, ``/health`` only that the server is up. The output goes to ``log``
    (``serve.log`` beside the root by default), shown when the server dies early.
    """
    port = free_port()
    log = log or root.parent / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [KIWIFS, "serve", "--root", str(root), "--port", str(port), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            assert proc.poll() is None, log.read_text(errors="replace")
            try:
                if httpx.get(base + probe, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        else:
            raise AssertionError(f"kiwifs serve never answered {probe}")
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
