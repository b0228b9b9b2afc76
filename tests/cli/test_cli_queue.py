"""The queue's commands in-process (click's runner): claim, release, merge --worker, check,
lineage; exit 2 for usage errors, 1 for conflicts and missing claims, nothing changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from gitrepo import commit_count
from kiwifs.cli import cli
from kiwifs.knowledge import Knowledge
from queuekit import add_episodes


@pytest.fixture
def queue_root(root: Path) -> Path:
    """The blank root with three episodes (e0-e2)."""
    add_episodes(root, 3)
    with Knowledge.open(root) as kb:
        kb.ensure_versioned()
    return root


def run(root: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--root", str(root)], catch_exceptions=False)


def test_claim_text_and_json(queue_root: Path) -> None:
    out = run(queue_root, "memory", "claim", "--worker", "w1", "--limit", "1")
    assert out.exit_code == 0, out.output
    assert out.output.startswith("w1 holds 1 episode until ")
    assert "  - episodes/e0.md  (episode_id=e0, etag " in out.output
    data = json.loads(
        run(queue_root, "memory", "claim", "--worker", "w2", "--json", "--with-content").output
    )
    assert [c["path"] for c in data["claimed"]] == ["episodes/e1.md", "episodes/e2.md"]
    assert data["claimed"][0]["content"].endswith("episode 1\n")
    empty = run(queue_root, "memory", "claim", "--worker", "w3")
    assert empty.output == "nothing to claim: w3 holds no episode and none is free\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--worker", "w", "--lease", "30s"], "between 1m and 24h"),
        (["--worker", "w", "--lease", "2d"], "lease must be a duration"),
        (["--worker", "w", "--limit", "-1"], "limit must be between 0 and 1000"),
        (["--worker", " "], "worker is required"),
        (["--worker", "w", "--episodes-prefix", "a/../.."], ".."),
    ],
)
def test_claim_usage_errors_exit_2(queue_root: Path, args: list[str], message: str) -> None:
    out = run(queue_root, "memory", "claim", *args)
    assert out.exit_code == 2 and message in out.output
    with Knowledge.open(queue_root) as kb:
        assert kb.claims_list() == []


def test_release_and_its_errors(queue_root: Path) -> None:
    run(queue_root, "memory", "claim", "--worker", "w1", "--limit", "2")
    run(queue_root, "memory", "claim", "--worker", "w2", "--limit", "1")
    one = run(queue_root, "memory", "release", "episodes/e0.md", "--worker", "w1", "--json")
    assert json.loads(one.output) == {"worker": "w1", "released": ["episodes/e0.md"]}
    other = run(queue_root, "memory", "release", "episodes/e2.md", "--worker", "w1")
    assert other.exit_code == 1 and "claimed by w2, not w1" in other.output
    rest = run(queue_root, "memory", "release", "--worker", "w1")
    assert rest.output == "released 1 claim of w1\n  - episodes/e1.md\n"
    unknown = run(queue_root, "memory", "release", "--worker", "nobody")
    assert unknown.exit_code == 1 and "worker nobody holds no live claims" in unknown.output
    outside = run(queue_root, "memory", "release", "../x.md", "--worker", "w2")
    assert outside.exit_code == 2


def test_release_names_the_holder_as_its_claims_do(queue_root: Path) -> None:
    """Spaces around --worker are not part of the holder's name, in the answer either."""
    run(queue_root, "memory", "claim", "--worker", "w1", "--limit", "2")
    one = run(queue_root, "memory", "release", "episodes/e0.md", "--worker", "  w1 ", "--json")
    assert json.loads(one.output) == {"worker": "w1", "released": ["episodes/e0.md"]}
    rest = run(queue_root, "memory", "release", "--worker", " w1")
    assert rest.output == "released 1 claim of w1\n  - episodes/e1.md\n"


def test_merge_with_worker_honours_claims(queue_root: Path) -> None:
    run(queue_root, "memory", "claim", "--worker", "w1", "--limit", "1")
    before = commit_count(queue_root)
    refused = run(
        queue_root, "memory", "merge", "concepts/p.md", "--episode", "e0", "--worker", "w2"
    )
    assert refused.exit_code == 1 and "episodes/e0.md is claimed by w1 until" in refused.output
    anonymous = run(queue_root, "memory", "merge", "concepts/p.md", "--path", "episodes/e0.md")
    assert anonymous.exit_code == 1
    assert commit_count(queue_root) == before and not (queue_root / "concepts/p.md").exists()
    done = run(queue_root, "memory", "merge", "concepts/p.md", "--episode", "e0", "--worker", "w1")
    assert done.exit_code == 0 and done.output == "merged 1 entry into concepts/p.md\n"
    report = json.loads(run(queue_root, "memory", "report", "--json").output)
    assert (report["unmerged_count"], report["claimed_count"]) == (2, 0)


def test_report_text_marks_claims(queue_root: Path) -> None:
    run(queue_root, "memory", "claim", "--worker", "w1", "--limit", "1")
    out = run(queue_root, "memory", "report").output
    assert "claimed (live lease):    1\n" in out
    assert "  - episodes/e0.md  (episode_id=e0)  [claimed by w1 until " in out
    assert "  - episodes/e1.md  (episode_id=e1)\n" in out


def test_check_text_json_and_fail_on_problems(queue_root: Path) -> None:
    clean = run(queue_root, "memory", "check", "--fail-on-problems")
    assert clean.exit_code == 0 and "problems:                0\n" in clean.output
    assert "oldest unmerged:         episodes/e0.md, waiting " in clean.output
    run(queue_root, "memory", "merge", "concepts/p.md", "--episode", "e0", "--episode", "ghost")
    run(queue_root, "memory", "merge", "concepts/q.md", "--path", "episodes/e0.md", "--force")
    out = run(queue_root, "memory", "check")
    assert out.exit_code == 0
    assert "  - concepts/p.md: episode ghost (" in out.output
    assert "  - episodes/e0.md: concepts/p.md, concepts/q.md" in out.output
    failing = run(queue_root, "memory", "check", "--fail-on-problems", "--json")
    assert failing.exit_code == 1
    data = json.loads(failing.output)
    assert data["problems"] == 2 and data["double_merges"][0]["path"] == "episodes/e0.md"
    scanned = json.loads(run(queue_root, "memory", "check", "--json", "--no-index").output)
    data["oldest_unmerged"].pop("age_seconds")
    scanned["oldest_unmerged"].pop("age_seconds")
    assert scanned == data


def test_lineage(queue_root: Path) -> None:
    run(queue_root, "memory", "merge", "concepts/p.md", "--episode", "e1", "--note", "why")
    text = run(queue_root, "memory", "lineage", "e1").output
    assert text.startswith("episodes/e1.md (episode, episode_id=e1)\nmerged by: 1\n")
    assert "  - concepts/p.md (by id): episode e1 (" in text and "\u2014 why" in text
    data = json.loads(run(queue_root, "memory", "lineage", "concepts/p.md", "--json").output)
    assert data["merged_from"][0]["targets"] == ["episodes/e1.md"]
    missing = run(queue_root, "memory", "lineage", "nothing-here")
    assert missing.exit_code == 1 and "no episode with id 'nothing-here'" in missing.output


def test_worker_flags_are_checked_before_anything_runs(queue_root: Path) -> None:
    for args in (["--rule", "command"], ["--command", "cat"], ["--lease", "5s"]):
        out = CliRunner().invoke(
            cli, ["memory", "worker", "--worker", "w", "--url", "http://127.0.0.1:9", *args]
        )
        assert out.exit_code == 2, (args, out.output)


def test_merge_refuses_a_double_merge_unless_forced_and_warns(queue_root: Path) -> None:
    assert run(queue_root, "memory", "merge", "concepts/b.md", "--episode", "e0").exit_code == 0
    refused = run(
        queue_root, "memory", "merge", "concepts/a.md", "--episode", "e0", "--worker", "A"
    )
    assert refused.exit_code == 1
    assert "error: episodes/e0.md is already merged into concepts/b.md" in refused.stderr
    assert not (queue_root / "concepts/a.md").exists()
    forced = run(queue_root, "memory", "merge", "concepts/a.md", "--episode", "e0", "--force")
    assert forced.exit_code == 0 and forced.stdout == "merged 1 entry into concepts/a.md\n"
    warned = run(queue_root, "memory", "merge", "concepts/c.md", "--episode", "x", "--json")
    assert warned.exit_code == 0 and json.loads(warned.stdout)["warnings"] == [
        "episode x cites nothing yet (no episode has id 'x'); memory check lists it as dangling"
        " until the episode exists"
    ]
    assert warned.stderr == f"warning: {json.loads(warned.stdout)['warnings'][0]}\n"
