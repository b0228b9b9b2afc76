"""The fast indented JSON writer prints exactly what ``json.dumps(indent=2)`` prints."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiwifs.indented_json import RENDERED_BATCH, RenderedItems, dumps_indented, write_indented

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(), st.integers(), st.booleans()), inner, max_size=4),
    ),
    max_leaves=20,
)


@given(values)
def test_same_text_as_json_dumps(value: object) -> None:
    assert dumps_indented(value) == json.dumps(value, indent=2, ensure_ascii=False)


@given(values)
def test_streamed_text_is_the_same(value: object) -> None:
    stream = io.StringIO()
    write_indented(value, stream)
    assert stream.getvalue() == json.dumps(value, indent=2, ensure_ascii=False)


def test_streamed_text_of_a_large_report_is_the_same() -> None:
    """Large enough to be handed over in several chunks."""
    value = {"files": [{"path": f"episodes/{i}.md", "episode_id": f"e{i}"} for i in range(20000)]}
    stream = io.StringIO()
    write_indented(value, stream)
    assert stream.getvalue() == json.dumps(value, indent=2, ensure_ascii=False)


@given(st.lists(values, max_size=5), st.integers(min_value=0, max_value=3))
def test_rendered_items_write_as_the_values_would(items: list[object], depth: int) -> None:
    """Items rendered at the depth they land at give the text of the plain list."""
    value: object = items
    rendered: object = RenderedItems([dumps_indented(i, depth + 1) for i in items], depth + 1)
    for _ in range(depth):
        value, rendered = {"k": value}, {"k": rendered}
    assert dumps_indented(rendered) == json.dumps(value, indent=2, ensure_ascii=False)


def test_many_rendered_items_are_joined_across_batches() -> None:
    items = [{"path": f"episodes/{i}.md"} for i in range(RENDERED_BATCH * 2 + 3)]
    document = {"files": RenderedItems([dumps_indented(i, 2) for i in items], 2)}
    stream = io.StringIO()
    write_indented(document, stream)
    expected = json.dumps({"files": items}, indent=2, ensure_ascii=False)
    assert stream.getvalue() == expected


def test_rendered_items_at_the_wrong_depth_are_refused() -> None:
    with pytest.raises(ValueError, match="depth 1 written at depth 2"):
        dumps_indented({"files": RenderedItems(["{}"], 1)})
