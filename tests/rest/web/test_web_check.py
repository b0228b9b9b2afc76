"""The dashboard's problems: the last ``memory check``, kept in the index by a background loop.

What the dashboard shows equals ``kiwifs memory check --json`` on a root with every kind of
problem; the loop runs after writes and announces each new result on the dashboard's event
stream (never on the API's); a request only reads what the loop stored.
"""

from __future__ import annotations

import contextlib
import html
import json
import queue
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from filetree import write_files
from gitrepo import git
from kiwifs.index import background
from kiwifs.index.connections import INDEX_FILE, STATE_DIR
from kiwifs.index.memory.checkcache import CheckWorker
from kiwifs.index.upkeep import IndexKeeper
from kiwifs.knowledge import Knowledge
from kiwifs.memory.overview import Overview
from kiwifs.memory.problems import (
    DANGLING,
    DOUBLE_MERGE,
    DUPLICATE_ID,
    NOT_YET,
    CheckState,
    Problem,
    problems_of,
)
from kiwifs.rest.app import create_app
from kiwifs.rest.web.routes import templates
from kiwifs.server.lifecycle import Serving
from kiwifs.tuning import Tuning
from kiwifs.writes.events import CHECK_STORED, Event, is_file_change
from partskit import index_keeper
from realserver import KIWIFS, serving
from waiting import running, wait_for


def fm(*lines: str, body: str = "text\n") -> str:
    return "\n".join(["---", *lines, "---", body])


# every kind of problem: dangling entries of four sorts, a duplicate id, a double merge; and
# what must not count: a forgotten episode, a page citing a known episode
FILES = {
    "episodes/2026/a.md": fm("episode_id: a", 'created: "2026-03-01T10:00:00Z"'),
    "episodes/2026/b.md": fm("episode_id: b"),
    "episodes/2026/c.md": fm("episode_id: dup"),
    "episodes/2025/d.md": fm("episode_id: dup"),
    "episodes/2025/old.md": fm("episode_id: old", "memory_status: superseded"),
    "episodes/bad.md": "---\nepisode_id: [unclosed\n---\nbroken frontmatter\n",
    "concepts/one.md": fm(
        "memory_kind: semantic",
        "merged-from:",
        "  - {type: episode, id: a, note: first}",
        "  - {type: episode, id: zz}",
        "  - {type: episode, path: episodes/gone.md}",
        "  - {id: a}",
        "  - {type: note, id: a}",
    ),
    "concepts/two.md": fm(
        "memory_kind: semantic", "merged-from:", "  - {type: episode, path: episodes/2026/a.md}"
    ),
    "concepts/fine.md": fm("memory_kind: semantic", "merged-from:", "  - {type: run, id: b}"),
}


@pytest.fixture
def files_root(root: Path) -> Path:
    """The blank root with ``FILES``, committed."""
    write_files(root, FILES)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "fixture")
    return root


def cli_check(root: Path) -> dict[str, Any]:
    done = subprocess.run(
        [KIWIFS, "memory", "check", "--json", "--root", str(root)],
        capture_output=True,
        text=True,
        check=True,
    )
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def expected_rows(check: dict[str, Any]) -> list[tuple[str, str, tuple[str, ...], str]]:
    """(kind, file, related files, a text the message must hold) per problem of the check."""
    rows = [(DANGLING, d["page"], (), d["why"]) for d in check["dangling"]]
    rows += [
        (DUPLICATE_ID, d["paths"][0], tuple(d["paths"][1:]), repr(d["id"]))
        for d in check["duplicate_ids"]
    ]
    rows += [
        (DOUBLE_MERGE, d["path"], tuple(d["pages"]), "merged by") for d in check["double_merges"]
    ]
    return rows


def shown_rows(problems: list[dict[str, Any]]) -> list[tuple[str, str, tuple[str, ...], str]]:
    return [(p["kind"], p["path"], tuple(p["related"]), p["message"]) for p in problems]


def get(app: Any, url: str) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            return await c.get(url)

    return anyio.run(go)


def html_rows(page: str) -> list[tuple[str, str, tuple[str, ...], str]]:
    """The problem rows of the dashboard's table, as the page shows them."""
    body = page.split('id="problem-list"', 1)[1].split("</table>", 1)[0]
    rows = []
    for row in re.findall(r"<tr>(.*?)</tr>", body.split("<tbody>", 1)[1], re.S):
        kind = re.search(r'class="kind">(.*?)<', row, re.S)
        main = re.search(r'class="problem-path" href="([^"]*)">(.*?)<', row, re.S)
        related = re.findall(r'class="problem-related" href="[^"]*">(.*?)<', row, re.S)
        message = re.search(r'class="message">(.*?)<', row, re.S)
        assert kind and main and message, row
        assert main.group(1) == "/file/" + main.group(2)  # each problem links to its file
        rows.append(
            (
                html.unescape(kind.group(1)),
                html.unescape(main.group(2)),
                tuple(html.unescape(r) for r in related),
                html.unescape(message.group(1)),
            )
        )
    return rows


def same(shown: list[tuple[str, str, tuple[str, ...], str]], check: dict[str, Any]) -> None:
    expected = expected_rows(check)
    assert [r[:3] for r in shown] == [e[:3] for e in expected]
    for row, want in zip(shown, expected, strict=True):
        assert want[3] in row[3], (row, want)


# -- what the dashboard shows -------------------------------------------------------------------


def test_the_dashboard_shows_what_memory_check_json_finds(files_root: Path) -> None:
    check = cli_check(files_root)
    assert check["problems"] == 6  # four dangling entries, one duplicate id, one double merge
    with Knowledge.open(files_root) as kb:
        app = create_app(kb)
        data = get(app, "/ui/overview.json").json()["check"]
        page = get(app, "/").text
    assert data["ready"] and data["current"] and data["total"] == check["problems"]
    same(shown_rows(data["shown"]), check)
    same(html_rows(page), check)
    assert re.search(r'id="problem-count">\s*6\s*<', page)
    assert f"Found by memory check at {data['computed_at']}" in page


def test_many_problems_are_counted_and_the_first_ones_listed(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        entries = "".join(f"  - {{type: episode, id: missing-{i}}}\n" for i in range(150))
        kb.write("concepts/many.md", f"---\nmerged-from:\n{entries}---\n")
        check = kb.memory_check()
        state = kb.overview().problems
        page = get(create_app(kb), "/").text
    with contextlib.closing(sqlite3.connect(files_root / STATE_DIR / INDEX_FILE)) as conn:
        (kept,) = conn.execute("SELECT count(*) FROM check_problems").fetchone()
    assert state is not None and state.total == check.problems == 156
    assert len(state.shown) == kept == 100 and state.shown[0].kind == DANGLING
    assert "The first 100 of 156 are shown" in page


def test_the_dashboard_says_so_while_the_first_check_runs(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        view: Overview = kb.overview()
    waiting = view.__class__(**{**view.__dict__, "problems": NOT_YET})
    page = (
        templates()
        .get_template("dashboard.html")
        .render(o=waiting, now=waiting.computed_at, chart="")
    )
    assert 'data-state="pending"' in page and "The first check is still running" in page
    assert waiting.to_json()["check"] == {
        "ready": False,
        "computed_at": None,
        "current": False,
        "total": 0,
        "shown": [],
    }


def test_another_prefix_shows_no_problems(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        assert kb.overview("concepts/").problems is None


# -- the background loop ------------------------------------------------------------------------


def wait_for_check(kb: Knowledge, sub: Any) -> None:
    """Until the loop announces a stored result (a generous bound, only so a bug cannot hang)."""
    while True:
        event = sub.get(timeout=120)
        assert event is not None, "no check result announced"
        if event.op == CHECK_STORED:
            return


def settle(kb: Knowledge, keeper: IndexKeeper, sub: Any) -> CheckState:
    """Until the stored result is for the rows as they are (the first runs race the watcher's
    first reconcile, which fills the index)."""
    while not (state := keeper.answers.check_state(kb.episodes_prefix())).current:
        wait_for_check(kb, sub)
    return state


def test_the_loop_checks_after_a_write_and_announces_it(files_root: Path) -> None:
    keeper = index_keeper(files_root)
    with Knowledge.open(files_root, index=keeper) as kb, kb.subscribe() as sub:
        Serving(kb).start_watching()
        Serving(kb).start_checking(quiet=0.2)  # the default quiet second, shortened
        assert settle(kb, keeper, sub).total == 6
        kb.write(
            "concepts/new.md",
            "---\nmerged-from:\n  - {type: episode, id: never-written}\n---\n",
        )
        while (state := kb.overview().problems) is not None and state.total == 6:
            wait_for_check(kb, sub)
        assert state is not None and state.total == 7 and state.current
        assert (
            Problem(
                DANGLING,
                "concepts/new.md",
                "merged-from entry (episode never-written) cites nothing:"
                " no episode has id 'never-written'",
            )
            in state.shown
        )


def test_a_request_reads_the_stored_result_and_never_runs_the_check(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        Serving(kb).start_watching()
        while not kb.ready():  # the index is filled: the first check sees it all
            time.sleep(0.05)
        with kb.subscribe() as sub:
            Serving(kb).start_checking(
                quiet=3600.0
            )  # runs at once, then an hour after each wake-up
            wait_for_check(kb, sub)
        first = kb.overview().problems
        assert first is not None and first.current and first.total == 6
        kb.write("concepts/new.md", "---\nmerged-from:\n  - {type: episode, id: nope}\n---\n")
        later = kb.overview().problems
        assert later is not None
        assert (later.total, later.computed_at, later.current) == (6, first.computed_at, False)
        assert kb.memory_check().problems == 7  # what the next run of the loop will store


def test_the_stored_result_outlives_the_process(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        first = kb.overview().problems
    keeper = index_keeper(files_root)
    with Knowledge.open(files_root, index=keeper) as kb:  # as stored: nothing ran the check here
        state = keeper.answers.check_state(kb.episodes_prefix())
    assert first is not None and state.ready and not state.current
    assert (state.total, state.shown, state.computed_at) == (
        first.total,
        first.shown,
        first.computed_at,
    )


def test_the_worker_process_finds_what_memory_check_finds(files_root: Path) -> None:
    """The server runs the check in a worker process (away from its interpreter lock)."""
    with Knowledge.open(files_root) as kb:
        kb.reindex()
        expected = problems_of(kb.memory_check())
        worker = CheckWorker()
        worker.enabled = True  # whatever this machine's CPUs: the process itself is tested
        try:
            found = worker.problems(str(files_root / STATE_DIR / INDEX_FILE), kb.episodes_prefix())
        finally:
            worker.close()
    assert found == expected and len(found) == 6


KILLED_WITH_A_WORKER = """
import glob, os, signal, sys
from kiwifs.index import background
from kiwifs.index.memory import checkcache
from kiwifs.index.memory.checkcache import CheckWorker
worker = CheckWorker()
worker.enabled = True
assert worker.problems(sys.argv[1], "") is not None
tasks = glob.glob(f"/proc/{os.getpid()}/task/*/children")
print(" ".join(pid for task in tasks for pid in open(task).read().split()), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # a server killed: no chance to shut its pool down
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_the_worker_process_leaves_when_its_server_is_killed(files_root: Path) -> None:
    with Knowledge.open(files_root) as kb:
        kb.reindex()
    out = (
        files_root.parent / "children.txt"
    )  # a file, not a pipe: a stuck worker would hold a pipe open
    with out.open("w") as stdout:
        index = str(files_root / STATE_DIR / INDEX_FILE)
        command = [sys.executable, "-c", KILLED_WITH_A_WORKER, index]
        code = subprocess.run(command, stdout=stdout, check=False).returncode
    assert code == -9
    children = [int(pid) for pid in out.read_text().split()]
    assert len(children) == 2  # the worker and multiprocessing's resource tracker
    deadline = time.monotonic() + 60
    while any(running(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in children if running(pid)]


STARTED_TOO_LATE = """
import sys, time
from kiwifs.index.memory.checkcache import _start_worker
_start_worker(int(sys.argv[1]))  # the pid of a server that is no longer our parent
time.sleep(600)
"""


def test_a_worker_whose_server_died_while_it_started_leaves_at_once() -> None:
    """A server killed while its worker was still importing has already left the worker to
    another parent when the worker's initializer runs: the server's pid, passed in, decides, not
    whichever parent the worker has by then."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    done = subprocess.run([sys.executable, "-c", STARTED_TOO_LATE, str(dead.pid)], timeout=120)
    assert done.returncode == 0


def test_check_events_are_the_dashboards_only() -> None:
    assert not is_file_change(Event(CHECK_STORED))
    assert all(is_file_change(Event(op)) for op in ("write", "delete", "bulk", "rename", "merge"))


# -- a real server: the two event streams -------------------------------------------------------


@dataclass
class Served:
    base: str
    proc: subprocess.Popen[bytes]


@pytest.fixture
def served(files_root: Path) -> Iterator[Served]:
    env = {"KIWIFS_WORKERS": "1"}
    with serving(files_root, args=(), env=env, probe="/health") as (base, proc):
        yield Served(base, proc)


def check_settled(client: httpx.Client) -> bool:
    """Whether the server's background check has a result for the files as they are."""
    check = client.get("/ui/overview.json").json()["check"]
    return bool(check["ready"] and check["current"])


@dataclass
class Listener:
    """One event stream read on a thread into ``frames`` (name, data) until :meth:`close`."""

    base: str
    path: str
    frames: queue.Queue[tuple[str, str]] = field(default_factory=queue.Queue)
    connected: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.base, timeout=None)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        name = ""
        try:
            with self.client.stream("GET", self.path) as resp:
                for line in resp.iter_lines():
                    if line.startswith(":"):
                        self.connected.set()
                    elif line.startswith("event: "):
                        name = line[len("event: ") :]
                    elif line.startswith("data: "):
                        self.frames.put((name, line[len("data: ") :]))
        except httpx.HTTPError:
            pass  # closed by the test

    def close(self) -> None:
        self.client.close()


def test_the_dashboard_hears_check_results_and_the_api_stream_does_not(served: Served) -> None:
    ui = Listener(served.base, "/ui/events")
    api = Listener(served.base, "/api/kiwi/events")
    try:
        assert ui.connected.wait(60) and api.connected.wait(60)
        with httpx.Client(base_url=served.base, timeout=60) as c:
            # the start-up check may still be running (a slow machine): its result is not ours
            assert wait_for(lambda: check_settled(c), 120)
            body = "---\nmerged-from:\n  - {type: episode, id: ghost}\n---\n"
            put = c.put("/api/kiwi/file", params={"path": "concepts/g.md"}, content=body)
            assert put.is_success
            seen: list[tuple[str, str]] = []
            while not any(name == "change" and "concepts/g.md" in data for name, data in seen):
                seen.append(ui.frames.get(timeout=120))
            while seen[-1] != ("check", json.dumps({"op": "check"})):
                seen.append(ui.frames.get(timeout=120))
            data = c.get("/ui/overview.json").json()["check"]
            assert any(
                p["path"] == "concepts/g.md" and "ghost" in p["message"] for p in data["shown"]
            )
            # a sentinel write after the check result: the API stream up to it holds file changes
            assert c.put("/api/kiwi/file", params={"path": "sentinel.md"}, content="x").is_success
        ops = []
        while not ops or json.loads(ops[-1][1]).get("path") != "sentinel.md":
            ops.append(api.frames.get(timeout=60))
        assert [name for name, _ in ops] == ["write", "write"]
    finally:
        ui.close()
        api.close()


def test_a_large_root_is_checked_first_once_the_server_has_settled(
    files_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large root's check takes a core for seconds: it waits until the server has been ready
    ``check_settle`` seconds, leaving the first questions of agents the whole machine."""
    monkeypatch.setattr(background, "SETTLE_FILES", 1)  # this root counts as large
    with Knowledge.open(files_root, tuning=Tuning(check_settle=0.8)) as kb:
        Serving(kb).start_watching()
        while not kb.ready():
            time.sleep(0.05)
        ready = time.monotonic()
        with kb.subscribe() as sub:
            Serving(kb).start_checking(quiet=0.2)
            wait_for_check(kb, sub)
        assert time.monotonic() - ready >= 0.8
        state = kb.overview().problems
        assert state is not None and state.total == 6 and state.current
