"""Frontmatter: the one block rule, the reader's typing, and round-trip editing."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml.comments import CommentedMap

from kiwifs.errors import InvalidFrontmatter
from kiwifs.frontmatter.edit import append_entries, edit_frontmatter
from kiwifs.frontmatter.reader import (
    find_block,
    parse_yaml,
    read_frontmatter,
    refuse_alias_bomb,
    split,
)
from kiwifs.frontmatter.yamlload import MAX_ALIAS_NODES, FastLoader, PlainLoader
from kiwifs.memory.fastkeys import relevant_frontmatter
from kiwifs.memory.rules import existing_merge_keys

LOADERS = pytest.mark.parametrize("loader", [FastLoader, PlainLoader], ids=["fast", "plain"])


# ---------------------------------------------------------------------------------------------
# the block rule


@pytest.mark.parametrize(
    ("data", "yaml_text", "body", "terminated"),
    [
        (b"---\na: 1\n---\nbody\n", b"a: 1\n", b"body\n", True),
        (b"---   \na: 1\n---\nbody", b"a: 1\n", b"body", True),
        (b"---\r\na: 1\r\n---\r\nbody\r\n", b"a: 1\r\n", b"body\r\n", True),
        (b"--- \r\na: 1\r\n--- \r\n", b"a: 1\r\n", b"", True),
        (b"---\na: 1\n...\nbody", b"a: 1\n", b"body", True),
        (b"---\na: 1\n...  \r\nbody", b"a: 1\n", b"body", True),
        (b"---\n---\nbody", b"", b"body", True),
        (b"---\na: 1\n---", b"a: 1\n", b"", True),
        (b"---\na:\n  -\n  - \nb: 2\n---\n", b"a:\n  -\n  - \nb: 2\n", b"", True),
        (b"---\na: 1\n\nb: 2\n---\n", b"a: 1\n\nb: 2\n", b"", True),
        (b"---\na: |\n  ---x\n  ...y\n---\nz", b"a: |\n  ---x\n  ...y\n", b"z", True),
        (b"---\na: 1\n---\n---\nb: 2\n---\n", b"a: 1\n", b"---\nb: 2\n---\n", True),
        (b"---\na: 1\n", b"a: 1\n", b"", False),
        (b"---", b"", b"", False),
        (b"---\na: 1\n ---\n", b"a: 1\n ---\n", b"", False),
        (b"---\na: 1\n----\n", b"a: 1\n----\n", b"", False),
        (b"---\na: 1\n-- -\n", b"a: 1\n-- -\n", b"", False),
        (b"---\na: 1\n---\t\nb\n", b"a: 1\n---\t\nb\n", b"", False),
        (b"---\na: 1\r---\r\nb", b"a: 1\r---\r\nb", b"", False),
        (b"---\n...", b"", b"", True),
        (b"---\na: 1\n--- \r \r\nbody", b"a: 1\n", b"body", True),
    ],
    ids=[
        "plain",
        "opening-trailing-spaces",
        "crlf",
        "crlf-trailing-spaces-no-body",
        "dots-close",
        "dots-close-trailing-space-cr",
        "empty-block",
        "closing-line-without-newline",
        "empty-list-items-do-not-close",
        "blank-lines-inside",
        "delimiter-like-text-in-scalar",
        "second-block-is-body",
        "unterminated",
        "opening-only",
        "indented-dashes-do-not-close",
        "four-dashes-do-not-close",
        "spaced-dashes-do-not-close",
        "tab-after-dashes-does-not-close",
        "a-lone-cr-is-no-line-break",
        "dots-close-at-the-end",
        "spaces-and-crs-after-closing-dashes",
    ],
)
def test_find_block(data: bytes, yaml_text: bytes, body: bytes, terminated: bool) -> None:
    block = find_block(data)
    assert block is not None
    assert (block.yaml, data[block.body_start :], block.terminated) == (
        yaml_text,
        body,
        terminated,
    )


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"# title\n---\na: 1\n---\n",
        b"-----\na: 1\n-----\n",
        b"----\na: 1\n----\n",
        b"\n---\na: 1\n---\n",
        b" ---\na: 1\n---\n",
        b"...\na: 1\n...\n",
        b"---a\nb: 1\n---\n",
        b"--- a: 1\n---\n",
        b"\xef\xbb\xbf---\na: 1\n---\n",
        b"---\t\na: 1\n---\n",
    ],
    ids=[
        "empty-file",
        "heading-first",
        "five-dashes",
        "four-dashes",
        "leading-blank-line",
        "leading-space",
        "dots-do-not-open",
        "text-after-dashes",
        "inline-yaml-after-dashes",
        "byte-order-mark",
        "trailing-tab-is-not-allowed",
    ],
)
def test_no_block(data: bytes) -> None:
    assert find_block(data) is None
    assert read_frontmatter(data).data == {}
    assert read_frontmatter(data).problem is None
    assert split(data) == (b"", data)


# ---------------------------------------------------------------------------------------------
# reading: YAML 1.1 typing, timestamps as strings


@LOADERS
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2026-01-01", "2026-01-01"),
        ("2026-01-01T10:00:00Z", "2026-01-01T10:00:00Z"),
        ("2026-01-01 10:00:00", "2026-01-01 10:00:00"),
        ("2026-01-01T10:00:00.5+02:00", "2026-01-01T10:00:00.5+02:00"),
        ("[2026-01-01, {d: 2026-02-02}]", ["2026-01-01", {"d": "2026-02-02"}]),
        ("yes", True),
        ("no", False),
        ("on", True),
        ("off", False),
        ("True", True),
        ("y", "y"),
        ("42", 42),
        ("012", 10),
        ("0x1F", 31),
        ("1_000", 1000),
        ("1.5", 1.5),
        ("~", None),
        ("", None),
        ("'yes'", "yes"),
        ('"42"', "42"),
        ("plain text", "plain text"),
    ],
    ids=[
        "date",
        "datetime-z",
        "datetime-space",
        "datetime-offset",
        "nested-dates",
        "yes",
        "no",
        "on",
        "off",
        "True",
        "y-is-a-string",
        "int",
        "yaml11-octal",
        "hex",
        "underscore-int",
        "float",
        "tilde-null",
        "empty-null",
        "quoted-yes",
        "quoted-number",
        "text",
    ],
)
def test_reader_typing(loader: type, text: str, value: Any) -> None:
    data = f"---\nv: {text}\n---\nbody\n".encode()
    fm = read_frontmatter(data, loader)
    assert fm.problem is None
    assert fm.data == {"v": value}
    assert type(fm.data["v"]) is type(value)


@LOADERS
@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_reader_line_endings(loader: type, newline: str) -> None:
    text = "---\nmemory_kind: episodic\nmerged-from:\n  - {type: run, id: r1}\n---\n# T\n"
    fm = read_frontmatter(text.replace("\n", newline).encode(), loader)
    assert fm.data == {"memory_kind": "episodic", "merged-from": [{"type": "run", "id": "r1"}]}


@LOADERS
@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"---\na: 1\n", "frontmatter block not terminated"),
        (b"---\na: [1\n---\n", "invalid YAML"),
        (b"---\na: 1\n a: 2\n---\n", "invalid YAML"),
        (b"---\n!!python/object:os.system x\n---\n", "invalid YAML"),
        (b"---\na: \xff\n---\n", "invalid YAML"),
        (b"---\n- a\n---\n", "not a mapping (a list)"),
        (b"---\nhello\n---\n", "not a mapping (a string)"),
        (b"---\n3\n---\n", "not a mapping (a int)"),
        (b"---\nx: " + b"a" * (1024 * 1024) + b"\n---\n", "over 1048576 bytes"),
    ],
    ids=[
        "unterminated",
        "unclosed-flow",
        "bad-indent",
        "python-tag-refused",
        "not-utf8",
        "list",
        "string",
        "number",
        "over-1-mib",
    ],
)
def test_reader_problems(loader: type, data: bytes, reason: str) -> None:
    fm = read_frontmatter(data, loader)
    assert fm.data == {}
    assert fm.problem is not None and reason in fm.problem
    assert "\n" not in fm.problem


def test_empty_and_comment_only_blocks_are_fine() -> None:
    for data in (b"---\n---\n", b"---\n# only a comment\n---\n", b"---\n\n\n---\n"):
        assert read_frontmatter(data) == parse_yaml(b"")
        assert read_frontmatter(data).problem is None


# ---------------------------------------------------------------------------------------------
# editing: body byte for byte, other keys kept

ENTRY = {"type": "episode", "id": "ep-1", "date": "2026-05-02T10:00:00Z", "note": "first"}


def add_entry(entry: dict[str, str] = ENTRY) -> Any:
    def mutate(doc: CommentedMap) -> bool:
        append_entries(doc, "merged-from", [entry])
        return True

    return mutate


BODIES = [
    (b"# T\nbody\n", "lf"),
    (b"# T\r\nbody\r\n", "crlf"),
    (b"\n\n\nafter blank lines\n", "leading-blank-lines"),
    (b"\r\n\r\nafter crlf blank lines", "leading-crlf-blank-lines"),
    (b"", "empty"),
    (b"no trailing newline", "no-trailing-newline"),
    (b"---\nnot: frontmatter\n---\n", "body-looks-like-frontmatter"),
    (b"  indented\n\ttabs \n", "whitespace"),
    (b"caf\xc3\xa9 \xe2\x80\x94 \xff\xfe raw bytes\n", "non-utf8-bytes"),
]


HEADS = [
    (b"---\ntitle: Auth\n---\n", "with-frontmatter"),
    (b"---\r\ntitle: Auth\r\n---\r\n", "crlf-frontmatter"),
    (b"---\n---\n", "empty-frontmatter"),
    (b"", "no-frontmatter"),
]
# Without a head, a body that starts with a block would itself be the frontmatter: left out.
HEAD_BODY = [
    pytest.param(head, body, id=f"{hn}-{bn}")
    for head, hn in HEADS
    for body, bn in BODIES
    if head or not body.startswith(b"---\n")
]


@pytest.mark.parametrize(("head", "body"), HEAD_BODY)
def test_edit_keeps_body_byte_for_byte(head: bytes, body: bytes) -> None:
    out = edit_frontmatter(head + body, add_entry())
    assert out.endswith(body)
    assert split(out)[1] == body
    assert read_frontmatter(out).data["merged-from"] == [ENTRY]


def test_edit_of_file_without_frontmatter_prepends_a_block() -> None:
    assert edit_frontmatter(b"# X\nbody\n", add_entry()) == (
        b"---\n"
        b"merged-from:\n"
        b"  - type: episode\n"
        b"    id: ep-1\n"
        b'    date: "2026-05-02T10:00:00Z"\n'
        b"    note: first\n"
        b"---\n"
        b"# X\nbody\n"
    )


def test_edit_of_five_dash_file_keeps_it_as_body() -> None:
    data = b"-----\ntitle: t\n-----\n"
    out = edit_frontmatter(data, add_entry())
    assert out.startswith(b"---\nmerged-from:")
    assert out.endswith(data)


KEPT = (
    "---\n"
    "# top comment\n"
    "title: 'Auth'  # trailing comment\n"
    "tags: [a, b]\n"
    'quoted: "x"\n'
    "flag: yes\n"
    "octal: 012\n"
    "date: 2026-01-01\n"
    "sexagesimal: 1:20\n"
    "nested:\n"
    "  # inner comment\n"
    "  k: v\n"
    "z_last: 1\n"
)


def test_edit_keeps_other_keys_order_comments_and_values() -> None:
    data = (KEPT + "---\n# Body\n").encode()
    out = edit_frontmatter(data, add_entry())
    text = out.decode()
    assert text.startswith(KEPT)
    assert text.endswith("---\n# Body\n")
    before = read_frontmatter(data).data
    after = read_frontmatter(out).data
    assert after.pop("merged-from") == [ENTRY]
    assert after == before
    assert list(after) == list(before)


def test_edit_keeps_comment_only_frontmatter_comment() -> None:
    out = edit_frontmatter(b"---\n# keep me\n---\nbody\n", add_entry())
    assert out.startswith(b"---\n# keep me\nmerged-from:\n")
    assert read_frontmatter(out).data == {"merged-from": [ENTRY]}
    assert out.endswith(b"\n---\nbody\n")


@pytest.mark.parametrize(
    ("existing", "expected"),
    [
        ("merged-from:\n  - {type: run, id: r0}\n", [{"type": "run", "id": "r0"}, ENTRY]),
        ("merged-from: [{type: run, id: r0}]\n", [{"type": "run", "id": "r0"}, ENTRY]),
        ("merged-from:\n", [ENTRY]),
        ("merged-from: []\n", [ENTRY]),
        ("merged-from: legacy\n", ["legacy", ENTRY]),
    ],
    ids=["block-list", "flow-list", "null", "empty-list", "scalar-becomes-first-item"],
)
def test_edit_appends_to_existing_merged_from(existing: str, expected: list[Any]) -> None:
    out = edit_frontmatter(f"---\ntitle: t\n{existing}---\n".encode(), add_entry())
    assert read_frontmatter(out).data == {"title": "t", "merged-from": expected}


def test_mutate_returning_false_gives_input_back() -> None:
    data = b"---\ntitle:   spaced   # c\n---\r\nbody"
    assert edit_frontmatter(data, lambda doc: False) is data


TRICKY = [
    "no",
    "No",
    "yes",
    "on",
    "off",
    "y",
    "n",
    "true",
    "null",
    "~",
    "1",
    "012",
    "0x1F",
    "1_000",
    "1.5",
    ".inf",
    "1:20",
    "2026-01-01",
    "2026-01-01T10:00:00Z",
    "",
    " padded ",
    "=",
    "<<",
    "a: b",
    "- item",
    "#hash",
    "x #y",
    "'single'",
    '"double"',
    "[flow]",
    "{map}",
    "*alias",
    "&anchor",
    "!tag",
    "%directive",
    "@at",
    "`tick",
    "|",
    ">",
    "? q",
    "two\nlines",
    "tab\there",
    "nel\x85here",
    "line\u2028sep",
    "caf\u00e9 \u2014 \U0001f95d",
    "path:episodes/a.md",
]


@pytest.mark.parametrize("value", TRICKY, ids=[repr(v) for v in TRICKY])
def test_written_strings_read_back_as_the_same_strings(value: str) -> None:
    entry = {"type": "episode", "id": value, "date": value, "note": value}
    out = edit_frontmatter(b"---\ntitle: t\n---\nbody\n", add_entry(entry))
    fm = read_frontmatter(out)
    assert fm.problem is None
    assert fm.data["merged-from"] == [entry]
    assert read_frontmatter(out, PlainLoader).data == fm.data


@pytest.mark.parametrize(
    "data",
    [
        b"---\ntitle: t\n",
        b"---\ntitle: [t\n---\nbody\n",
        b"---\n- a\n- b\n---\nbody\n",
        b"---\njust a string\n---\nbody\n",
    ],
    ids=["unterminated", "invalid-yaml", "list", "scalar"],
)
def test_broken_frontmatter_is_refused(data: bytes) -> None:
    called = []

    def mutate(doc: CommentedMap) -> bool:
        called.append(doc)
        return True

    with pytest.raises(InvalidFrontmatter):
        edit_frontmatter(data, mutate)
    assert called == []


def test_inventory_inject_is_idempotent_by_key() -> None:
    """Reference TestInjectMergedFrom_idempotent, through the edit + key helpers."""
    data = b"---\ntitle: Auth\n---\n# Auth\n"
    out = edit_frontmatter(data, add_entry({"type": "episode", "id": "ep-1", "note": "first"}))
    assert b"merged-from" in out
    assert existing_merge_keys(read_frontmatter(out).data) == {("episode", "id", "ep-1")}


# ---------------------------------------------------------------------------------------------
# property: any text written by the editor reads back unchanged

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(value=TEXT, body=st.binary(max_size=40))
def test_property_values_and_body_round_trip(value: str, body: bytes) -> None:
    data = b"---\ntitle: t # c\n---\n" + body
    entry = {"type": "episode", "id": value, "note": value}
    out = edit_frontmatter(data, add_entry(entry))
    assert out.endswith(body)
    assert split(out)[1] == body
    fm = read_frontmatter(out)
    assert fm.problem is None
    assert fm.data == {"title": "t", "merged-from": [entry]}


# ---------------------------------------------------------------------------------------------
# alias bombs: refused before anything expands them


def laughs(levels: int = 9, width: int = 9) -> str:
    """The "billion laughs": each level a list of ``width`` aliases of the level below."""
    lines = ["a: &a [" + ",".join(['"lol"'] * width) + "]"]
    for n in range(1, levels):
        lines.append(
            f"l{n}: &l{n} [" + ",".join([f"*{'a' if n == 1 else f'l{n - 1}'}"] * width) + "]"
        )
    return "\n".join(lines) + "\n"


def merge_laughs(levels: int = 9, width: int = 9) -> str:
    """The same explosion through merge keys, which PyYAML copies while constructing."""
    lines = ["m0: &m0 {k0: v, k1: v, k2: v}"]
    for n in range(1, levels):
        aliases = ",".join([f"*m{n - 1}"] * width)
        lines.append(f"m{n}: &m{n} {{<<: [{aliases}], own{n}: x}}")
    return "\n".join(lines) + "\n"


BOMBS = pytest.mark.parametrize(
    "text",
    [
        laughs(),
        laughs(levels=30, width=2),
        merge_laughs(),
        "a: &a {k: v}\nb: &b {x: [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]}\n"
        + "".join(
            f"c{n}: &c{n} [" + ",".join([f"*{'b' if n == 0 else f'c{n - 1}'}"] * 10) + "]\n"
            for n in range(6)
        ),
        "a: &a [*a]\n",
        "a: &a {self: *a}\n",
    ],
    ids=[
        "billion-laughs",
        "deep-doubling",
        "merge-keys",
        "mappings",
        "recursive-list",
        "recursive-map",
    ],
)


@LOADERS
@BOMBS
def test_alias_bomb_reads_as_empty_with_a_problem(loader: type, text: str) -> None:
    fm = read_frontmatter(b"---\n" + text.encode() + b"---\nbody\n", loader)
    assert fm.data == {}
    assert fm.problem is not None and "alias" in fm.problem


@BOMBS
def test_alias_bomb_is_refused_for_editing_and_writing(text: str) -> None:
    data = b"---\n" + text.encode() + b"---\nbody\n"
    with pytest.raises(InvalidFrontmatter, match="alias"):
        edit_frontmatter(data, lambda doc: True)
    with pytest.raises(InvalidFrontmatter, match="alias"):
        refuse_alias_bomb(data)


def test_the_fast_key_reader_never_reads_aliases() -> None:
    assert relevant_frontmatter(laughs().encode()) is None
    assert relevant_frontmatter(b"id: &x a\nepisode_id: *x\n") is None


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("a: &x {k: v}\nb: *x\nc: *x\n", {"a": {"k": "v"}, "b": {"k": "v"}, "c": {"k": "v"}}),
        (
            "base: &b {x: 1}\nmine:\n  <<: *b\n  y: 2\n",
            {"base": {"x": 1}, "mine": {"x": 1, "y": 2}},
        ),
        ("t: &t hello\nlist: [" + ", ".join(["*t"] * 1000) + "]\n", None),
        ("title: '**bold** * and *'\n", {"title": "**bold** * and *"}),
    ],
    ids=["shared-mapping", "merge-key", "a-thousand-scalar-aliases", "stars-in-strings"],
)
def test_modest_aliases_still_read_edit_and_write(text: str, value: Any) -> None:
    data = b"---\n" + text.encode() + b"---\nbody\n"
    for loader in (FastLoader, PlainLoader):
        fm = read_frontmatter(data, loader)
        assert fm.problem is None
        if value is not None:
            assert fm.data == value
        else:
            assert fm.data["list"] == ["hello"] * 1000
    refuse_alias_bomb(data)
    edited = edit_frontmatter(data, lambda doc: doc.update({"z": "1"}) is None)
    assert read_frontmatter(edited).data["z"] == "1"


def test_the_bound_counts_nodes_added_by_aliases() -> None:
    """Just under the bound reads; one level more does not (the bound is on expansion)."""
    width = 10
    # laughs(n, 10) expands to about 1.2 * 10**n nodes
    levels = max(n for n in range(1, 20) if 2 * width**n < MAX_ALIAS_NODES)
    under = read_frontmatter(b"---\n" + laughs(levels, width).encode() + b"---\n")
    over = read_frontmatter(b"---\n" + laughs(levels + 1, width).encode() + b"---\n")
    assert under.problem is None and len(under.data) == levels
    assert over.data == {} and "alias" in (over.problem or "")


def test_invalid_yaml_is_no_bomb_for_the_write_guard() -> None:
    """The write guard refuses only bombs: other bad frontmatter is written (and warned about)."""
    for data in (b"---\na: [\n---\n", b"---\na: *missing\n---\n", b"---\nunterminated *x\n", b"x"):
        refuse_alias_bomb(data)
