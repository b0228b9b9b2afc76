"""A snippet's line is found from the earliest match in the body lowered once; it must be the
line the plain rule picks (the first of ``splitlines()`` whose lower case holds a term)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kiwifs.index.search.keyword import LINE_BREAKS, first_line_holding


def plainly(body: str, terms: list[str]) -> str:
    lines = body.splitlines() or [""]
    return next((ln for ln in lines if any(t in ln.lower() for t in terms)), lines[0])


# words, breaks of every kind ("\r\n" too), a lower case that grows (İ), sigmas at line ends
PIECES = st.sampled_from(
    ["run", "Run", "RUN", "deploy", "roll back", " ", "İ", "Σ", "ΑΣ", "é", "\r\n", *LINE_BREAKS]
)
WORDS = ["run", "deploy", "back", "σ", "ς", "i̇", "é", "", "x"]
TERMS = st.lists(st.sampled_from(WORDS), max_size=4)


@settings(max_examples=600, deadline=None)
@given(st.lists(PIECES, max_size=30).map("".join), TERMS)
def test_the_same_line_as_the_plain_rule(body: str, terms: list[str]) -> None:
    assert first_line_holding(body, terms) == plainly(body, terms)


@given(st.text(max_size=200), st.lists(st.text(max_size=4), max_size=3))
def test_any_text_and_terms(body: str, terms: list[str]) -> None:
    assert first_line_holding(body, terms) == plainly(body, terms)


def test_examples() -> None:
    body = "Title\r\nnothing here\n\nwe Rolled back the DEPLOY\u2028after"
    assert first_line_holding(body, ["deploy"]) == "we Rolled back the DEPLOY"
    assert first_line_holding(body, ["after", "title"]) == "Title"
    assert first_line_holding(body, ["absent"]) == "Title"
    assert first_line_holding("", ["a"]) == ""
    assert first_line_holding("\n\nx", ["x"]) == "x"
    # a lower case longer than the body (İ lowers to two characters) would shift the match
    assert first_line_holding("İİİİİ\nab\ncd\nef", ["ab"]) == "ab"
    # a term holding a line break is matched within one line only
    assert first_line_holding("a\nb\na b", ["a\nb", "a b"]) == "a b"
