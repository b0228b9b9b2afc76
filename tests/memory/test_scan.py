"""The full scan: its fast paths must give exactly what the plain path gives.

The plain path is ``frontmatter.reader.find_block`` + ``frontmatter.reader.parse_yaml`` (PyYAML) +
``memory.file_facts``. The fast frontmatter reader (``kiwifs.memory.fastkeys``), the block
locator and the
parallel readers are each checked against it: on tables of tricky cases, on generated frontmatter
(a grammar of the simple subset, then adversarial mutations of it) and on a generated corpus.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchload import corpus as corpusgen
from kiwifs.base import walk as filewalk
from kiwifs.base.walk import walk
from kiwifs.frontmatter.reader import find_block, parse_yaml, read_frontmatter
from kiwifs.index.record import frontmatter_json
from kiwifs.memory import fastkeys, scan
from kiwifs.memory.rules import FileFacts, build_report, file_facts, unreadable_facts

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# the adversarial documents (whole frontmatter blocks, mutated: ~10x a scalar's cost per example,
# the slowest properties here): half as many examples
DOCUMENTS = settings(PROPERTY, max_examples=150)


# ---------------------------------------------------------------------------------------------
# the reference: the plain path


def plain_facts(rel: str, data: bytes) -> FileFacts:
    block = find_block(data)
    if block is None:
        return file_facts(rel, {})
    if not block.terminated:
        return file_facts(rel, {}, "frontmatter block not terminated")
    fm = parse_yaml(block.yaml)
    return file_facts(rel, fm.data, fm.problem)


def relevant_view(data: dict[Any, Any]) -> str:
    """What the fast reader must reproduce, as a repr (so that NaN equals NaN)."""

    def cut(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if k in fastkeys.ENTRY_KEYS}
        if isinstance(value, list):
            return [cut(v) for v in value]
        return value

    return repr({k: cut(v) for k, v in data.items() if k in fastkeys.RELEVANT_KEYS})


def assert_fast_agrees(text: bytes) -> dict[str, Any] | None:
    """When the fast readers answer, PyYAML accepts the text and the facts are the same; the
    whole-block reader gives PyYAML's very mapping (values, types, key order)."""
    whole = fastkeys.simple_frontmatter(text)
    if whole is not None:
        plain = parse_yaml(text)
        assert plain.problem is None, (text, plain.problem)
        assert repr(whole) == repr(plain.data), text
        framed = b"---\n" + text + b"---\nbody\n"
        assert fastkeys.read_simple_first(framed)[0] == read_frontmatter(framed)
        assert frontmatter_json(whole, simple=True) == frontmatter_json(plain.data)
    fast = fastkeys.relevant_frontmatter(text)
    if fast is None:
        return None
    plain = parse_yaml(text)
    assert plain.problem is None, (text, plain.problem)
    # the same subset, except that the whole-block reader leaves a key PyYAML does not read as
    # text (``on:`` is True) to PyYAML, while the report's reader only needs its own keys
    assert whole is not None or any(not isinstance(k, str) for k in plain.data), text
    assert relevant_view(fast) == relevant_view(plain.data), text
    assert file_facts("p.md", fast) == file_facts("p.md", plain.data, plain.problem), text
    return fast


# ---------------------------------------------------------------------------------------------
# table-driven cases

ACCEPTED = [
    b"",
    b"# only a comment\n",
    b"title: Hello\n",
    b'title: "Run #1: fixed"\nmemory_kind: episodic\nepisode_id: ep-1\n',
    b"memory_kind: episodic\nepisode_id: 2023-01-05\n",  # a date stays a string
    b"episode_id: 42\n",
    b"episode_id: 012\n",  # octal in YAML 1.1
    b"episode_id: 0x1F\n",
    b"episode_id: 1_000\n",
    b"episode_id: 1:20\n",  # sexagesimal
    b"episode_id: 3.5\n",
    b"episode_id: yes\nid: fallback\n",
    b"id: ~\n",
    b"episode_id: ''\nid: ' spaced '\n",
    b"tags: [a, b, 'c d', \"e\"]\nstatus: ok\n",
    b"tags:\n- a\n- b\n",
    b"tags:\n  - a\n  -\n  - c\n",
    b"merged-from:\n  - type: episode\n    id: ep-1\n  - type: run\n    path: ./episodes/a.md\n",
    b'merged-from:\n- type: Episode\n  id: 7\n  note: "x: y"\n-\n- just a string\n',
    b"merged-from:\n  -   type: episode\n      path: /episodes/b.md\n      date: 2025-01-01\n",
    b"merged-from:\n  type: episode\n  path: episodes/a.md\n",  # a single mapping: one entry
    b"memory_status: superseded\nvalid_until: '2026-11-30T00:00:00Z'\n",
    b"memory_status: SUPERSEDED\nepisode_id: e\n",
    b"memory_status: active\n",
    b"memory_status: [superseded]\n",
    b"merged-from: episodes/a.md\n",  # a scalar: a warning
    b"merged-from: []\n",
    b"merged-from: [null, Null, x]\n",
    b"merged-from:\n",
    b"merged-from:\n  - type: episode\n    id:\n    path: ../escape.md\n",
    b"title: a\r\nepisode_id: crlf\r\n",
    b"title: caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\nepisode_id: \xc3\xa9t\xc3\xa9\n",
    b"episode_id: first\nepisode_id: second\n",  # duplicate keys: the last wins, as PyYAML
    b"derived-from:\n  - type: run\n    id: r\n    actor: agent:ci\n",
    b"title: a#b\nnote: C# and F#\n",
    b"title: x\n\n   \n# c\n  # indented comment\nepisode_id: y\n",
    b"url: http://example.com/a?b=c\n",
    b"title: a, b [c] {d}\n",
    b"episode_id: ---\n",
    b"episode_id: ...\n",
]

FALLBACK = [
    b"title: &a x\nid: *a\n",  # anchors and aliases
    b"id: !!str 12\n",  # tags
    b"title: |\n  block\n",  # block scalars
    b"title: a\n  continued\n",  # multi-line plain scalar
    b"title: 'it''s'\n",  # escaped quote
    b'title: "a\\nb"\n',  # escapes
    b"title: x # comment\n",  # trailing comment
    b"title:\tx\n",  # tab
    b"on: x\n",  # a key that is not a string
    b"null: x\n",
    b"- a\n- b\n",  # not a mapping
    b"just text\n",
    b"a: b: c\n",  # invalid
    b"a: [1, 2\n",  # unterminated flow
    b"a: {b: c}\n",  # flow mapping
    b"a: 0b_\n",  # an int the constructor cannot build
    b"a: <<\n",  # merge key as a value
    b"a: =\n",
    b"<<: {a: 1}\n",
    b"a:\n  b:\n    c: d\n",  # deeper nesting
    b"a:\n  - - x\n",
    b"a: x\n b: y\n",  # odd indentation
    b"\xef\xbb\xbftitle: bom\n",
    b"title: \xff\n",  # not UTF-8
    b"title: a\x85b\n",  # NEL is a line break in YAML 1.1
    b"title: a\rb\n",
    b"? complex\n: key\n",
    b"%YAML 1.1\n---\na: b\n",
    b"a: x\n--- b\n",
]


@pytest.mark.parametrize("text", ACCEPTED, ids=range(len(ACCEPTED)))
def test_fast_reader_accepts_and_agrees(text: bytes) -> None:
    assert assert_fast_agrees(text) is not None


@pytest.mark.parametrize("text", FALLBACK, ids=range(len(FALLBACK)))
def test_fast_reader_falls_back_outside_the_subset(text: bytes) -> None:
    assert fastkeys.relevant_frontmatter(text) is None
    assert fastkeys.simple_frontmatter(text) is None
    # and the plain path still gives an answer for it
    plain_facts("p.md", b"---\n" + text + b"---\nbody\n")


def test_over_size_limit_falls_back() -> None:
    text = b"title: " + b"x" * (1024 * 1024) + b"\n"
    assert fastkeys.relevant_frontmatter(text) is None
    assert fastkeys.simple_frontmatter(text) is None


# ---------------------------------------------------------------------------------------------
# generated frontmatter

SAFE_SCALARS = [
    "episodic",
    "semantic",
    "superseded",
    " Superseded ",
    "Consolidation",
    "ep-20230101-0001",
    "run-20230101-bb4904ab",
    "episodes/2023/01/run-0001.md",
    "./episodes/a.md",
    "/episodes/a.md",
    "episodes//a.md",
    "../x.md",
    "agent:reviewer",
    "2025-07-27T07:28:00Z",
    "2023-01-05",
    "Episode",
    "yes",
    "No",
    "on",
    "OFF",
    "true",
    "null",
    "~",
    "42",
    "012",
    "0x1F",
    "1_000",
    "1:20",
    "-7",
    "+3",
    "3.14",
    ".inf",
    "-.inf",
    ".nan",
    "1e3",
    "6.8e+5",
    "a#b",
    "a :b",
    "x, y",
    "not [flow] {x}",
    "caf\u00e9",
    "\u65e5\u672c",
    "---",
    "...",
    "-x",
    "C#",
]
ADVERSARIAL_SCALARS = [
    "",
    " ",
    "0b_",
    "0x_",
    "0b101",
    "1:60",
    "190:20:30",
    "<<",
    "=",
    "!",
    "&a x",
    "*a",
    "!!str x",
    "- x",
    "-",
    "? x",
    ": x",
    "a: b",
    "a #b",
    "#x",
    "a:",
    "'q'",
    '"q"',
    "it's",
    "'it''s'",
    '"esc\\n"',
    "[a, b]",
    "[]",
    "[a,]",
    "{a: 1}",
    "|",
    ">-",
    "%x",
    "@x",
    "`x",
    "a\tb",
    "x\u2028y",
    "\u00a0nbsp",
    "\ufeffbom",
    "a\\b",
]
KEYS = [
    "memory_kind",
    "memory_status",
    "episode_id",
    "id",
    "merged-from",
    "title",
    "tags",
    "type",
    "path",
    "derived-from",
    "note",
    "Id",
    "x-y",
    "a.b",
    "_k",
]
ADVERSARIAL_KEYS = ["on", "yes", "null", "No", "True", "y", "n", "~", "1", "<<", "a b", "-k"]
ENTRY_FIELD_KEYS = ["type", "id", "path", "date", "actor", "note", "Type"]


def scalar(pool: list[str]) -> st.SearchStrategy[str]:
    """A scalar written plain, double-quoted or single-quoted."""
    value = st.sampled_from(pool)
    return st.one_of(
        value,
        value.map(lambda v: '"' + v + '"'),
        value.map(lambda v: "'" + v + "'"),
    )


FLOW_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./+\-]*")


@st.composite
def flow_list(draw: st.DrawFn, pool: list[str]) -> str:
    """A one-line flow list; a value that is not a plain word in flow context gets quoted."""
    items = []
    for value in draw(st.lists(st.sampled_from(pool), max_size=4)):
        quote = draw(st.sampled_from(["", '"', "'"]))
        if not quote and not FLOW_PLAIN.fullmatch(value) and pool is SAFE_SCALARS:
            quote = '"'
        items.append(quote + value + quote)
    sep = draw(st.sampled_from([", ", ",", " , "]))
    return "[" + sep.join(items) + "]"


@st.composite
def entry_lines(draw: st.DrawFn, pool: list[str], keys: list[str]) -> list[str]:
    """``key: value`` lines of one flat mapping (before indentation)."""
    lines = []
    for key in draw(st.lists(st.sampled_from(keys), min_size=1, max_size=4)):
        if draw(st.integers(0, 9)) == 0:
            lines.append(key + ":")
        else:
            lines.append(key + ": " + draw(st.one_of(scalar(pool), flow_list(pool))))
    return lines


@st.composite
def documents(draw: st.DrawFn, pool: list[str], keys: list[str]) -> str:
    """A frontmatter text of the simple subset (when ``pool`` and ``keys`` are safe)."""
    out: list[str] = []
    for key in draw(st.lists(st.sampled_from(keys), max_size=6)):
        shape = draw(st.sampled_from(["scalar", "flow", "list", "entries", "mapping", "null"]))
        if shape == "scalar":
            out.append(key + ": " + draw(scalar(pool)))
        elif shape == "flow":
            out.append(key + ": " + draw(flow_list(pool)))
        elif shape == "null":
            out.append(key + ":")
        elif shape == "mapping":
            out.append(key + ":")
            indent = " " * draw(st.integers(1, 4))
            out.extend(indent + line for line in draw(entry_lines(pool, ENTRY_FIELD_KEYS)))
        else:
            out.append(key + ":")
            dash = " " * draw(st.sampled_from([0, 2, 4]))
            for _ in range(draw(st.integers(1, 4))):
                gap = " " * draw(st.integers(1, 3))
                kind = draw(
                    st.sampled_from(
                        ["scalar", "null", "map"] if shape == "entries" else ["scalar", "null"]
                    )
                )
                if kind == "null":
                    out.append(dash + "-")
                elif kind == "scalar":
                    out.append(dash + "-" + gap + draw(scalar(pool)))
                else:
                    first, *rest = draw(entry_lines(pool, ENTRY_FIELD_KEYS))
                    out.append(dash + "-" + gap + first)
                    column = " " * (len(dash) + 1 + len(gap))
                    out.extend(column + line for line in rest)
        if draw(st.integers(0, 5)) == 0:
            out.append(draw(st.sampled_from(["", "   ", "# note", "  # indented", "#"])))
    trailing = draw(st.sampled_from(["", " ", "  "]))
    text = "\n".join(line + (trailing if line else "") for line in out)
    return text + "\n" if out else text


MUTATIONS = [
    ":",
    ": ",
    " ",
    "  ",
    "#",
    " #",
    "\t",
    "\r\n",
    "\r",
    "\n",
    "\n  ",
    "'",
    '"',
    "-",
    "- ",
    "\n---\n",
    "\n...\n",
    "--- ",
    "&a ",
    "*a",
    "!!",
    "|",
    ">",
    "?",
    "{",
    "}",
    "[",
    "]",
    ",",
    "\u2028",
    "\x85",
    "\ufeff",
    "\x00",
    "\x7f",
    "\u00e9",
    "%",
    "@",
    "`",
    "~",
    "<<: ",
    "\\",
    "0",
    "_",
    ".",
    "yes",
    "null",
    "\nid: 1\n",
    "\nmerged-from:\n",
]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    text = draw(documents(SAFE_SCALARS + ADVERSARIAL_SCALARS, KEYS + ADVERSARIAL_KEYS))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        if draw(st.booleans()):
            text = text[:at] + draw(st.sampled_from(MUTATIONS)) + text[at:]
        else:
            text = text[:at] + text[at + draw(st.integers(1, 3)) :]
    if draw(st.integers(0, 4)) == 0:
        text = text.replace("\n", "\r\n")
    return text.encode("utf-8", errors="surrogatepass")


@PROPERTY
@given(documents(SAFE_SCALARS, KEYS))
def test_simple_subset_is_read_fast_and_equally(text: str) -> None:
    data = text.encode("utf-8")
    assert assert_fast_agrees(data) is not None, text


@DOCUMENTS
@given(documents(SAFE_SCALARS + ADVERSARIAL_SCALARS, KEYS + ADVERSARIAL_KEYS))
def test_adversarial_values_never_disagree(text: str) -> None:
    assert_fast_agrees(text.encode("utf-8"))


@DOCUMENTS
@given(mutated())
def test_mutated_frontmatter_never_disagrees(data: bytes) -> None:
    assert_fast_agrees(data)
    rel = "episodes/e.md"
    whole = b"---\n" + data + b"\n---\nbody\n"
    assert scan.facts_of_bytes(rel, whole) == plain_facts(rel, whole)


@PROPERTY
@given(st.one_of(st.sampled_from(SAFE_SCALARS + ADVERSARIAL_SCALARS), st.text(max_size=12)))
def test_scalar_typing_is_pyyamls(value: str) -> None:
    text = ("episode_id: " + value + "\n").encode("utf-8", errors="surrogatepass")
    fast = assert_fast_agrees(text)
    if fast is not None and value.strip(" ") and value[0] not in "\"'[":
        assert repr(fast["episode_id"]) == repr(
            yaml.load(text, Loader=fastkeys.FastLoader)["episode_id"]
        )


@PROPERTY
@given(st.one_of(st.sampled_from(SAFE_SCALARS + ADVERSARIAL_SCALARS), st.text(max_size=8)))
def test_typing_screen_flags_everything_the_exact_check_rejects(value: str) -> None:
    for line in (f"k: {value}", f"{value}: v", f"l:\n- {value}", f"l:\n- k: {value}"):
        source = fastkeys._subset_source(line.encode("utf-8", errors="surrogatepass"))
        if source is None or fastkeys._SUBSET_DOCUMENT.fullmatch(source) is None:
            continue
        if fastkeys._TYPING_SCREEN.search(source) is None:
            fastkeys._check_typing(source)  # must not raise


def test_nan_id_is_its_string() -> None:
    fast = assert_fast_agrees(b"episode_id: .nan\n")
    assert fast is not None and math.isnan(fast["episode_id"])
    assert file_facts("e.md", fast).episode_id == "nan"


# ---------------------------------------------------------------------------------------------
# the head reader


@pytest.mark.parametrize(
    "content",
    [
        b"---\ntitle: " + b"x" * (scan.HEAD_BYTES + 100) + b"\nepisode_id: long\n---\nbody\n",
        b"---\n" + b"a: b\n" * (scan.HEAD_BYTES // 5) + b"episode_id: late\n---\n",
        b"---\nepisode_id: never closed\n" + b"x: y\n" * 3000,
        b"x" * (scan.HEAD_BYTES * 2),
        b"---" + b" " * (scan.HEAD_BYTES * 2) + b"\nepisode_id: wide\n---\n",
        b"",
    ],
    ids=["long-line", "long-block", "unterminated", "no-newline", "wide-first-line", "empty"],
)
def test_read_head_reads_as_far_as_the_block_needs(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "f.md"
    path.write_bytes(content)
    head = scan.read_head(str(path))
    assert content.startswith(head)
    assert scan.facts_of_bytes("f.md", head) == plain_facts("f.md", content)


def test_read_head_is_not_fooled_by_a_delimiter_cut_at_the_boundary(tmp_path: Path) -> None:
    # the head ends in "---" but the file's line is "----": the block does not end there
    prefix = b"---\nepisode_id: cut\n"
    filler = b"a: b\n" * ((scan.HEAD_BYTES - len(prefix) - 3) // 5)
    pad = b"#" * (scan.HEAD_BYTES - len(prefix) - len(filler) - 3 - 1) + b"\n"
    content = prefix + filler + pad + b"----\nepisode_id: after\n---\n"
    assert content[scan.HEAD_BYTES - 3 : scan.HEAD_BYTES] == b"---"
    path = tmp_path / "f.md"
    path.write_bytes(content)
    head = scan.read_head(str(path))
    assert len(head) > scan.HEAD_BYTES  # it read on
    assert scan.facts_of_bytes("f.md", head) == plain_facts("f.md", content)


# ---------------------------------------------------------------------------------------------
# the whole scan: sequential, parallel and plain agree on a generated corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus") / "root"
    truth = corpusgen.generate(root, episodes=300, seed=7)
    (root.parent / "truth.json").write_text(json.dumps(truth), encoding="utf-8")
    (root / "episodes" / "broken.md").symlink_to(root / "missing.md")
    (root / "episodes" / "unterminated.md").write_bytes(b"---\nepisode_id: open\n")
    (root / "episodes" / "long.md").write_bytes(
        b"---\nnote: " + b"n" * 20000 + b"\nepisode_id: long\n---\n"
    )
    return root


def plain_scan(root: Path) -> list[FileFacts]:
    out = []
    for entry in walk(root):
        if entry.error is not None:
            out.append(unreadable_facts(entry.rel, entry.error))
        else:
            out.append(plain_facts(entry.rel, Path(entry.path).read_bytes()))
    return out


def report_json(facts: list[FileFacts]) -> str:
    return json.dumps(build_report(facts, "episodes/").to_json())


def test_sequential_scan_equals_the_plain_path(corpus: Path) -> None:
    plain = plain_scan(corpus)
    assert list(scan.scan_facts(corpus, workers=1)) == plain
    assert any(f.unreadable for f in plain) and any(f.warnings for f in plain)


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_parallel_scan_equals_the_sequential_one(corpus: Path, method: str) -> None:
    context = (
        scan.forkserver_context() if method == "forkserver" else multiprocessing.get_context("fork")
    )
    sequential = list(scan.scan_facts(corpus, workers=1))
    parallel = list(scan.parallel_facts(scan.walk_jobs(corpus), 2, context, chunk_files=37))
    assert parallel == sequential
    assert report_json(parallel) == report_json(plain_scan(corpus))


def test_scan_facts_with_workers_matches_ground_truth(corpus: Path) -> None:
    summary = json.loads((corpus.parent / "truth.json").read_bytes())
    report = build_report(scan.scan_facts(corpus, workers=2), "episodes/")
    added = {"episodes/unterminated.md", "episodes/long.md"}  # no id, so unmerged
    assert sorted(e.path for e in report.unmerged) == sorted(summary["unmerged"] + list(added))
    assert report.merged_from_refs == summary["merged_from_refs"]


SCALAR_ALPHABET = "0123456789_:.+-eEbxoXaAyYnNtTfFlLuU~<=!&*#' \"[]{},?|>%@`\\/"
PLACES = [
    "k: {}",
    "{}: v",
    "l:\n- {}",
    "l:\n- k: {}\n  id: {}",
    "id: [{}, a]",
    "merged-from:\n- type: {}\n  id: {}\n  path: {}",
]


@PROPERTY
@given(st.text(alphabet=SCALAR_ALPHABET, max_size=10), st.sampled_from(PLACES))
def test_number_like_and_indicator_scalars_never_disagree(value: str, place: str) -> None:
    assert_fast_agrees(place.replace("{}", value).encode("utf-8"))


# ---------------------------------------------------------------------------------------------
# the walk the scan reads (filewalk.walk_rows): documented order, as a plain recursive reference


def reference_walk(base: str, rel_dir: str = "") -> list[tuple[str, str, bool, str | None]]:
    """Depth first, names in byte order, dot-names skipped, symlinked folders not descended."""
    real_root = os.path.realpath(base)
    out: list[tuple[str, str, bool, str | None]] = []

    def visit(rel: str, abs_dir: str) -> None:
        with os.scandir(abs_dir) as it:
            entries = sorted(
                (e for e in it if not e.name.startswith(".")), key=lambda e: os.fsencode(e.name)
            )
        for e in entries:
            if not e.is_symlink() and e.is_dir(follow_symlinks=False):
                visit(rel + e.name + "/", e.path)
            elif e.name.endswith(".md"):
                error = None
                if e.is_symlink():
                    target = os.path.realpath(e.path)
                    inner = target[len(real_root) + 1 :].split(os.sep)
                    if not target.startswith(real_root + os.sep):
                        error = "symlink points outside the root"
                    elif any(seg.startswith(".") for seg in inner):
                        error = "symlink points to a hidden path"
                    elif not os.path.isfile(target):
                        error = "broken symlink"
                out.append((rel + e.name, e.path, e.is_symlink(), error))

    visit(rel_dir, os.path.join(base, rel_dir) if rel_dir else base)
    return out


def test_walk_rows_is_the_spec_order(tmp_path: Path) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside.md"
    outside.write_text("x")
    names = ["b.md", "a.md", "B.md", "a-b.md", "a.b.md", "\u00e9.md", "\u65e5.md", "z.MD"]
    for sub in ("", "d/", "d/e/", "a/", "\u00e9/"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        for name in names:
            (root / sub / name).write_text("---\nid: x\n---\n")
        (root / sub / ".hidden.md").write_text("x")
    (root / ".git").mkdir()
    (root / ".git" / "x.md").write_text("x")
    os.close(os.open(os.fsencode(root / "d") + b"/\xff.md", os.O_CREAT | os.O_WRONLY))
    os.close(os.open(os.fsencode(root / "d") + b"/\xc3.md", os.O_CREAT | os.O_WRONLY))
    (root / "link-dir").symlink_to(root / "d", target_is_directory=True)
    (root / "d" / "link.md").symlink_to(root / "a.md")
    (root / "d" / "out.md").symlink_to(outside)
    (root / "d" / "broken.md").symlink_to(root / "missing.md")
    (root / "d" / "git.md").symlink_to(root / ".git" / "x.md")
    (root / "d" / "git-new.md").symlink_to(root / ".git" / "new.md")
    (root / "d" / "hidden.md").symlink_to(root / "d" / ".hidden.md")
    rows = list(filewalk.walk_rows(root))
    assert rows == reference_walk(str(root))
    assert [(e.rel, e.path, e.symlink, e.error) for e in filewalk.walk(root)] == rows
    assert list(filewalk.walk_rows(root, "d/")) == reference_walk(str(root), "d/")
    assert {r[3] for r in rows} == {
        None,
        "symlink points outside the root",
        "symlink points to a hidden path",
        "broken symlink",
    }


def test_walk_rows_names_a_folder_it_cannot_list(tmp_path: Path) -> None:
    rows = list(filewalk.walk_rows(tmp_path / "missing"))
    assert len(rows) == 1 and rows[0][3] is not None and rows[0][3].startswith("cannot list")


def forgetful_root(root: Path) -> Path:
    """Episodes of which some are forgotten (``memory_status: superseded``) and one is merged."""
    files: dict[str, str] = {}
    for n in range(12):
        status = "memory_status: superseded\n" if n % 3 == 0 else ""
        files[f"episodes/e{n:02}.md"] = f"---\nepisode_id: e{n:02}\n{status}---\nrun {n}\n"
    files["pages/merged.md"] = (
        "---\nmemory_kind: semantic\nmerged-from:\n  - {type: episode, id: e01}\n---\n"
    )
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_parallel_scan_keeps_forgotten_episodes_out_of_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The readers' rows carry the superseded flag: the scan (``--no-index`` and a root without
    an index) answers what the index answers, forgotten episodes counted and never unmerged."""
    from click.testing import CliRunner

    from kiwifs.cli import cli
    from kiwifs.knowledge import Knowledge

    root = forgetful_root(tmp_path / "root")
    parallel = build_report(scan.scan_facts(root, workers=2), "episodes/").to_json()
    monkeypatch.setattr(scan, "PARALLEL_THRESHOLD", 4)  # the CLI's scan forks past 4 files
    runner = CliRunner()
    args = ["memory", "report", "--root", str(root), "--json"]
    scanned = runner.invoke(cli, [*args, "--no-index"])
    assert scanned.exit_code == 0, scanned.output
    with Knowledge.open(root) as kb:
        kb.reindex()
    indexed = runner.invoke(cli, args)
    assert indexed.exit_code == 0, indexed.output
    expected = json.loads(indexed.output)
    assert expected["superseded_count"] == 4
    assert "episodes/e03.md" not in {e["path"] for e in expected["unmerged"]}
    assert json.loads(scanned.output) == expected
    assert parallel == {k: v for k, v in expected.items() if k in parallel}
    fields = FileFacts.__dataclass_fields__
    assert len(scan.FactsRow.__args__) == len(fields) - 1  # every field but the path travels
