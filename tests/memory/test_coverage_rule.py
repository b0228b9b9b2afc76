"""One coverage rule, two implementations held equal: the dashboard's (SQL over the index rows,
``index/memory/overview.py``: a few index scans, fast enough for a page) and ``memory check``'s
(Python over the rows, ``memory/check.py``: the same rows from the index, or from a plain scan of
the files when there is no index).

On a generated corpus (every frontmatter shape, traps, malformed YAML, episodes outside the
prefix) made richer by hand with forgotten (superseded) episodes, claimed episodes, episodes
without a ``created`` (aged by their first commit) and a file directly under the prefix, the
episodic and unmerged counts, the coverage per top-level folder and the oldest unmerged episode
are the same from all three.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
from pathlib import Path

import pytest

from gitrepo import git
from kiwifs.errors import InvalidFrontmatter
from kiwifs.knowledge import Knowledge
from kiwifs.memory.check import AGE_FROM_COMMIT, AGE_FROM_MTIME, MemoryCheck
from kiwifs.memory.overview import Overview

MONTHS = [(2024, m) for m in range(1, 13)] + [(2025, m) for m in range(1, 7)]
OLD, NEW = "2020-01-02T03:04:05Z", "2021-06-07T08:09:10Z"


def episode(rng: random.Random, n: int, year: int, month: int) -> str:
    """One episode in one of the shapes agents write: ids as strings, numbers or missing,
    ``created`` as RFC 3339, a bare date, nonsense or missing, now and then broken YAML."""
    lines = []
    ident = rng.choice(
        ["episode_id: ep-{n}", "id: ep-{n}", "episode_id: {n}", "", "episode_id: ep-{n}"]
    )
    if ident:
        lines.append(ident.format(n=n))
    day = f"{year}-{month:02d}-{rng.randint(1, 28):02d}"
    created = rng.choice(
        [
            f'created: "{day}T{rng.randint(0, 23):02d}:00:00Z"',
            f"created: {day}",
            "created: not a date",
            "",
            "",
        ]
    )
    if created:
        lines.append(created)
    if rng.random() < 0.03:
        lines.append("tags: [unclosed")  # malformed: the whole frontmatter is ignored
    return "---\n" + "\n".join(lines) + "\n---\n# run " + str(n) + "\n"


def page(rng: random.Random, cited: list[tuple[str, int]]) -> str:
    """A page citing episodes by id or by path, with the traps that cite nothing."""
    items = []
    for path, n in cited:
        items.append(
            rng.choice(
                [
                    f"  - {{type: episode, id: ep-{n}}}",
                    f"  - {{type: run, path: {path}}}",
                    f"  - {{type: session, path: ./{path}}}",
                    f"  - {{id: ep-{n}}}",  # no type: cites nothing
                    f"  - {{type: episode, id: {n}}}",
                    f"  - {path}",  # a bare string: cites nothing
                ]
            )
        )
    return "---\nmemory_kind: semantic\nmerged-from:\n" + "\n".join(items) + "\n---\n"


def write_corpus(folder: Path, seed: int = 11) -> list[str]:
    """About 1000 episodes over 18 months, 60 pages merging about half of them, a few broken
    pages; returns the episodes' paths."""
    rng = random.Random(seed)
    paths: list[tuple[str, int]] = []
    for n in range(1000):
        year, month = rng.choice(MONTHS)
        rel = f"episodes/{year}/{month:02d}/run-{n:04d}.md"
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(episode(rng, n, year, month))
        paths.append((rel, n))
    (folder / "concepts").mkdir()
    for i in range(60):
        cited = rng.sample(paths, rng.randint(1, 16))
        (folder / f"concepts/page-{i:02d}.md").write_text(page(rng, cited))
    (folder / "concepts/broken.md").write_text(
        "---\nmerged-from: [{type: episode, id: ep-1}\n---\n"  # malformed: merges nothing
    )
    return [p for p, _ in paths]


ADDED = {
    # no created: aged by the commit that added them (the older commit below)
    "episodes/2019/undated-1.md": "---\nepisode_id: undated-1\n---\nno date\n",
    "episodes/2019/undated-2.md": "---\nepisode_id: undated-2\n---\nno date\n",
    # directly under the prefix: counts in the prefix's own folder
    "episodes/loose.md": "---\nepisode_id: loose\ncreated: 2031-01-01\n---\n",
    # malformed frontmatter under the prefix: episodic by path, no id, never merged
    "episodes/2019/broken.md": "---\nepisode_id: [oops\n---\nbroken\n",
    # episodic outside the prefix, in a folder of its own and at the root
    "runs/outside.md": "---\nmemory_kind: episodic\nid: outside-1\n---\n",
    "stray.md": "---\nmemory_kind: episodic\nid: stray\n---\n",
}


def commit(root: Path, message: str, when: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    git(root, "add", "-A")
    subprocess.run(["git", "-C", str(root), "commit", "-qm", message], env=env, check=True)


@pytest.fixture(scope="module")
def corpus_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The blank root with the corpus and late additions committed at fixed dates, some
    episodes forgotten and some claimed, shared by the module."""
    folder = tmp_path_factory.mktemp("coverage") / "kb"
    Knowledge.init(folder, "blank")
    write_corpus(folder)
    commit(folder, "the corpus", OLD)
    for rel, text in ADDED.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    commit(folder, "late additions", NEW)
    with Knowledge.open(folder) as kb:
        unmerged = [e.path for e in kb.memory_report().unmerged]
        forgotten = 0
        for path in unmerged:  # forgotten: needs no consolidation, so not unmerged
            with contextlib.suppress(InvalidFrontmatter):  # broken YAML cannot be edited
                kb.forget(path, reason="test")
                forgotten += 1
            if forgotten == 3:
                break
        kb.claim_episodes("worker-1", limit=5)  # claimed ones stay unmerged
    os.utime(folder / "runs/outside.md", (1e9, 1e9))  # the mtime never wins over a commit
    return folder


def check_figures(check: MemoryCheck) -> tuple[object, ...]:
    oldest = check.oldest
    return (
        check.episodic_count,
        check.unmerged_count,
        [(f.key, f.episodic, f.unmerged) for f in check.folders],
        None if oldest is None else (oldest.path, oldest.episode_id, oldest.since, oldest.age_from),
    )


def overview_figures(view: Overview) -> tuple[object, ...]:
    oldest = view.oldest
    return (
        view.episodic,
        view.unmerged,
        [(f.folder, f.episodic, f.unmerged) for f in view.folders],
        None if oldest is None else (oldest.path, oldest.episode_id, oldest.since, oldest.age_from),
    )


def test_the_dashboard_and_memory_check_agree_on_a_real_corpus(corpus_root: Path) -> None:
    with Knowledge.open(corpus_root) as kb:
        view = kb.overview()  # replays the history first: first-commit ages are known
        indexed = kb.memory_check()
        scanned = kb.memory_check(use_index=False)
        report = kb.memory_report()
    assert overview_figures(view) == check_figures(indexed) == check_figures(scanned)
    assert (view.episodic, view.unmerged) == (report.episodic_count, report.unmerged_count)
    assert view.claimed == 5 and view.superseded == 3
    folders = {f.folder for f in view.folders}
    assert {"episodes/", "runs/", ""} <= folders  # the loose file, outside, at the root
    assert indexed.problems > 0  # the corpus's traps are real problems


def test_without_created_the_first_commit_dates_the_oldest(corpus_root: Path) -> None:
    """Only undated unmerged episodes: the oldest is the one added first, by its commit."""
    with Knowledge.open(corpus_root) as kb:
        # the history replayed first, as the overview of the configured prefix does: the test
        # above did it on this shared root, but run alone (or on another worker) this one must
        kb.overview()
        prefix = "episodes/2019/"
        view = kb.overview(prefix)
        check = kb.memory_check(prefix)
    assert overview_figures(view) == check_figures(check)
    assert view.oldest is not None and view.oldest.age_from == AGE_FROM_COMMIT
    assert view.oldest.path == "episodes/2019/broken.md"  # the same commit: walk order decides
    assert view.oldest.age_from != AGE_FROM_MTIME
