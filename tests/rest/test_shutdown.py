"""``kiwifs serve`` stops on SIGTERM even while clients hold event streams open.

uvicorn waits for open connections before it stops, and an event stream never ends by itself:
before the fix one open ``/ui/events`` (a dashboard left open) kept the server up forever.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import httpx

from kiwifs.knowledge import Knowledge
from kiwifs.rest.stopping import SHUTDOWN_GRACE
from realserver import serving


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
    with serving(root, env={"KIWIFS_WORKERS": "1"}) as (base, proc):
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
