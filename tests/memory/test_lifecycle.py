"""The memory lifecycle in the core and on the CLI: forget, restore, brief, and recall filters.

``Knowledge.forget`` / ``restore`` / ``brief`` and the search parameters are the one rule every
interface calls; REST and MCP are tested in ``test_rest.py`` and ``test_mcp.py``. Everything
runs on real files, real git and the real index.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gitrepo import commit_count, git
from kiwifs.cli import cli
from kiwifs.errors import Conflict, InvalidFrontmatter, InvalidQuery, NotFound, UsageError
from kiwifs.frontmatter.reader import read_frontmatter, split
from kiwifs.git.repo import blob_id
from kiwifs.index.record import json_safe
from kiwifs.index.rows import status_columns
from kiwifs.knowledge import Knowledge
from kiwifs.memory.brief import Candidate, check_brief_args, pack, token_cost
from kiwifs.memory.lifecycle import record_merge
from kiwifs.memory.rules import MergeEntry
from kiwifs.memory.status import is_superseded
from kiwifs.tuning import Tuning

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def fm_of(kb: Knowledge, path: str) -> dict[str, Any]:
    return kb.frontmatter(path)


def paths_found(kb: Knowledge, query: str, **kwargs: Any) -> list[str]:
    return [h.path for h in kb.search(query, **kwargs).results]


# ---------------------------------------------------------------------------------------------
# forget and restore


PAGE = b"---\n# why this page exists\ntitle: Retries # short\ntags: [api]\n---\nThe body.\n\n"


def test_forget_sets_the_keys_and_keeps_everything_else(kb: Knowledge, root: Path) -> None:
    kb.write("concepts/retries.md", PAGE)
    before = commit_count(root)
    result = kb.forget(
        "concepts/retries.md", "the API changed", "/concepts/api-v2.md", actor="agent-7"
    )
    data = (root / "concepts/retries.md").read_bytes()
    assert (result.path, result.etag, result.changed, result.superseded) == (
        "concepts/retries.md",
        blob_id(data),
        True,
        True,
    )
    assert commit_count(root) == before + 1
    assert (
        git(root, "log", "-1", "--format=%an %s") == "agent-7 agent-7: forget concepts/retries.md\n"
    )
    fm = read_frontmatter(data).data
    assert list(fm) == [
        "title",
        "tags",
        "memory_status",
        "valid_until",
        "superseded_reason",
        "superseded_by",
    ]
    assert fm["memory_status"] == "superseded" and STAMP.match(fm["valid_until"])
    assert (fm["superseded_reason"], fm["superseded_by"]) == (
        "the API changed",
        "concepts/api-v2.md",
    )
    assert b"# why this page exists\ntitle: Retries # short\n" in data  # comments kept
    assert split(data)[1] == b"The body.\n\n"
    change = kb.changes(limit=1)[0]
    assert (change.action, change.path, change.actor) == ("write", "concepts/retries.md", "agent-7")


def test_forgetting_twice_changes_nothing(kb: Knowledge, root: Path) -> None:
    kb.write("a.md", "# A\n")
    first = kb.forget("a.md", "first reason")
    stamped = (root / "a.md").read_bytes()
    before = commit_count(root)
    again = kb.forget("a.md", "another reason", "b.md")
    assert (again.changed, again.superseded, again.etag) == (False, True, first.etag)
    assert (root / "a.md").read_bytes() == stamped
    assert commit_count(root) == before


def test_restore_removes_the_four_keys_in_one_commit(kb: Knowledge, root: Path) -> None:
    kb.write("concepts/retries.md", PAGE)
    kb.forget("concepts/retries.md", "why", "b.md")
    before = commit_count(root)
    result = kb.restore("concepts/retries.md", actor="agent-8")
    assert (result.changed, result.superseded) == (True, False)
    assert (root / "concepts/retries.md").read_bytes() == PAGE  # exactly as before
    assert commit_count(root) == before + 1
    assert git(root, "log", "-1", "--format=%s") == "agent-8: restore concepts/retries.md\n"
    # restoring a live page is a no-op without a commit
    again = kb.restore("concepts/retries.md")
    assert (again.changed, again.superseded) == (False, False)
    assert commit_count(root) == before + 1
    # history keeps both states
    assert len(kb.versions("concepts/retries.md")) == 3


def test_a_page_without_frontmatter_comes_back_without_one(kb: Knowledge, root: Path) -> None:
    kb.write("plain.md", "just text\n")
    kb.forget("plain.md")
    assert is_superseded(fm_of(kb, "plain.md"))
    kb.restore("plain.md")
    assert (root / "plain.md").read_bytes() == b"just text\n"


def test_restore_of_a_page_forgotten_by_hand(kb: Knowledge, root: Path) -> None:
    (root / "hand.md").write_text("---\nmemory_status: ' SUPERSEDED '\nvalid_until: x\n---\nb\n")
    assert kb.restore("hand.md").changed
    assert (root / "hand.md").read_text() == "b\n"


def test_forget_and_restore_refuse_bad_input_and_change_nothing(kb: Knowledge, root: Path) -> None:
    kb.write("a.md", "# A\n")
    kb.write("broken.md", "---\ntitle: [oops\n---\nbody\n")
    before = commit_count(root)
    with pytest.raises(NotFound):
        kb.forget("missing.md")
    with pytest.raises(NotFound):
        kb.restore("missing.md")
    for bad in ("../outside.md", ".git/config", "a//b.md"):
        with pytest.raises(UsageError, match="superseded_by"):
            kb.forget("a.md", superseded_by=bad)
    with pytest.raises(UsageError, match="another page"):
        kb.forget("a.md", superseded_by="/a.md")
    with pytest.raises(InvalidFrontmatter):
        kb.forget("broken.md")
    assert not kb.restore("broken.md").changed  # reads as live: nothing to restore
    with pytest.raises(Conflict) as conflict:
        kb.forget("a.md", if_match='"0000000000000000000000000000000000000000"')
    assert conflict.value.etag == blob_id(b"# A\n")
    assert (root / "a.md").read_bytes() == b"# A\n"
    assert commit_count(root) == before


def test_superseded_is_one_rule_in_python_and_the_index() -> None:
    """``is_superseded`` on parsed frontmatter and the index's column, set from the stored
    JSON, agree."""

    @settings(max_examples=300, deadline=None)
    @given(
        st.one_of(
            st.sampled_from(["superseded", " Superseded ", "SUPERSEDED", "superseded\n", "x"]),
            st.text(max_size=12),
            st.integers(),
            st.booleans(),
            st.none(),
            st.lists(st.just("superseded"), max_size=1),
            st.dictionaries(st.just("a"), st.just("superseded"), max_size=1),
        ),
        st.booleans(),
    )
    def agree(value: object, present: bool) -> None:
        fm = (
            {"title": "t", "memory_status": value}
            if present
            else {"nested": {"memory_status": value}}
        )
        stored = json.dumps(json_safe(fm), ensure_ascii=False)
        superseded, _scope = status_columns(stored)
        assert superseded == int(is_superseded(fm)), fm

    agree()


# ---------------------------------------------------------------------------------------------
# superseded pages leave every recall path


def test_a_forgotten_page_leaves_search_meta_brief_and_the_unmerged_list(kb: Knowledge) -> None:
    kb.write("episodes/e1.md", "---\nepisode_id: e1\nstatus: raw\n---\nthe quokka sleeps\n")
    kb.write("episodes/e2.md", "---\nepisode_id: e2\nstatus: raw\n---\nthe quokka eats\n")

    def recall() -> tuple[list[str], list[str], list[str], list[str], int]:
        report = kb.memory_report()
        return (
            sorted(paths_found(kb, "quokka")),
            [h.path for h in kb.meta(["$.status=raw"]).results],
            sorted(p.path for p in kb.brief("quokka").pages),
            [e.path for e in report.unmerged],
            report.superseded_count,
        )

    both = ["episodes/e1.md", "episodes/e2.md"]
    assert recall() == (both, both, both, both, 0)
    kb.forget("episodes/e1.md", "wrong")
    only = ["episodes/e2.md"]
    assert recall() == (only, only, only, only, 1)
    assert kb.memory_report(use_index=False).to_json() == kb.memory_report().to_json()
    assert [e.path for e in kb.memory_report().episodic_files] == both  # still an episode
    # asked for, it comes back; by path it is always there
    assert sorted(paths_found(kb, "quokka", include_superseded=True)) == both
    assert len(kb.meta(["$.status=raw"], include_superseded=True).results) == 2
    assert len(kb.brief("quokka", include_superseded=True).pages) == 2
    assert "quokka sleeps" in kb.read("episodes/e1.md").text
    kb.restore("episodes/e1.md")
    assert recall() == (both, both, both, both, 0)


def test_memory_status_written_by_hand_counts_too(kb: Knowledge, root: Path) -> None:
    kb.reindex()
    (root / "episodes").mkdir()
    (root / "episodes/x.md").write_text("---\nmemory_status: Superseded\n---\nwombat\n")
    assert paths_found(kb, "wombat") == []
    assert kb.memory_report().superseded_count == 1
    assert kb.memory_report().unmerged_count == 0


# ---------------------------------------------------------------------------------------------
# briefs


def cand(path: str, chars: int, score: float = 1.0) -> Candidate:
    return Candidate(path, "e-" + path, score, "x" * chars)


def test_token_cost_is_characters_over_four_rounded_up() -> None:
    assert [token_cost("x" * n) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]
    assert token_cost("\u00e9\u00e9\u00e9\u00e9") == 1  # characters, not bytes


def test_pack_skips_what_does_not_fit_and_keeps_trying() -> None:
    brief = pack(
        "q",
        [cand("a", 40), cand("huge", 4000), cand("b", 36), cand("c", 30), cand("d", 4)],
        budget_tokens=20,
        max_pages=10,
    )
    assert [(p.path, p.tokens) for p in brief.pages] == [("a", 10), ("b", 9), ("d", 1)]
    assert [(o.path, o.tokens, o.reason) for o in brief.left_out] == [
        ("huge", 1000, "budget"),
        ("c", 8, "budget"),
    ]
    assert brief.total_tokens == 20 <= brief.budget_tokens
    assert brief.pages[0].text == "x" * 40  # whole, never cut


def test_pack_stops_at_max_pages() -> None:
    brief = pack("q", [cand(str(n), 4) for n in range(5)], budget_tokens=100, max_pages=2)
    assert [p.path for p in brief.pages] == ["0", "1"]
    assert [(o.path, o.reason) for o in brief.left_out] == [
        ("2", "max_pages"),
        ("3", "max_pages"),
        ("4", "max_pages"),
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 400), max_size=30),
    st.integers(1, 500),
    st.integers(1, 10),
)
def test_pack_never_exceeds_its_limits(sizes: list[int], budget: int, max_pages: int) -> None:
    brief = pack("q", [cand(str(i), n) for i, n in enumerate(sizes)], budget, max_pages)
    assert brief.total_tokens == sum(p.tokens for p in brief.pages) <= budget
    assert len(brief.pages) <= max_pages
    assert len(brief.pages) + len(brief.left_out) == len(sizes)
    assert [p.path for p in brief.pages] == sorted((p.path for p in brief.pages), key=int)


def test_brief_arguments() -> None:
    assert check_brief_args(1, 1000) == (1, 100)
    with pytest.raises(UsageError, match="budget_tokens"):
        check_brief_args(0, 5)
    with pytest.raises(UsageError, match="max_pages"):
        check_brief_args(10, 0)


def test_brief_reads_whole_pages_best_first_with_their_etags(kb: Knowledge) -> None:
    kb.write("concepts/otter.md", "---\nscope: a\n---\notter otter otter\n")
    kb.write("notes/otter.md", "---\nscope: b\n---\notter once, in a much longer page\n")
    kb.write("notes/big.md", "otter " + "word " * 2000)
    brief = kb.brief("otter", budget_tokens=60)
    assert [p.path for p in brief.pages] == ["concepts/otter.md", "notes/otter.md"]
    for page in brief.pages:
        assert page.text == kb.read(page.path).text
        assert page.etag == kb.read(page.path).etag
        assert page.tokens == token_cost(page.text)
    assert [(o.path, o.reason) for o in brief.left_out] == [("notes/big.md", "budget")]
    assert [p.path for p in kb.brief("otter", scope="b").pages] == ["notes/otter.md"]
    assert [p.path for p in kb.brief("otter", path_prefix="concepts/").pages] == [
        "concepts/otter.md"
    ]
    assert kb.brief("nothing-matches").pages == ()
    with pytest.raises(UsageError, match="query is required"):
        kb.brief("  ")


def test_a_brief_reads_its_pages_at_once_as_one_by_one(kb: Knowledge) -> None:
    """``Storage.read_many`` (the default) and one read per page (``Tuning.read_many`` off)
    give the same brief (the refusals of ``read_many`` are tested with the storage)."""
    for i in range(30):
        kb.write(f"notes/n{i:02}.md", "otter " * (i % 7 + 1) + "word " * (i * 9))
    kb.write("notes/tiny.md", "otter")
    briefs = []
    for read_many in (True, False):
        with Knowledge(kb.root, tuning=Tuning(read_many=read_many)) as reader:
            briefs.append(reader.brief("otter", budget_tokens=300, max_pages=8).to_json())
    assert briefs[0] == briefs[1]
    assert len(briefs[0]["pages"]) == 8 and briefs[0]["left_out"]


# ---------------------------------------------------------------------------------------------
# search parameters


def test_scope_is_an_exact_match(kb: Knowledge) -> None:
    kb.write("a.md", "---\nscope: a\n---\nbadger\n")
    kb.write("b.md", "---\nscope: ab\n---\nbadger\n")
    kb.write("c.md", "---\nscope: [a]\n---\nbadger\n")
    assert paths_found(kb, "badger", scope="a") == ["a.md"]
    assert sorted(paths_found(kb, "badger")) == ["a.md", "b.md", "c.md"]


def test_modified_after_filters_by_mtime_and_refuses_garbage(kb: Knowledge, root: Path) -> None:
    kb.write("old.md", "heron\n")
    kb.write("new.md", "heron\n")
    long_ago = time.time() - 400 * 86400
    os.utime(root / "old.md", (long_ago, long_ago))
    cutoff = (dt.datetime.now(dt.UTC) - dt.timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert paths_found(kb, "heron", modified_after=cutoff) == ["new.md"]
    assert sorted(paths_found(kb, "heron", modified_after="2000-01-01")) == ["new.md", "old.md"]
    for bad in ("yesterday", "2026-13-01T00:00:00Z"):
        with pytest.raises(UsageError, match="modifiedAfter"):
            kb.search("heron", modified_after=bad)


def test_recency_weight_blends_rank_with_age(kb: Knowledge, root: Path) -> None:
    kb.write("relevant.md", "ibis ibis ibis ibis\n")
    kb.write("recent.md", "ibis and many other words that dilute the match a lot\n")
    old = time.time() - 365 * 86400
    os.utime(root / "relevant.md", (old, old))
    assert paths_found(kb, "ibis") == ["relevant.md", "recent.md"]
    assert paths_found(kb, "ibis", recency_weight=0) == ["relevant.md", "recent.md"]
    newest_first = kb.search("ibis", recency_weight=1.0)
    assert [h.path for h in newest_first.results] == ["recent.md", "relevant.md"]
    assert all(0 <= h.score <= 1 for h in newest_first.results)
    assert paths_found(kb, "ibis", recency_weight=1.0, limit=1, offset=1) == ["relevant.md"]
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(UsageError, match="recency_weight"):
            kb.search("ibis", recency_weight=bad)


# ---------------------------------------------------------------------------------------------
# meta filters as a mapping


def test_meta_filters_as_a_mapping_are_equalities_and_ed(kb: Knowledge) -> None:
    kb.write("a.md", "---\nstatus: draft\nrank: 2\nflag: true\n---\n")
    kb.write("b.md", "---\nstatus: draft\nrank: 3\n---\n")
    kb.write("c.md", "---\nstatus: done\nrank: 2\nnote: a=b<c\n---\n")

    def found(filters: dict[str, Any]) -> list[str]:
        return [h.path for h in kb.meta(filters).results]

    assert found({"status": "draft"}) == ["a.md", "b.md"]
    assert found({"status": "draft", "$.rank": 2}) == ["a.md"]
    assert found({"flag": True}) == ["a.md"]
    assert found({"status": "draft", "flag": None}) == ["b.md"]
    assert found({"note": "a=b<c"}) == ["c.md"]  # operators inside a value are just text
    with pytest.raises(InvalidQuery, match="filters.status"):
        kb.meta({"status": ["draft"]})
    with pytest.raises(InvalidQuery, match="invalid field"):
        kb.meta({"a b": "x"})


# ---------------------------------------------------------------------------------------------
# merged-from: a single mapping, and ids and paths kept apart


def test_a_single_mapping_merged_from_is_one_entry_and_merges_extend_it(kb: Knowledge) -> None:
    kb.write("episodes/a.md", "---\nepisode_id: a\n---\n")
    kb.write("episodes/b.md", "---\nepisode_id: b\n---\n")
    kb.write("concepts/c.md", "---\nmerged-from:\n  type: episode\n  id: a\n---\nbody\n")
    report = kb.memory_report()
    assert (report.merged_from_refs, report.unmerged_count, report.warnings) == (1, 1, ())
    from kiwifs.memory.rules import MergeEntry

    assert kb.merge("concepts/c.md", [MergeEntry(id="a")]).added == ()  # already cited
    kb.merge("concepts/c.md", [MergeEntry(id="b")])
    fm = fm_of(kb, "concepts/c.md")
    assert [e["id"] for e in fm["merged-from"]] == ["a", "b"]
    assert kb.memory_report().unmerged_count == 0


def test_cli_merge_keeps_ids_and_paths_apart(root: Path) -> None:
    (root / "episodes").mkdir()
    (root / "episodes/a.md").write_text("# no id\n")
    runner = CliRunner()
    base = ["memory", "merge", "concepts/c.md", "--root", str(root)]
    first = runner.invoke(cli, [*base, "--episode", "path:episodes/a.md"])
    assert first.exit_code == 0 and "merged 1 entry" in first.output
    second = runner.invoke(cli, [*base, "--path", "episodes/a.md"])
    assert second.exit_code == 0 and "merged 1 entry" in second.output, second.output
    entries = read_frontmatter((root / "concepts/c.md").read_bytes()).data["merged-from"]
    assert [(e.get("id"), e.get("path")) for e in entries] == [
        ("path:episodes/a.md", None),
        (None, "episodes/a.md"),
    ]
    with Knowledge.open(root) as kb:
        assert kb.memory_report().unmerged_count == 0  # covered by the path, not the id
    third = runner.invoke(cli, [*base, "--path", "./episodes/a.md"])
    assert "nothing to do" in third.output


# ---------------------------------------------------------------------------------------------
# the command line


def invoke(*args: str, color: bool = False) -> Any:
    result = CliRunner().invoke(cli, list(args), color=color)
    return result


def test_cli_search_prints_plain_text(kb: Knowledge, root: Path) -> None:
    kb.write("notes/n.md", "the narwhal swims\n")
    plain = invoke("search", "narwhal", "--root", str(root))
    assert plain.exit_code == 0
    assert "   the narwhal swims" in plain.output and "<mark>" not in plain.output
    on_a_terminal = invoke("search", "narwhal", "--root", str(root), color=True)
    assert "\x1b[1mnarwhal\x1b[0m" in on_a_terminal.output and "<mark>" not in on_a_terminal.output
    as_json = invoke("search", "narwhal", "--root", str(root), "--json")
    assert json.loads(as_json.output)["results"][0]["snippet"] == "the <mark>narwhal</mark> swims"
    bad = invoke("search", "narwhal", "--root", str(root), "--modified-after", "soon")
    assert bad.exit_code == 2 and "modifiedAfter" in bad.output


def test_cli_mcp_remote_says_kiwifs_serves_mcp_in_process(tmp_path: Path) -> None:
    for args in (["--remote", "http://host:3333"], ["--root", str(tmp_path), "--api-key", "k"]):
        result = invoke("mcp", *args)
        assert result.exit_code == 2, result.output
        assert "kiwifs serves MCP in-process" in result.output
        assert "kiwifs mcp --root" in result.output and "/mcp" in result.output
    assert "Missing option '--root'" in invoke("mcp").output


def test_cli_agent_loop(root: Path) -> None:
    """remember 5 → brief within a small budget → forget one → gone → restore → back."""
    r = str(root)
    (root / "episodes").mkdir(exist_ok=True)
    ids = []
    for n in range(5):
        scope = ["--scope", "a"] if n < 2 else []
        text = f"pelican sighting {n}: " + "detail " * (20 * n) + "\n"
        out = CliRunner().invoke(
            cli, ["memory", "remember", "--root", r, "--json", *scope], input=text
        )
        assert out.exit_code == 0, out.output
        ids.append(json.loads(out.output))
    pack = json.loads(invoke("brief", "pelican", "--root", r, "--budget", "120", "--json").output)
    assert pack["total_tokens"] <= 120 and pack["pages"] and pack["left_out"]
    assert {p["reason"] for p in pack["left_out"]} == {"budget"}
    assert len(pack["pages"]) + len(pack["left_out"]) == 5
    scoped = json.loads(invoke("brief", "pelican", "--root", r, "--scope", "a", "--json").output)
    assert sorted(p["path"] for p in scoped["pages"]) == sorted(e["path"] for e in ids[:2])
    text = invoke("brief", "pelican", "--root", r, "--budget", "120").output
    assert text.startswith("# Context pack: pelican") and "Dropped for budget:" in text
    gone = ids[0]["path"]

    def visible() -> tuple[bool, bool, bool]:
        found = json.loads(invoke("search", "pelican", "--root", r, "--json").output)
        brief = json.loads(invoke("brief", "pelican", "--root", r, "--json").output)
        report = json.loads(invoke("memory", "report", "--root", r, "--json").output)
        return (
            gone in [h["path"] for h in found["results"]],
            gone in [p["path"] for p in brief["pages"]],
            gone in [e["path"] for e in report["unmerged"]],
        )

    assert visible() == (True, True, True)
    forgot = invoke("memory", "forget", gone, "--root", r, "--reason", "wrong bird")
    assert forgot.exit_code == 0 and forgot.output == f"forgot {gone}\n"
    assert visible() == (False, False, False)
    report = json.loads(invoke("memory", "report", "--root", r, "--json").output)
    assert report["superseded_count"] == 1
    assert "superseded (forgotten):  1" in invoke("memory", "report", "--root", r).output
    again = invoke("memory", "forget", gone, "--root", r, "--json")
    assert json.loads(again.output)["changed"] is False
    assert (root / gone).read_text().endswith("pelican sighting 0: \n")  # readable by path
    restored = invoke("memory", "restore", gone, "--root", r)
    assert restored.output == f"restored {gone}\n"
    assert visible() == (True, True, True)
    assert "nothing to do" in invoke("memory", "restore", gone, "--root", r).output
    missing = invoke("memory", "forget", "nope.md", "--root", r)
    assert missing.exit_code == 1 and "not found" in missing.output
    bad = invoke("memory", "forget", gone, "--root", r, "--superseded-by", "../x.md")
    assert bad.exit_code == 2 and "superseded_by" in bad.output


def test_the_dashboard_counts_a_forgotten_episode_as_the_report_does(kb: Knowledge) -> None:
    kb.write("episodes/a.md", "---\nepisode_id: a\ncreated: 2020-01-01T00:00:00Z\n---\n")
    kb.write("episodes/b.md", "---\nepisode_id: b\ncreated: 2021-01-01T00:00:00Z\n---\n")
    kb.forget("episodes/a.md")
    report, overview = kb.memory_report(), kb.overview()
    assert (overview.unmerged, overview.superseded) == (report.unmerged_count, 1) == (1, 1)
    oldest = overview.oldest
    assert oldest is not None and oldest.path == "episodes/b.md"  # a forgotten one waits for none
    assert [i.episode.path for i in kb.queue().items] == ["episodes/b.md"]


def test_with_vectors_on_a_brief_ranks_by_hybrid_search(make_root: Any, tmp_path: Path) -> None:
    """A page that shares no word with the query, found by meaning, is packed too."""
    from vectorkit import build_model, local_config

    model = build_model(tmp_path / "m2v")
    root = make_root(
        {
            ".kiwi/config.toml": local_config(model),
            "zoo/kiwi.md": "The kiwi has feathers and lays one egg.\n",
            "zoo/weather.md": "Rain and storm clouds today.\n",
            "zoo/old.md": "---\nmemory_status: superseded\n---\nA flightless bird, once.\n",
        }
    )
    with Knowledge.open(root) as kb:
        assert "zoo/kiwi.md" not in paths_found(kb, "flightless bird")  # keyword alone misses it
        pack = kb.brief("flightless bird", max_pages=1)
        assert [p.path for p in pack.pages] == ["zoo/kiwi.md"]
        assert "zoo/old.md" not in [o.path for o in pack.left_out]  # superseded: not ranked


def test_record_merge_adds_only_what_a_page_does_not_cite_and_stamps_it() -> None:
    """The merge's page change, pure: a new page is created semantic; entries already cited
    (by key) are not added again, within one call or across calls; a date or actor an entry
    carries is kept."""
    wanted = [
        MergeEntry(id="ep-1"),
        MergeEntry(id="ep-1"),
        MergeEntry(path="episodes/b.md", date="2020-01-01T00:00:00Z", actor="w0"),
    ]
    data, added = record_merge(None, wanted, "2026-02-03T04:05:06Z", "w1")
    assert data is not None
    assert [(e.id, e.path, e.date, e.actor) for e in added] == [
        ("ep-1", "", "2026-02-03T04:05:06Z", "w1"),
        ("", "episodes/b.md", "2020-01-01T00:00:00Z", "w0"),
    ]
    fm = read_frontmatter(data).data
    assert fm["memory_kind"] == "semantic"
    assert [item.get("id") or item["path"] for item in fm["merged-from"]] == [
        "ep-1",
        "episodes/b.md",
    ]
    assert record_merge(data, [MergeEntry(path="./episodes/b.md")], "later", "w2") == (None, ())
    more, added = record_merge(data, [MergeEntry(id="ep-2")], "later", "w2")
    assert more is not None and more.startswith(b"---\nmemory_kind: semantic\n")
    assert [e.id for e in added] == ["ep-2"]
    assert len(read_frontmatter(more).data["merged-from"]) == 3
