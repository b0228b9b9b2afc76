"""The consolidation picture in the core: lineage both ways, the dashboard's figures, the queue
page, and the history replayed from git into the index (real roots, real git, real SQLite)."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitrepo import git
from kiwifs.errors import NotFound, UsageError
from kiwifs.index import background
from kiwifs.index.memory import timeline as timeline_index
from kiwifs.knowledge import Knowledge
from kiwifs.memory.check import AGE_FROM_COMMIT, AGE_FROM_CREATED, AGE_FROM_MTIME
from kiwifs.memory.rules import MergeEntry, build_report, file_facts
from kiwifs.memory.timeline import CoverageState
from kiwifs.server.lifecycle import Serving
from kiwifs.tuning import Tuning
from partskit import index_keeper


def episode(ident: str, extra: str = "") -> str:
    return f"---\nepisode_id: {ident}\n{extra}---\n# {ident}\n"


# -- lineage ------------------------------------------------------------------------------------


def test_lineage_both_ways_with_dates_notes_and_dangling(kb: Knowledge) -> None:
    kb.write("episodes/a.md", episode("ep-a"), provenance="run:ep-a", actor="agent:x")
    kb.write("episodes/b.md", episode("ep-b"))
    kb.write("episodes/c.md", "no frontmatter, no id\n")
    kb.merge(
        "concepts/p.md",
        [
            MergeEntry(id="ep-a", note="the login bug", date="2026-01-02T03:04:05Z"),
            MergeEntry(type="run", path="./episodes/c.md"),
            MergeEntry(id="ghost"),
            MergeEntry(type="concept", id="not-by-id"),
            MergeEntry(path="episodes/missing.md"),
        ],
        actor="consolidator",
    )
    # a second page merges ep-a as well: a double merge, which only force allows
    kb.merge("concepts/q.md", [MergeEntry(type="Session", id=" ep-a ")], actor="other", force=True)

    ep = kb.lineage("episodes/a.md")
    assert ep.episodic and ep.episode_id == "ep-a"
    assert [(c.page, c.by, c.entry.note, c.entry.date) for c in ep.merged_by] == [
        ("concepts/p.md", "id", "the login bug", "2026-01-02T03:04:05Z"),
        ("concepts/q.md", "id", "", ep.merged_by[1].entry.date),
    ]
    assert [(e.type, e.id, e.actor) for e in ep.derived_from] == [("run", "ep-a", "agent:x")]
    assert kb.lineage("episodes/c.md").merged_by[0].by == "path"
    assert kb.lineage("episodes/b.md").merged_by == ()

    page = kb.lineage("concepts/p.md")
    assert not page.episodic and page.merged_by == ()
    got = [(c.targets, c.dangling, c.problem) for c in page.merged_from]
    assert got == [
        (("episodes/a.md",), False, ""),
        (("episodes/c.md",), False, ""),
        ((), True, "no episode has id 'ghost'"),
        ((), True, "type 'concept' does not cite episodes by id (only by path)"),
        ((), True, "no file at episodes/missing.md"),
    ]
    assert page.dangling_count == 3
    assert page.to_json()["merged_from"][2] == {
        "type": "episode",
        "id": "ghost",
        "date": page.merged_from[2].entry.date,
        "actor": "consolidator",
        "targets": [],
        "dangling": True,
        "why": "no episode has id 'ghost'",
    }


def test_lineage_sees_out_of_band_edits_and_missing_files(kb: Knowledge) -> None:
    (kb.root / "episodes").mkdir()
    (kb.root / "episodes/x.md").write_text(episode("ep-x"))
    (kb.root / "page.md").write_text("---\nmerged-from:\n  - type: trace\n    id: ep-x\n---\n")
    assert [c.page for c in kb.lineage("episodes/x.md").merged_by] == ["page.md"]
    assert kb.lineage("page.md").merged_from[0].targets == ("episodes/x.md",)
    with pytest.raises(NotFound):
        kb.lineage("episodes/none.md")


def test_an_id_resolves_only_to_episodes(kb: Knowledge) -> None:
    kb.write("episodes/e.md", episode("shared"))
    kb.write("notes/n.md", "---\nmemory_kind: semantic\nepisode_id: shared\n---\n")
    kb.merge("p.md", [MergeEntry(id="shared")])
    assert kb.lineage("p.md").merged_from[0].targets == ("episodes/e.md",)
    assert kb.lineage("notes/n.md").merged_by == ()  # not an episode: nothing "merges" it


# -- the dashboard's figures --------------------------------------------------------------------


def test_overview_counts_equal_the_report_and_folders_add_up(kb: Knowledge) -> None:
    for i in range(6):
        kb.write(f"episodes/2026/0{i % 2 + 1}/r{i}.md", episode(f"r{i}"))
    kb.write("episodes/top.md", episode("top"))
    kb.write("inbox/loose.md", "---\nmemory_kind: episodic\nepisode_id: loose\n---\n")
    kb.write("episodes/done.md", "---\nmemory_kind: semantic\n---\n")
    kb.merge("concepts/c.md", [MergeEntry(id="r0"), MergeEntry(id="r3"), MergeEntry(id="loose")])
    report = kb.memory_report()
    view = kb.overview()
    assert (view.episodic, view.unmerged) == (report.episodic_count, report.unmerged_count)
    folders = {f.folder: (f.episodic, f.unmerged) for f in view.folders}
    assert folders == {"episodes/": (1, 1), "episodes/2026/": (6, 4), "inbox/": (1, 0)}
    assert sum(e for e, _ in folders.values()) == view.episodic
    assert view.to_json()["merged_count"] == 3


TRICKY = {
    "root-episode.md": "---\nmemory_kind: episodic\n---\n",  # outside, at the root
    "episodes/direct.md": "no frontmatter\n",
    "episodes/kind.md": "---\nmemory_kind: Episodic\nepisode_id: k\n---\n",
    "episodes/deep/er/still.md": "---\nid: 7\n---\n",
    "episodes/deep/semantic.md": "---\nmemory_kind: semantic\n---\n",
    "episodes/bad.md": "---\n: [\n---\n",
    "episodesX/near.md": "---\nepisode_id: near\n---\n",  # not under episodes/
    "a/b/c.md": "---\nmemory_kind: episodic\nepisode_id: c\n---\n",
    "episodes/z/dup1.md": "---\nepisode_id: dup\n---\n",
    "episodes/z/dup2.md": "---\nepisode_id: dup\n---\n",
    "p.md": "---\nmerged-from:\n  - {type: run, id: dup}\n"
    "  - {type: x, path: /episodes/direct.md}\n  - {type: event, id: '7'}\n---\n",
}


@pytest.mark.parametrize("prefix", [None, "episodes/deep", "a", "nowhere"])
def test_folder_counts_add_up_to_the_report_on_a_tricky_root(
    kb: Knowledge, prefix: str | None
) -> None:
    for rel, text in TRICKY.items():
        (kb.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (kb.root / rel).write_text(text)
    report = kb.memory_report(prefix, use_index=False)
    view = kb.overview(prefix)
    assert (view.episodic, view.unmerged) == (report.episodic_count, report.unmerged_count)


def test_overview_for_another_prefix_and_an_empty_root(kb: Knowledge) -> None:
    assert kb.overview().episodic == 0 and kb.overview().oldest is None
    kb.write("runs/a/x.md", episode("x"))
    view = kb.overview("runs")
    assert view.prefix == "runs/" and view.episodic == 1
    assert [f.folder for f in view.folders] == ["runs/a/"]
    assert view.timeline == ()  # history is replayed for the configured prefix only


def test_oldest_unmerged_by_created_then_first_commit_then_mtime(kb: Knowledge) -> None:
    kb.write("episodes/new.md", episode("new", "created: 2026-03-01T00:00:00Z\n"))
    kb.write("episodes/old.md", episode("old", "created: 2020-05-01\n"))
    oldest = kb.overview().oldest
    assert oldest is not None and oldest.path == "episodes/old.md"
    assert oldest.age_from == AGE_FROM_CREATED
    assert oldest.since == dt.datetime(2020, 5, 1, tzinfo=dt.UTC).timestamp()

    kb.merge("p.md", [MergeEntry(id="old"), MergeEntry(id="new")])
    kb.write("episodes/undated.md", episode("undated"))
    oldest = kb.overview().oldest
    assert oldest is not None and oldest.path == "episodes/undated.md"
    assert oldest.age_from == AGE_FROM_COMMIT
    head_time = int(git(kb.root, "log", "-1", "--format=%ct").strip())
    assert abs(oldest.since - head_time) <= 1

    (kb.root / "episodes/behind.md").write_text(episode("behind"))  # not committed
    os.utime(kb.root / "episodes/behind.md", (1000000000, 1000000000))
    oldest = kb.overview().oldest
    assert oldest is not None and (oldest.path, oldest.age_from) == (
        "episodes/behind.md",
        AGE_FROM_MTIME,
    )
    assert oldest.since == 1000000000


def test_superseded_episodes_are_counted(kb: Knowledge) -> None:
    kb.write("episodes/a.md", episode("a", "memory_status: superseded\n"))
    kb.write("episodes/b.md", episode("b", 'memory_status: "active"\n'))
    kb.write("notes/n.md", "---\nmemory_status: superseded\n---\n")  # not an episode
    kb.write("episodes/c.md", episode("c") + "\nmemory_status superseded in the body\n")
    assert kb.overview().superseded == 1


def test_queue_pages_and_filters_by_path_prefix(kb: Knowledge) -> None:
    for i in range(5):
        kb.write(f"episodes/a/{i}.md", episode(f"a{i}"))
        kb.write(f"episodes/b/{i}.md", episode(f"b{i}"))
    kb.merge("p.md", [MergeEntry(id="a1")])
    page = kb.queue("episodes/a/", limit=2, offset=2)
    assert page.total == 4
    assert [i.episode.path for i in page.items] == ["episodes/a/3.md", "episodes/a/4.md"]
    assert kb.queue().total == 9 and kb.queue("episodes/b/4").total == 1
    assert page.to_json()["unmerged"][0] == {"path": "episodes/a/3.md", "episode_id": "a3"}
    for bad in ({"limit": 0}, {"limit": 5000}, {"offset": -1}, {"path_prefix": "a\x01"}):
        with pytest.raises(UsageError):
            kb.queue(**bad)  # type: ignore[arg-type]


# -- the history --------------------------------------------------------------------------------


def commit_at(root: Path, when: str, message: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    import subprocess

    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", message], check=True, env=env)


def one_episode_root(tmp_path: Path, when: str, message: str) -> Path:
    """A root with one episode (``a``), committed at ``when``."""
    root = tmp_path / "kb"
    Knowledge.init(root, "blank")
    (root / "episodes").mkdir()
    (root / "episodes/a.md").write_text(episode("a"))
    commit_at(root, when, message)
    return root


def test_timeline_has_one_point_per_day_and_replays_only_new_commits(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    Knowledge.init(root, "blank")
    (root / "episodes").mkdir()
    (root / "episodes/a.md").write_text(episode("a"))
    (root / "episodes/b.md").write_text(episode("b"))
    commit_at(root, "2026-01-01T10:00:00Z", "two episodes")
    (root / "p.md").write_text("---\nmerged-from:\n  - type: episode\n    id: a\n---\n")
    commit_at(root, "2026-01-01T12:00:00Z", "merge a")
    (root / "episodes/c.md").write_text(episode("c"))
    commit_at(root, "2026-01-03T09:00:00Z", "one more")
    keeper = index_keeper(root)
    with Knowledge.open(root, index=keeper) as kb:
        assert keeper.refresh_timeline("episodes/") == 4  # with the init commit
        assert keeper.refresh_timeline("episodes/") == 0
        days = [p.day for p in kb.overview().timeline]
        assert days == sorted(days)  # oldest first (the init commit is dated today)
        points = {p.day: (p.episodic, p.unmerged) for p in kb.overview().timeline}
        assert (points["2026-01-01"], points["2026-01-03"]) == ((2, 1), (3, 2))
        kb.merge("p.md", [MergeEntry(id="c")])
        view = kb.overview()  # the merge is today's last commit
        assert view.timeline[-1].unmerged == 1 and view.timeline_current
        assert keeper.refresh_timeline("episodes/") == 0


def test_timeline_follows_rewritten_history_and_a_new_prefix(tmp_path: Path) -> None:
    root = one_episode_root(tmp_path, "2026-02-01T10:00:00Z", "a")
    (root / "episodes/b.md").write_text(episode("b"))
    commit_at(root, "2026-02-02T10:00:00Z", "b")
    keeper = index_keeper(root)
    with Knowledge.open(root, index=keeper):
        keeper.refresh_timeline("episodes/")
        git(root, "reset", "-q", "--hard", "HEAD~1")
        (root / "episodes/z.md").write_text(episode("z"))
        (root / "episodes/y.md").write_text(episode("y"))
        commit_at(root, "2026-02-05T10:00:00Z", "y and z")
        assert keeper.refresh_timeline("episodes/") == 1
        points = {p.day: p.episodic for p in keeper.timeline.points()}
        assert "2026-02-02" not in points  # the commit that left HEAD's line
        assert (points["2026-02-01"], points["2026-02-05"]) == (1, 3)
        assert keeper.refresh_timeline("other/") == 3  # another prefix: replayed afresh
        assert {p.episodic for p in keeper.timeline.points()} == {0}


def test_a_stopped_replay_keeps_what_it_did_and_resumes(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    Knowledge.init(root, "blank")
    (root / "episodes").mkdir()
    for day in range(1, 4):
        (root / f"episodes/{day}.md").write_text(episode(f"e{day}"))
        commit_at(root, f"2026-04-0{day}T10:00:00Z", f"day {day}")
    keeper = index_keeper(root)
    with Knowledge.open(root, index=keeper):
        assert keeper.timeline.refresh("episodes/", stop=lambda: True) == 0
        asked = iter([False] * 4 + [True])  # asked before each commit and each of its chunks
        assert keeper.timeline.refresh("episodes/", stop=lambda: next(asked, True)) == 2
        assert keeper.refresh_timeline("episodes/") == 2
        points = {p.day: p.episodic for p in keeper.timeline.points()}
        assert (points["2026-04-01"], points["2026-04-03"]) == (1, 3)


def test_a_new_server_starts_from_the_last_replayed_tree_read_in_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay in a new process starts from the state of the last commit the table holds, made
    from that commit's tree a few files at a time (a million at once took ~1 GB): the counts
    after the next commits are the report's, as when one process replayed them all."""
    monkeypatch.setattr(timeline_index, "STATE_CHUNK", 2)
    root = tmp_path / "kb"
    Knowledge.init(root, "blank")
    (root / "episodes").mkdir()
    for n in range(5):
        (root / f"episodes/{n}.md").write_text(episode(f"e{n}"))
    (root / "p.md").write_text("---\nmerged-from:\n  - type: run\n    id: e1\n---\n")
    commit_at(root, "2026-05-01T10:00:00Z", "five episodes, one merged")
    keeper = index_keeper(root)
    with Knowledge.open(root, index=keeper):
        assert keeper.refresh_timeline("episodes/") >= 1
    cites = "  - type: run\n    id: e1\n  - type: episode\n    id: e2\n"
    (root / "p.md").write_text(f"---\nmerged-from:\n{cites}---\n")
    (root / "episodes/0.md").unlink()
    commit_at(root, "2026-05-02T10:00:00Z", "e2 merged, e0 gone")
    keeper = index_keeper(root)  # a new process: no state kept
    with Knowledge.open(root, index=keeper) as kb:
        kb.reconcile()
        assert keeper.refresh_timeline("episodes/") == 1
        points = {p.day: (p.episodic, p.unmerged) for p in keeper.timeline.points()}
        assert (points["2026-05-01"], points["2026-05-02"]) == ((5, 4), (4, 2))


def test_a_commit_of_many_files_is_replayed_a_chunk_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import of a whole root is one commit, the first: its files are read from its tree and
    applied a few at a time (a million files' facts at once stayed in a server's memory), and so
    are a later commit's many changes. The counts after each are the report's."""
    monkeypatch.setattr(timeline_index, "STATE_CHUNK", 2)
    root = tmp_path / "kb"
    (root / "episodes").mkdir(parents=True)
    git(root, "init", "-q")
    for n in range(7):
        (root / f"episodes/{n}.md").write_text(episode(f"e{n}"))
    cites = "  - type: run\n    id: {}\n  - type: run\n    path: episodes/{}.md\n"
    page = "---\nmerged-from:\n" + cites + "---\n"
    (root / "p.md").write_text(page.format("e1", 3))
    commit_at(root, "2026-06-01T10:00:00Z", "the import")
    Knowledge.init(root, "blank")
    (root / "p.md").write_text(page.format("e5", 6))
    for n in (0, 2):
        (root / f"episodes/{n}.md").unlink()
    (root / "episodes/7.md").write_text(episode("e7"))
    commit_at(root, "2026-06-02T10:00:00Z", "e5 and e6 merged instead, two gone, one new")
    keeper = index_keeper(root)
    with Knowledge.open(root, index=keeper) as kb:
        kb.reconcile()
        assert keeper.refresh_timeline("episodes/") == 3
        points = {p.day: (p.episodic, p.unmerged) for p in keeper.timeline.points()}
        assert (points["2026-06-01"], points["2026-06-02"]) == ((7, 5), (6, 4))
        report = kb.memory_report()
        assert points["2026-06-02"] == (report.episodic_count, report.unmerged_count)


def test_a_replay_cut_short_inside_a_commit_gives_the_same_counts_when_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay that fails after some of a commit's chunks leaves them applied; the next replay
    applies that commit again from its start and the counts are the report's."""
    monkeypatch.setattr(timeline_index, "STATE_CHUNK", 2)
    root = one_episode_root(tmp_path, "2026-07-01T10:00:00Z", "one episode")
    keeper = index_keeper(root)
    with Knowledge.open(root, index=keeper) as kb:
        kb.reconcile()
        keeper.refresh_timeline("episodes/")
        for n in range(5):
            (root / f"episodes/{n}.md").write_text(episode(f"e{n}"))
        merged = "---\nmerged-from:\n  - type: episode\n    id: a\n  - type: run\n    id: e4\n---\n"
        (root / "p.md").write_text(merged)
        commit_at(root, "2026-07-02T10:00:00Z", "five more, two merged")
        kb.reconcile()
        real = timeline_index.Timeline._facts
        calls = iter(range(100))

        def failing(self: timeline_index.Timeline, *args: object) -> object:
            if next(calls) == 2:
                raise OSError("the disk went away")
            return real(self, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(timeline_index.Timeline, "_facts", failing)
        with pytest.raises(OSError):
            keeper.timeline.refresh("episodes/")
        monkeypatch.setattr(timeline_index.Timeline, "_facts", real)
        assert keeper.refresh_timeline("episodes/") == 1
        points = {p.day: (p.episodic, p.unmerged) for p in keeper.timeline.points()}
        assert points["2026-07-02"] == (6, 4)


def test_a_stop_is_heard_between_chunks_of_a_big_commit_and_of_a_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server stopping does not wait for a commit of a million files, nor for a state made
    from such a tree (a minute each): ``stop`` is asked between chunks, and what was cut short
    is done again by the next replay, with the report's counts."""
    monkeypatch.setattr(timeline_index, "STATE_CHUNK", 2)
    root = one_episode_root(tmp_path, "2026-08-01T10:00:00Z", "one episode")
    for n in range(7):
        (root / f"episodes/{n}.md").write_text(episode(f"e{n}"))
    commit_at(root, "2026-08-02T10:00:00Z", "seven more")
    keeper = index_keeper(root)
    with Knowledge.open(root, index=keeper) as kb:
        kb.reconcile()
        timeline = keeper.timeline
        asked = itertools.count()
        # asked before each commit and each chunk: the 7th time is in the last commit's second
        assert timeline.refresh("episodes/", stop=lambda: next(asked) >= 6) == 2
        assert keeper.refresh_timeline("episodes/") == 1
        assert {p.day: p.episodic for p in timeline.points()}["2026-08-02"] == 8
        (root / "episodes/7.md").write_text(episode("e7"))
        commit_at(root, "2026-08-03T10:00:00Z", "one more")
    keeper = index_keeper(root)  # a new process: the state is made from the last tree
    with Knowledge.open(root, index=keeper) as kb:
        kb.reconcile()
        asked = itertools.count()
        assert keeper.timeline.refresh("episodes/", stop=lambda: next(asked) >= 3) == 0
        assert keeper.refresh_timeline("episodes/") == 1
        points = {p.day: p.episodic for p in keeper.timeline.points()}
        assert (points["2026-08-02"], points["2026-08-03"]) == (8, 9)


def test_a_change_that_fails_part_way_leaves_the_coverage_state_as_it_was() -> None:
    state = CoverageState("episodes/")
    state.apply([("episodes/a.md", file_facts("episodes/a.md", {"episode_id": "a"}))])

    # the second change fails as it is stored (a path SQLite cannot hold), after the first was
    with pytest.raises(sqlite3.Error):
        state.apply(
            [
                ("episodes/b.md", file_facts("episodes/b.md", {"episode_id": "b"})),
                (("not", "a", "path"), None),  # type: ignore[list-item]
            ]
        )
    assert (state.episodic, state.unmerged) == (1, 1)
    page = file_facts("p.md", {"merged-from": [{"type": "run", "id": "a"}]})
    state.apply([("p.md", page), ("episodes/b.md", None)])
    assert (state.episodic, state.unmerged) == (1, 0)
    state.close()


def test_timeline_reads_blobs_the_index_does_not_hold(tmp_path: Path) -> None:
    """Old versions are parsed from git; the current one comes from the index row."""
    root = tmp_path / "kb"
    Knowledge.init(root, "blank")
    (root / "episodes").mkdir()
    (root / "episodes/a.md").write_text("---\nmemory_kind: semantic\n---\n")
    commit_at(root, "2026-03-01T10:00:00Z", "not an episode yet")
    (root / "episodes/a.md").write_text(episode("a"))
    commit_at(root, "2026-03-02T10:00:00Z", "now it is")
    keeper = index_keeper(root)
    with Knowledge.open(root, index=keeper) as kb:
        kb.reconcile()
        keeper.refresh_timeline("episodes/")
        points = {p.day: p.episodic for p in keeper.timeline.points()}
        assert (points["2026-03-01"], points["2026-03-02"]) == (0, 1)


@pytest.mark.parametrize("batches", [False, True])
def test_an_undated_episode_is_as_old_as_its_first_commit_among_many(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batches: bool
) -> None:
    """The first commit that added a file is kept over later edits, and the times of more
    undated episodes than one lookup holds are all found (the table is keyed by a hash); also
    when the rows are stored a few at a time, within a commit and across commits."""
    if batches:
        monkeypatch.setattr(timeline_index, "STATE_CHUNK", 2)
        monkeypatch.setattr(timeline_index, "ADDED_BATCH", 3)
    root = tmp_path / "kb"
    Knowledge.init(root, "blank")
    (root / "episodes").mkdir()
    (root / "episodes/e0550.md").write_text(episode("e0550"))
    commit_at(root, "2026-03-01T10:00:00Z", "the first one")
    (root / "episodes/e0550.md").write_text(episode("e0550") + "edited\n")
    for i in range(600):
        if i != 550:
            (root / f"episodes/e{i:04}.md").write_text(episode(f"e{i}"))
    commit_at(root, "2026-04-01T10:00:00Z", "the others")
    keeper = index_keeper(root)
    with Knowledge.open(root, index=keeper) as kb:
        kb.reconcile()
        keeper.refresh_timeline("episodes/")
        oldest = kb.overview().oldest
        assert oldest is not None and oldest.path == "episodes/e0550.md"
        assert oldest.age_from == AGE_FROM_COMMIT
        assert oldest.since == dt.datetime(2026, 3, 1, 10, tzinfo=dt.UTC).timestamp()
        kb.write("episodes/e0550.md", episode("e0550", "created: 2026-05-01\n"))
        oldest = kb.overview().oldest  # the others, all added at once: walk order
        assert oldest is not None and oldest.path == "episodes/e0000.md"
        assert oldest.since == dt.datetime(2026, 4, 1, 10, tzinfo=dt.UTC).timestamp()


def test_undated_episodes_older_than_the_oldest_dated_one_are_found(tmp_path: Path) -> None:
    """With no first commit as old as the oldest dated episode, only the undated episodes
    modified by then are read: one modified at that very second and earlier in walk order is
    still the oldest; and once a first commit is older, the undated episode it added is."""
    root = tmp_path / "kb"
    Knowledge.init(root, "blank")
    (root / "episodes").mkdir()
    (root / "episodes/m-dated.md").write_text(episode("dated", "created: 2020-05-01\n"))
    for i in range(3):
        (root / f"episodes/z{i}.md").write_text(episode(f"z{i}"))  # undated, newer
    commit_at(root, "2026-03-01T10:00:00Z", "the first ones")
    when = dt.datetime(2020, 5, 1, tzinfo=dt.UTC).timestamp()
    keeper = index_keeper(root)
    with Knowledge.open(root, index=keeper) as kb:
        kb.reconcile()
        keeper.refresh_timeline("episodes/")
        oldest = kb.overview().oldest
        assert oldest is not None and (oldest.path, oldest.since) == ("episodes/m-dated.md", when)
        tied = root / "episodes/a-tied.md"
        tied.write_text(episode("tied"))  # not committed: its age is its modification time
        os.utime(tied, (when, when))
        kb.reconcile()
        oldest = kb.overview().oldest
        assert oldest is not None
        assert (oldest.path, oldest.age_from, oldest.since) == (
            "episodes/a-tied.md",
            AGE_FROM_MTIME,
            when,
        )
        tied.unlink()
        (root / "episodes/b-old.md").write_text(episode("old"))
        commit_at(root, "2019-01-01T00:00:00Z", "history from before")
        kb.reconcile()
        keeper.refresh_timeline("episodes/")
        oldest = kb.overview().oldest
        assert oldest is not None
        assert (oldest.path, oldest.age_from) == ("episodes/b-old.md", AGE_FROM_COMMIT)
        assert oldest.since == dt.datetime(2019, 1, 1, tzinfo=dt.UTC).timestamp()


def test_the_check_ages_undated_episodes_by_the_replayed_history_when_it_reaches_head(
    tmp_path: Path,
) -> None:
    """``memory check`` reads an undated episode's first commit from the history the index
    replayed when that reaches HEAD (a time planted there shows), and from git's log when HEAD
    has moved past it."""
    root = tmp_path / "kb"
    Knowledge.init(root, "blank")
    (root / "episodes").mkdir()
    (root / "episodes/u.md").write_text(episode("u"))
    commit_at(root, "2026-03-01T10:00:00Z", "an undated episode")
    committed = dt.datetime(2026, 3, 1, 10, tzinfo=dt.UTC).timestamp()
    keeper = index_keeper(root)
    with Knowledge.open(root, index=keeper) as kb:
        kb.reconcile()
        keeper.refresh_timeline("episodes/")
        oldest = kb.memory_check().oldest
        assert oldest is not None and (oldest.age_from, oldest.since) == (
            AGE_FROM_COMMIT,
            committed,
        )
        with sqlite3.connect(root / ".kiwi/state/index.db") as conn:
            conn.execute("UPDATE timeline_added SET time = 1000000000")
        oldest = kb.memory_check().oldest
        assert oldest is not None and oldest.since == 1000000000  # the replayed history's
        kb.write("notes/n.md", "a note\n")  # a commit the history has not replayed
        oldest = kb.memory_check().oldest
        assert oldest is not None and oldest.since == committed  # git's log's


def test_the_keeper_replays_first_once_the_index_is_ready(tmp_path: Path) -> None:
    """A server's keeper waits for the first reconcile: replayed before it, every file's facts
    would be read from git, with the rows not there yet."""
    root = one_episode_root(tmp_path, "2026-06-01T10:00:00Z", "a")
    ready = threading.Event()
    keeper = index_keeper(root)
    loop = timeline_index.TimelineKeeper(keeper.timeline, lambda: "episodes/", 0.1, ready.is_set)
    loop.start()
    try:
        assert not loop.replayed.wait(1.0)
        assert keeper.timeline.points() == []
        ready.set()
        assert loop.replayed.wait(10.0)
        assert "2026-06-01" in [p.day for p in keeper.timeline.points()]
    finally:
        loop.stop()
    stopped = timeline_index.TimelineKeeper(keeper.timeline, lambda: "episodes/", 0.1, bool)
    stopped.start()
    stopped.stop(5.0)  # a keeper still waiting stops at once
    assert not stopped.running and not stopped.replayed.is_set()


def test_a_large_roots_first_replay_settles_after_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agents' first questions come first: on a root of SETTLE_FILES files or more the
    first replay waits ``settle`` seconds after the index is ready."""
    monkeypatch.setattr(background, "SETTLE_FILES", 1)  # this root counts as large
    root = one_episode_root(tmp_path, "2026-06-01T10:00:00Z", "a")
    keeper = index_keeper(root)
    with Knowledge.open(root, index=keeper) as kb:
        kb.reconcile()
        loop = timeline_index.TimelineKeeper(keeper.timeline, lambda: "episodes/", 0.1)
        loop.settle = 1.5
        began = time.monotonic()
        loop.start()
        try:
            assert loop.replayed.wait(10.0)
            assert time.monotonic() - began >= 1.5
            assert "2026-06-01" in [p.day for p in keeper.timeline.points()]
        finally:
            loop.stop()


def test_a_served_large_roots_first_replay_waits_the_tunings_settle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's wiring: the replay it starts waits ``Tuning.check_settle`` after ready."""
    monkeypatch.setattr(background, "SETTLE_FILES", 1)  # this root counts as large
    root = one_episode_root(tmp_path, "2026-06-01T10:00:00Z", "a")
    keeper = index_keeper(root, Tuning(check_settle=1.5))
    with Knowledge.open(root, index=keeper) as kb:
        serving = Serving(kb)
        serving.start_watching()
        while not kb.ready():
            time.sleep(0.05)
        ready = time.monotonic()
        serving.start_timeline()
        loop = keeper.timeline_keeper
        assert loop is not None
        assert loop.replayed.wait(10.0)
        assert time.monotonic() - ready >= 1.5
        assert "2026-06-01" in [p.day for p in keeper.timeline.points()]


def test_a_root_without_git_has_no_history(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    (root / "episodes").mkdir(parents=True)
    (root / "episodes/a.md").write_text(episode("a"))
    with Knowledge.open(root) as kb:
        view = kb.overview()
        assert view.timeline == () and view.episodic == 1 and view.timeline_current


# -- the replay rule equals the report ---------------------------------------------------------

NAMES = ["episodes/a.md", "episodes/b.md", "episodes/c.md", "inbox/d.md", "p.md", "q.md"]
IDS = ["a", "b", "x", ""]
FRONTMATTER = st.fixed_dictionaries(
    {
        "memory_kind": st.sampled_from(["", "episodic", "semantic", "consolidation"]),
        "episode_id": st.sampled_from(IDS),
        "merged-from": st.lists(
            st.fixed_dictionaries(
                {
                    "type": st.sampled_from(["episode", "run", "note", ""]),
                    "id": st.sampled_from(IDS),
                    "path": st.sampled_from(["", *NAMES, "./episodes/a.md"]),
                }
            ),
            max_size=3,
        ),
    }
)
COMMITS = st.lists(
    st.dictionaries(st.sampled_from(NAMES), st.none() | FRONTMATTER, min_size=1), max_size=8
)


@settings(max_examples=200, deadline=None)
@given(COMMITS)
def test_coverage_state_equals_the_report_after_every_commit(commits: list[dict]) -> None:  # type: ignore[type-arg]
    state = CoverageState("episodes/")
    files: dict[str, dict] = {}  # type: ignore[type-arg]
    for commit in commits:
        changes = []
        for path, fm in commit.items():
            if fm is None:
                files.pop(path, None)
                changes.append((path, None))
            else:
                files[path] = fm
                changes.append((path, file_facts(path, fm)))
        state.apply(changes)
        report = build_report([file_facts(p, files[p]) for p in sorted(files)], "episodes/")
        assert (state.episodic, state.unmerged) == (report.episodic_count, report.unmerged_count)


def test_episodes_sharing_an_id_are_all_recounted_when_a_citation_of_it_changes() -> None:
    """Three episodes hold id ``a`` (the state keeps one path for an id, then a set of them);
    a page citing ``a`` covers all three, and dropping the citation uncovers all three."""
    state = CoverageState("episodes/")
    first = [
        (f"episodes/{n}.md", file_facts(f"episodes/{n}.md", {"episode_id": "a"})) for n in "xyz"
    ]
    steps: list[list[tuple[str, dict | None]]] = [  # type: ignore[type-arg]
        [(p, {"episode_id": "a"}) for p, _ in first[:1]],
        [(p, {"episode_id": "a"}) for p, _ in first[1:]],
        [("p.md", {"merged-from": [{"type": "episode", "id": "a"}]})],
        [("episodes/y.md", None)],
        [("p.md", {"merged-from": []})],
        [("episodes/y.md", {"episode_id": "a"})],
        [("p.md", {"merged-from": [{"type": "run", "id": "a"}]})],
    ]
    files: dict[str, dict] = {}  # type: ignore[type-arg]
    for step in steps:
        for path, fm in step:
            if fm is None:
                files.pop(path, None)
            else:
                files[path] = fm
        state.apply([(p, None if fm is None else file_facts(p, fm)) for p, fm in step])
        report = build_report([file_facts(p, files[p]) for p in sorted(files)], "episodes/")
        assert (state.episodic, state.unmerged) == (report.episodic_count, report.unmerged_count)
    assert (state.episodic, state.unmerged) == (3, 0)
