"""A server's writes indexed in batches by the writeback thread, and read back at once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kiwifs.index.writeback import Writeback
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving
from kiwifs.tuning import Tuning
from waiting import wait_for

HOUR = 3600.0  # a window no round waits out in a test: only settle() and close() start it


class Rounds:
    """The paths of each round the writeback ran."""

    def __init__(self, fail_first: bool = False) -> None:
        self.lock = threading.Lock()
        self.rounds: list[list[str]] = []
        self.fail_first = fail_first

    def refresh(self, paths: list[str]) -> None:
        with self.lock:
            self.rounds.append(list(paths))
            if self.fail_first and len(self.rounds) == 1:
                raise RuntimeError("the database went away")


@pytest.fixture
def rounds() -> Iterator[tuple[Writeback, Rounds]]:
    seen = Rounds()
    writeback = Writeback(seen.refresh, window=HOUR)
    yield writeback, seen
    writeback.close()


def test_paths_queued_meanwhile_share_one_round(rounds: tuple[Writeback, Rounds]) -> None:
    writeback, seen = rounds
    assert writeback.add(["a.md", "b.md"])
    assert writeback.add(["c.md", "a.md"])  # named twice: indexed once
    assert seen.rounds == []  # the window is an hour: nothing yet
    writeback.settle()  # a reader cuts the window short and waits for the round
    assert seen.rounds == [["a.md", "b.md", "c.md"]]
    writeback.settle()  # nothing queued: returns at once, no empty round
    assert seen.rounds == [["a.md", "b.md", "c.md"]]


def test_the_watcher_leaves_queued_paths_to_the_round(rounds: tuple[Writeback, Rounds]) -> None:
    writeback, seen = rounds
    writeback.add(["notes/a.md"])
    assert writeback.unqueued(["notes/a.md", "notes/b.md"]) == ["notes/b.md"]
    writeback.settle()
    assert writeback.unqueued(["notes/a.md"]) == ["notes/a.md"]  # indexed: no longer queued


def test_the_watcher_waits_for_the_round_that_took_its_path() -> None:
    """A path's event comes while the round that took it reads it: checked before the round
    stores its row, the path would look new to the index and be indexed a second time."""
    entered, release = threading.Event(), threading.Event()

    def refresh(paths: list[str]) -> None:
        entered.set()
        release.wait(30)

    writeback = Writeback(refresh, window=0.0)
    try:
        writeback.add(["notes/a.md"])
        assert entered.wait(10)  # the round has taken notes/a.md and is indexing it
        assert writeback.unqueued(["notes/b.md"]) == ["notes/b.md"]  # not taken: at once
        answers: list[list[str]] = []
        watcher = threading.Thread(
            target=lambda: answers.append(writeback.unqueued(["notes/a.md", "notes/b.md"]))
        )
        watcher.start()
        watcher.join(0.3)
        assert watcher.is_alive() and answers == []  # waits for the round
        release.set()
        watcher.join(10)
        assert answers == [["notes/a.md", "notes/b.md"]]  # the round is done: both checked
    finally:
        release.set()
        writeback.close()


def test_closing_indexes_what_is_queued_then_refuses_more(tmp_path: Path) -> None:
    seen = Rounds()
    writeback = Writeback(seen.refresh, window=HOUR)
    writeback.add(["a.md"])
    writeback.close()
    assert seen.rounds == [["a.md"]]
    assert not writeback.add(["b.md"])  # the caller indexes it itself
    writeback.settle()  # a stopped writeback holds nobody up
    assert seen.rounds == [["a.md"]]


def test_a_failed_round_does_not_stop_the_next() -> None:
    seen = Rounds(fail_first=True)
    writeback = Writeback(seen.refresh, window=HOUR)
    try:
        writeback.add(["a.md"])
        writeback.settle()
        writeback.add(["b.md"])
        writeback.settle()
        assert seen.rounds == [["a.md"], ["b.md"]]
    finally:
        writeback.close()


def test_without_a_reader_a_round_starts_after_its_window() -> None:
    seen = Rounds()
    writeback = Writeback(seen.refresh, window=0.01)
    try:
        writeback.add(["a.md"])
        assert wait_for(lambda: seen.rounds == [["a.md"]])
    finally:
        writeback.close()


@pytest.mark.parametrize("batched", [True, False], ids=["writeback", "inside-the-write"])
def test_a_write_is_found_by_the_next_answer_while_watching(
    make_root: Callable[..., Path], batched: bool
) -> None:
    """Each answer reads every write that returned before it, batched or not."""
    root = make_root({"episodes/e0.md": "---\nepisode_id: e-0\n---\nfirst\n"})
    with Knowledge.open(root, tuning=Tuning(index_writeback=batched)) as kb:
        Serving(kb).start_watching()
        assert wait_for(kb.ready)
        for i in range(1, 21):
            body = f"---\nepisode_id: e-{i}\n---\nwombat{i} grazes\n"
            kb.write(f"episodes/e{i}.md", body)
            assert [hit.path for hit in kb.search(f"wombat{i}").results] == [f"episodes/e{i}.md"]
            assert kb.memory_report().episodic_count == i + 1
        kb.delete("episodes/e3.md")
        assert kb.search("wombat3").results == []
        assert kb.memory_report().episodic_count == 20
