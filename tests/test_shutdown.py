"""``kiwifs serve`` stops on SIGTERM even while clients hold event streams open.

uvicorn waits for open connections before it stops, and an event stream never ends by itself:
before the fix one open ``/ui/events`` (a dashboard left open) kept the server up forever.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from kiwifs.knowledge import Knowledge
from kiwifs.rest.stopping import SHUTDOWN_GRACE

KIWIFS = shutil.which("kiwifs") or str(Path(sys.executable).with_name("kiwifs"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hold_stream(url: str, connected: threading.Event) -> None:
    """Read the stream until the server ends it (or the connection drops)."""
    try:
        with httpx.stream("GET", url, timeout=None) as resp:
            for line in resp.iter_lines():
                if line.startswith(":"):
                    connected.set()
    except httpx.HTTPError:
        pass


def test_sigterm_stops_the_server_while_event_streams_are_open(tmp_path: Path) -> None:
    root = tmp_path / "root"
    Knowledge.init(root)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [KIWIFS, "serve", "--root", str(root), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "KIWIFS_WORKERS": "1"},
    )
    try:
        for _ in range(600):
            try:
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        streams = []
        for path in ("/api/kiwi/events", "/ui/events"):
            connected = threading.Event()
            thread = threading.Thread(
                target=hold_stream, args=(base + path, connected), daemon=True
            )
            thread.start()
            assert connected.wait(60), path
            streams.append(thread)
        proc.send_signal(signal.SIGTERM)
        # well before the grace period other requests get: the streams ended, nothing waited
        assert proc.wait(timeout=SHUTDOWN_GRACE - 2) in (0, -signal.SIGTERM)  # uvicorn re-raises it
        for thread in streams:
            thread.join(timeout=10)
            assert not thread.is_alive()  # the server ended the stream
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
