"""The fast indented JSON writer prints exactly what ``json.dumps(indent=2)`` prints."""

from __future__ import annotations

import io
import json

from hypothesis import given
from hypothesis import strategies as st

from kiwifs.jsontext import dumps_indented, write_indented

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
