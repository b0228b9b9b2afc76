"""End to end: a generated 2,000-episode root, its ground truth, kiwifs's report and a naive scan.

The root comes from ``bench/corpus.py``, which knows the right report by construction (it never
parses what it wrote); kiwifs answers from its index (after ``kiwifs reindex``) and by scanning
(``--no-index``); ``bench/naive_report.py`` computes it the plain way. All must agree: lists in
walk order, ids and kinds as shown, counts, and the warnings of each kind naming the same files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchload import BENCH, corpus, naive_report

KIWIFS = shutil.which("kiwifs", path=str(Path(sys.executable).parent)) or shutil.which("kiwifs")
WARNING_FORMS = {  # kind -> the form of its text, the file it names as the group
    "invalid_frontmatter": re.compile(r"invalid frontmatter in (\S+): .+"),
    "shape": re.compile(r"memory: merged-from has unsupported shape in (\S+)"),
    "escape": re.compile(r"merged-from path escapes the root in (\S+)"),
    "missing_id": re.compile(r"missing episode_id in (\S+) \u2014 .+"),
    "duplicate_id": re.compile(r"duplicate episode_id '[^']+' in (\S+) \(also in \S+\)"),
}


def run(*args: str | Path) -> str:
    out = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, encoding="utf-8", check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("corpus") / "kb"
    return root, corpus.generate(root, episodes=2000, seed=7)


@pytest.fixture(scope="module")
def truth(generated: tuple[Path, dict[str, Any]]) -> dict[str, Any]:
    return generated[1]


@pytest.fixture(scope="module", params=["index", "scan"])
def report(request: pytest.FixtureRequest, generated: tuple[Path, dict[str, Any]]) -> Any:
    """kiwifs's report of the root, from the index or from a scan of the files."""
    if KIWIFS is None:
        pytest.fail("the kiwifs command is not installed next to this Python (pip install -e .)")
    root = generated[0]
    extra = []
    if request.param == "index":
        run(KIWIFS, "reindex", "--root", root)
        assert (root / ".kiwi" / "state" / "index.db").is_file()
    else:
        extra = ["--no-index"]
    return json.loads(run(KIWIFS, "memory", "report", "--json", "--root", root, *extra))


def paths(items: list[dict[str, str]]) -> list[str]:
    return [item["path"] for item in items]


def warnings_by_kind(warnings: list[str]) -> dict[str, list[str]]:
    """The files each kind of warning names, in the report's order; every warning has a kind."""
    found: dict[str, list[str]] = {kind: [] for kind in WARNING_FORMS}
    for warning in warnings:
        kinds = [k for k, form in WARNING_FORMS.items() if form.fullmatch(warning)]
        assert len(kinds) == 1, warning
        match = WARNING_FORMS[kinds[0]].fullmatch(warning)
        assert match is not None
        found[kinds[0]].append(match.group(1))
    return found


def assert_agrees(report: dict[str, Any], truth: dict[str, Any]) -> None:
    """``report`` (kiwifs's or the naive scan's) is the truth, in every part the truth knows."""
    assert paths(report["episodic_files"]) == truth["episodic"]
    assert paths(report["unmerged"]) == truth["unmerged"]
    ids = {e["path"]: e["episode_id"] for e in report["episodic_files"] if "episode_id" in e}
    assert ids == truth["episode_ids"]
    kinds = {e["path"]: e["memory_kind"] for e in report["episodic_files"] if "memory_kind" in e}
    assert kinds == truth["memory_kinds"]
    for count in ("episodic_count", "merged_from_refs", "unmerged_count", "superseded_count"):
        assert report[count] == truth[count], count
    assert report["episodes_prefix"] == truth["episodes_prefix"] == "episodes/"
    assert report["claimed_count"] == 0
    found = warnings_by_kind(report["warnings"])
    assert found == truth["warnings"]
    assert {k: len(v) for k, v in found.items()} == truth["warning_counts"]


def test_kiwifs_reports_the_ground_truth(report: dict[str, Any], truth: dict[str, Any]) -> None:
    assert_agrees(report, truth)


def test_the_naive_scan_reports_the_ground_truth(
    generated: tuple[Path, dict[str, Any]], truth: dict[str, Any]
) -> None:
    assert_agrees(naive_report.report(generated[0]), truth)


def test_the_root_holds_every_trap(truth: dict[str, Any]) -> None:
    assert sorted(truth["categories"]) == sorted(["std", *(s for s, *_ in corpus.EPISODE_SHAPES)])
    assert all(count > 0 for count in truth["warning_counts"].values()), truth["warning_counts"]
    assert truth["episodic_count"] > 2000 and truth["superseded_count"] > 0
    assert 0 < truth["unmerged_count"] < truth["episodic_count"]
    unmerged = set(truth["unmerged"])
    assert "episodes/README.md" in unmerged
    assert any(p.startswith("inbox/") for p in truth["episodic"])
    assert not any(
        p.startswith(("episodes/notes/", "episodes_archive/")) for p in truth["episodic"]
    )
    assert not any("/." in p or p.startswith(".") for p in truth["episodic"])


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_the_generator_is_deterministic_by_seed(tmp_path: Path) -> None:
    first = corpus.generate(tmp_path / "a", episodes=300, seed=3)
    again = corpus.generate(tmp_path / "b", episodes=300, seed=3)
    other = corpus.generate(tmp_path / "c", episodes=300, seed=4)
    assert first == again and tree(tmp_path / "a") == tree(tmp_path / "b")
    assert first["unmerged"] != other["unmerged"]
    assert tree(tmp_path / "a") != tree(tmp_path / "c")
    # as a script, under another hash seed: nothing may depend on the order of a set
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    args = [tmp_path / "d", "--episodes", "300", "--seed", "3", "--truth", tmp_path / "t.json"]
    script = subprocess.run(
        [sys.executable, BENCH / "corpus.py", *args], env=env, capture_output=True, check=False
    )
    assert script.returncode == 0, script.stderr
    assert json.loads((tmp_path / "t.json").read_text("utf-8")) == first
    assert json.loads(script.stdout)["unmerged_count"] == first["unmerged_count"]
    assert tree(tmp_path / "d") == tree(tmp_path / "a")


def test_the_generator_refuses_a_root_with_files(tmp_path: Path) -> None:
    (tmp_path / "kept.md").write_text("mine\n")
    with pytest.raises(FileExistsError):
        corpus.generate(tmp_path, episodes=10)
    assert (tmp_path / "kept.md").read_text() == "mine\n"
