"""What only a real server on a socket shows: clients that go away mid-body, and clients that
never finish their headers. The tests run ``kiwifs serve`` (tests/realserver.py) and talk to it
over raw sockets; the bounds below only end a failing test, they measure nothing."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

import realserver
from kiwifs.knowledge import Knowledge

ABORTED = 40  # uploads cut off mid-body (the report saw trouble from 50)
BOUND = 30.0  # seconds a socket may wait for an answer before the test fails


def started(root: Path) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    log = root.parent / "serve.log"
    env = {"KIWIFS_HEADER_TIMEOUT": "1"}
    base, proc = realserver.start(root, log, env=env)
    try:
        yield base, proc, log
    finally:
        realserver.stop(proc)


@pytest.fixture
def server(root: Path) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """A server of the test's own: for a test that stops it and reads its whole log."""
    yield from started(root)


@pytest.fixture(scope="module")
def shared_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """One server for the tests that only open connections of their own and leave it running
    (each one's slow connection is its own; the server's other clients are unaffected)."""
    root = tmp_path_factory.mktemp("guards") / "kb"
    Knowledge.init(root, "blank")
    yield from started(root)


def connect(base: str) -> socket.socket:
    url = urlsplit(base)
    sock = socket.create_connection((url.hostname, url.port), timeout=BOUND)
    return sock


def test_uploads_cut_off_mid_body_are_quietly_dropped(
    server: tuple[str, subprocess.Popen[bytes], Path],
) -> None:
    """An upload whose client went away once became an "unexpected error" with a traceback
    each, and a few dozen of them stalled the server. A disconnect is normal: no log, no work."""
    base, proc, log = server
    host = urlsplit(base).netloc
    head = (
        f"PUT /api/kiwi/file?path=aborted.md HTTP/1.1\r\nHost: {host}\r\n"
        "Content-Type: application/octet-stream\r\nContent-Length: 1048576\r\n\r\n"
    ).encode()
    for _ in range(ABORTED):
        with connect(base) as sock:
            sock.sendall(head + b"x" * 10_240)
    with httpx.Client(base_url=base, timeout=BOUND) as client:
        assert client.get("/health").status_code == 200
        written = client.put("/api/kiwi/file", params={"path": "after.md"}, content=b"# ok\n")
        assert written.status_code == 200
        assert client.get("/api/kiwi/file", params={"path": "aborted.md"}).status_code == 404
    realserver.stop(proc)  # every aborted request has been handled once the server is gone
    assert proc.returncode is not None
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "unexpected error" not in text, text


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes ``sock`` (EOF or a reset) before the bound; no answer is read."""
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize("sent", [b"GET /health HT", b"GET /health HTTP/1.1\r\nHost: x"])
def test_a_request_whose_headers_never_end_is_closed(
    shared_server: tuple[str, subprocess.Popen[bytes], Path], sent: bytes
) -> None:
    """Incomplete headers were never timed out: 1,500 such connections stayed open. The server
    (started with a 1 s header limit) must close them, and still answer everyone else."""
    base, _, _ = shared_server
    with connect(base) as slow:
        slow.sendall(sent)
        with httpx.Client(base_url=base, timeout=BOUND) as client:
            assert client.get("/health").status_code == 200  # others are not held up
        assert closed_by_server(slow)


def test_a_kept_alive_connection_gets_the_limit_again(
    shared_server: tuple[str, subprocess.Popen[bytes], Path],
) -> None:
    """After a first answer, the next request's headers on the same connection are limited too
    (uvicorn's keep-alive timer stops once any byte arrives)."""
    base, _, _ = shared_server
    host = urlsplit(base).netloc
    with connect(base) as sock:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(4096)
            assert chunk, answer
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")
        assert closed_by_server(sock)
