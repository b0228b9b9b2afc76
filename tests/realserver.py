"""A real ``kiwifs serve`` (or ``kiwifs mcp --http``) for the few tests that need a socket and a
separate process.

Most route tests run in process (``asgiclient``); these helpers are for what only a real server
shows: signals, several processes, crashes, a browser.

- :func:`serving` (a ``with`` block) or :func:`start` and :func:`stop`: ``kiwifs serve`` on a
  root, ready.
- :func:`running`: any ``kiwifs`` command that serves HTTP (``kiwifs mcp --http``).
- :func:`launch` and :func:`wait_ready`: the two steps apart, for a test that must act between
  them.
- :func:`in_thread`: an app of the test's own under uvicorn in this process, on a real socket.

Every server here is started with ``--port 0``: the system picks a free port at bind time and the
server names it in its start-up line, which :func:`launch` reads. Guessing a free port first and
handing it over was a race: another test's server could take it in between (``Address already in
use`` on a busy CI machine).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn
from starlette.types import ASGIApp

KIWIFS = shutil.which("kiwifs") or str(Path(sys.executable).with_name("kiwifs"))

# "kiwifs 0.x serving ROOT on http://127.0.0.1:PORT" / "streamable HTTP on http://HOST:PORT/mcp"
_ANNOUNCED = re.compile(r" on (http://(?:\[[^\]]+\]|[^\s/:]+):\d+)")
START_TIMEOUT = 60.0


def launch(
    args: Sequence[str],
    log: Path,
    env: Mapping[str, str] | None = None,
    stdout_to_log: bool = True,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``kiwifs <args> --port 0`` and return the process and its base URL, read from the
    line the server prints once its port is bound (bounded wait; the log is shown on failure).

    Standard error goes to ``log`` (standard output too unless ``stdout_to_log`` is false, for
    ``kiwifs mcp``, whose stdout is not a log).
    """
    full_env = {**os.environ, **(env or {})}
    start = log.stat().st_size if log.exists() else 0  # a log appended to by restarts
    with open(log, "ab") as out:  # the child keeps its own copy
        proc = subprocess.Popen(
            [KIWIFS, *args, "--port", "0"],
            stdout=out if stdout_to_log else subprocess.DEVNULL,
            stderr=out,
            env=full_env,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        found = _ANNOUNCED.search(log.read_bytes()[start:].decode(errors="replace"))
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            raise AssertionError(f"kiwifs exited ({proc.returncode}): {log.read_text()}")
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise AssertionError(f"kiwifs never said where it listens: {log.read_text()}")


def wait_ready(
    base: str,
    proc: subprocess.Popen[bytes],
    log: Path,
    probe: str = "/readyz",
    ready: Collection[int] = frozenset({200}),
) -> None:
    """Wait (bounded) until ``probe`` answers one of ``ready``: ``/readyz`` means the routes are
    built and the index is current, ``/health`` only that the server is up."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"kiwifs exited ({proc.returncode}): {log.read_text()}"
        try:
            if httpx.get(base + probe, timeout=2).status_code in ready:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"kiwifs never answered {probe}: {log.read_text(errors='replace')}")


def start(
    root: Path,
    log: Path | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    probe: str = "/readyz",
) -> tuple[str, subprocess.Popen[bytes]]:
    """``kiwifs serve`` on a free port, ready: ``(base URL, process)``. The caller stops it
    (:func:`stop`)."""
    log = log or root.parent / "serve.log"
    proc, base = launch(["serve", "--root", str(root), *args], log, env)
    try:
        wait_ready(base, proc, log, probe)
    except BaseException:
        stop(proc)
        raise
    return base, proc


def stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not gone within ``timeout`` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def serving(
    root: Path,
    log: Path | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    probe: str = "/readyz",
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``kiwifs serve`` on a free port until the block ends: ``(base URL, process)``.

    The output goes to ``log`` (``serve.log`` beside the root by default), shown when the server
    dies early.
    """
    base, proc = start(root, log, args, env, probe)
    try:
        yield base, proc
    finally:
        stop(proc)


@contextmanager
def running(
    args: Sequence[str],
    log: Path,
    env: Mapping[str, str] | None = None,
    probe: str = "/readyz",
    ready: Collection[int] = frozenset({200}),
    stdout_to_log: bool = True,
    stop_timeout: float = 30,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``kiwifs <args> --port 0`` until the block ends, once ``probe`` answers one of ``ready``:
    ``(base URL, process)``. For commands other than ``serve`` (``mcp --http``)."""
    proc, base = launch(args, log, env, stdout_to_log)
    try:
        wait_ready(base, proc, log, probe, ready)
        yield base, proc
    finally:
        stop(proc, stop_timeout)


@contextmanager
def in_thread(app: ASGIApp) -> Iterator[str]:
    """``app`` under uvicorn on 127.0.0.1 in a thread of this process until the block ends: its
    base URL. For an app the test builds itself (a route of its own); uvicorn runs the app's
    lifespan, and binds port 0 so no other test can take the port first."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not server.started:
            assert thread.is_alive(), "uvicorn stopped before it started"
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        (listening,) = server.servers
        host, port = listening.sockets[0].getsockname()[:2]
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
