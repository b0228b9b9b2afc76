"""The change monitor: one-shot commands on a large root ask it which folders changed instead of
stating every file, and still see every edit made behind kiwifs's back (real inotify, a real
monitor process, real files)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiwifs.base.printed_json import dumps
from kiwifs.index import monitor
from kiwifs.index.core import Index
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving
from kiwifs.tuning import Tuning

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify: Linux")

MONITORED = Tuning(monitor_files=1)  # every root is "large"
PLAIN = Tuning(monitor_files=0)


def episode(root: Path, rel: str, eid: str, body: str = "a run") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\nmemory_kind: episodic\nepisode_id: {eid}\n---\n{body}\n")


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    top = tmp_path / "root"
    for month in ("01", "02"):
        for n in range(3):
            episode(top, f"episodes/2026/{month}/run-{n}.md", f"e-{month}-{n}")
    (top / "pages").mkdir()
    (top / "pages" / "a.md").write_text("---\ntitle: A\n---\nabout runs\n")
    with Knowledge.open(top, tuning=PLAIN) as kb:
        kb.reindex()
    yield top
    monitor.stop(top)


def report(root: Path, tuning: Tuning) -> str:
    with Knowledge.open(root, tuning=tuning) as kb:
        return dumps(kb.memory_report_document().value).decode()


def walked(root: Path) -> int:
    """Files a one-shot reconcile walks now (the monitor asked first); it stores the position."""
    index = Index(root, tuning=MONITORED)
    try:
        return index.reconcile(monitored=True).files
    finally:
        index.close()


def position(root: Path) -> tuple[str | None, int | None]:
    index = Index(root, tuning=MONITORED)
    try:
        return index.monitor_position()
    finally:
        index.close()


def same_as_plain(root: Path) -> None:
    """A monitored report equals one after a full walk, and the index equals a rebuild's."""
    monitored = report(root, MONITORED)
    assert monitored == report(root, PLAIN)
    with Knowledge.open(root, tuning=PLAIN) as kb:
        assert kb.memory_report_document(use_index=False).value is not None
        assert dumps(kb.memory_report_document(use_index=False).value).decode() == monitored


def test_a_monitored_root_sees_every_kind_of_edit(root: Path) -> None:
    same_as_plain(root)  # starts the monitor, walks everything once, stores its position
    assert monitor.sync(root, None, None) is not None
    # a new file, an edit in place (no rename: the folder's time does not move), a deletion
    episode(root, "episodes/2026/01/run-9.md", "e-new")
    text = (root / "episodes/2026/02/run-1.md").read_text()
    with open(root / "episodes/2026/02/run-1.md", "r+") as handle:
        handle.write(text.replace("memory_kind: episodic", "memory_kind: semantic"))
        handle.truncate()
    (root / "episodes/2026/01/run-0.md").unlink()
    same_as_plain(root)
    # a page merging an episode, written in place
    page = root / "pages" / "a.md"
    page.write_text("---\ntitle: A\nmerged-from:\n  - type: episode\n    id: e-02-0\n---\nx\n")
    same_as_plain(root)
    # folders that come, move and go, with what they hold
    episode(root, "episodes/2026/03/deep/run-0.md", "e-deep")
    same_as_plain(root)
    os.rename(root / "episodes/2026/03", root / "episodes/2026/04")
    same_as_plain(root)
    shutil.rmtree(root / "episodes/2026/04")
    same_as_plain(root)
    # a folder hidden by a rename, and shown again
    os.rename(root / "episodes/2026/02", root / "episodes/2026/.02")
    same_as_plain(root)
    os.rename(root / "episodes/2026/.02", root / "episodes/2026/02")
    same_as_plain(root)


def test_only_the_folders_that_changed_are_walked(root: Path) -> None:
    report(root, MONITORED)
    assert walked(root) == 0  # nothing changed since the stored position
    episode(root, "episodes/2026/02/run-7.md", "e-7")
    assert walked(root) == 4  # the one folder that changed, its four files
    assert walked(root) == 0  # caught up: the new position was stored
    assert report(root, MONITORED) == report(root, PLAIN)


def test_another_epoch_or_no_monitor_walks_everything(root: Path) -> None:
    report(root, MONITORED)
    epoch, at = position(root)
    assert epoch is not None and at is not None
    assert monitor.sync(root, "another", at).full  # type: ignore[union-attr]
    assert monitor.sync(root, epoch, at + 1000).full  # type: ignore[union-attr]
    assert not monitor.sync(root, epoch, at).full  # type: ignore[union-attr]
    assert monitor.stop(root)
    assert monitor.sync(root, None, None) is None  # gone: a command walks, then starts one
    episode(root, "episodes/2026/01/run-8.md", "e-8")  # while no monitor ran
    same_as_plain(root)
    assert monitor.sync(root, None, None) is not None


def test_a_symlinked_knowledge_file_makes_every_answer_full(root: Path) -> None:
    report(root, MONITORED)
    os.symlink(root / "pages" / "a.md", root / "pages" / "b.md")
    same_as_plain(root)
    answer = monitor.sync(root, *position(root))
    assert answer is not None and answer.full
    # the link's target changes with no event where the link is; the walk still sees it
    (root / "pages" / "a.md").write_text("---\ntitle: A2\n---\nother words\n")
    same_as_plain(root)


def test_a_rebuild_stores_the_position_it_started_from(root: Path) -> None:
    report(root, MONITORED)
    with Knowledge.open(root, tuning=MONITORED) as kb:
        kb.reindex()
    answer = monitor.sync(root, *position(root))
    assert answer is not None and not answer.full and not answer.flat and not answer.trees


def test_off_never_starts_a_monitor(root: Path) -> None:
    report(root, PLAIN)
    assert monitor.sync(root, None, None) is None
    assert Tuning.from_env({"KIWIFS_MONITOR": "off"}).monitor_files == 0
    assert Tuning.from_env({"KIWIFS_MONITOR": "5000"}).monitor_files == 5000
    assert Tuning.from_env({}).monitor_files == 100_000


# -- the monitor itself, in this process -----------------------------------------------------


def asked(watcher: monitor.Monitor, request: dict[str, object]) -> dict[str, object]:
    """``request`` answered by ``watcher`` through a socket pair, its cookie's event read."""
    mine, theirs = socket.socketpair()
    with mine:
        watcher.ask(theirs, request)
        while watcher.pending:
            watcher.read_events()
        return dict(json.loads(mine.makefile().readline()))


def test_the_journal_names_folders_flat_or_whole(root: Path) -> None:
    watcher = monitor.Monitor(str(root))
    watcher.watch_all()
    start = asked(watcher, {"epoch": None, "since": None})
    assert start["full"] is True
    epoch, since = start["epoch"], start["position"]
    episode(root, "episodes/2026/01/run-5.md", "e-5")
    (root / "pages" / "notes.txt").write_text("not knowledge")  # not a knowledge file
    (root / "pages" / ".hidden.md").write_text("hidden")
    (root / "new" / "sub").mkdir(parents=True)
    answer = asked(watcher, {"epoch": epoch, "since": since})
    assert answer["full"] is False
    assert answer["flat"] == ["episodes/2026/01"]
    assert answer["trees"] == ["new"]
    episode(root, "new/sub/x.md", "e-x")  # the new folders are watched now
    later = asked(watcher, {"epoch": epoch, "since": answer["position"]})
    assert later["flat"] == ["new/sub"] and later["trees"] == []


def test_too_many_changes_start_a_new_epoch(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor, "MAX_FOLDERS", 2)
    watcher = monitor.Monitor(str(root))
    watcher.watch_all()
    start = asked(watcher, {"epoch": None, "since": None})
    for n in range(3):
        episode(root, f"f{n}/x.md", f"x{n}")
    answer = asked(watcher, {"epoch": start["epoch"], "since": start["position"]})
    assert answer["full"] is True and answer["epoch"] != start["epoch"]


def test_the_monitor_exits_when_its_root_goes(tmp_path: Path) -> None:
    top = tmp_path / "gone"
    episode(top, "a/x.md", "x")
    watcher = monitor.Monitor(str(top))
    watcher.watch_all()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(b"\0kiwifs-monitor-test-" + os.urandom(8).hex().encode())
    listener.listen(1)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (monitor.serve(watcher, listener), done.set()))
    thread.start()
    shutil.rmtree(top)
    assert done.wait(10)
    thread.join()
    listener.close()


def test_a_stranger_request_is_closed_without_an_answer(root: Path) -> None:
    report(root, MONITORED)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        conn.connect(monitor.address(root))
        conn.sendall(b"not json\n")
        assert conn.recv(100) == b""
    assert monitor.sync(root, None, None) is not None  # still answering


def test_a_folder_it_could_not_watch_makes_every_answer_full(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel refuses a watch past the user's limit (ENOSPC): that folder's changes would go
    unheard, so the monitor vouches for nothing."""
    watcher = monitor.Monitor(str(root))
    add = watcher.inotify.add

    def limited(path: bytes, mask: int) -> int:
        if path.endswith(b"/pages"):
            raise OSError(errno.ENOSPC, "no space left on device", path)
        return add(path, mask)

    monkeypatch.setattr(watcher.inotify, "add", limited)
    watcher.watch_all()
    start = asked(watcher, {"epoch": None, "since": None})
    assert asked(watcher, {"epoch": start["epoch"], "since": start["position"]})["full"] is True


def test_a_server_reconciles_through_the_monitor(root: Path) -> None:
    """A watcher's reconciles (its first, before ready, included) ask the monitor: what changed
    while no server ran is found by walking its folder alone, and the position moves on."""
    report(root, MONITORED)
    before = position(root)
    episode(root, "episodes/2026/02/run-5.md", "e-while-down")  # no server, no watcher
    with Knowledge.open(root, tuning=MONITORED) as kb:
        serving = Serving(kb)
        serving.start_watching()
        try:
            assert kb.search("e-while-down").results  # answered once the first reconcile ran
            after = position(root)
            assert after[0] == before[0] and after[1] is not None and before[1] is not None
            assert after[1] > before[1]  # the reconcile followed the monitor's answer
        finally:
            serving.stop_watching()
    assert report(root, MONITORED) == report(root, PLAIN)
