"""The link rows' compact encoding (index/schema.py ``KIND_CODES``): the target as written, the
kind and the heading read back as parsed, and a shared key hash never mixing two pages."""

from __future__ import annotations

import itertools
from pathlib import Path

from kiwifs import Knowledge
from kiwifs.index.linkparse import parse_links
from kiwifs.index.schema import key_hash


def test_outbound_reads_back_what_was_parsed(tmp_path: Path) -> None:
    kb = Knowledge.open(tmp_path)
    kb.write("Auth.md", "# A\n")
    kb.write("d/x.md", "x\n")
    text = (
        "---\ncontradicts: [[Auth]]\nsuperseded_by: d/x.md\n---\n"
        "[[Auth]] [[auth]] [[d/x.md]] [[d/./x#H]] [[../up]] [[MiSsInG]] [[É/é]]\n"
        "[m](d/x.md#s) [n](./d/X.md) [o](/d/x.md) [p](../out.md)\n"
    )
    kb.write("s.md", text)
    links = parse_links("s.md", text, {"contradicts": [["Auth"]], "superseded_by": "d/x.md"})
    got = [(o.kind, o.target, o.heading) for o in kb.outbound_links("s.md")]
    assert got == [(link.kind, link.target, link.heading) for link in links]
    resolved = {o.target: o.path for o in kb.outbound_links("s.md")}
    assert resolved["Auth"] == "Auth.md" and resolved["auth"] == "Auth.md"
    assert resolved["./d/X.md"] == "d/x.md" and resolved["MiSsInG"] is None
    assert {(b.source, b.target) for b in kb.broken_links()} == {
        ("s.md", "../up"),
        ("s.md", "MiSsInG"),
        ("s.md", "É/é"),
        ("s.md", "../out.md"),
    }


def _colliding() -> tuple[str, str]:
    """Two page names whose keys share a hash."""
    seen: dict[int, str] = {}
    for i in itertools.count():
        name = f"p{i}.md"
        h = key_hash(name)
        if h in seen:
            return seen[h], name
        seen[h] = name
    raise AssertionError  # pragma: no cover


def test_a_shared_hash_never_mixes_pages(tmp_path: Path) -> None:
    one, two = _colliding()
    kb = Knowledge.open(tmp_path)
    kb.write(one, "1\n")
    kb.write(two, "2\n")
    kb.write("a.md", f"[[{one[:-3]}]]\n")
    kb.write("b.md", f"[[{two[:-3]}]] [[{two}]]\n")
    assert [b.path for b in kb.backlinks(one)] == ["a.md"]
    assert [(b.path, b.count) for b in kb.backlinks(two)] == [("b.md", 2)]
    kb.reindex()
    assert [b.path for b in kb.backlinks(one)] == ["a.md"]
