"""End to end: a generated 2,000-episode root, its ground truth, and the naive reference scan.

``shared/bench`` sits beside the repository (CI clones the repo into a folder with ``shared/`` as
a sibling); the tests are skipped, saying so, when it is not there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corpustruth import amend

BENCH = Path(__file__).resolve().parents[2] / "shared" / "bench"
GEN = BENCH / "gen_corpus.py"
NAIVE = BENCH / "naive_report.py"
KIWIFS = shutil.which("kiwifs", path=str(Path(sys.executable).parent)) or shutil.which("kiwifs")

pytestmark = pytest.mark.skipif(
    not (GEN.is_file() and NAIVE.is_file()),
    reason=f"corpus generator not found at {BENCH} (expects shared/bench beside the repo)",
)


def run(*args: str) -> str:
    out = subprocess.run(list(args), capture_output=True, text=True, encoding="utf-8", check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("corpus")
    root, truth_file = base / "kb", base / "truth.json"
    run(
        sys.executable, str(GEN), str(root),
        "--episodes", "2000", "--seed", "7", "--truth", str(truth_file),
    )  # fmt: skip
    if KIWIFS is None:
        pytest.fail("the kiwifs command is not installed next to this Python (pip install -e .)")
    report = json.loads(run(KIWIFS, "memory", "report", "--json", "--root", str(root)))
    truth = json.loads(truth_file.read_text(encoding="utf-8"))
    truth = amend(truth, root)
    assert truth["single_mapping_targets"], "no single-mapping page: the amendment is untested"
    yield {"root": root, "truth": truth, "report": report}


def paths(items: list[dict[str, str]]) -> list[str]:
    return [item["path"] for item in items]


def test_lists_match_the_ground_truth(corpus: dict[str, Any]) -> None:
    report, truth = corpus["report"], corpus["truth"]
    assert sorted(paths(report["unmerged"])) == truth["unmerged"]
    assert sorted(paths(report["episodic_files"])) == truth["episodic"]
    assert len(truth["episodic"]) > 2000
    assert 0 < len(truth["unmerged"]) < len(truth["episodic"])


def test_counts_match_the_ground_truth(corpus: dict[str, Any]) -> None:
    report, truth = corpus["report"], corpus["truth"]
    assert report["episodic_count"] == truth["episodic_count"]
    assert report["unmerged_count"] == truth["unmerged_count"]
    assert report["merged_from_refs"] == truth["merged_from_refs"]
    assert report["episodes_prefix"] == "episodes/"


def test_warning_counts_match_the_ground_truth(corpus: dict[str, Any]) -> None:
    warnings, truth = corpus["report"]["warnings"], corpus["truth"]
    missing = [w for w in warnings if w.startswith("missing episode_id in ")]
    shape = [w for w in warnings if w.startswith("memory: merged-from has unsupported shape in ")]
    assert len(missing) == truth["warnings_missing_id"]
    assert len(shape) == truth["warnings_shape"]
    other = [w for w in warnings if w not in missing and w not in shape]
    assert all(w.startswith("invalid frontmatter in ") for w in other), other


def test_lists_are_in_walk_order(corpus: dict[str, Any]) -> None:
    def walk_key(path: str) -> list[bytes]:
        return [segment.encode() for segment in path.split("/")]

    for field in ("episodic_files", "unmerged"):
        listed = paths(corpus["report"][field])
        assert listed == sorted(listed, key=walk_key)


def test_unmerged_matches_the_naive_reference_scan(corpus: dict[str, Any]) -> None:
    naive = json.loads(run(sys.executable, str(NAIVE), str(corpus["root"]), "--loader", "csafe"))
    report, targets = corpus["report"], corpus["truth"]["single_mapping_targets"]
    # the naive scan keeps KiwiFS 0.4's reading of a single-mapping merged-from (corpustruth)
    assert set(paths(report["unmerged"])) == set(paths(naive["unmerged"])) - targets
    assert set(paths(report["episodic_files"])) == set(paths(naive["episodic_files"]))
    assert report["merged_from_refs"] == naive["merged_from_refs"] + len(targets)
