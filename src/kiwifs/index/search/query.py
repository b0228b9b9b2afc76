"""How a search query is read: natural language unless it is clearly FTS5 (docs/search.md).

Agents ask questions ("When did Caroline go to the support group?"), they do not write FTS5.
AND-ing every word of a question finds almost nothing, so plain text is matched as **any** of
its words, ranked by BM25 (a page holding more of the rarer words ranks higher; BM25 of an OR
query is the sum of each word's contribution). English stop words are left out of that OR —
they match nearly every page and add nothing but cost — unless the query is made of nothing
else ("what is it" is still asked as its words). At most :data:`MAX_TERMS` distinct terms are
kept, in the order they come.

A query is **FTS5 syntax** only when it says so explicitly, the way KiwiFS clients send it:
an upper-case ``AND``/``OR``/``NOT`` between terms, ``NEAR(``, a prefix ``word*``, an initial
token ``^word``, a column filter naming a real column (``body:``), or nothing but quoted phrases
(``"exact phrase"``). Such a query is handed to FTS5 as written; when FTS5 rejects it (``fox
AND``, a question ending in ``?``, an unbalanced quote), it is read as natural language instead.
A query string is never an error.

Inside natural language, a balanced quoted phrase (``read the book "nothing is impossible"``) and
a word joined of several (``run-249``, ``episode_id``) are also OR-ed in as phrases: a page
holding the phrase scores its words and the phrase, so it ranks first, and a page holding only
some of the words is still found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kiwifs.index.search.bm25 import TOKENIZER
from kiwifs.index.search.termcolumns import PHRASE

MAX_TERMS = 32  # distinct words and phrases OR-ed from one query (the rest are ignored)
COLUMNS = frozenset({"body"})  # the text index's columns, as a column filter names them
_OPERATORS = frozenset({"AND", "OR", "NOT"})
_WORD = re.compile(r"[^\W_]+")  # a run of letters and digits: unicode61's token characters
_QUOTED = re.compile(r'"((?:[^"]|"")*)"')
_PREFIX = re.compile(r'(?:[^\W_]|")\*(?:\)*)$')
_COLUMN = re.compile(r"^[-(]*(\w+)\s*:")
_INITIAL = re.compile(r"^\(*\^[^\W_]")

# English stop words (the usual list: pronouns, articles, auxiliaries, prepositions,
# conjunctions, question words, contraction pieces): left out of a natural query's OR
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are aren as at be because been before
    being below between both but by can couldn d did didn do does doesn doing don down during
    each few for from further had hadn has hasn have haven having he her here hers herself him
    himself his how i if in into is isn it its itself just ll m ma me mightn more most mustn my
    myself needn no nor not now o of off on once only or other our ours ourselves out over own
    re s same shan she should shouldn so some such t than that the their theirs them themselves
    then there these they this those through to too under until up ve very was wasn we were
    weren what when where which while who whom why will with won wouldn y you your yours
    yourself yourselves""".split()
)


@dataclass(frozen=True)
class Term:
    """One OR-ed term: ``key`` names its term column (an indexed word, or :data:`PHRASE` and
    the phrase), ``match`` is its FTS5 string."""

    key: str
    match: str


@dataclass(frozen=True)
class Query:
    """A query as read: ``syntax`` is the FTS5 expression to try first (``None``: plain text);
    ``terms`` is the natural reading (any of them), also the fallback when FTS5 rejects the
    syntax; ``words`` are the lower-cased words a snippet marks."""

    text: str
    syntax: str | None
    terms: tuple[Term, ...]
    words: tuple[str, ...]

    @property
    def any_match(self) -> str:
        """The natural reading as one FTS5 expression: its terms OR-ed, in order."""
        return " OR ".join(term.match for term in self.terms)


def parse(text: str) -> Query:
    """Read ``text`` (see the module docstring); never raises on any string."""
    terms, words = natural_terms(text)
    return Query(text, text if is_fts5(text) else None, terms, words)


def is_fts5(text: str) -> bool:
    """True when ``text`` uses FTS5 syntax explicitly (and is tried as written first)."""
    tokens = text.split()
    inner = tokens[1:-1]
    if any(tok.strip("()") in _OPERATORS for tok in inner):
        return True
    for tok in tokens:
        if tok.lstrip("(").startswith("NEAR(") or _PREFIX.search(tok) or _INITIAL.match(tok):
            return True
        column = _COLUMN.match(tok)
        if column and column.group(1).lower() in COLUMNS:
            return True
    rest = _QUOTED.sub(" ", text)
    return rest.strip() == "" and '"' in text


def natural_terms(text: str) -> tuple[tuple[Term, ...], tuple[str, ...]]:
    """The terms OR-ed for plain text and the words a snippet marks.

    Quoted phrases come first, then the words in order (stop words left out unless there is
    nothing else), then words joined of several; each distinct, :data:`MAX_TERMS` at most."""
    words = _WORD.findall(text)
    content = [w for w in words if w.lower() not in STOP_WORDS]
    phrases = [p.replace('""', " ") for p in _QUOTED.findall(text)]
    joined = [tok for tok in text.split() if _is_joined(tok)]
    kept = content or words
    candidates = [*(_phrase(p) for p in phrases), *kept, *(_phrase(j) for j in joined)]
    candidates = [c for c in candidates if c]
    counted = TOKENIZER.counts(candidates) if candidates else []
    terms: list[Term] = []
    seen: set[str] = set()
    for candidate, (found, length) in zip(candidates, counted, strict=True):
        if length == 0:
            continue
        if length == 1:
            key, match = next(iter(found)), f'"{candidate}"'
        else:
            match = '"' + " ".join(_WORD.findall(candidate)) + '"'
            key = PHRASE + match
        if key not in seen:
            seen.add(key)
            terms.append(Term(key, match))
        if len(terms) == MAX_TERMS:
            break
    marked = dict.fromkeys(w.lower() for w in kept)
    return tuple(terms), tuple(marked)


def _phrase(text: str) -> str:
    """A phrase's words joined by spaces (what an FTS5 string of them holds), or ``""``."""
    return " ".join(_WORD.findall(text))


def _is_joined(token: str) -> bool:
    """A token of several words joined by something other than an apostrophe (``run-249``,
    ``episode_id``, ``v1.2``), not counting punctuation around it."""
    found = _WORD.findall(token)
    if len(found) < 2:
        return False
    start, end = token.find(found[0]), token.rfind(found[-1]) + len(found[-1])
    between = _WORD.sub("", token[start:end])
    return bool(between) and not set(between) <= {"'", "\u2019"}
