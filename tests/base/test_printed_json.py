"""Printed JSON is exactly what ``json.dumps(value, indent=2, ensure_ascii=False)`` writes."""

from __future__ import annotations

import json

from hypothesis import example, given
from hypothesis import strategies as st

from kiwifs.base.printed_json import RawJSON, dumps

# text with lone surrogates too (a file name that is not UTF-8 decodes to them)
texts = st.text(st.characters(blacklist_categories=()), max_size=8)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**63 - 2, max_value=2**64 + 2),
    st.floats(),
    st.sampled_from([1e-05, 1e-07, 1.5e-300, 1e16, 1e22, -0.0, 0.1]),
    texts,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(
            st.one_of(texts, st.integers(), st.booleans(), st.none()), inner, max_size=4
        ),
    ),
    max_leaves=20,
)


def standard(value: object) -> bytes:
    return json.dumps(value, indent=2, ensure_ascii=False).encode("utf-8", "surrogatepass")


@given(values)
def test_same_bytes_as_json_dumps(value: object) -> None:
    assert dumps(value, "surrogatepass") == standard(value)


def test_what_orjson_writes_differently_is_written_as_json_dumps_does() -> None:
    for value in [1e-05, [1e-07, 1e16], {"score": 2.5e-06}, float("nan"), float("-inf")]:
        assert dumps(value) == standard(value)
    for value in [{"p": "\udcff.md"}, 2**64, {1: "one", None: 2}]:  # orjson refuses these
        assert dumps(value, "surrogatepass") == standard(value)


@given(st.lists(values, max_size=4), st.integers(min_value=0, max_value=3), values)
# a key twice in the raw text ('false' and False), beside a key orjson refuses (None): the
# standard library's way must splice the text in, not read it back (which kept one key)
@example(items=[{"false": None, False: None}], depth=1, other={None: None})
def test_raw_json_is_written_as_the_value_it_holds(
    items: list[object], depth: int, other: object
) -> None:
    """Text indented for where it lands prints as the value would, beside any other value."""
    text = json.dumps(items, indent=2, ensure_ascii=False).replace("\n", "\n" + "  " * depth)
    value: object = items
    raw: object = RawJSON(text)
    for _ in range(depth):
        value, raw = {"k": value, "o": other}, {"k": raw, "o": other}
    assert dumps(raw, "surrogatepass") == standard(value)
