"""``Knowledge.remember``: a new episode, its path and frontmatter, and a create-only id.

The CLI command is tested here too; MCP's ``kiwi_remember`` in ``test_mcp.py`` and REST's
``/memory/remember`` in ``test_rest.py`` call the same method.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from gitrepo import commit_count, git
from kiwifs.cli import cli
from kiwifs.errors import Conflict, InvalidProvenance, UsageError
from kiwifs.frontmatter.reader import read_frontmatter, split
from kiwifs.knowledge import Knowledge
from kiwifs.memory.lifecycle import episode_path, new_episode, rfc3339
from kiwifs.writes.lock import WriteLock
from kiwifs.writes.pipeline import STATE_DIR

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def write(root: Path, rel: str, text: str) -> None:
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def test_a_new_episode_has_its_layout_and_frontmatter(kb: Knowledge, root: Path) -> None:
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    result = kb.remember(
        "Tried the cache.\n\nIt halved latency.",
        scope="api",
        tags=["perf", "cache"],
        actor="agent-7",
        provenance="run:run-7",
    )
    after = dt.datetime.now(dt.UTC)
    assert uuid.UUID(result.episode_id).version == 4
    data = (root / result.path).read_bytes()
    fm = read_frontmatter(data).data
    created = dt.datetime.strptime(fm["created"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    assert STAMP.match(fm["created"]) and before <= created <= after
    assert result.path == f"episodes/{created:%Y-%m-%d}/{result.episode_id}.md"
    assert list(fm) == ["memory_kind", "episode_id", "created", "scope", "tags", "derived-from"]
    assert (fm["memory_kind"], fm["episode_id"]) == ("episodic", result.episode_id)
    assert (fm["scope"], fm["tags"]) == ("api", ["perf", "cache"])
    assert fm["derived-from"] == [
        {"type": "run", "id": "run-7", "date": fm["derived-from"][0]["date"], "actor": "agent-7"}
    ]
    assert split(data)[1] == b"Tried the cache.\n\nIt halved latency."  # the body is the content
    assert git(root, "log", "-1", "--format=%an %s") == f"agent-7 agent-7: {result.path}\n"
    report = kb.memory_report()
    assert [e.episode_id for e in report.unmerged] == [result.episode_id]


def test_the_episodes_prefix_comes_from_config(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    Knowledge.init(root, "blank")
    (root / ".kiwi/config.toml").write_text('[memory]\nepisodes_path_prefix = "./raw"\n')
    result = Knowledge.open(root).remember("x", episode_id="e1")
    assert re.fullmatch(r"raw/\d{4}-\d\d-\d\d/e1\.md", result.path)


def test_the_rules_are_pure_and_use_one_moment() -> None:
    moment = dt.datetime(2026, 11, 30, 23, 59, 59, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    episode = new_episode("body\n", "episodes/", moment, " ep-1 ", title="T")
    assert episode.path == "episodes/2026-12-01/ep-1.md"  # the UTC date, not the local one
    assert episode.path == episode_path("episodes/", moment, "ep-1")
    assert rfc3339(moment) == "2026-12-01T04:59:59Z"
    assert episode.data == (
        b'---\nmemory_kind: episodic\nepisode_id: ep-1\ncreated: "2026-12-01T04:59:59Z"\n'
        b"title: T\n---\nbody\n"
    )
    assert episode.chosen_id and not new_episode("x", "e/", moment, "  ").chosen_id


def test_frontmatter_in_the_content_is_kept_under_the_identity_keys(kb: Knowledge) -> None:
    content = "---\nsource: slack\nmemory_kind: semantic\n---\nthe body\n"
    result = kb.remember(content, episode_id="own-fm")
    fm = kb.frontmatter(result.path)
    assert (fm["source"], fm["memory_kind"], fm["episode_id"]) == ("slack", "episodic", "own-fm")
    assert split(kb.read(result.path).content)[1] == b"the body\n"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"content": ""}, "content is required"),
        ({"content": " \n"}, "content is required"),
        ({"content": "x", "episode_id": "a/b"}, "invalid episode_id"),
        ({"content": "x", "episode_id": "../x"}, "invalid episode_id"),
        ({"content": "x", "episode_id": ".hidden"}, "invalid episode_id"),
        ({"content": "x", "episode_id": "x" * 129}, "invalid episode_id"),
        ({"content": "x", "tags": ["ok", ""]}, "tags must be non-empty strings"),
    ],
)
def test_bad_arguments_are_usage_errors_and_write_nothing(
    kb: Knowledge, root: Path, kwargs: dict[str, object], message: str
) -> None:
    before = commit_count(root)
    with pytest.raises(UsageError, match=message):
        kb.remember(**kwargs)  # type: ignore[arg-type]
    assert commit_count(root) == before
    assert not (root / "episodes").exists()


def test_bad_provenance_is_refused_before_anything_is_written(kb: Knowledge, root: Path) -> None:
    with pytest.raises(InvalidProvenance):
        kb.remember("x", provenance="no-colon")
    assert not (root / "episodes").exists()


def test_an_id_taken_anywhere_in_the_root_is_a_conflict(kb: Knowledge, root: Path) -> None:
    kb.reindex()
    # written behind kiwifs's back after the index was built: the check still sees them
    write(root, "notes/deep/old.md", "---\nmemory_kind: episodic\nepisode_id: taken\n---\n")
    write(root, "episodes/2020-01-01/legacy.md", "---\nid: ' by-id '\n---\n")
    write(root, "concepts/page.md", "---\nmemory_kind: semantic\nepisode_id: page-id\n---\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "out of band")
    before = commit_count(root)
    for ident, where in (("taken", "notes/deep/old.md"), ("by-id", "episodes/2020-01-01/")):
        with pytest.raises(Conflict, match=f"episode {ident} already exists at {where}"):
            kb.remember("again", episode_id=ident)
    assert commit_count(root) == before
    assert sorted(p.name for p in (root / "episodes").rglob("*.md")) == ["legacy.md"]
    # a page that is not an episode does not take the id
    assert kb.remember("fine", episode_id="page-id").episode_id == "page-id"
    with pytest.raises(Conflict, match="already exists"):
        kb.remember("the same id, now an episode", episode_id="page-id")


def test_the_id_check_runs_under_the_write_lock(kb: Knowledge, root: Path) -> None:
    """An episode written while ``remember`` waits for the lock is seen by its check."""
    kb.reindex()
    outcome: list[BaseException | str] = []

    def remember() -> None:
        try:
            outcome.append(kb.remember("mine", episode_id="raced").path)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=remember)
    # the root's write lock, taken by a lock of its own as another writer would take it
    lock = WriteLock(root, root / STATE_DIR, lambda: 0, lambda: None, lambda: None)
    with lock.held():
        thread.start()
        wait_until_blocked_in(thread, "locked")
        write(root, "elsewhere/raced.md", "---\nmemory_kind: episodic\nepisode_id: raced\n---\n")
    thread.join()
    lock.close()
    assert isinstance(outcome[0], Conflict), outcome
    assert [p.relative_to(root).as_posix() for p in root.rglob("raced.md")] == [
        "elsewhere/raced.md"
    ]


def wait_until_blocked_in(thread: threading.Thread, function: str) -> None:
    """Poll the thread's stack (bounded) until it is inside ``function`` (waiting on a lock)."""
    for _ in range(10_000):
        frame = sys._current_frames().get(thread.ident or 0)
        while frame is not None:
            if frame.f_code.co_name == function:
                return
            frame = frame.f_back
        time.sleep(0.001)
    raise AssertionError(f"{thread.name} never reached {function}()")


def test_cli_reads_the_content_from_a_file_or_stdin(root: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    source = tmp_path / "note.md"
    source.write_text("from a file\n")
    args = ["memory", "remember", "--root", str(root), "--episode-id", "cli-1", str(source)]
    out = runner.invoke(cli, [*args, "--tag", "a", "--tag", "b", "--scope", "s", "--actor", "me"])
    assert out.exit_code == 0, out.output
    path = out.output.strip()
    assert re.fullmatch(r"episodes/\d{4}-\d\d-\d\d/cli-1\.md", path)
    fm = read_frontmatter((root / path).read_bytes()).data
    assert (fm["tags"], fm["scope"]) == (["a", "b"], "s")
    assert git(root, "log", "-1", "--format=%an") == "me\n"
    out = runner.invoke(cli, ["memory", "remember", "--root", str(root), "--json"], input="stdin\n")
    assert out.exit_code == 0, out.output
    answer = json.loads(out.output)
    assert set(answer) == {"path", "episode_id", "etag"}
    assert (root / answer["path"]).read_text().endswith("---\nstdin\n")
    again = runner.invoke(cli, args)
    assert again.exit_code == 1 and "already exists" in again.output
    bad = runner.invoke(
        cli, ["memory", "remember", "--root", str(root), "--episode-id", "a/b"], input="x"
    )
    assert bad.exit_code == 2 and "invalid episode_id" in bad.output
