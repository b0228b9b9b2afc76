"""Start-up of ``kiwifs serve``: the probes answer while the full app is still being built, every
other request waits for it, and requests needing the index wait for the watcher's first
reconcile, then answer as the files are (an edit made while the server was down included).

In-process: the start-up app (:class:`StartingApp`) as ``serve`` runs it, called through httpx's
ASGI transport with its lifespan running. The full app's build is the start-up app's own
argument: here it waits for an event the test sets before calling ``create_app``. The watcher's
first reconcile is held by a write lock on the index database that the test's own SQLite
connection takes, as another process writing would. Nothing of ours is mocked.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from asgiclient import AppClient, serve_in_process
from kiwifs.index.watcher import Watcher
from kiwifs.knowledge import Knowledge
from kiwifs.rest.app import create_app
from kiwifs.rest.probes import Probes
from kiwifs.rest.starting import StartingApp

API = "/api/kiwi"
LONG = 60.0  # a bound on waits that only a broken implementation reaches


def episode(root: Path, name: str) -> None:
    path = root / "episodes" / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\nmemory_kind: episodic\nepisode_id: {name}\n---\nran\n")


@pytest.fixture
def stale_root(knowledge_root: Path) -> Path:
    """A root with an index that was current when its last server stopped, then an episode
    added behind its back (while no server ran)."""
    episode(knowledge_root, "run-1")
    with Knowledge.open(knowledge_root) as kb:
        kb.reconcile()
    episode(knowledge_root, "run-2")
    return knowledge_root


class IndexWriteLock:
    """The index database's write lock, held by a connection of the test's own (as another
    process writing would hold it) until ``release``."""

    def __init__(self, root: Path) -> None:
        self.conn: sqlite3.Connection | None = sqlite3.connect(
            root / ".kiwi/state/index.db", isolation_level=None
        )
        self.conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        if self.conn is not None:
            self.conn.execute("ROLLBACK")
            self.conn.close()
            self.conn = None


class Starting:
    """A start-up app over ``root`` whose full app is built only once ``release`` is set."""

    def __init__(self, root: Path, loopback: bool = False) -> None:
        self.kb = Knowledge.open(root, sweep=True)
        self.kb.ensure_versioned()
        self.release = threading.Event()
        self.failures = 0
        self.app = StartingApp(self.kb, self._build, loopback, on_failure=self._failed)

    def _build(self, probes: Probes) -> Any:
        assert self.release.wait(LONG), "the test never released the build"
        return create_app(self.kb, probes=probes)

    def _failed(self) -> None:
        self.failures += 1


@contextmanager
def serving(starting: Starting) -> Iterator[AppClient]:
    try:
        with serve_in_process(starting.app) as client:
            try:
                yield client
            finally:
                starting.release.set()  # a build still held ends: the shutdown waits for it
    finally:
        starting.kb.close()


def in_background(call: Callable[[], httpx.Response]) -> tuple[threading.Thread, list[Any]]:
    """``call()`` in a thread; its response (or exception) lands in the returned list."""
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # reported by the test thread
            result.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def finished(thread: threading.Thread, result: list[Any]) -> httpx.Response:
    thread.join(LONG)
    assert not thread.is_alive(), "the request never finished"
    (response,) = result
    assert isinstance(response, httpx.Response), response
    return response


def unmerged_ids(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    ids = [e["episode_id"] for e in response.json()["unmerged"]]
    return [i for i in ids if i.startswith("run-")]  # not the template's example


def test_probes_answer_while_the_full_app_is_built(stale_root: Path) -> None:
    starting = Starting(stale_root)
    with serving(starting) as client:
        assert starting.app.app is None  # the build is held: these are the start-up app's answers
        health = client.get("/health")
        assert (health.status_code, health.json()) == (
            200,
            {
                "status": "ok",
                "commits": {"pending": 0, "failing": False},
                "vectors": {"enabled": False},
            },
        )
        assert health.headers["content-type"] == "application/json"
        alive = client.get("/healthz")
        assert alive.status_code == 200 and set(alive.json()) == {"status", "uptime", "version"}
        ready = client.get("/readyz")
        assert (ready.status_code, ready.json()) == (503, {"status": "not-ready"})
        head = client.request("HEAD", "/health")
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-length"] == str(len(health.content))
        starting.release.set()
        report = client.get(f"{API}/memory/report")  # waits for the full app, then its index
        assert unmerged_ids(report) == ["run-1", "run-2"]
        assert starting.app.app is not None
        assert client.get("/health").json() == health.json()  # the routes answer the same
        assert client.get("/readyz").json() == {"status": "ready"}  # the report waited for it


def test_a_request_during_the_build_waits_and_gets_the_right_answer(stale_root: Path) -> None:
    starting = Starting(stale_root)
    with serving(starting) as client:
        thread, result = in_background(lambda: client.get(f"{API}/memory/report"))
        thread.join(0.5)
        assert thread.is_alive() and not result  # waiting for the full app
        assert client.get("/health").status_code == 200  # meanwhile the probes still answer
        starting.release.set()
        assert unmerged_ids(finished(thread, result)) == ["run-1", "run-2"]


def test_the_browser_guard_applies_before_the_full_app_is_there(stale_root: Path) -> None:
    starting = Starting(stale_root, loopback=True)
    with serving(starting) as client:
        refused = client.get("/health", headers={"Host": "evil.example:3333"})
        assert refused.status_code == 403
        assert "not a loopback name" in refused.json()["error"]
        cross = client.get(
            "/readyz", headers={"Host": "127.0.0.1", "Origin": "http://evil.example"}
        )
        assert cross.status_code == 403
        assert client.get("/healthz", headers={"Host": "127.0.0.1:3333"}).status_code == 200


def test_a_request_during_the_first_reconcile_waits_for_it_and_readyz_flips(
    stale_root: Path,
) -> None:
    starting = Starting(stale_root)
    starting.release.set()
    lock = IndexWriteLock(stale_root)  # the watcher's first reconcile cannot store run-2 yet
    try:
        with serving(starting) as client:
            thread, result = in_background(lambda: client.get(f"{API}/memory/report"))
            assert client.get("/readyz").json() == {"status": "not-ready"}
            thread.join(0.5)
            assert thread.is_alive() and not result  # never the index as it was (run-1 only)
            assert client.get("/health").status_code == 200
            lock.release()
            assert unmerged_ids(finished(thread, result)) == ["run-1", "run-2"]
            assert client.get("/readyz").json() == {"status": "ready"}
    finally:
        lock.release()


def test_a_failed_build_stops_the_server_and_answers_503(stale_root: Path) -> None:
    kb = Knowledge.open(stale_root)
    failures: list[str] = []

    def build(probes: Probes) -> Any:
        raise RuntimeError("no routes today")

    app = StartingApp(kb, build, loopback=False, on_failure=lambda: failures.append("stop"))
    try:
        with serve_in_process(app) as client:
            resp = client.get(f"{API}/tree")
            assert resp.status_code == 503
            assert resp.json() == {"error": "the server failed to start: no routes today"}
            assert failures == ["stop"]
            assert app.error == "the server failed to start: no routes today"
    finally:
        kb.close()


# -- the watcher's first reconcile ---------------------------------------------------------------


def test_the_watcher_is_ready_only_once_a_reconcile_succeeded(tmp_path: Path) -> None:
    calls: list[int] = []

    def reconcile() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise sqlite3.OperationalError("database is locked")

    watcher = Watcher(tmp_path, lambda paths: None, reconcile, period=0.2)
    watcher.start()
    try:
        assert watcher.wait_ready() is False  # the first pass failed: callers reconcile themselves
        for _ in range(1200):  # the periodic reconcile comes every 0.2 s
            if watcher.ready.is_set():
                break
            time.sleep(0.05)
        assert watcher.ready.is_set() and len(calls) >= 2
        assert watcher.wait_ready() is True
    finally:
        watcher.stop()


def test_an_edit_during_the_first_reconcile_is_heard(tmp_path: Path) -> None:
    """The watches are set up before the first reconcile walks: a file changed after the walk
    passed it arrives as an event (no periodic reconcile within the test)."""
    refreshed: list[list[str]] = []
    heard = threading.Event()

    def reconcile() -> None:
        (tmp_path / "late.md").write_text("written while the first reconcile ran\n")

    def refresh(paths: list[str]) -> None:
        refreshed.append(paths)
        heard.set()

    watcher = Watcher(tmp_path, refresh, reconcile, period=3600)
    watcher.start()
    try:
        assert heard.wait(LONG)
        assert ["late.md"] in refreshed
    finally:
        watcher.stop()
