"""The episodic-memory rules, one named case each.

Every case writes real files into a fresh root and asks :meth:`Knowledge.memory_report`, so the
scan, the frontmatter reader and the pure rules of
:mod:`kiwifs.memory.rules` are exercised together.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from kiwifs.errors import UsageError
from kiwifs.knowledge import Knowledge
from kiwifs.memory.render import render_cli, render_mcp
from kiwifs.memory.rules import (
    MemoryReport,
    build_report,
    file_facts,
    normalize_prefix,
    resolve_prefix,
)

MakeRoot = Callable[..., Path]

MISSING_ID = (
    "missing episode_id in {} \u2014 set memory_kind: episodic and episode_id, "
    "or match merged-from by path"
)
SHAPE = "memory: merged-from has unsupported shape in {}"
ESCAPE = "merged-from path escapes the root in {}"
JSON_KEYS = [
    "episodic_count",
    "merged_from_refs",
    "episodic_files",
    "unmerged",
    "warnings",
    "unmerged_count",
    "episodes_prefix",
    "superseded_count",
    "claimed_count",
]


def table(*rows: tuple[Any, ...]) -> dict[str, Any]:
    """``(name, value, …)`` rows → ``parametrize`` keyword arguments with the names as ids."""
    values = [row[1] if len(row) == 2 else row[1:] for row in rows]
    return {"argvalues": values, "ids": [row[0] for row in rows]}


def fm(*lines: str, body: str = "# page\n") -> str:
    """A markdown file whose frontmatter block holds ``lines``."""
    return "---\n" + "".join(line + "\n" for line in lines) + "---\n" + body


def cites(*entries: str, kind: str = "semantic") -> str:
    """A page whose ``merged-from`` list holds the given flow-style YAML items."""
    return fm(f"memory_kind: {kind}", "merged-from:", *[f"  - {e}" for e in entries])


def report(
    make_root: MakeRoot,
    files: Mapping[str, str | bytes],
    prefix: str | None = None,
    limit: int | None = None,
    offset: int = 0,
    config_prefix: str | None = None,
) -> MemoryReport:
    if config_prefix is not None:
        files = {
            **files,
            ".kiwi/config.toml": f"[memory]\nepisodes_path_prefix = {json.dumps(config_prefix)}\n",
        }
    root = make_root(files)
    return Knowledge.open(root).memory_report(prefix, limit, offset)


def paths(items: Sequence[Any]) -> list[str]:
    return [e.path for e in items]


# ---------------------------------------------------------------------------------------------
# the episodes prefix


@pytest.mark.parametrize(
    ("given", "expected"),
    **table(
        ("plain", "raw", "raw/"),
        ("trailing-slash", "raw/", "raw/"),
        ("dot-slash", "./raw", "raw/"),
        ("slashes-both-ends", "/raw/", "raw/"),
        ("padded", "  raw  ", "raw/"),
        ("double-slash", "team//raw", "team/raw/"),
        ("backslash", "team\\raw", "team/raw/"),
        ("dot-segment", "team/./raw/", "team/raw/"),
        ("nested", "a/b/c", "a/b/c/"),
        ("case-kept", "Episodes", "Episodes/"),
        ("empty", "", ""),
        ("blank", " ", ""),
        ("dot-slash-only", "./", ""),
        ("slash-only", "/", ""),
        ("none", None, ""),
    ),
)
def test_normalize_prefix(given: str | None, expected: str) -> None:
    assert normalize_prefix(given) == expected


@pytest.mark.parametrize(
    ("flag", "config", "expected"),
    **table(
        ("flag-wins-over-config", "raw", "notes", "raw/"),
        ("flag-normalised", "./raw", "notes", "raw/"),
        ("empty-flag-uses-config", "", "notes", "notes/"),
        ("blank-flag-uses-config", " ", "notes/", "notes/"),
        ("dot-slash-flag-uses-config", "./", "/notes/", "notes/"),
        ("slash-flag-uses-config", "/", "notes", "notes/"),
        ("no-flag-uses-config", None, "notes", "notes/"),
        ("blank-config-default", None, "  ", "episodes/"),
        ("slash-config-default", "/", "/", "episodes/"),
        ("empty-config-default", "", "", "episodes/"),
        ("no-config-default", None, None, "episodes/"),
    ),
)
def test_prefix_precedence(
    make_root: MakeRoot, flag: str | None, config: str | None, expected: str
) -> None:
    files = {"raw/r.md": "# r\n", "notes/n.md": "# n\n", "episodes/e.md": "# e\n"}
    r = report(make_root, files, prefix=flag, config_prefix=config)
    assert r.episodes_prefix == expected
    assert paths(r.episodic_files) == [p for p in sorted(files) if p.startswith(expected)]
    assert r.to_json()["episodes_prefix"] == expected


def test_resolve_prefix_takes_first_meaningful_candidate() -> None:
    assert resolve_prefix(None, "", " ", "./", "/x/", "y") == "x/"
    assert resolve_prefix() == "episodes/"


@pytest.mark.parametrize(
    ("prefix", "path", "episodic"),
    **table(
        ("default-matches", None, "episodes/a.md", True),
        ("default-nested", None, "episodes/2026/01/a.md", True),
        ("case-sensitive", None, "Episodes/a.md", False),
        ("root-anchored", None, "team/episodes/a.md", False),
        ("sibling-name-not-prefix", None, "episodes-old/a.md", False),
        ("file-named-like-prefix", None, "episodes.md", False),
        ("raw-not-rawx", "raw", "rawx/b.md", False),
        ("raw-matches", "raw", "raw/b.md", True),
        ("dot-slash-prefix-matches", "./raw", "raw/b.md", True),
        ("slashed-prefix-matches", "/raw/", "raw/b.md", True),
        ("prefix-case-sensitive", "Raw", "raw/b.md", False),
        ("nested-prefix", "team/episodes", "team/episodes/a.md", True),
        ("nested-prefix-anchored", "team/episodes", "episodes/a.md", False),
    ),
)
def test_prefix_matching(
    make_root: MakeRoot, prefix: str | None, path: str, episodic: bool
) -> None:
    r = report(make_root, {path: "# plain file, no frontmatter\n"}, prefix=prefix)
    assert paths(r.episodic_files) == ([path] if episodic else [])


# ---------------------------------------------------------------------------------------------
# classification


@pytest.mark.parametrize(
    ("kind_line", "path", "episodic"),
    **table(
        ("semantic-under-prefix", "memory_kind: semantic", "episodes/a.md", False),
        ("Semantic-capitalised", "memory_kind: Semantic", "episodes/a.md", False),
        ("SEMANTIC-padded", "memory_kind: ' SEMANTIC '", "episodes/a.md", False),
        ("consolidation", "memory_kind: consolidation", "episodes/a.md", False),
        ("Consolidation-trailing-space", "memory_kind: 'Consolidation '", "episodes/a.md", False),
        ("episodic-outside-prefix", "memory_kind: episodic", "inbox/a.md", True),
        ("EPISODIC-outside-prefix", "memory_kind: EPISODIC", "inbox/a.md", True),
        ("episodic-padded", "memory_kind: ' Episodic '", "a.md", True),
        ("working-under-prefix", "memory_kind: working", "episodes/a.md", True),
        ("working-outside-prefix", "memory_kind: working", "inbox/a.md", False),
        ("other-string-under-prefix", "memory_kind: scratch", "episodes/a.md", True),
        ("other-string-outside", "memory_kind: scratch", "inbox/a.md", False),
        ("absent-under-prefix", "title: t", "episodes/a.md", True),
        ("absent-outside", "title: t", "inbox/a.md", False),
        ("null-under-prefix", "memory_kind:", "episodes/a.md", True),
        ("empty-string-under-prefix", "memory_kind: ''", "episodes/a.md", True),
        ("list-semantic-ignored", "memory_kind: [semantic]", "episodes/a.md", True),
        ("list-episodic-ignored", "memory_kind: [episodic]", "inbox/a.md", False),
        ("number-ignored", "memory_kind: 1", "episodes/a.md", True),
        ("bool-ignored", "memory_kind: yes", "inbox/a.md", False),
        ("mapping-ignored", "memory_kind: {k: semantic}", "episodes/a.md", True),
    ),
)
def test_classification(make_root: MakeRoot, kind_line: str, path: str, episodic: bool) -> None:
    r = report(make_root, {path: fm(kind_line, "episode_id: e1")})
    assert paths(r.episodic_files) == ([path] if episodic else [])
    assert r.episodic_count == (1 if episodic else 0)


@pytest.mark.parametrize(
    ("kind_line", "shown"),
    **table(
        ("raw-string-kept", "memory_kind: EPISODIC", "EPISODIC"),
        ("padding-kept", "memory_kind: ' episodic '", " episodic "),
        ("working-shown", "memory_kind: working", "working"),
        ("absent-omitted", "title: t", None),
        ("empty-omitted", "memory_kind: ''", None),
        ("list-omitted", "memory_kind: [episodic]", None),
        ("number-omitted", "memory_kind: 3", None),
    ),
)
def test_memory_kind_output(make_root: MakeRoot, kind_line: str, shown: str | None) -> None:
    r = report(make_root, {"episodes/a.md": fm(kind_line, "episode_id: e1")})
    (record,) = r.to_json()["episodic_files"]
    assert record.get("memory_kind") == shown
    assert list(record) == ["path", "episode_id"] + (["memory_kind"] if shown else [])


# ---------------------------------------------------------------------------------------------
# episode identity


@pytest.mark.parametrize(
    ("lines", "episode_id"),
    **table(
        ("episode-id", ["episode_id: run-1"], "run-1"),
        ("episode-id-raw-padding-kept", ["episode_id: ' x1 '"], " x1 "),
        ("blank-episode-id-kept", ["episode_id: '  '"], "  "),
        ("blank-episode-id-falls-back", ["episode_id: '  '", "id: ' y '"], "y"),
        ("empty-episode-id-falls-back", ["episode_id: ''", "id: z"], "z"),
        ("id-fallback-trimmed", ["id: ' z '"], "z"),
        ("episode-id-beats-id", ["episode_id: a", "id: b"], "a"),
        ("number-is-str", ["episode_id: 42"], "42"),
        ("float-is-str", ["episode_id: 4.5"], "4.5"),
        ("yaml11-octal-is-str-of-value", ["episode_id: 012"], "10"),
        ("number-id-fallback", ["id: 7"], "7"),
        ("bool-true-not-id", ["episode_id: true"], ""),
        ("bool-yes-not-id", ["episode_id: yes"], ""),
        ("bool-falls-back-to-id", ["episode_id: no", "id: fb"], "fb"),
        ("bool-id-fallback-not-id", ["id: on"], ""),
        ("null-not-id", ["episode_id:"], ""),
        ("list-not-id", ["episode_id: [a]"], ""),
        ("mapping-not-id", ["episode_id: {a: b}"], ""),
        ("date-stays-string", ["episode_id: 2026-01-01"], "2026-01-01"),
        ("datetime-stays-string", ["episode_id: 2026-01-01T10:00:00Z"], "2026-01-01T10:00:00Z"),
        ("quoted-number-string", ["episode_id: '007'"], "007"),
        ("absent", ["title: t"], ""),
    ),
)
def test_episode_identity(make_root: MakeRoot, lines: list[str], episode_id: str) -> None:
    r = report(make_root, {"episodes/a.md": fm(*lines)})
    (record,) = r.episodic_files
    assert record.episode_id == episode_id
    assert r.to_json()["episodic_files"][0].get("episode_id") == (episode_id or None)
    warned = MISSING_ID.format("episodes/a.md") in r.warnings
    assert warned == (episode_id == "")


@pytest.mark.parametrize(
    ("episode", "page", "warned"),
    **table(
        ("no-id-unmerged-warns", fm("title: t"), None, True),
        (
            "no-id-covered-by-path-silent",
            fm("title: t"),
            cites("{type: note, path: episodes/a.md}"),
            False,
        ),
        ("blank-id-silent", fm("episode_id: '  '"), None, False),
        ("bool-id-unmerged-warns", fm("episode_id: yes"), None, True),
        ("id-present-silent", fm("episode_id: e1"), None, False),
        ("no-frontmatter-warns", "# just a body\n", None, True),
    ),
)
def test_missing_id_warning_only_for_unmerged(
    make_root: MakeRoot, episode: str, page: str | None, warned: bool
) -> None:
    files = {"episodes/a.md": episode}
    if page is not None:
        files["concepts/p.md"] = page
    r = report(make_root, files)
    assert (MISSING_ID.format("episodes/a.md") in r.warnings) is warned


def test_missing_id_warning_text_is_exact() -> None:
    r = build_report([file_facts("episodes/a.md", {})], "episodes/")
    assert r.warnings == (
        "missing episode_id in episodes/a.md \u2014 set memory_kind: episodic and episode_id, "
        "or match merged-from by path",
    )


# ---------------------------------------------------------------------------------------------
# harvesting merged-from


@pytest.mark.parametrize(
    ("merged_from_lines", "refs", "covered", "shape_warning"),
    **table(
        ("list-of-mappings", ["merged-from:", "  - {type: episode, id: e1}"], 1, True, False),
        (
            "two-mappings-both-count",
            ["merged-from:", "  - {type: episode, id: e1}", "  - {type: episode, id: e1}"],
            2,
            True,
            False,
        ),
        ("null-item-counts", ["merged-from:", "  - ~", "  - {type: run, id: e1}"], 2, True, False),
        ("only-null-item", ["merged-from:", "  -"], 1, False, False),
        ("null-in-flow-list", ["merged-from: [null]"], 1, False, False),
        (
            "scalar-item-dropped",
            ["merged-from:", "  - e1", "  - {type: episode, id: e1}"],
            1,
            True,
            False,
        ),
        ("only-scalar-items", ["merged-from: [e1, e2, 3, true]"], 0, False, False),
        ("list-item-dropped", ["merged-from:", "  - [episode, e1]"], 0, False, False),
        ("empty-list", ["merged-from: []"], 0, False, False),
        ("absent", ["title: t"], 0, False, False),
        ("null-value", ["merged-from:"], 0, False, False),
        ("explicit-null", ["merged-from: null"], 0, False, False),
        ("single-mapping-is-one-entry", ["merged-from: {type: episode, id: e1}"], 1, True, False),
        ("block-single-mapping", ["merged-from:", "  type: episode", "  id: e1"], 1, True, False),
        ("single-mapping-by-path", ["merged-from:", "  path: ./episodes/a.md"], 1, False, False),
        (
            "single-mapping-by-path-with-type",
            ["merged-from:", "  type: note", "  path: ./episodes/a.md"],
            1,
            True,
            False,
        ),
        ("single-empty-mapping", ["merged-from: {}"], 1, False, False),
        ("scalar", ["merged-from: e1"], 0, False, True),
        ("number", ["merged-from: 3"], 0, False, True),
        ("boolean", ["merged-from: yes"], 0, False, True),
        ("underscore-key-ignored", ["merged_from: [{type: episode, id: e1}]"], 0, False, False),
        ("derived-from-ignored", ["derived-from: [{type: episode, id: e1}]"], 0, False, False),
        ("flow-list", ["merged-from: [{type: episode, id: e1}]"], 1, True, False),
        ("entry-without-type-counts", ["merged-from: [{id: e1}]"], 1, False, False),
        ("empty-mapping-counts", ["merged-from: [{}]"], 1, False, False),
    ),
)
def test_merged_from_harvesting(
    make_root: MakeRoot, merged_from_lines: list[str], refs: int, covered: bool, shape_warning: bool
) -> None:
    files = {
        "episodes/a.md": fm("memory_kind: episodic", "episode_id: e1"),
        "concepts/x.md": fm("memory_kind: semantic", *merged_from_lines),
    }
    r = report(make_root, files)
    assert r.merged_from_refs == refs
    assert paths(r.unmerged) == ([] if covered else ["episodes/a.md"])
    assert r.warnings == ((SHAPE.format("concepts/x.md"),) if shape_warning else ())


def test_merged_from_is_harvested_from_every_file(make_root: MakeRoot) -> None:
    """Episodic and plain pages cite too; each entry counts once however many episodes match."""
    files = {
        "episodes/a.md": fm("episode_id: e1", "merged-from: [{type: episode, id: e2}]"),
        "episodes/b.md": fm("episode_id: e2"),
        "notes/plain.md": fm("merged-from: [{type: episode, id: e1}]"),
    }
    r = report(make_root, files)
    assert r.merged_from_refs == 2
    assert r.unmerged == ()


# ---------------------------------------------------------------------------------------------
# coverage

EPISODE_E1 = ["memory_kind: episodic", "episode_id: e1"]
NO_ID = ["memory_kind: episodic"]


@pytest.mark.parametrize(
    ("episode_lines", "entry", "covered", "escapes"),
    **table(
        ("episode-id", EPISODE_E1, "{type: episode, id: e1}", True, False),
        ("compat-run", EPISODE_E1, "{type: run, id: e1}", True, False),
        ("compat-session", EPISODE_E1, "{type: session, id: e1}", True, False),
        ("compat-trace", EPISODE_E1, "{type: trace, id: e1}", True, False),
        ("compat-event", EPISODE_E1, "{type: event, id: e1}", True, False),
        ("compat-ingest", EPISODE_E1, "{type: ingest, id: e1}", True, False),
        ("type-RUN-upper", EPISODE_E1, "{type: RUN, id: e1}", True, False),
        ("type-Episode-padded", EPISODE_E1, "{type: ' Episode ', id: e1}", True, False),
        ("type-job-not-by-id", EPISODE_E1, "{type: job, id: e1}", False, False),
        ("type-note-not-by-id", EPISODE_E1, "{type: note, id: e1}", False, False),
        ("no-type-id", EPISODE_E1, "{id: e1}", False, False),
        ("empty-type", EPISODE_E1, "{type: '', id: e1}", False, False),
        ("blank-type", EPISODE_E1, "{type: '  ', id: e1}", False, False),
        ("number-type", EPISODE_E1, "{type: 5, id: e1}", False, False),
        ("citation-id-padded", EPISODE_E1, "{type: episode, id: ' e1 '}", True, False),
        ("id-case-sensitive", EPISODE_E1, "{type: episode, id: E1}", False, False),
        ("blank-citation-id", EPISODE_E1, "{type: episode, id: '  '}", False, False),
        ("list-citation-id", EPISODE_E1, "{type: episode, id: [e1]}", False, False),
        ("path-type-note", NO_ID, "{type: note, path: episodes/a.md}", True, False),
        ("path-type-job", NO_ID, "{type: job, path: episodes/a.md}", True, False),
        ("path-type-episode", NO_ID, "{type: episode, path: episodes/a.md}", True, False),
        ("path-without-type", NO_ID, "{path: episodes/a.md}", False, False),
        ("path-dot-slash", NO_ID, "{type: episode, path: ./episodes/a.md}", True, False),
        ("path-leading-slash", NO_ID, "{type: episode, path: /episodes/a.md}", True, False),
        ("path-double-slash", NO_ID, "{type: episode, path: episodes//a.md}", True, False),
        ("path-dot-segment", NO_ID, "{type: episode, path: episodes/./a.md}", True, False),
        ("path-trailing-slash", NO_ID, "{type: episode, path: episodes/a.md/}", True, False),
        ("path-backslash", NO_ID, "{type: episode, path: 'episodes\\a.md'}", True, False),
        ("path-padded", NO_ID, "{type: episode, path: ' episodes/a.md '}", True, False),
        ("path-dotdot", NO_ID, "{type: episode, path: episodes/x/../a.md}", False, True),
        ("path-leading-dotdot", NO_ID, "{type: episode, path: ../episodes/a.md}", False, True),
        (
            "path-dotdot-id-still-covers",
            EPISODE_E1,
            "{type: run, id: e1, path: ../a.md}",
            True,
            True,
        ),
        ("path-case-sensitive", NO_ID, "{type: episode, path: Episodes/a.md}", False, False),
        ("path-without-suffix", NO_ID, "{type: episode, path: episodes/a}", False, False),
        ("path-blank", NO_ID, "{type: episode, path: '  '}", False, False),
        (
            "path-covers-despite-other-id",
            NO_ID,
            "{type: x, id: nope, path: episodes/a.md}",
            True,
            False,
        ),
        (
            "id-path-namespace-separate",
            NO_ID,
            "{type: episode, id: 'path:episodes/a.md'}",
            False,
            False,
        ),
        ("number-both", ["episode_id: 42"], "{type: episode, id: 42}", True, False),
        (
            "number-citation-string-episode",
            ["episode_id: '42'"],
            "{type: run, id: 42}",
            True,
            False,
        ),
        (
            "string-citation-number-episode",
            ["episode_id: 42"],
            "{type: episode, id: '42'}",
            True,
            False,
        ),
        ("float-both", ["episode_id: 4.5"], "{type: trace, id: 4.5}", True, False),
        ("bool-citation-not-id", ["episode_id: 'true'"], "{type: episode, id: true}", False, False),
        ("yes-citation-not-id", ["episode_id: 'yes'"], "{type: episode, id: yes}", False, False),
        (
            "date-like-both",
            ["episode_id: 2026-01-01"],
            "{type: episode, id: 2026-01-01}",
            True,
            False,
        ),
        (
            "date-like-quoted",
            ["episode_id: 2026-01-01"],
            "{type: event, id: '2026-01-01'}",
            True,
            False,
        ),
        ("id-fallback", ["id: x1"], "{type: session, id: x1}", True, False),
        ("id-fallback-padded", ["id: ' x1 '"], "{type: Session, id: x1}", True, False),
        ("episode-id-padded", ["episode_id: ' x1 '"], "{type: episode, id: x1}", True, False),
    ),
)
def test_coverage(
    make_root: MakeRoot, episode_lines: list[str], entry: str, covered: bool, escapes: bool
) -> None:
    files = {"episodes/a.md": fm(*episode_lines), "concepts/p.md": cites(entry)}
    r = report(make_root, files)
    assert r.merged_from_refs == 1
    assert r.episodic_count == 1
    assert paths(r.unmerged) == ([] if covered else ["episodes/a.md"])
    assert r.unmerged_count == (0 if covered else 1)
    assert (ESCAPE.format("concepts/p.md") in r.warnings) is escapes


@pytest.mark.parametrize(
    "page_path",
    **table(("page-before-episode", "a-first.md"), ("page-after-episode", "zz/last.md")),
)
def test_coverage_is_order_independent(make_root: MakeRoot, page_path: str) -> None:
    files = {"episodes/e.md": fm("episode_id: e1"), page_path: cites("{type: episode, id: e1}")}
    assert report(make_root, files).unmerged == ()


def test_self_citation_covers(make_root: MakeRoot) -> None:
    files = {"episodes/a.md": fm("episode_id: e1", "merged-from: [{type: episode, id: e1}]")}
    r = report(make_root, files)
    assert (r.episodic_count, r.merged_from_refs, r.unmerged) == (1, 1, ())


def test_duplicate_ids_one_citation_covers_both(make_root: MakeRoot) -> None:
    files = {
        "episodes/a.md": fm("episode_id: dup"),
        "episodes/b.md": fm("episode_id: ' dup '"),
        "concepts/p.md": cites("{type: episode, id: dup}"),
    }
    r = report(make_root, files)
    assert paths(r.episodic_files) == ["episodes/a.md", "episodes/b.md"]
    assert r.unmerged == ()
    assert r.warnings == ("duplicate episode_id 'dup' in episodes/b.md (also in episodes/a.md)",)


def test_duplicate_ids_unmerged_both_listed_and_warned_once_per_later_file(
    make_root: MakeRoot,
) -> None:
    files = {f"episodes/{n}.md": fm("episode_id: dup") for n in "abc"}
    r = report(make_root, files)
    assert paths(r.unmerged) == ["episodes/a.md", "episodes/b.md", "episodes/c.md"]
    assert r.warnings == (
        "duplicate episode_id 'dup' in episodes/b.md (also in episodes/a.md)",
        "duplicate episode_id 'dup' in episodes/c.md (also in episodes/a.md)",
    )


def test_non_episodic_file_with_same_id_is_not_a_duplicate(make_root: MakeRoot) -> None:
    files = {
        "episodes/a.md": fm("episode_id: e1"),
        "concepts/a.md": fm("memory_kind: semantic", "episode_id: e1"),
    }
    assert report(make_root, files).warnings == ()


# ---------------------------------------------------------------------------------------------
# which files are scanned, and in what order


@pytest.mark.parametrize(
    "path",
    **table(
        ("hidden-file", "episodes/.a.md"),
        ("hidden-root-dir", ".hidden/episodes/a.md"),
        ("hidden-sub-dir", "episodes/.sub/b.md"),
        ("kiwi-dir", ".kiwi/episodes/a.md"),
        ("upper-case-suffix", "episodes/X.MD"),
        ("mixed-case-suffix", "episodes/x.Md"),
        ("not-markdown", "episodes/a.txt"),
        ("markdown-like", "episodes/a.markdown"),
        ("md-then-other-suffix", "episodes/a.md.bak"),
    ),
)
def test_ignored_files(make_root: MakeRoot, path: str) -> None:
    page = fm("memory_kind: episodic", "episode_id: e1", "merged-from: [{type: run, id: z}]")
    r = report(make_root, {path: page, "concepts/keep.md": fm("memory_kind: semantic")})
    assert (r.episodic_count, r.merged_from_refs, r.warnings) == (0, 0, ())


def test_walk_order_is_depth_first_by_name_bytes(make_root: MakeRoot) -> None:
    ordered = [
        "episodes/A/z.md",
        "episodes/a/y.md",
        "episodes/a-b.md",
        "episodes/a.md",
        "episodes/b.md",
        "episodes/z/\u00e9.md",
        "episodes/\u00e9.md",
    ]
    files = {p: "# no frontmatter\n" for p in reversed(ordered)}
    r = report(make_root, files)
    assert paths(r.episodic_files) == ordered
    assert paths(r.unmerged) == ordered
    assert r.warnings == tuple(MISSING_ID.format(p) for p in ordered)


def test_reference_walk_order_example(make_root: MakeRoot) -> None:
    ordered = ["episodes/A/z.md", "episodes/a/y.md", "episodes/a.md", "episodes/b.md"]
    r = report(make_root, {p: fm(f"episode_id: {i}") for i, p in enumerate(ordered)})
    assert paths(r.episodic_files) == ordered


def test_symlinked_md_inside_root_is_read_under_its_own_path(make_root: MakeRoot) -> None:
    root = make_root({"notes/real.md": fm("memory_kind: episodic", "episode_id: r1")})
    (root / "episodes").mkdir()
    os.symlink("../notes/real.md", root / "episodes" / "link.md")
    r = Knowledge.open(root).memory_report()
    assert paths(r.episodic_files) == ["episodes/link.md", "notes/real.md"]
    assert r.warnings == ("duplicate episode_id 'r1' in notes/real.md (also in episodes/link.md)",)


def test_symlinked_folder_is_not_descended(make_root: MakeRoot) -> None:
    root = make_root({"elsewhere/a.md": "# body only\n", "episodes/own.md": "# own\n"})
    os.symlink("../elsewhere", root / "episodes" / "linked")
    r = Knowledge.open(root).memory_report()
    assert paths(r.episodic_files) == ["episodes/own.md"]


# ---------------------------------------------------------------------------------------------
# never abort: bad input is read as empty, with a warning naming the file

BIG = "x: " + "a" * (1024 * 1024) + "\n"


@pytest.mark.parametrize(
    ("content", "reason"),
    **table(
        ("unterminated", "---\nmemory_kind: semantic\nepisode_id: e1\n", "not terminated"),
        ("unterminated-no-newline", "---", "not terminated"),
        ("invalid-yaml", "---\nmemory_kind: [semantic\n---\n", "invalid YAML"),
        ("invalid-yaml-tabs", "---\nmemory_kind: semantic\n\tbad: indent\n---\n", "invalid YAML"),
        ("duplicate-anchor-alias", "---\na: *nope\n---\n", "invalid YAML"),
        ("not-utf8", b"---\nmemory_kind: \xff\xfe semantic\n---\n", "invalid YAML"),
        ("list", "---\n- memory_kind\n- semantic\n---\n", "not a mapping"),
        ("scalar", "---\nmemory_kind semantic\n---\n", "not a mapping"),
        ("number", "---\n42\n---\n", "not a mapping"),
        ("over-1-mib", "---\nmemory_kind: semantic\n" + BIG + "---\n", "over 1048576 bytes"),
    ),
)
def test_bad_frontmatter_reads_as_empty_with_warning(
    make_root: MakeRoot, content: str | bytes, reason: str
) -> None:
    # Read properly, the file would be semantic; read as empty it is episodic by its path.
    r = report(make_root, {"episodes/bad.md": content})
    assert paths(r.episodic_files) == ["episodes/bad.md"]
    first, missing = r.warnings
    assert first.startswith("invalid frontmatter in episodes/bad.md: ")
    assert reason in first
    assert "\n" not in first
    assert missing == MISSING_ID.format("episodes/bad.md")


def test_frontmatter_just_under_1_mib_is_read(make_root: MakeRoot) -> None:
    filler = "x: " + "a" * (1024 * 1024 - 200) + "\n"
    r = report(make_root, {"episodes/ok.md": "---\nmemory_kind: semantic\n" + filler + "---\n"})
    assert (r.episodic_count, r.warnings) == (0, ())


@pytest.mark.parametrize(
    ("path", "content"),
    **table(
        ("unterminated-episodic-outside-prefix", "inbox/u.md", "---\nmemory_kind: episodic\n"),
        (
            "invalid-episodic-outside-prefix",
            "inbox/u.md",
            "---\nmemory_kind: episodic\n: : :\n---\n",
        ),
    ),
)
def test_bad_frontmatter_loses_its_memory_kind(
    make_root: MakeRoot, path: str, content: str
) -> None:
    r = report(make_root, {path: content})
    assert r.episodic_count == 0
    assert len(r.warnings) == 1 and r.warnings[0].startswith(f"invalid frontmatter in {path}: ")


def test_citations_in_broken_frontmatter_do_not_count(make_root: MakeRoot) -> None:
    files = {
        "episodes/a.md": fm("episode_id: e1"),
        "concepts/p.md": "---\nmerged-from: [{type: episode, id: e1}\n---\n",
    }
    r = report(make_root, files)
    assert (r.merged_from_refs, paths(r.unmerged)) == (0, ["episodes/a.md"])


def test_broken_symlink_is_skipped_with_warning(make_root: MakeRoot) -> None:
    root = make_root({"episodes/a.md": fm("episode_id: e1")})
    os.symlink("missing.md", root / "episodes" / "broken.md")
    r = Knowledge.open(root).memory_report()
    assert paths(r.episodic_files) == ["episodes/a.md"]
    assert len(r.warnings) == 1
    assert r.warnings[0].startswith("cannot read episodes/broken.md")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
@pytest.mark.parametrize("use_index", [False, True], ids=["scan", "index"])
def test_fifo_named_md_is_skipped_not_waited_on(make_root: MakeRoot, use_index: bool) -> None:
    """Opening a FIFO for reading blocks until a writer comes: it must be refused, not read."""
    root = make_root({"episodes/a.md": fm("episode_id: e1")})
    os.mkfifo(root / "episodes" / "pipe.md")
    with Knowledge.open(root) as kb:
        if use_index:
            kb.reindex()
        r = kb.memory_report()
    assert paths(r.episodic_files) == ["episodes/a.md"]
    assert r.warnings == ("cannot read episodes/pipe.md: not a regular file",)


def test_symlink_out_of_root_is_skipped_with_warning(make_root: MakeRoot, tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text(
        fm("memory_kind: episodic", "episode_id: secret", "merged-from: [{type: run, id: e1}]")
    )
    root = make_root({"episodes/a.md": fm("episode_id: e1")})
    os.symlink(outside, root / "episodes" / "out.md")
    r = Knowledge.open(root).memory_report()
    assert paths(r.episodic_files) == ["episodes/a.md"]
    assert paths(r.unmerged) == ["episodes/a.md"]
    assert r.merged_from_refs == 0
    assert len(r.warnings) == 1
    assert r.warnings[0].startswith("cannot read episodes/out.md")
    assert "outside" in r.warnings[0]


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads files whatever their mode"
)
def test_unreadable_file_is_skipped_with_warning(make_root: MakeRoot) -> None:
    root = make_root({"episodes/a.md": fm("episode_id: e1"), "episodes/b.md": fm("episode_id: e2")})
    (root / "episodes" / "b.md").chmod(0)
    try:
        r = Knowledge.open(root).memory_report()
    finally:
        (root / "episodes" / "b.md").chmod(0o644)
    assert paths(r.episodic_files) == ["episodes/a.md"]
    assert len(r.warnings) == 1
    assert r.warnings[0].startswith("cannot read episodes/b.md")


# ---------------------------------------------------------------------------------------------
# warning order (per file, walk order)


def test_warning_order(make_root: MakeRoot) -> None:
    files = {
        "episodes/a.md": "---\nepisode_id: [broken\n---\n",
        "episodes/b.md": fm("episode_id: dup", "merged-from: [{type: note, path: ../x.md}]"),
        "episodes/c.md": fm("episode_id: dup", "merged-from: [{type: note, path: ../y.md}]"),
        "episodes/d.md": fm("merged-from: oops"),
        "episodes/e.md": fm("merged-from: [{type: note, path: a/../../z.md}]"),
        "notes/n.md": fm("merged-from: 42"),
    }
    r = report(make_root, files)
    assert r.warnings[0].startswith("invalid frontmatter in episodes/a.md: invalid YAML")
    assert r.warnings[1:] == (
        MISSING_ID.format("episodes/a.md"),
        ESCAPE.format("episodes/b.md"),
        ESCAPE.format("episodes/c.md"),
        "duplicate episode_id 'dup' in episodes/c.md (also in episodes/b.md)",
        SHAPE.format("episodes/d.md"),
        MISSING_ID.format("episodes/d.md"),
        ESCAPE.format("episodes/e.md"),
        MISSING_ID.format("episodes/e.md"),
        SHAPE.format("notes/n.md"),
    )


# ---------------------------------------------------------------------------------------------
# paging

PAGING_FILES = {
    **{f"episodes/e{i}.md": fm(f"episode_id: e{i}") for i in range(5)},
    "concepts/p.md": cites("{type: episode, id: e1}", "{type: episode, id: e3}"),
}
ALL = [f"episodes/e{i}.md" for i in range(5)]
OPEN = ["episodes/e0.md", "episodes/e2.md", "episodes/e4.md"]


@pytest.mark.parametrize(
    ("limit", "offset", "episodic", "unmerged"),
    **table(
        ("everything", None, 0, ALL, OPEN),
        ("first-page", 2, 0, ALL[:2], OPEN[:2]),
        ("second-page", 2, 2, ALL[2:4], OPEN[2:]),
        ("last-page", 2, 4, ALL[4:], []),
        ("limit-zero", 0, 0, [], []),
        ("limit-zero-offset", 0, 3, [], []),
        ("offset-only", None, 3, ALL[3:], []),
        ("offset-one", None, 1, ALL[1:], OPEN[1:]),
        ("past-the-end", 10, 10, [], []),
        ("limit-larger-than-list", 100, 0, ALL, OPEN),
    ),
)
def test_paging(
    make_root: MakeRoot,
    limit: int | None,
    offset: int,
    episodic: list[str],
    unmerged: list[str],
) -> None:
    r = report(make_root, PAGING_FILES, limit=limit, offset=offset)
    assert paths(r.episodic_files) == episodic
    assert paths(r.unmerged) == unmerged
    assert (r.episodic_count, r.unmerged_count, r.merged_from_refs) == (5, 3, 2)
    data = r.to_json()
    assert (data["episodic_count"], data["unmerged_count"]) == (5, 3)


@pytest.mark.parametrize(
    ("limit", "offset"),
    **table(("negative-limit", -1, 0), ("negative-offset", None, -1), ("both", -5, -5)),
)
def test_negative_paging_is_a_usage_error(
    make_root: MakeRoot, limit: int | None, offset: int
) -> None:
    kb = Knowledge.open(make_root(PAGING_FILES))
    with pytest.raises(UsageError):
        kb.memory_report(None, limit, offset)
    with pytest.raises(UsageError):
        build_report([], "episodes/", limit, offset)


def test_paging_keeps_all_warnings(make_root: MakeRoot) -> None:
    files = {f"episodes/n{i}.md": "# no id\n" for i in range(4)}
    r = report(make_root, files, limit=1, offset=0)
    assert len(r.warnings) == 4


# ---------------------------------------------------------------------------------------------
# report JSON


def test_json_of_empty_root(make_root: MakeRoot) -> None:
    data = report(make_root, {}).to_json()
    assert data == {
        "episodic_count": 0,
        "merged_from_refs": 0,
        "episodic_files": [],
        "unmerged": [],
        "warnings": [],
        "unmerged_count": 0,
        "episodes_prefix": "episodes/",
        "superseded_count": 0,
        "claimed_count": 0,
    }
    assert list(data) == JSON_KEYS


def test_json_shape_and_order(make_root: MakeRoot) -> None:
    files = {
        "episodes/a.md": fm("memory_kind: EPISODIC", "episode_id: e1"),
        "episodes/b.md": "# no frontmatter\n",
        "inbox/c.md": fm("memory_kind: episodic", "id: c1"),
        "concepts/p.md": cites("{type: run, id: c1}"),
    }
    data = json.loads(json.dumps(report(make_root, files).to_json()))
    assert list(data) == JSON_KEYS
    assert data["episodic_files"] == [
        {"path": "episodes/a.md", "episode_id": "e1", "memory_kind": "EPISODIC"},
        {"path": "episodes/b.md"},
        {"path": "inbox/c.md", "episode_id": "c1", "memory_kind": "episodic"},
    ]
    assert data["unmerged"] == data["episodic_files"][:2]
    assert [list(e) for e in data["episodic_files"]] == [
        ["path", "episode_id", "memory_kind"],
        ["path"],
        ["path", "episode_id", "memory_kind"],
    ]
    assert (data["episodic_count"], data["merged_from_refs"], data["unmerged_count"]) == (3, 1, 2)
    assert data["warnings"] == [MISSING_ID.format("episodes/b.md")]


# ---------------------------------------------------------------------------------------------
# text renderings


def test_render_cli_with_unmerged(make_root: MakeRoot) -> None:
    r = report(make_root, {"episodes/a.md": fm("episode_id: e1"), "episodes/b.md": "# b\n"})
    assert render_cli(r) == (
        "episodic files:" + " " * 10 + "2\n"
        "merged-from references:" + " " * 2 + "0\n"
        "unmerged (no merged-from): 2\n"
        "  - episodes/a.md  (episode_id=e1)\n"
        "  - episodes/b.md  (set episode_id)\n"
    )


@pytest.mark.parametrize(
    "files",
    **table(
        ("empty-root", {}),
        (
            "all-covered",
            {"episodes/a.md": fm("episode_id: e1"), "p.md": cites("{type: run, id: e1}")},
        ),
    ),
)
def test_render_cli_all_merged(make_root: MakeRoot, files: dict[str, str]) -> None:
    r = report(make_root, files)
    n, refs = r.episodic_count, r.merged_from_refs
    assert render_cli(r) == (
        f"episodic files:          {n}\n"
        f"merged-from references:  {refs}\n"
        "unmerged (no merged-from): 0\n"
        "all episodic files are referenced by at least one merged-from list\n"
    )


def test_render_mcp_with_unmerged_and_warnings(make_root: MakeRoot) -> None:
    r = report(make_root, {"episodes/a.md": fm("episode_id: e1"), "episodes/b.md": "# b\n"})
    assert render_mcp(r) == (
        "Episodic files:" + " " * 11 + "2\n"
        "merged-from references:" + " " * 3 + "0\n"
        "Unmerged (no merged-from): 2\n"
        "  - episodes/a.md  episode_id=e1\n"
        "  - episodes/b.md\n"
        "warning: " + MISSING_ID.format("episodes/b.md") + "\n"
    )


def test_render_mcp_all_merged_line_comes_after_warnings(make_root: MakeRoot) -> None:
    files = {
        "episodes/a.md": fm("episode_id: e1"),
        "p.md": cites("{type: run, id: e1}"),
        "q.md": fm("merged-from: scalar"),
    }
    assert render_mcp(report(make_root, files)) == (
        "Episodic files:           1\n"
        "merged-from references:   1\n"
        "Unmerged (no merged-from): 0\n"
        "warning: " + SHAPE.format("q.md") + "\n"
        "All episodic files are referenced by at least one merged-from list.\n"
    )


def test_render_cli_pages_the_list_but_counts_totals(make_root: MakeRoot) -> None:
    r = report(make_root, PAGING_FILES, limit=1, offset=1)
    assert render_cli(r).splitlines()[2:] == [
        "unmerged (no merged-from): 3",
        "  - episodes/e2.md  (episode_id=e2)",
    ]


# ---------------------------------------------------------------------------------------------
# KiwiFS's own test inventory, and extra cases


def test_inventory_scan_unmerged(make_root: MakeRoot) -> None:
    files = {
        "episodes/a.md": fm("memory_kind: episodic", "episode_id: run-1"),
        "concepts/x.md": fm(
            "memory_kind: semantic",
            "title: x",
            "merged-from:",
            "  - type: episode",
            "    id: run-1",
        ),
    }
    r = report(make_root, files, prefix="episodes/")
    assert r.episodic_count == 1
    assert r.unmerged == ()


def test_inventory_scan_path_only_merge(make_root: MakeRoot) -> None:
    files = {
        "episodes/b.md": fm("memory_kind: episodic"),
        "c.md": fm(
            "memory_kind: semantic", "merged-from:", "  - type: episode", "    path: episodes/b.md"
        ),
    }
    assert report(make_root, files).unmerged == ()


def test_inventory_report_endpoint_sequence(make_root: MakeRoot) -> None:
    root = make_root({"episodes/e.md": fm("memory_kind: episodic", "episode_id: ep-api-1")})
    kb = Knowledge.open(root)
    first = kb.memory_report().to_json()
    assert first["episodic_count"] == 1
    assert [e["episode_id"] for e in first["unmerged"]] == ["ep-api-1"]
    page = fm("memory_kind: semantic", "merged-from:", "  - type: episode", "    id: ep-api-1")
    (root / "concepts").mkdir()
    (root / "concepts" / "c.md").write_text(page)
    assert kb.memory_report().to_json()["unmerged"] == []


def test_inventory_prefix_query_without_memory_kind(make_root: MakeRoot) -> None:
    """The stronger form of TestMemoryReportEpisodesPrefixQuery: only the prefix classifies."""
    files = {"raw/z.md": fm("episode_id: z1"), "episodes/e.md": fm("episode_id: e1")}
    r = report(make_root, files, prefix="raw/")
    assert r.episodic_count == 1
    assert paths(r.episodic_files) == ["raw/z.md"]


def test_inventory_mcp_text_sequence(make_root: MakeRoot) -> None:
    root = make_root(
        {
            "index.md": "# Index\n",
            "concepts/auth.md": fm("title: Auth"),
            "SCHEMA.md": "# Schema\n",
            "episodes/run.md": fm("memory_kind: episodic", "episode_id: mcp-ep-1"),
        }
    )
    kb = Knowledge.open(root)
    assert "Unmerged (no merged-from): 1" in render_mcp(kb.memory_report())
    (root / "concepts" / "sum.md").write_text(cites("{type: episode, id: mcp-ep-1}"))
    assert "Unmerged (no merged-from): 0" in render_mcp(kb.memory_report())


@pytest.mark.parametrize(
    ("files", "refs", "unmerged"),
    **table(
        (
            "scalar-then-mapping",
            {"episodes/a.md": fm("episode_id: e1"), "p.md": cites("e1", "{type: episode, id: e1}")},
            1,
            [],
        ),
        (
            "empty-item-line-is-a-null-item",
            {"episodes/a.md": fm("episode_id: e1"), "p.md": cites("", "{type: episode, id: e1}")},
            2,
            [],
        ),
        (
            "session-vs-padded-id-fallback",
            {"episodes/a.md": fm("id: ' x1 '"), "p.md": cites("{type: Session, id: x1}")},
            1,
            [],
        ),
        (
            "note-path",
            {"episodes/a.md": fm("title: t"), "p.md": cites("{type: note, path: episodes/a.md}")},
            1,
            [],
        ),
        (
            "path-without-type",
            {"episodes/a.md": fm("episode_id: e1"), "p.md": cites("{path: episodes/a.md}")},
            1,
            ["episodes/a.md"],
        ),
        (
            "numbers-are-ids",
            {"episodes/a.md": fm("episode_id: 42"), "p.md": cites("{type: episode, id: 42}")},
            1,
            [],
        ),
        (
            "list-memory-kind-episodic-by-prefix",
            {"episodes/a.md": fm("memory_kind: [semantic]", "episode_id: e1")},
            0,
            ["episodes/a.md"],
        ),
        (
            "dashes-delimiter-not-frontmatter",
            {"episodes/a.md": "-----\nmemory_kind: semantic\n-----\n"},
            0,
            ["episodes/a.md"],
        ),
        (
            "crlf",
            {
                "episodes/a.md": fm("episode_id: e1").replace("\n", "\r\n"),
                "p.md": cites("{type: episode, id: e1}").replace("\n", "\r\n"),
                "episodes/b.md": fm("memory_kind: semantic").replace("\n", "\r\n"),
            },
            1,
            [],
        ),
    ),
)
def test_extra_edge_cases(
    make_root: MakeRoot, files: dict[str, str], refs: int, unmerged: list[str]
) -> None:
    r = report(make_root, files)
    assert r.merged_from_refs == refs
    assert paths(r.unmerged) == unmerged
