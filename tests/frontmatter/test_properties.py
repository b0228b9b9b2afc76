"""Property tests of the pure report rules (:func:`file_facts`, :func:`build_report`)."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiwifs.frontmatter.reader import read_frontmatter
from kiwifs.memory.rules import FileFacts, MemoryReport, build_report, file_facts

PREFIX = "episodes/"
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

DIRS = ["episodes/", "episodes/2026/", "Episodes/", "inbox/", "concepts/", ""]
IDS = ["e1", "e2", " e1 ", "E1", "  ", "", "42", "2026-01-01"]
ID_VALUES = st.one_of(st.sampled_from(IDS), st.integers(-3, 50), st.booleans(), st.none())
KINDS = st.one_of(
    st.sampled_from(["episodic", "EPISODIC", " Semantic ", "semantic", "consolidation", "working"]),
    st.sampled_from(["", "other"]),
    st.integers(0, 3),
    st.lists(st.sampled_from(["semantic", "episodic"]), max_size=1),
)
TYPES = st.one_of(
    st.sampled_from(["episode", "Episode", "run", "SESSION", "trace", "job", "note", "", " "]),
    st.none(),
    st.integers(0, 2),
)
CITED_PATHS = st.sampled_from(
    [
        "episodes/f0.md",
        "./episodes/f1.md",
        "/episodes/2026/f2.md",
        "episodes//f3.md",
        "episodes/x/../f4.md",
        " inbox/f5.md ",
        "Episodes/f6.md",
        "",
    ]
)
ENTRY = st.fixed_dictionaries(
    {},
    optional={"type": TYPES, "id": ID_VALUES, "path": CITED_PATHS, "note": st.just("n")},
)
ITEM = st.one_of(ENTRY, st.none(), st.sampled_from(["e1", 3]))
MERGED_FROM = st.one_of(
    st.lists(ITEM, max_size=4),
    st.none(),
    ENTRY,
    st.just("e1"),
)
FRONTMATTER = st.fixed_dictionaries(
    {},
    optional={
        "memory_kind": KINDS,
        "episode_id": ID_VALUES,
        "id": ID_VALUES,
        "merged-from": MERGED_FROM,
    },
)


@st.composite
def roots(draw: st.DrawFn) -> list[FileFacts]:
    """Facts of a whole root: unique paths, each frontmatter written out and read back."""
    count = draw(st.integers(0, 12))
    facts = []
    for i in range(count):
        path = f"{draw(st.sampled_from(DIRS))}f{i}.md"
        fm = draw(FRONTMATTER)
        text = "---\n" + yaml.safe_dump(fm, sort_keys=False) + "---\n# body\n" if fm else "# b\n"
        parsed = read_frontmatter(text.encode())
        facts.append(file_facts(path, parsed.data, parsed.problem))
    return facts


def _paths(report: MemoryReport, field: str) -> list[str]:
    return [e.path for e in getattr(report, field)]


@SETTINGS
@given(roots())
def test_unmerged_is_an_ordered_subset_of_episodic(facts: list[FileFacts]) -> None:
    r = build_report(facts, PREFIX)
    episodic, unmerged = _paths(r, "episodic_files"), _paths(r, "unmerged")
    assert set(unmerged) <= set(episodic)
    assert unmerged == [p for p in episodic if p in set(unmerged)]
    assert (r.episodic_count, r.unmerged_count) == (len(episodic), len(unmerged))
    assert r.merged_from_refs == sum(f.refs for f in facts)
    assert len(set(episodic)) == len(episodic)


@SETTINGS
@given(roots(), st.data())
def test_citing_one_unmerged_episode_removes_exactly_it(
    facts: list[FileFacts], data: st.DataObject
) -> None:
    before = build_report(facts, PREFIX)
    if not before.unmerged:
        return
    chosen = data.draw(st.sampled_from(before.unmerged))
    ident = chosen.episode_id.strip()
    entry: dict[str, Any] = (
        {"type": data.draw(st.sampled_from(["episode", "run", "Session"])), "id": ident}
        if ident
        else {"type": "note", "path": chosen.path}
    )
    page = file_facts("zz-added.md", {"memory_kind": "semantic", "merged-from": [entry]})
    after = build_report([*facts, page], PREFIX)
    removed = set(_paths(before, "unmerged")) - set(_paths(after, "unmerged"))
    same_id = {e.path for e in before.unmerged if ident and e.episode_id.strip() == ident}
    assert removed == (same_id if ident else {chosen.path})
    assert chosen.path in removed
    assert set(_paths(after, "unmerged")) <= set(_paths(before, "unmerged"))
    assert after.merged_from_refs == before.merged_from_refs + 1
    assert _paths(after, "episodic_files") == _paths(before, "episodic_files")
    if len(same_id) <= 1:
        assert removed == {chosen.path}


@SETTINGS
@given(roots(), st.integers(1, 14))
def test_pages_concatenate_to_the_full_lists(facts: list[FileFacts], limit: int) -> None:
    full = build_report(facts, PREFIX)
    pages: dict[str, list[str]] = {"episodic_files": [], "unmerged": []}
    for offset in range(0, full.episodic_count + limit, limit):
        page = build_report(facts, PREFIX, limit=limit, offset=offset)
        assert (page.episodic_count, page.unmerged_count) == (
            full.episodic_count,
            full.unmerged_count,
        )
        assert page.warnings == full.warnings
        for field in pages:
            chunk = _paths(page, field)
            assert len(chunk) <= limit
            pages[field] += chunk
    for field in pages:
        assert pages[field] == _paths(full, field)
    empty = build_report(facts, PREFIX, limit=0)
    assert (empty.episodic_files, empty.unmerged) == ((), ())
    assert empty.unmerged_count == full.unmerged_count


@SETTINGS
@given(roots(), st.randoms(use_true_random=False))
def test_coverage_does_not_depend_on_file_order(facts: list[FileFacts], rnd: Any) -> None:
    shuffled = list(facts)
    rnd.shuffle(shuffled)
    a, b = build_report(facts, PREFIX), build_report(shuffled, PREFIX)
    assert set(_paths(a, "unmerged")) == set(_paths(b, "unmerged"))
    assert set(_paths(a, "episodic_files")) == set(_paths(b, "episodic_files"))
    assert (a.episodic_count, a.merged_from_refs, a.unmerged_count) == (
        b.episodic_count,
        b.merged_from_refs,
        b.unmerged_count,
    )
    assert sorted(w for w in a.warnings if "duplicate" not in w) == sorted(
        w for w in b.warnings if "duplicate" not in w
    )
