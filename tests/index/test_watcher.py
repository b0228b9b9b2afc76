"""The file watcher: per-folder watches that follow folders coming and going."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from kiwifs.index.core import ReconcileStats
from kiwifs.index.watcher import Watcher
from kiwifs.tuning import Tuning
from waiting import wait_for


class Recorder:
    """What the watcher asked for: the paths refreshed, the reconciles run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.refreshed: list[str] = []
        self.reconciles = 0

    def refresh(self, rels: list[str]) -> None:
        with self.lock:
            self.refreshed.extend(rels)

    def reconcile(self) -> None:
        with self.lock:
            self.reconciles += 1

    def saw(self, rel: str) -> bool:
        with self.lock:
            return rel in self.refreshed


@pytest.fixture(params=[True, False], ids=["per-folder", "recursive"])
def watching(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Watcher, Recorder]:
    (tmp_path / "notes").mkdir()
    (tmp_path / ".git/objects").mkdir(parents=True)
    seen = Recorder()
    tuning = Tuning(watch_folders=request.param)
    watcher = Watcher(tmp_path, seen.refresh, seen.reconcile, period=3600, tuning=tuning)
    watcher.start()
    request.addfinalizer(watcher.stop)
    assert watcher.wait_ready()
    return watcher, seen


def test_a_folder_made_after_the_start_is_watched(watching: tuple[Watcher, Recorder]) -> None:
    watcher, seen = watching
    root = watcher.root
    (root / "notes/a.md").write_text("a\n")
    assert wait_for(lambda: seen.saw("notes/a.md"))
    reconciles = seen.reconciles
    watched = list(watcher._watched)
    (root / ".staging/new/deeper").mkdir(parents=True)
    (root / ".staging/new/deeper/early.md").write_text("e\n")  # no event: hidden, unwatched
    (root / ".staging/new").rename(root / "new")
    if watcher._per_folder:
        # the folder came: the watches set up again, then the new folder walked alone
        assert wait_for(lambda: seen.saw("new/deeper/early.md"))
        assert seen.reconciles == reconciles
        # the folders watched before, kept as they were, and the new ones listed alone: the
        # root is not walked again for them (a million files: ~1 s a new folder)
        assert watcher._watched[: len(watched)] == watched
        added = sorted(os.path.relpath(f, root) for f in watcher._watched[len(watched) :])
        assert added == ["new", "new/deeper"]
    else:
        assert wait_for(lambda: seen.reconciles > reconciles)  # the whole root reconciled
    (root / "new/deeper/b.md").write_text("b\n")  # no reconcile for an hour: only an event
    assert wait_for(lambda: seen.saw("new/deeper/b.md"))


def test_a_folder_that_went_gets_a_reconcile(watching: tuple[Watcher, Recorder]) -> None:
    watcher, seen = watching
    root = watcher.root
    before = seen.reconciles
    (root / "gone/sub").mkdir(parents=True)
    (root / "gone/sub/x.md").write_text("x\n")
    # per folder: the new folder walked; recursively: the root reconciled
    assert wait_for(lambda: seen.saw("gone/sub/x.md") or seen.reconciles > before)
    reconciles = seen.reconciles
    shutil.rmtree(root / "gone")  # only a reconcile of the root can drop its rows
    assert wait_for(lambda: seen.reconciles > reconciles)


def test_the_plain_path_reconciles_the_root_for_a_new_folder(tmp_path: Path) -> None:
    seen = Recorder()
    tuning = Tuning(walk_new_folders=False)
    watcher = Watcher(tmp_path, seen.refresh, seen.reconcile, period=3600, tuning=tuning)
    watcher.start()
    try:
        assert watcher.wait_ready()
        reconciles = seen.reconciles
        (tmp_path / "new").mkdir()
        assert wait_for(lambda: seen.reconciles > reconciles)
    finally:
        watcher.stop()


def test_hidden_files_are_never_refreshed(watching: tuple[Watcher, Recorder]) -> None:
    watcher, seen = watching
    root = watcher.root
    (root / ".git/objects/x.md").write_text("hidden\n")
    (root / "notes/after.md").write_text("seen\n")
    assert wait_for(lambda: seen.saw("notes/after.md"))
    assert not any(".git" in rel for rel in seen.refreshed)


def test_the_folders_watched_leave_out_hidden_ones_and_links(tmp_path: Path) -> None:
    (tmp_path / "a/b").mkdir(parents=True)
    (tmp_path / ".kiwi/state").mkdir(parents=True)
    (tmp_path / "a/.obsidian").mkdir()
    os.symlink(tmp_path / "a", tmp_path / "link")
    watcher = Watcher(tmp_path, lambda rels: None, lambda: None)
    folders = sorted(os.path.relpath(f, tmp_path) for f in watcher._folders())
    assert folders == [".", "a", "a/b"]


def test_the_periodic_reconcile_waits_longer_while_the_events_miss_nothing(
    tmp_path: Path,
) -> None:
    missed = [0]
    reconciles: list[float] = []

    def reconcile() -> ReconcileStats:
        reconciles.append(watcher.interval)
        return ReconcileStats(0, 0, 0, 0.0, missed=missed[0])

    tuning = Tuning(reconcile_max=0.4)
    watcher = Watcher(tmp_path, lambda rels: None, reconcile, period=0.05, tuning=tuning)
    watcher.start()
    try:
        assert watcher.wait_ready()
        assert wait_for(lambda: watcher.interval == 0.4)  # 0.05, 0.1, 0.2, then the cap
        assert reconciles[1:4] == [0.05, 0.1, 0.2]  # the first is the start's own
        missed[0] = 3  # a reconcile found changes whose events were lost: back to the period
        assert wait_for(lambda: watcher.interval == 0.05)
    finally:
        watcher.stop()


def test_a_reconcile_that_cannot_tell_keeps_the_period(tmp_path: Path) -> None:
    seen = Recorder()  # answers nothing: as good as a failed reconcile
    watcher = Watcher(tmp_path, seen.refresh, seen.reconcile, period=0.05)
    watcher.start()
    try:
        assert watcher.wait_ready()
        assert wait_for(lambda: seen.reconciles >= 4)
        assert watcher.interval == 0.05
    finally:
        watcher.stop()


# ---------------------------------------------------------------------------------------------
# names that are not UTF-8: watchfiles cannot hand them over (it raises), the watcher goes on

PROMPTLY = 10.0  # seconds: the events take milliseconds; without them nothing comes for an hour


def test_a_file_name_that_is_not_utf8_does_not_end_the_events(
    watching: tuple[Watcher, Recorder],
) -> None:
    watcher, seen = watching
    root = watcher.root
    for change in ("came", "went"):  # each event makes watchfiles raise: its batch is lost
        reconciles = seen.reconciles
        bad = os.fsencode(root / "notes") + b"/caf\xe9.md"
        if change == "came":
            os.close(os.open(bad, os.O_CREAT | os.O_WRONLY, 0o644))
        else:
            os.unlink(bad)
        assert wait_for(lambda n=reconciles: seen.reconciles > n, PROMPTLY)  # what it held
        after = f"notes/after-{change}.md"
        (root / after).write_text("edited with cat\n")
        assert wait_for(lambda rel=after: seen.saw(rel), PROMPTLY)  # heard as an event
        assert watcher.running


def test_a_folder_name_that_is_not_utf8_is_left_out_of_the_watches(
    watching: tuple[Watcher, Recorder],
) -> None:
    watcher, seen = watching
    root = watcher.root
    reconciles = seen.reconciles
    os.mkdir(os.fsencode(root) + b"/f\xe9")  # came after the start: watches set up again
    assert wait_for(lambda: seen.reconciles > reconciles, PROMPTLY)
    (root / "notes/after.md").write_text("edited with cat\n")
    assert wait_for(lambda: seen.saw("notes/after.md"), PROMPTLY)
    assert watcher.running


def test_the_watches_start_beside_a_folder_name_that_is_not_utf8(tmp_path: Path) -> None:
    os.mkdir(os.fsencode(tmp_path) + b"/f\xe9")
    os.close(os.open(os.fsencode(tmp_path) + b"/f\xe9/caf\xe9.md", os.O_CREAT | os.O_WRONLY))
    (tmp_path / "notes").mkdir()
    watcher = Watcher(tmp_path, (seen := Recorder()).refresh, seen.reconcile, period=3600)
    assert sorted(os.path.relpath(f, tmp_path) for f in watcher._folders()) == [".", "notes"]
    watcher.start()
    try:
        assert watcher.wait_ready()
        (tmp_path / "notes/a.md").write_text("a\n")
        assert wait_for(lambda: seen.saw("notes/a.md"), PROMPTLY)
    finally:
        watcher.stop()


def test_a_failed_first_reconcile_is_tried_again_soon(tmp_path: Path) -> None:
    """The wait after a reconcile grows with its duration (its share of the time), but not
    before the index is ready: a long first reconcile that failed is tried again after the
    period."""
    calls: list[float] = []

    def reconcile() -> ReconcileStats:
        calls.append(time.monotonic())
        if len(calls) == 1:
            time.sleep(0.3)  # a long first fill, at a share of 1 %: a 30 s wait
            raise OSError("the disk went away")
        return ReconcileStats(0, 0, 0, 0.0)

    tuning = Tuning(reconcile_share=0.01)
    watcher = Watcher(tmp_path, lambda rels: None, reconcile, period=0.05, tuning=tuning)
    watcher.start()
    try:
        assert wait_for(watcher.ready.is_set, 10)
        assert calls[1] - calls[0] < 5
    finally:
        watcher.stop()


@pytest.mark.parametrize("fails", [False, True])
def test_the_warm_up_runs_once_before_ready_and_never_stops_it(tmp_path: Path, fails: bool) -> None:
    """A server's warm-up (``on_ready``) runs after the first reconcile and before ``ready``,
    once; a warm-up that fails is logged, and the index is ready all the same."""
    seen_ready: list[bool] = []

    def warm() -> None:
        seen_ready.append(watcher.ready.is_set())
        if fails:
            raise RuntimeError("no numpy today")

    reconcile = lambda: ReconcileStats(0, 0, 0, 0.0)  # noqa: E731
    watcher = Watcher(tmp_path, lambda rels: None, reconcile, period=0.05, on_ready=warm)
    watcher.start()
    try:
        assert watcher.wait_ready()
        assert wait_for(lambda: watcher.interval > 0.05)  # later reconciles have run
        assert seen_ready == [False]
    finally:
        watcher.stop()


def test_a_server_is_ready_with_its_first_report_counted(tmp_path: Path) -> None:
    """``serve``'s watcher counts the report of the default prefix before it reports ready: the
    first report answers from those totals, equal to a fresh count."""
    from kiwifs import Knowledge
    from kiwifs.server.lifecycle import Serving

    for i in range(5):
        (tmp_path / "episodes").mkdir(exist_ok=True)
        (tmp_path / f"episodes/run-{i}.md").write_text(f"---\nepisode_id: run-{i}\n---\nran\n")
    with Knowledge.open(tmp_path) as kb:
        serving = Serving(kb)
        serving.start_watching()
        try:
            assert wait_for(kb.ready)
            warmed = kb.memory_report(limit=0)
        finally:
            serving.stop_watching()
        assert warmed.to_json() == kb.memory_report(limit=0, use_index=False).to_json()
        assert warmed.unmerged_count == 5


def test_the_periodic_reconcile_takes_at_most_its_share_of_the_time(tmp_path: Path) -> None:
    """A reconcile of 0.1 s may take 20 % of the time here: the next waits at least 0.5 s,
    from the start's own one on, whatever the period and the doubling say."""
    took = [0.1]

    def reconcile() -> ReconcileStats:
        time.sleep(took[0])
        return ReconcileStats(0, 0, 0, 0.0)

    tuning = Tuning(reconcile_max=0.4, reconcile_share=0.2)
    watcher = Watcher(tmp_path, lambda rels: None, reconcile, period=0.05, tuning=tuning)
    watcher.start()
    try:
        assert watcher.wait_ready()
        assert wait_for(lambda: watcher.interval >= 0.5)
        took[0] = 0.0  # quick again: back to the doubling's waits, capped
        assert wait_for(lambda: watcher.interval == 0.4)
    finally:
        watcher.stop()


def test_folders_that_came_are_added_once_beside_those_watched(tmp_path: Path) -> None:
    """The new folders (and those under them) join the watched ones, each once, even when one
    that came lies under another that came; the folders watched before stay as they were."""
    (tmp_path / "a/b").mkdir(parents=True)
    (tmp_path / "n").mkdir()
    watcher = Watcher(tmp_path, Recorder().refresh, Recorder().reconcile, period=3600)
    watcher._watched = [str(tmp_path), str(tmp_path / "n")]
    watched = watcher._watched_with([str(tmp_path / "a"), str(tmp_path / "a/b")])
    assert watched[:2] == [str(tmp_path), str(tmp_path / "n")]
    assert sorted(os.path.relpath(f, tmp_path) for f in watched[2:]) == ["a", "a/b"]
