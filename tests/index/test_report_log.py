"""The memory report's totals rolled forward over the report log equal the totals counted again,
after any writes: episodes with and without ids, shared ids, pages citing episodes by id and by
path, superseded episodes, notes outside the episodes prefix, broken frontmatter, deletes. When
the roll cannot vouch for the warnings it says so (``None``) and the totals are counted; the
usual writes of a busy root (new episodes, a consolidation page citing them) roll."""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiwifs.index import report as indexed_report
from kiwifs.index.core import Index
from kiwifs.index.memory import overview as indexed_overview
from kiwifs.index.upkeep import IndexKeeper
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving
from partskit import index_keeper

PREFIX = "episodes/"
IDS = ("a", "b", "c", "d", "")


def episode(eid: str, superseded: bool = False) -> str:
    head = [f"episode_id: {eid}"] if eid else []
    head += ["memory_status: superseded"] if superseded else []
    return "---\n" + "\n".join(head) + "\n---\nwhat happened\n" if head else "no id\n"


def merge_page(ids: list[str], paths: list[str]) -> str:
    cited = [f"  - type: episode\n    id: {i}\n" for i in ids if i]
    cited += [f"  - type: note\n    path: {p}\n" for p in paths]
    body = "merged-from:\n" + "".join(cited) if cited else "merged-from: []\n"
    return "---\nmemory_kind: semantic\n" + body + "---\nwhat we learned\n"


@contextmanager
def served(root: Path) -> Iterator[tuple[Knowledge, IndexKeeper, Index]]:
    keeper = index_keeper(root)
    with Knowledge(root, index=keeper) as kb:
        kb.search("what")  # the index made and current
        index = keeper._open()
        keeper.answers.warm(index, PREFIX)  # as a server warms up: the report log made
        yield kb, keeper, index


@contextmanager
def watched(root: Path) -> Iterator[tuple[Knowledge, IndexKeeper, Index]]:
    """A watching keeper on ``root`` (as ``kiwifs serve`` runs one), ready, its report's
    totals kept."""
    keeper = index_keeper(root)
    with Knowledge(root, index=keeper) as kb:
        Serving(kb).start_watching()
        try:
            while not kb.ready():
                time.sleep(0.01)
            index = keeper._open()
            keeper.answers.memory_report(PREFIX, 10, 0)
            yield kb, keeper, index
        finally:
            Serving(kb).stop_watching()


class Rolling:
    """Totals kept at a log position and rolled forward, as a server keeps them."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.totals, self.position = self.counted()
        self.rolled = 0

    def counted(self) -> tuple[indexed_report.Totals, indexed_report.LogPosition]:
        with self.index.reader() as conn, indexed_report.snapshot(conn):
            position = indexed_report.log_position(conn)
            _, totals = indexed_report.report(conn, PREFIX, 0, 0)
        assert position is not None
        return totals, position

    def check(self) -> bool:
        """Roll forward to now; assert it equals counting again. True when it rolled."""
        with self.index.reader() as conn, indexed_report.snapshot(conn):
            rolled = indexed_report.advanced(conn, self.totals, self.position, PREFIX)
            position = indexed_report.log_position(conn)
            _, fresh = indexed_report.report(conn, PREFIX, 0, 0)
        assert position is not None
        if rolled is not None:
            assert rolled == fresh
            self.rolled += 1
        self.totals, self.position = fresh, position
        return rolled is not None


def test_the_usual_writes_of_a_busy_root_roll(make_root: Callable[..., Path]) -> None:
    root = make_root({"episodes/old.md": episode("old"), "notes/n.md": "a note\n"})
    with served(root) as (kb, _, index):
        rolling = Rolling(index)
        for n in range(5):
            kb.write(f"episodes/run{n}.md", episode(f"run{n}"))
            assert rolling.check()
        kb.write("pages/p.md", merge_page(["run0", "run1"], ["episodes/run2.md"]))
        assert rolling.check()
        kb.write("episodes/run3.md", episode("run3", superseded=True))
        assert rolling.check()
        kb.write("pages/p.md", merge_page(["run0"], []))  # cites less: uncovered again
        assert rolling.check()
        kb.delete("episodes/run4.md")
        kb.write("notes/n.md", "a note, edited\n")
        assert rolling.check()
        assert rolling.totals.unmerged_count == 3  # old, run1, run2


def test_a_shared_id_or_a_missing_one_counts_again(make_root: Callable[..., Path]) -> None:
    root = make_root({"episodes/e1.md": episode("x")})
    with served(root) as (kb, _, index):
        rolling = Rolling(index)
        kb.write("episodes/e2.md", episode("x"))  # a duplicate id: a warning comes
        assert not rolling.check()
        kb.delete("episodes/e2.md")  # and goes
        assert not rolling.check()
        kb.write("episodes/e3.md", episode(""))  # no id: a warning
        assert not rolling.check()
        kb.write("episodes/e4.md", "---\nepisode_id: [open\n---\nbroken\n")
        assert not rolling.check()


def test_the_served_report_rolls_its_totals(make_root: Callable[..., Path]) -> None:
    """A watching keeper's report after writes gives what a report counted afresh gives, its
    totals rolled forward from the ones it kept (the same warnings, not read again)."""
    root = make_root({"episodes/e1.md": episode("e1"), "episodes/e2.md": episode("")})
    with watched(root) as (kb, keeper, index):
        for n in range(3):
            kept = keeper.answers._totals[(PREFIX, None)][1]
            kb.write(f"episodes/w{n}.md", episode(f"w{n}"))
            served_report = keeper.answers.memory_report(PREFIX, 10, 0)
            with index.reader() as conn:
                fresh, _ = indexed_report.report(conn, PREFIX, 10, 0)
            assert served_report == fresh
            assert keeper.answers._totals[(PREFIX, None)][1].warnings is kept.warnings


def test_kept_totals_roll_by_the_log_even_where_the_generation_did_not_move(
    make_root: Callable[..., Path],
) -> None:
    """A write committed after a report read the index generation and before it took its
    snapshot leaves totals from before the write kept under the generation after it: the log
    position they were kept at still rolls them (an out-of-band delete once stayed in the
    served report for good)."""
    root = make_root({"episodes/e1.md": episode("e1"), "episodes/e2.md": episode("e2")})
    with watched(root) as (kb, keeper, index):
        (ident, _, position), totals = keeper.answers._totals[(PREFIX, None)]
        kb.delete("episodes/e2.md")
        kb.write("episodes/e3.md", episode("e3", superseded=True))
        keeper.answers.memory_report(PREFIX, 10, 0)  # the writes applied: the generation moved
        raced = ((ident, index.generation, position), totals)  # as the race left them
        keeper.answers._totals[(PREFIX, None)] = raced
        served_report = keeper.answers.memory_report(PREFIX, 10, 0)
        assert served_report is not None
        assert (served_report.episodic_count, served_report.unmerged_count) == (2, 1)


def test_the_whole_queue_takes_its_length_from_the_kept_totals(
    make_root: Callable[..., Path],
) -> None:
    """A watching keeper's queue of every unmerged episode is as long as a count says, after
    writes, its length rolled from the report's kept totals (a count planted there shows); a
    queue under a path prefix is counted."""
    root = make_root({"episodes/e1.md": episode("e1"), "episodes/a/e2.md": episode("e2")})
    with watched(root) as (kb, keeper, index):
        for n in range(3):
            kb.write(f"episodes/w{n}.md", episode(f"w{n}", superseded=n == 1))
            page = kb.queue()
            with index.reader() as conn:
                fresh = indexed_overview.queue_page(conn, PREFIX, "", 100, 0)
            assert page == fresh and page.total == 3 + n - (n >= 1)
        mark, totals = keeper.answers._totals[(PREFIX, None)]
        planted = dataclasses.replace(totals, unmerged_count=1000)
        keeper.answers._totals[(PREFIX, None)] = (mark, planted)
        kb.write("episodes/w3.md", episode("w3"))
        assert kb.queue().total == 1001
        assert kb.queue("episodes/a/").total == 1


ops = st.lists(
    st.one_of(
        st.tuples(st.just("episode"), st.integers(0, 5), st.sampled_from(IDS), st.booleans()),
        st.tuples(st.just("note"), st.integers(0, 2), st.sampled_from(IDS), st.booleans()),
        st.tuples(st.just("kinded"), st.integers(0, 2), st.sampled_from(IDS), st.booleans()),
        st.tuples(
            st.just("merge"),
            st.integers(0, 2),
            st.lists(st.sampled_from(IDS), max_size=3),
            st.lists(st.integers(0, 5), max_size=2),
        ),
        st.tuples(st.just("broken"), st.integers(0, 5), st.just(""), st.just(False)),
        st.tuples(st.just("delete"), st.integers(0, 5), st.sampled_from(["e", "n", "k", "m"])),
    ),
    min_size=1,
    max_size=10,
)


# the episodes' paths, in folders of their own and directly under the prefix (the dashboard's
# folder counts tell them apart), and those of the notes episodic by their kind
EPISODES = (
    "episodes/e0.md",
    "episodes/a/e1.md",
    "episodes/a/b/e2.md",
    "episodes/e3.md",
    "episodes/c/e4.md",
    "episodes/e5.md",
)
KINDED = ("notes/k0.md", "notes/deep/k1.md", "k2.md")


def apply(kb: Knowledge, root: Path, op: tuple) -> None:  # type: ignore[type-arg]
    what, n = op[0], op[1]
    if what == "episode":
        kb.write(EPISODES[n], episode(op[2], op[3]))
    elif what == "note":  # no kind, outside the prefix: an episode only by its path (it is not)
        kb.write(f"notes/n{n}.md", episode(op[2], op[3]))
    elif what == "kinded":  # episodic by its kind, outside the prefix
        head = (
            f"memory_kind: episodic\nepisode_id: {op[2]}\n" if op[2] else "memory_kind: episodic\n"
        )
        kb.write(KINDED[n], "---\n" + head + "---\nrun\n")
    elif what == "merge":
        kb.write(f"pages/m{n}.md", merge_page(op[2], [EPISODES[p] for p in op[3]]))
    elif what == "broken":
        kb.write(EPISODES[n], "---\nepisode_id: [open\n---\nbroken\n")
    else:
        paths = {
            "e": EPISODES,
            "n": [f"notes/n{i}.md" for i in range(3)],
            "k": KINDED,
            "m": [f"pages/m{i}.md" for i in range(3)],
        }[op[2]]
        if n < len(paths) and (root / paths[n]).exists():
            kb.delete(paths[n])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_rolled_totals_equal_counted_totals_after_any_writes(steps: list[tuple]) -> None:  # type: ignore[type-arg]
    replayed(steps, Rolling)


def replayed(steps: list[tuple], checker: Callable[[Index], Rolling | RollingCoverage]) -> None:  # type: ignore[type-arg]
    """``steps`` applied one at a time to a root holding one episode, ``checker``'s check
    after each."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "episodes").mkdir()
        (root / "episodes" / "seed.md").write_text(episode("seed"))
        with served(root) as (kb, _, index):
            rolling = checker(index)
            for op in steps:
                apply(kb, root, op)
                rolling.check()


class RollingCoverage:
    """The dashboard's folder counts of each of :data:`COVERAGE_PREFIXES` kept and rolled
    forward, as a server keeps them."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.kept = {p: self.counted(p) for p in COVERAGE_PREFIXES}

    def counted(self, prefix: str) -> indexed_overview.Coverage:
        with self.index.reader() as conn, indexed_report.snapshot(conn):
            return indexed_overview.coverage(conn, prefix)

    def check(self) -> None:
        """Roll each forward to now; assert it equals counting again."""
        for prefix, kept in self.kept.items():
            with self.index.reader() as conn, indexed_report.snapshot(conn):
                rolled = indexed_overview.coverage(conn, prefix, kept)
                fresh = indexed_overview.coverage(conn, prefix)
            assert rolled == fresh
            self.kept[prefix] = rolled


COVERAGE_PREFIXES = ("episodes/", "notes/", "episodes/a/")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_rolled_folder_coverage_equals_counted_after_any_writes(steps: list[tuple]) -> None:  # type: ignore[type-arg]
    """Episodes in folders and directly under the prefix, notes episodic by their kind outside
    it (in a folder and at the root), citations, superseded episodes, deletes: each prefix's
    folder counts and superseded count, rolled over the report log, equal a fresh count."""
    replayed(steps, RollingCoverage)


def test_the_dashboard_rolls_its_folder_counts(make_root: Callable[..., Path]) -> None:
    """The overview after writes rolls the counts it kept to the report log's new position,
    the same as counting them; a log cut past them is counted again."""
    root = make_root({"episodes/a/e1.md": episode("e1"), "episodes/e2.md": episode("e2")})
    with served(root) as (kb, keeper, index):
        kb.overview()
        for n in range(3):
            kb.write(f"episodes/b/w{n}.md", episode(f"w{n}", superseded=n == 2))
            view = kb.overview()
            _, kept = keeper.answers._coverage[PREFIX]
            with index.reader() as conn, indexed_report.snapshot(conn):
                assert kept.position == indexed_report.log_position(conn)
                assert kept == indexed_overview.coverage(conn, PREFIX)
        assert {f.folder: (f.episodic, f.unmerged) for f in view.folders} == {
            "episodes/": (1, 1),
            "episodes/a/": (1, 1),
            "episodes/b/": (3, 2),
        }
        assert view.superseded == 1
        # rolled from what it kept, not counted: a count planted in the kept state stays
        ident, kept = keeper.answers._coverage[PREFIX]
        keeper.answers._coverage[PREFIX] = (ident, kept._replace(superseded=100))
        kb.write("episodes/b/w3.md", episode("w3"))
        assert kb.overview().superseded == 100
        kb.write("episodes/b/w4.md", episode("w4"))
        with index.transaction() as conn:
            conn.execute("DELETE FROM report_log")  # as trimmed past the kept position
        kb.write("episodes/b/w5.md", episode("w5"))
        view = kb.overview()
        assert (view.superseded, {f.folder: f.episodic for f in view.folders}["episodes/b/"]) == (
            1,
            6,
        )


def test_a_log_cut_past_the_totals_or_another_schema_counts_again(
    make_root: Callable[..., Path],
) -> None:
    root = make_root({"episodes/e1.md": episode("e1")})
    with served(root) as (kb, _, index):
        rolling = Rolling(index)
        kb.write("episodes/e2.md", episode("e2"))
        with index.transaction() as conn:
            conn.execute("DELETE FROM report_log")  # as trimmed past the kept position
        kb.write("episodes/e3.md", episode("e3"))
        assert not rolling.check()
        with index.transaction() as conn:
            conn.execute("CREATE TABLE elsewhere (x)")
        kb.write("episodes/e4.md", episode("e4"))
        assert not rolling.check()


def test_an_index_without_the_log_has_no_position(make_root: Callable[..., Path]) -> None:
    root = make_root({"episodes/e1.md": episode("e1")})
    with served(root) as (_, _, index):
        with index.transaction() as conn:
            conn.execute("DROP TRIGGER report_log_update")
        with index.reader() as conn:
            assert indexed_report.log_position(conn) is None
