"""What the one-shot memory report imports: only what it needs (a start-up budget, kept by test).

``kiwifs memory report`` from a current index spends a good share of its time importing Python
modules, so the modules of other answers load where they are used (see docs/architecture.md).
These tests run the report in a fresh interpreter and list ``sys.modules`` afterwards: a module
imported again at the top of a file on the report's path shows up here, whatever it costs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kiwifs.index import record
from kiwifs.knowledge import Knowledge

# Files are treated as old enough to trust their stat signature (as they are a few seconds after
# being written): else the report's reconcile would read them again, which needs the parsers.
REPORT = """
import json, sys
import kiwifs.index.record
kiwifs.index.record.RACY_NS = 0
from kiwifs.cli import main
sys.argv = ["kiwifs", "memory", "report", "--json", "--root", sys.argv[1]]
try:
    main()
except SystemExit as exc:
    if exc.code:
        raise
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""

# Loaded by other commands or by the servers, never by a report from a current index.
NOT_FOR_THE_REPORT = [
    # parsing and editing frontmatter (a report re-reads no file when none changed)
    "yaml",
    "ruamel.yaml",
    "kiwifs.frontmatter.yamlload",
    "kiwifs.memory.fastkeys",
    "kiwifs.memory.scan",
    # git, and the history it replays
    "pygit2",
    "subprocess",
    "kiwifs.index.memory.timeline",
    # search, /meta, vectors and the brief
    "kiwifs.index.search.keyword",
    "kiwifs.index.search.meta",
    "kiwifs.index.vectors.hybrid",
    "kiwifs.index.vectors.semantic",
    "kiwifs.index.vectors.store",
    "kiwifs.memory.brief",
    "zstandard",
    "numpy",
    "urllib.request",
    # the check, lineage and the dashboard
    "kiwifs.index.memory.check",
    "kiwifs.memory.check",
    "kiwifs.memory.lineage",
    "kiwifs.memory.problems",
    "kiwifs.memory.overview",
    "multiprocessing",
    "concurrent.futures",
    # the servers and the terminal renderers
    "socket",
    "kiwifs.rest",
    "kiwifs.mcp",
    "fastapi",
    "uvicorn",
    "mcp",
    "rich",
    "watchfiles",
]

EPISODE = "---\nmemory_kind: episodic\nepisode_id: ep-{n}\n---\nWhat happened, {n}.\n"
PAGE = "---\nmerged-from:\n  - type: episode\n    id: ep-1\n---\n# Learned\n"


def report_modules(root: Path) -> tuple[list[str], dict[str, object]]:
    """The modules a fresh interpreter holds after printing the report, and the report."""
    done = subprocess.run(
        [sys.executable, "-c", REPORT, str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    modules: list[str] = json.loads(done.stderr.splitlines()[-1])
    return modules, json.loads(done.stdout)


@pytest.fixture
def indexed(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A versioned root with episodes and a merged page, its index built and current."""
    monkeypatch.setattr(record, "RACY_NS", 0)
    with Knowledge.open(root) as kb:
        for n in range(1, 4):
            kb.write(f"episodes/ep-{n}.md", EPISODE.format(n=n))
        kb.write("pages/learned.md", PAGE)
        kb.reindex()
    return root


def loaded(modules: list[str], name: str) -> bool:
    return name in modules or any(m.startswith(name + ".") for m in modules)


def test_report_from_a_current_index_imports_none_of_the_other_answers(indexed: Path) -> None:
    modules, report = report_modules(indexed)
    assert report["unmerged_count"] == 2  # answered, from the index:
    assert "kiwifs.index.report" in modules
    assert [name for name in NOT_FOR_THE_REPORT if loaded(modules, name)] == []


def test_a_file_changed_behind_its_back_is_read_with_the_parsers_it_needs(indexed: Path) -> None:
    """The other side of the rule: what the report skips is imported once it is needed (here
    the reconcile reads an edited episode), and the answer sees the edit."""
    edited = indexed / "episodes/ep-2.md"
    edited.write_text(EPISODE.format(n=2).replace("episodic", "semantic"))
    modules, report = report_modules(indexed)
    assert report["unmerged_count"] == 1
    assert loaded(modules, "kiwifs.memory.fastkeys")
