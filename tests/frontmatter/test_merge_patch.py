"""The frontmatter merge patch (RFC 7386) as a pure function: keys set, ``None`` removing one,
objects merged, key order and formatting kept, and every byte outside the YAML identical."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiwifs.errors import InvalidFrontmatter, UsageError
from kiwifs.frontmatter.edit import merge_patched
from kiwifs.frontmatter.reader import read_frontmatter

PAGE = (
    b"---\n"
    b"title: Auth  # the page's name\n"
    b"status: draft\n"
    b"tags: [a, b]\n"
    b"owner:\n"
    b"  team: core\n"
    b"  lead: ann\n"
    b"---\n"
    b"# Auth\n\nbody --- text\n"
)


def fm(data: bytes) -> dict[str, object]:
    return dict(read_frontmatter(data).data)


def test_set_remove_and_nested_merge() -> None:
    out = merge_patched(
        PAGE, {"status": "done", "tags": None, "owner": {"lead": None, "since": 2024}, "n": 1}
    )
    assert fm(out) == {
        "title": "Auth",
        "status": "done",
        "owner": {"team": "core", "since": 2024},
        "n": 1,
    }
    text = out.decode()
    assert text.index("title:") < text.index("status:") < text.index("owner:") < text.index("n:")
    assert "title: Auth  # the page's name\n" in text  # an untouched key keeps its comment
    assert out.endswith(b"---\n# Auth\n\nbody --- text\n")


def test_values_read_back_as_sent() -> None:
    patch = {"a": "no", "b": "1", "c": True, "d": [1, "x", {"k": None}], "e": 1.5, "f": ""}
    out = merge_patched(PAGE, patch)
    assert {k: fm(out)[k] for k in patch} == patch


def test_a_new_object_drops_its_nulls_and_replaces_a_scalar() -> None:
    out = merge_patched(PAGE, {"status": {"x": 1, "y": None}, "new": {"z": None}})
    assert fm(out)["status"] == {"x": 1} and fm(out)["new"] == {}


def test_no_change_is_the_same_bytes() -> None:
    assert merge_patched(PAGE, {"status": "draft", "gone": None}) is PAGE
    assert merge_patched(PAGE, {}) is PAGE


def test_a_file_without_frontmatter_gets_a_block() -> None:
    assert merge_patched(b"# Body\n", {"status": "done"}) == b"---\nstatus: done\n---\n# Body\n"


def test_the_blocks_own_lines_are_kept() -> None:
    data = b"---\r\na: 1\n...\nbody\n"
    assert merge_patched(data, {"a": 2}) == b"---\r\na: 2\n...\nbody\n"


def test_every_key_removed_drops_the_block() -> None:
    assert merge_patched(b"---\na: 1\n---\nbody\n", {"a": None}) == b"body\n"


@pytest.mark.parametrize(
    "data",
    [b"---\na: [1\n---\nbody\n", b"---\n- a\n---\nbody\n", b"---\na: 1\nbody without end\n"],
)
def test_broken_frontmatter_is_refused(data: bytes) -> None:
    with pytest.raises(InvalidFrontmatter):
        merge_patched(data, {"a": 2})


@pytest.mark.parametrize(
    "patch", [{"a": "\ud800"}, {"\ud800": 1}, {"a": object()}, {"a": [[[[]]]] * 1}]
)
def test_patches_yaml_cannot_hold_are_refused(patch: dict[str, object]) -> None:
    if patch == {"a": [[[[]]]]}:  # nesting within the bound is fine
        assert fm(merge_patched(PAGE, patch))["a"] == [[[[]]]]
        return
    with pytest.raises(UsageError):
        merge_patched(PAGE, patch)


def test_too_deep_a_patch_is_refused() -> None:
    deep: dict[str, object] = {}
    for _ in range(40):
        deep = {"k": deep}
    with pytest.raises(UsageError):
        merge_patched(PAGE, deep)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=st.text(st.characters(codec="utf-8"), max_size=200),
    value=st.one_of(st.text(max_size=20), st.integers(), st.booleans(), st.none()),
)
def test_bytes_outside_the_frontmatter_are_identical(body: str, value: object) -> None:
    data = PAGE[: PAGE.index(b"# Auth")] + body.encode()
    out = merge_patched(data, {"status": value})
    assert out.endswith(b"\n---\n" + body.encode())
    expected = {k: v for k, v in fm(data).items() if k != "status"}
    if value is not None:
        expected["status"] = value
    assert fm(out) == expected
