"""The link index: every kind of link kept exact through writes, out-of-band edits, renames,
deletes, reconciles and rebuilds, compared with a fresh parse of the files."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiwifs import Knowledge
from kiwifs.index.linkparse import parse_links
from linkrules import resolved


def _kb(root: Path) -> Knowledge:
    root.mkdir(exist_ok=True)
    return Knowledge.open(root)


def back(kb: Knowledge, path: str, prefix: str = "") -> set[tuple[str, str]]:
    return {(b.path, b.kind) for b in kb.backlinks(path, prefix)}


def broken(kb: Knowledge, prefix: str = "") -> set[tuple[str, str]]:
    found = kb.broken_links(prefix)
    assert kb.broken_link_count(prefix) == len(found)
    return {(b.source, b.target) for b in found}


def test_parse_kinds_code_and_urls() -> None:
    text = (
        "---\ncontradicts: ['[[old|x]]']\n---\n[[a|alias]] [[b#h]] `[[code]]`\n"
        "```\n[[fenced]]\n```\n[m](../x.md#s) [u](http://e.com/y.md) [n](z.txt)\n"
    )
    fm = {
        "contradicts": ["[[old|x]]"],
        "superseded_by": "new.md",
        "derived-from": [{"path": "p.md"}],
    }
    got = {(link.kind, link.target, link.heading) for link in parse_links("d/s.md", text, fm)}
    assert got == {
        ("wiki", "a", ""),
        ("wiki", "b", "h"),
        ("markdown", "../x.md", "s"),
        ("typed:contradicts", "old", ""),
        ("superseded-by", "new.md", ""),
        ("derived-from", "p.md", ""),
    }


def test_each_kind_created_edited_renamed_deleted(tmp_path: Path) -> None:
    kb = _kb(tmp_path / "r")
    kb.write("t/target.md", "# T\n")
    kb.write("w.md", "see [[target]]\n")
    kb.write("m/md.md", "[x](../t/target.md#top)\n")
    kb.write("c.md", "---\ncontradicts: t/target\n---\nbody\n")
    kb.write("s.md", "---\nsuperseded_by: t/target.md\n---\nbody\n")
    kb.write(
        "d.md", "---\nderived-from:\n  - type: ingest\n    id: x\n    path: t/target.md\n---\n"
    )
    kb.write("e/ep.md", "---\nmemory_kind: episodic\nepisode_id: ep1\n---\nhi\n")
    kb.write("mf.md", "---\nmerged-from:\n  - type: episode\n    id: ep1\n---\nmerged\n")
    assert back(kb, "t/target.md") == {
        ("w.md", "wiki"),
        ("m/md.md", "markdown"),
        ("c.md", "typed:contradicts"),
        ("s.md", "superseded-by"),
        ("d.md", "derived-from"),
    }
    assert back(kb, "e/ep.md") == {("mf.md", "merged-from")}
    assert broken(kb) == set()
    # edited out of band, then reconciled
    (kb.root / "w.md").write_text("no link now\n")
    kb.reconcile()
    assert ("w.md", "wiki") not in back(kb, "t/target.md")
    # renamed: the links to the old path break, to the new one resolve by name
    kb.rename("t/target.md", "u/target.md", update_links=False)
    assert ("m/md.md", "../t/target.md") in broken(kb)
    assert ("c.md", "typed:contradicts") not in back(kb, "u/target.md")
    kb.write("w.md", "[[target]]\n")
    assert ("w.md", "wiki") in back(kb, "u/target.md")
    # deleted: every link to it broken; recreated: resolved again (resolution at query time)
    kb.delete("u/target.md")
    assert ("w.md", "target") in broken(kb)
    kb.write("target.md", "back\n")
    assert ("w.md", "wiki") in back(kb, "target.md")
    kb.delete("e/ep.md")
    assert ("mf.md", "episode:ep1") in broken(kb)
    # a rebuild keeps the same answers
    before = (broken(kb), back(kb, "target.md"), kb.orphans())
    kb.reindex()
    assert (broken(kb), back(kb, "target.md"), kb.orphans()) == before


def test_orphans_leave_out_episodes_and_self_links(tmp_path: Path) -> None:
    kb = _kb(tmp_path / "r")
    kb.write("a.md", "[[b]] [[a]]\n")
    kb.write("b.md", "b\n")
    kb.write("e.md", "---\nmemory_kind: episodic\nepisode_id: x\n---\n")
    assert kb.orphans() == ["a.md"]


def test_prefix_hides_sources_and_targets_outside(tmp_path: Path) -> None:
    kb = _kb(tmp_path / "r")
    kb.write("team/a.md", "[[secret]] [[team/b]]\n")
    kb.write("team/b.md", "b\n")
    kb.write("secret.md", "[[team/b]]\n")
    assert back(kb, "team/b.md") == {("team/a.md", "wiki"), ("secret.md", "wiki")}
    assert back(kb, "team/b.md", "team/") == {("team/a.md", "wiki")}
    assert back(kb, "secret.md", "team/") == set()
    assert broken(kb) == set()
    assert broken(kb, "team/") == {("team/a.md", "secret")}  # outside: as if absent
    assert kb.orphans("team/") == ["team/a.md"]
    assert [o.path for o in kb.outbound_links("team/a.md", "team/")] == [None, "team/b.md"]


NAMES = ["a", "b", "c", "d/a", "d/e"]


def expected(root: Path) -> tuple[set[tuple[str, str, str]], set[tuple[str, str]]]:
    """Backlinks and broken links worked out from the files alone, by the documented rules."""
    back_set: set[tuple[str, str, str]] = set()
    broken_set: set[tuple[str, str]] = set()
    for src, link, hit in resolved(root):
        if hit is not None:
            back_set.add((hit, src, link.kind))
        else:
            broken_set.add((src, link.target))
    return back_set, broken_set


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(st.sampled_from(NAMES), st.lists(st.sampled_from([*NAMES, "zz"]), max_size=3)),
        min_size=1,
        max_size=6,
    )
)
def test_index_agrees_with_a_reparse(tmp_path_factory: object, pages: list) -> None:
    root = tmp_path_factory.mktemp("p")  # type: ignore[attr-defined]
    kb = Knowledge.open(root)
    for name, targets in pages:
        body = " ".join(f"[[{t}]]" for t in targets) + "\n"
        if name == "c":  # out of band, found by the reconcile
            (root / "c.md").write_text(body)
        else:
            kb.write(f"{name}.md", body)
    kb.reconcile()
    want_back, want_broken = expected(root)
    got_back = {
        (f, b.path, b.kind)
        for f in {p for p, _, _ in want_back} | {f"{n}.md" for n, _ in pages}
        for b in kb.backlinks(f)
    }
    assert got_back == want_back
    assert broken(kb) == want_broken


TOKENS = [
    "[[a]]",
    "[x](b.md)",
    "`",
    "``",
    "```",
    "~~~",
    " ```py",
    "    ```",
    "\n",
    "text ",
    "]",
    "(",
    "[",
    "~",
    "`~",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=40).map("".join))
def test_fast_link_lines_equal_the_plain_rule(body: str) -> None:
    """The fast line finder (``_link_lines``) keeps exactly the lines the plain rule
    (``prose_lines``: outside fences, code spans blanked) has with a link opener."""
    from kiwifs.index.linkparse import _link_lines, prose_lines

    plain = [p for _, _, p in prose_lines(body) if "[[" in p or "](" in p]
    assert _link_lines(body) == plain
