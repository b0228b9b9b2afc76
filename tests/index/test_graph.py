"""Graph navigation over the link index on a real root: the graph bounded by limit and prefix,
a walk with and without siblings, shortest paths (found, none, to itself, missing page), a
page's health (healthy, broken, orphaned, stale, superseded), and the prefix hiding every node
outside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiwifs import Knowledge
from kiwifs.errors import NotFound

HEALTHY = "---\nowner: ana\nstatus: published\ntags: [auth]\n---\n"


@pytest.fixture
def kb(tmp_path: Path) -> Knowledge:
    kb = Knowledge.open(tmp_path)
    kb.write("index.md", "start at [[a]]\n")
    kb.write("a.md", HEALTHY + "A links [[b]] and [md](team/c.md) and [[missing]]\n")
    kb.write("b.md", "---\ntags: [Auth, db]\n---\nB links [[c]]\n")
    kb.write("team/c.md", "---\ncontradicts: b\n---\nC body\n")
    kb.write(
        "team/d.md",
        "---\nmemory_status: superseded\nsuperseded_by: team/c.md\n---\nD links [[a]]\n",
    )
    kb.write("lone.md", "---\nreviewed: 2001-01-01\nnext-review: 2002-01-01\n---\nalone\n")
    return kb


def test_graph_nodes_edges_limit_prefix(kb: Knowledge) -> None:
    whole = kb.graph().to_json()
    assert [n["path"] for n in whole["nodes"]] == [
        "a.md", "b.md", "index.md", "lone.md", "team/c.md", "team/d.md"
    ]  # fmt: skip
    assert {n["path"] for n in whole["nodes"] if n["superseded"]} == {"team/d.md"}
    assert whole["nodes"][0]["tags"] == ["auth"] and "tags" not in whole["nodes"][2]
    edges = {(e["source"], e["target"], e["kind"]) for e in whole["edges"]}
    assert edges == {
        ("index.md", "a.md", "wiki"),
        ("a.md", "b.md", "wiki"),
        ("a.md", "team/c.md", "markdown"),
        ("b.md", "team/c.md", "wiki"),
        ("team/c.md", "b.md", "typed:contradicts"),
        ("team/d.md", "a.md", "wiki"),
        ("team/d.md", "team/c.md", "superseded-by"),
    }
    assert whole["truncated"] is False
    two = kb.graph(limit=2).to_json()
    assert [n["path"] for n in two["nodes"]] == ["a.md", "b.md"] and two["truncated"]
    assert [(e["source"], e["target"]) for e in two["edges"]] == [("a.md", "b.md")]
    team = kb.graph("team/").to_json()
    assert [n["path"] for n in team["nodes"]] == ["team/c.md", "team/d.md"]
    assert [(e["source"], e["target"]) for e in team["edges"]] == [("team/d.md", "team/c.md")]


def test_walk_with_and_without_siblings(kb: Knowledge) -> None:
    walk = kb.graph_walk("a.md").to_json()
    assert walk["links_out"] == ["b.md", "team/c.md"] and walk["broken"] == ["missing"]
    assert walk["links_in"] == ["index.md", "team/d.md"]
    assert (walk["in_degree"], walk["out_degree"]) == (2, 2)
    assert walk["hub_score"] == round(2 / 6, 4)
    assert walk["siblings"] == [
        {"path": "b.md", "relation": "sibling_dir"},
        {"path": "index.md", "relation": "sibling_dir"},
        {"path": "lone.md", "relation": "sibling_dir"},
        {"path": "b.md", "relation": "sibling_tag", "shared_tag": "auth"},
    ]
    assert walk["superseded"] == ["team/d.md"]
    bare = kb.graph_walk("a.md", include_siblings=False).to_json()
    assert bare["siblings"] == [] and bare["links_out"] == walk["links_out"]
    with pytest.raises(NotFound):
        kb.graph_walk("nope.md")


def test_walk_under_a_prefix_sees_nothing_outside(kb: Knowledge) -> None:
    walk = kb.graph_walk("team/d.md", prefix="team/").to_json()
    assert walk["links_out"] == ["team/c.md"] and walk["broken"] == ["a"]
    assert walk["links_in"] == [] and walk["siblings"] == [
        {"path": "team/c.md", "relation": "sibling_dir"}
    ]
    with pytest.raises(NotFound):
        kb.graph_walk("a.md", prefix="team/")


def test_shortest_path(kb: Knowledge) -> None:
    found = kb.graph_path("index.md", "team/c.md").to_json()
    assert found == {"path": ["index.md", "a.md", "team/c.md"], "hops": 2, "superseded": []}
    via = kb.graph_path("team/d.md", "b.md").to_json()
    assert via["path"][0] == "team/d.md" and via["path"][-1] == "b.md" and via["hops"] == 2
    assert via["superseded"] == ["team/d.md"]
    assert kb.graph_path("b.md", "b.md").to_json()["path"] == ["b.md"]
    with pytest.raises(NotFound, match="no path exists between the given pages"):
        kb.graph_path("b.md", "lone.md")
    with pytest.raises(NotFound, match="node not found in graph: nope.md"):
        kb.graph_path("a.md", "nope.md")
    with pytest.raises(NotFound, match="node not found"):  # a.md is outside the prefix
        kb.graph_path("team/d.md", "a.md", prefix="team/")


def test_health_check(kb: Knowledge) -> None:
    healthy = kb.health_check("b.md").to_json()
    assert healthy["issues"] == [
        "empty-page: page has less than 50 characters of content",
        "missing-owner: no owner field in frontmatter",
        "missing-status: no status field in frontmatter",
        "contradiction: team/c.md contradicts this page",
    ]
    a = kb.health_check("a.md").to_json()
    assert a["issues"] == [
        "empty-page: page has less than 50 characters of content",
        "no-review-date: has an owner but no next-review date",
        "broken-link: [[missing]] doesn't resolve to any file",
    ]
    assert (a["word_count"], a["link_count"], a["backlink_count"]) == (7, 3, 2)
    assert a["superseded"] is False and "quality_score" not in a
    lone = kb.health_check("lone.md").to_json()
    assert "orphan: no inbound links point to this page" in lone["issues"]
    assert "stale: last reviewed 2001-01-01 (30+ days ago)" in lone["issues"]
    assert "stale: next-review date 2002-01-01 is in the past" in lone["issues"]
    d = kb.health_check("team/d.md").to_json()
    assert d["superseded"] is True and any(i.startswith("superseded:") for i in d["issues"])
    assert "orphan" not in " ".join(kb.health_check("index.md").to_json()["issues"])
    scoped = kb.health_check("team/c.md", prefix="team/").to_json()
    assert scoped["backlink_count"] == 1  # team/d.md only: a.md and b.md are outside
    with pytest.raises(NotFound):
        kb.health_check("a.md", prefix="team/")


def test_health_check_kiwifs_janitor_checks(tmp_path: Path) -> None:
    """The janitor's checks KiwiFS reports per page: an empty page, an owner without a review
    date, decision language outside decisions/, identical titles, two sources of truth sharing
    a tag; and ours, a typed contradicts link either way."""
    kb = Knowledge.open(tmp_path)
    kb.write("index.md", "[[auth]] [[auth-v2]] [[empty]] [[plans]] [[decisions/db]] [[old]]\n")
    kb.write("empty.md", "---\nowner: ana\nstatus: draft\nnext-review: 2999-01-01\n---\n\n")
    kb.write(
        "auth.md",
        "---\ntitle: Login Flow\nsource-of-truth: true\ntags: [Auth, sso]\ncontradicts: plans\n"
        "---\n# Login\n\npasskeys\n",
    )
    kb.write(
        "auth-v2.md",
        "---\nsource-of-truth: true\ntags: [auth, SSO, web]\n---\n# LOGIN flow\n\nsame story\n",
    )
    kb.write("plans.md", "---\ntitle: login flow\nsource-of-truth: 'true'\ntags: [auth]\n---\nx\n")
    kb.write("old.md", "---\ntitle: Login flow\nmemory_status: superseded\n---\nold words\n")
    kb.write("decisions/db.md", "We decided to use SQLite.\n")
    kb.write("notes.md", "After a long talk we decided to use SQLite. [[index]]\n")

    def issues(path: str, prefix: str = "") -> list[str]:
        found: list[str] = kb.health_check(path, prefix).to_json()["issues"]
        return found

    empty = issues("empty.md")
    assert empty[0] == "empty-page: page has less than 50 characters of content"
    assert kb.health_check("empty.md").to_json()["word_count"] == 0
    assert not any(i.startswith("no-review-date") for i in empty)
    assert not any(i.startswith("no-review-date") for i in issues("index.md"))  # no owner
    auth = issues("auth.md")
    # the frontmatter title is the title; plans.md's is the same, case aside; old.md is retired
    assert 'duplicate: identical title "login flow" also found in plans.md' in auth
    assert not any("old.md" in i for i in auth)
    assert (
        "contradiction: both claim source-of-truth with overlapping tags [auth sso]; also: "
        "auth-v2.md" in auth
    )  # plans.md's source-of-truth is the text 'true', not a claim
    assert "contradiction: contradicts plans.md" in auth
    assert "contradiction: auth.md contradicts this page" in issues("plans.md")
    v2 = issues("auth-v2.md")
    # no frontmatter title: the first level-1 heading is the title, found in the others' titles
    assert 'duplicate: identical title "login flow" also found in auth.md' in v2
    assert 'duplicate: identical title "login flow" also found in plans.md' in v2
    assert (
        "contradiction: both claim source-of-truth with overlapping tags [auth sso]; also: "
        "auth.md" in v2
    )
    assert not any(i.startswith("duplicate") for i in issues("old.md"))  # superseded: no check
    decision = "decision-found: contains decision language but is not in decisions/"
    assert decision in issues("notes.md") and decision not in issues("decisions/db.md")
    # a prefix hides the pages outside it: no duplicate, no contradiction seen from there
    kb.write("team/auth.md", "---\ntitle: Login flow\n---\nteam page\n")
    assert 'duplicate: identical title "login flow" also found in team/auth.md' in issues("auth.md")
    assert not any(i.startswith("duplicate") for i in issues("team/auth.md", "team/"))
    kb.close()


def test_walk_with_a_name_that_is_not_utf8(tmp_path: Path) -> None:
    """A sibling whose name on disk is not UTF-8 (read as lone surrogates) is looked up in the
    index like any other path, not handed to SQLite as text it cannot encode."""
    import os

    root = tmp_path / "r"
    Knowledge.init(root, template="blank")
    with Knowledge.open(root) as kb:
        kb.write("notes/a.md", "[[notes/b]]\n")
        kb.write("notes/b.md", "b\n")
        os.close(os.open(os.fsencode(root / "notes") + b"/\xff-name.md", os.O_CREAT | os.O_WRONLY))
        kb.reconcile()
        walk = kb.graph_walk("notes/a.md")
        assert {s["path"] for s in walk.to_json()["siblings"]} == {
            "notes/b.md",
            "notes/\udcff-name.md",
        }
        assert kb.graph_walk("notes/\\xff-name.md").to_json()["superseded"] == []
