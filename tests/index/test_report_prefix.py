"""The memory report confined to a path prefix (what a scoped key with a prefix is shown).

The episodes listed and counted, the ``merged-from`` entries counted, the claims counted and the
warnings are those of the files under the prefix, and no warning names a file outside it; an
episode that a page outside cites stays covered. The index and the scan give the same answer
for every prefix, and without one the report is the very answer kiwifs gave before the option
existed (the expected value below was printed by that code on this root). Real files, real git,
real SQLite.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kiwifs.base.printed_json import dumps
from kiwifs.errors import UsageError
from kiwifs.knowledge import Knowledge
from kiwifs.memory.rules import MISSING_ID_WARNING

TEAM = "episodes/team/"
FILES = {
    "episodes/team/bad.md": "---\nepisode_id: [unclosed\n---\nbad\n",
    "episodes/team/dup.md": "---\nepisode_id: o1\n---\nsame id as other/o1\n",
    "episodes/team/e1.md": "---\nepisode_id: t1\n---\none\n",
    "episodes/team/e2.md": "---\nepisode_id: t2\n---\ncited from concepts/c.md\n",
    "episodes/team/e3.md": "no id at all\n",
    "episodes/team/page.md": (
        "---\nmemory_kind: semantic\nmerged-from:\n  - type: episode\n    id: t1\n---\np\n"
    ),
    "episodes/team/shape.md": "---\nmemory_kind: semantic\nmerged-from: 5\n---\ns\n",
    "episodes/other/o1.md": "---\nepisode_id: o1\n---\nfirst with o1\n",
    "episodes/other/bad.md": "---\n: [\n---\nbad\n",
    "episodes/teamx.md": "---\nepisode_id: x1\n---\nnot under team/\n",
    "concepts/c.md": (
        "---\nmemory_kind: semantic\nmerged-from:\n  - type: run\n    id: t2\n"
        "  - type: note\n    path: ../out.md\n---\nc\n"
    ),
}


@pytest.fixture
def memory_root(root: Path) -> Path:
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-q", "-m", "memory"], check=True)
    return root


def printed(kb: Knowledge, **options: object) -> str:
    return dumps(kb.memory_report_document(**options).value).decode()  # type: ignore[arg-type]


def answers(kb: Knowledge, **options: object) -> dict:
    """The report from the index, checked equal to the scan's and to the printed document."""
    fast = kb.memory_report(**options).to_json()  # type: ignore[arg-type]
    slow = kb.memory_report(use_index=False, **options).to_json()  # type: ignore[arg-type]
    assert fast == slow
    assert printed(kb, **options) == json.dumps(fast, indent=2, ensure_ascii=False)
    # the unmerged alone (what the CLI's text shows): the same report less the list of files
    for use_index in (True, False):
        alone = kb.memory_report(use_index=use_index, unmerged_only=True, **options).to_json()  # type: ignore[arg-type]
        assert alone == {**fast, "episodic_files": []}
    return fast


def paths(entries: list[dict]) -> list[str]:
    return [entry["path"] for entry in entries]


def test_a_prefixed_report_holds_only_what_lies_under_the_prefix(memory_root: Path) -> None:
    with Knowledge.open(memory_root) as kb:
        kb.reindex()
        team = answers(kb, path_prefix=TEAM)
        listed = ["bad.md", "dup.md", "e1.md", "e2.md", "e3.md"]
        assert paths(team["episodic_files"]) == [TEAM + name for name in listed]
        # e1 is cited from inside, e2 from outside: both stay covered
        assert paths(team["unmerged"]) == [TEAM + name for name in ("bad.md", "dup.md", "e3.md")]
        assert (team["episodic_count"], team["unmerged_count"]) == (5, 3)
        assert team["merged_from_refs"] == 1  # page.md's; concepts/c.md's two are outside
        assert team["episodes_prefix"] == "episodes/"
        warned = "\n".join(team["warnings"])
        for inside in ("bad.md", "e3.md", "shape.md"):
            assert TEAM + inside in warned
        assert "other/" not in warned and "concepts/" not in warned and "teamx" not in warned
        assert not any("duplicate" in w for w in team["warnings"])  # its first is outside
        assert "dup.md" not in warned
        whole = answers(kb)
        assert any(
            "duplicate episode_id 'o1' in episodes/team/dup.md" in w for w in whole["warnings"]
        )


def test_paging_applies_after_the_prefix(memory_root: Path) -> None:
    with Knowledge.open(memory_root) as kb:
        kb.reindex()
        page = answers(kb, path_prefix=TEAM, limit=2, offset=1)
        assert paths(page["episodic_files"]) == [TEAM + "dup.md", TEAM + "e1.md"]
        assert paths(page["unmerged"]) == [TEAM + "dup.md", TEAM + "e3.md"]
        assert page["episodic_count"] == 5  # totals are the prefix's, whatever the page


@pytest.mark.parametrize(
    "prefix", ["episodes/", "/episodes/team/", "episodes/team", "episodes/other/", "e", "nowhere/"]
)
def test_the_index_and_the_scan_agree_for_any_prefix(memory_root: Path, prefix: str) -> None:
    with Knowledge.open(memory_root) as kb:
        kb.reindex()
        found = answers(kb, path_prefix=prefix)
        inside = prefix.lstrip("/")
        assert all(p.startswith(inside) for p in paths(found["episodic_files"]))
        assert (
            answers(kb, path_prefix=prefix, limit=1, offset=1)["episodic_count"]
            == (found["episodic_count"])
        )


def test_claims_are_marked_and_counted_under_the_prefix_only(memory_root: Path) -> None:
    with Knowledge.open(memory_root) as kb:
        kb.reindex()
        batch = kb.claim_episodes("w1", limit=50)
        assert len(batch.to_json()["claimed"]) == 6  # every unmerged episode of the root
        team = answers(kb, path_prefix=TEAM)
        assert team["claimed_count"] == 3
        assert all(entry.get("claimed_by") == "w1" for entry in team["unmerged"])
        assert answers(kb)["claimed_count"] == 6


def test_without_a_prefix_the_report_is_the_one_before_the_option(memory_root: Path) -> None:
    with Knowledge.open(memory_root) as kb:
        kb.reindex()
        before = printed(kb)
        assert before == json.dumps(BEFORE, indent=2, ensure_ascii=False)
        for same in ({"path_prefix": None}, {"path_prefix": ""}, {"path_prefix": "/"}):
            assert printed(kb, **same) == before
            assert kb.memory_report(use_index=False, **same).to_json() == BEFORE  # type: ignore[arg-type]


def test_a_prefix_that_is_not_text_is_refused(memory_root: Path) -> None:
    with Knowledge.open(memory_root) as kb, pytest.raises(UsageError, match="path prefix"):
        kb.memory_report(path_prefix="episodes/\udc80")


# The report of memory_root as kiwifs printed it before reports took a path prefix.
BEFORE = {
    "episodic_count": 8,
    "merged_from_refs": 3,
    "episodic_files": [
        {"path": "episodes/other/bad.md"},
        {"path": "episodes/other/o1.md", "episode_id": "o1"},
        {"path": "episodes/team/bad.md"},
        {"path": "episodes/team/dup.md", "episode_id": "o1"},
        {"path": "episodes/team/e1.md", "episode_id": "t1"},
        {"path": "episodes/team/e2.md", "episode_id": "t2"},
        {"path": "episodes/team/e3.md"},
        {"path": "episodes/teamx.md", "episode_id": "x1"},
    ],
    "unmerged": [
        {"path": "episodes/other/bad.md"},
        {"path": "episodes/other/o1.md", "episode_id": "o1"},
        {"path": "episodes/team/bad.md"},
        {"path": "episodes/team/dup.md", "episode_id": "o1"},
        {"path": "episodes/team/e3.md"},
        {"path": "episodes/teamx.md", "episode_id": "x1"},
    ],
    "warnings": [
        "merged-from path escapes the root in concepts/c.md",
        "invalid frontmatter in episodes/other/bad.md: invalid YAML: while parsing a block mapping"
        ' did not find expected key in "<byte string>", line 1, column 1',
        MISSING_ID_WARNING.format(path="episodes/other/bad.md"),
        "invalid frontmatter in episodes/team/bad.md: invalid YAML: while parsing a flow sequence"
        " in \"<byte string>\", line 1, column 13 did not find expected ',' or ']' in"
        ' "<byte string>", line 2, column 1',
        MISSING_ID_WARNING.format(path="episodes/team/bad.md"),
        "duplicate episode_id 'o1' in episodes/team/dup.md (also in episodes/other/o1.md)",
        MISSING_ID_WARNING.format(path="episodes/team/e3.md"),
        "memory: merged-from has unsupported shape in episodes/team/shape.md",
    ],
    "unmerged_count": 6,
    "episodes_prefix": "episodes/",
    "superseded_count": 0,
    "claimed_count": 0,
}
