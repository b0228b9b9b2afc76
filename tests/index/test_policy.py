"""The answers and lookups ask the keeper only what :class:`KeeperPolicy` names: a policy that is
not the keeper serves them as well, and what it refuses they never reach around it for."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from kiwifs.config import VectorConfig
from kiwifs.index.answers import IndexAnswers
from kiwifs.index.core import Index
from kiwifs.index.filters import RecallFilter
from kiwifs.index.lookups import IndexLookups
from kiwifs.index.memory.checkcache import CheckKeeper, CheckWorker
from kiwifs.index.memory.timeline import TimelineKeeper
from kiwifs.index.policy import KeeperPolicy
from kiwifs.index.upkeep import IndexKeeper
from kiwifs.index.vectors.side import Recall
from kiwifs.tuning import Tuning

T = TypeVar("T")


class Policy:
    """A keeper's policy over one index: reconciled before each answer, no loops, no vectors."""

    def __init__(self, index: Index, reports: bool) -> None:
        self.index = index
        self.reports = reports
        self.guarded_calls = 0
        self.vector = VectorConfig()
        self.check_keeper: CheckKeeper | None = None
        self.check_worker: CheckWorker | None = None
        self.timeline_keeper: TimelineKeeper | None = None

    def guarded(self, action: Callable[[Index], T]) -> T:
        self.guarded_calls += 1
        self.index.reconcile()
        return action(self.index)

    @property
    def watching(self) -> bool:
        return False

    def answers_reports(self) -> bool:
        return self.reports

    def recall(self) -> Recall:
        raise AssertionError("vectors are off: nothing may build the vector side")


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes/fox.md").write_text("---\nstatus: todo\n---\nthe quick brown fox\n")
    opened = Index(tmp_path, None, 1.0, Tuning())
    yield opened
    opened.close()


def test_the_parts_answer_through_a_policy_that_is_not_the_keeper(index: Index) -> None:
    policy = Policy(index, reports=True)
    lookups, answers = IndexLookups(policy), IndexAnswers(policy)
    found = lookups.search("fox", 10, 0, None).results
    assert [hit.path for hit in found] == ["notes/fox.md"]
    blended = lookups.hybrid("fox", 10, 0, RecallFilter()).results
    assert [hit.path for hit in blended] == ["notes/fox.md"]
    assert lookups.vector_status().enabled is False  # vectors off: recall() never asked
    assert answers.memory_report("episodes/", None, 0) is not None
    assert [t.path for t in answers.todo_files("")] == ["notes/fox.md"]
    assert policy.guarded_calls == 4


def test_the_scan_preferred_keeps_the_report_away_from_the_index(index: Index) -> None:
    policy = Policy(index, reports=False)
    answers = IndexAnswers(policy)
    assert answers.memory_report("episodes/", None, 0) is None
    assert answers.check_rows("episodes/") is None
    assert policy.guarded_calls == 0


def test_the_keeper_is_the_policy_its_parts_are_handed(tmp_path: Path) -> None:
    keeper = IndexKeeper(tmp_path)
    policy: KeeperPolicy = keeper  # mypy holds the keeper to the protocol here too
    assert keeper.answers._keeper is policy and keeper.lookups._keeper is policy
    keeper.close()
