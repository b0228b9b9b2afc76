"""FTS5's BM25, reproduced outside FTS5 to the last bit, and FTS5's own word counting.

FTS5's ``bm25()`` of a document for a query of phrases ``p`` is ``-Σ idf(p) · f·(k1+1) / (f +
k1·(1 − b + b·dl/avgdl))`` with ``k1 = 1.2``, ``b = 0.75``, ``f`` the phrase's occurrences in
the document, ``dl`` its length in words, ``avgdl`` the table's total words over its rows, and
``idf = log((N − n + 0.5) / (n + 0.5))`` (``1e-6`` when that is not positive: a word in more
than half the documents). The functions here evaluate it with the same operations in the same
order, so IEEE doubles give the very same numbers (the tests compare them with ``bm25()``).

Words are counted as FTS5 counts them (:class:`Tokenizer`: the index's tokenizer in a private
in-memory database), so a count never disagrees with the index about what a word is. An ASCII
text is split here, where FTS5 would split it, and only its new forms go through FTS5's stemmer.
"""

from __future__ import annotations

import math
import re
import sqlite3
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

TOKENIZE = "porter unicode61 remove_diacritics 1"
K1 = 1.2
B = 0.75
# The last characters of the runs the stemmer (Porter's, as FTS5 has it) may change: every
# suffix its rules remove or replace ends in one of them (``-s``, ``-ed``, ``-ing``, ``-y``,
# ``-al``, ``-ance``, ``-ic``, ``-er``, ``-ant``, ``-ion``, ``-ou``, ``-ism``, ``-iti``, ...).
# A run ending in anything else (a digit, ``a``, ``b``, ``f``, ...) is its own stem, which a
# test holds against FTS5 for every ending.
STEMMED_ENDINGS = b"cdegilmnrstuy"
MAX_FORMS = 200_000  # lower-cased runs whose stems are remembered (then forgotten: ids are unique)
_RUN = re.compile(r"[a-z0-9]+")  # unicode61's tokens of a lower-cased ASCII text
_ENDINGS = tuple(chr(c) for c in STEMMED_ENDINGS)


def term_score(tf: float, dl: float, avgdl: float) -> float:
    """One phrase's factor, written as FTS5's C code computes it."""
    return (tf * (K1 + 1.0)) / (tf + K1 * (1 - B + B * dl / avgdl))


def shape(dl: Any, avgdl: float) -> Any:
    """The length part of a phrase's factor, ``k1·(1 − b + b·dl/avgdl)``, for a length or an
    array of them (as doubles), with FTS5's operations in FTS5's order."""
    return K1 * (1 - B + B * dl / avgdl)


def share(weight: Any, tf: Any, length_shape: Any) -> Any:
    """One phrase's part of a score, ``idf · f·(k1+1) / (f + shape)``, for numbers or arrays
    (``tf`` as doubles), with FTS5's operations in FTS5's order: every place that scores a
    document outside FTS5 computes it here, so all of them agree with FTS5 to the bit."""
    return weight * ((tf * (K1 + 1.0)) / (tf + length_shape))


def document_lengths(np: Any, conn: sqlite3.Connection) -> Any:
    """Every document's number of words as FTS5 recorded it (``fts_docsize``), by row id;
    ``-1`` where there is no document."""
    rows = conn.execute("SELECT id, sz FROM fts_docsize").fetchall()
    size = max((int(i) for i, _ in rows), default=0) + 1
    lengths = np.full(size, -1, dtype=np.int64)
    if rows:
        ids = np.fromiter((int(i) for i, _ in rows), dtype=np.int64, count=len(rows))
        lengths[ids] = [varint(sz)[0] for _, sz in rows]
    return lengths


def idf(nrows: int, nhit: int) -> float:
    value = math.log((nrows - nhit + 0.5) / (nhit + 0.5))
    return value if value > 0.0 else 1e-6


def varint(blob: bytes, at: int = 0) -> tuple[int, int]:
    """SQLite's variable-length integer at ``at``: ``(value, next offset)``."""
    value = 0
    for i in range(9):
        byte = blob[at]
        at += 1
        if i == 8:
            return (value << 8) | byte, at
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            break
    return value, at


def solve(np: Any, fts: Any, dl: Any, nrows: int, nhit: int, ntokens: int) -> Any:
    """Each document's frequency of a one-phrase query from FTS5's ``bm25()`` of it (``fts``,
    the documents' lengths ``dl``, the table's totals and the phrase's document count), or
    ``None`` unless the frequencies, scored again, give back every score to the last bit."""
    weight = idf(nrows, nhit)
    avgdl = ntokens / nrows
    factor = shape(dl.astype(np.float64), avgdl)
    score = -fts
    tf = np.rint(score * factor / ((K1 + 1.0) * weight - score))
    again = -1.0 * (0.0 + share(weight, tf, factor))
    if len(fts) and (tf.min() < 1 or not np.array_equal(again, fts)):
        return None
    return tf


def totals(conn: sqlite3.Connection) -> tuple[int, int]:
    """The ``fts`` table's row count and word count (its "averages" record), as BM25 reads them."""
    row = conn.execute("SELECT block FROM fts_data WHERE id = 1").fetchone()
    if row is None or not row[0]:
        return 0, 0
    nrows, at = varint(row[0])
    return nrows, varint(row[0], at)[0]


class Tokenizer:
    """FTS5's tokenizer on a private in-memory database: the words of a text, as FTS5 sees them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(":memory:", check_same_thread=False)
        self._conn.execute(
            f"CREATE VIRTUAL TABLE tok USING fts5(body, content = '', tokenize = '{TOKENIZE}')"
        )
        self._conn.execute("CREATE VIRTUAL TABLE tokv USING fts5vocab('tok', 'instance')")
        self._stems: dict[str, str] = {}

    def counts(
        self, texts: Sequence[str], terms: Sequence[str] | None = None
    ) -> list[tuple[Counter[str], int]]:
        """Per text, how often each word occurs (only ``terms`` when given: far cheaper than
        listing every word) and its length in words.

        An ASCII text is split here: ``unicode61`` makes a token of each run of letters and
        digits there (every other ASCII character separates) and folds it to lower case, so
        its tokens are the runs of ``[a-z0-9]`` of the lower-cased text; each run is then
        stemmed by FTS5 itself, once (:meth:`_stem_all`). That costs ~0.4 ms for three pages
        against ~2 ms through FTS5's vocabulary table. Any other text is counted by FTS5."""
        out: list[tuple[Counter[str], int]] = [(Counter(), 0) for _ in texts]
        other = [i for i, text in enumerate(texts) if not text.isascii()]
        wanted = None if terms is None else frozenset(terms)
        for i, text in enumerate(texts):
            if text.isascii():
                out[i] = self._ascii_counts(text, wanted)
        if other:
            counted = self.fts_counts([texts[i] for i in other], terms)
            for i, each in zip(other, counted, strict=True):
                out[i] = each
        return out

    def _ascii_counts(self, text: str, wanted: frozenset[str] | None) -> tuple[Counter[str], int]:
        forms = _RUN.findall(text.lower())
        stems = self._stem_all(forms)
        found = Counter(map(stems.__getitem__, forms))
        if wanted is not None:
            found = Counter({w: n for w, n in found.items() if w in wanted})
        return found, len(forms)

    def _stem_all(self, forms: list[str]) -> dict[str, str]:
        """The remembered stems, holding every one of ``forms`` (runs of ``[a-z0-9]``): a run
        ending past :data:`STEMMED_ENDINGS` is its own stem, any other new one is asked of
        FTS5."""
        stems = self._stems
        new = set(forms).difference(stems)
        if not new:
            return stems
        if len(stems) + len(new) > MAX_FORMS:
            # forgotten all at once, and then every form of this text is new (the ones known
            # before are asked again): the answer must hold each of them
            stems = self._stems = {}
            new = set(forms)
        ask = [f for f in new if f.endswith(_ENDINGS)]
        made = dict(zip(new, new, strict=True))
        made.update(zip(ask, self.stems(ask), strict=True))
        stems.update(made)  # at once: another thread never reads a run before its stem
        return stems

    def fts_counts(
        self, texts: Sequence[str], terms: Sequence[str] | None = None
    ) -> list[tuple[Counter[str], int]]:
        """:meth:`counts` made by FTS5 alone, whatever the texts' characters."""
        out: list[tuple[Counter[str], int]] = [(Counter(), 0) for _ in texts]
        if not texts:
            return out
        sql = "SELECT doc, term, count(*) FROM tokv"
        params: tuple[str, ...] = ()
        if terms is not None:
            sql += f" WHERE term IN ({','.join('?' * len(terms))})"
            params = tuple(terms)
        with self._lock:
            conn = self._conn
            conn.executemany("INSERT INTO tok (rowid, body) VALUES (?, ?)", list(enumerate(texts)))
            for doc, term, n in conn.execute(sql + " GROUP BY 1, 2", params):
                out[doc][0][term] = n
            sizes = conn.execute("SELECT id, sz FROM tok_docsize").fetchall()
            conn.execute("INSERT INTO tok (tok) VALUES ('delete-all')")
            conn.commit()
        for doc, size in sizes:
            out[doc] = (out[doc][0], varint(size)[0])
        return out

    def stems(self, forms: Sequence[str]) -> list[str]:
        """The indexed word of each form (``releases`` → ``releas``). Each form must be one
        word to FTS5 (a run of ASCII letters and digits is); all go through FTS5 as one text,
        each word found again by its place in it."""
        if not forms:
            return []
        out: list[str | None] = [None] * len(forms)
        with self._lock:
            conn = self._conn
            conn.execute("INSERT INTO tok (rowid, body) VALUES (1, ?)", (" ".join(forms),))
            for term, offset in conn.execute("SELECT term, offset FROM tokv"):
                out[int(offset)] = term
            conn.execute("INSERT INTO tok (tok) VALUES ('delete-all')")
            conn.commit()
        if any(word is None for word in out):
            raise ValueError("a form that is not one word")
        return [word for word in out if word is not None]

    def phrase_counts(
        self, texts: Sequence[str], phrases: Sequence[str]
    ) -> list[dict[int, int]] | None:
        """Per FTS5 phrase (``"a b"``, ``memo*``), its number of instances in each text that
        holds it (by the text's position), solved from FTS5's own BM25 of the phrase over these
        texts; ``None`` when a score does not solve exactly."""
        import numpy as np

        out: list[dict[int, int]] = []
        with self._lock:
            conn = self._conn
            conn.executemany("INSERT INTO tok (rowid, body) VALUES (?, ?)", list(enumerate(texts)))
            try:
                sizes = conn.execute("SELECT id, sz FROM tok_docsize").fetchall()
                dl = np.zeros(len(texts), dtype=np.int64)
                for doc, size in sizes:
                    dl[doc] = varint(size)[0]
                # the table holds these texts alone (its totals record is written at commit)
                nrows, ntokens = len(texts), int(dl.sum())
                for phrase in phrases:
                    rows = conn.execute(
                        "SELECT rowid, bm25(tok) FROM tok WHERE tok MATCH ?", (phrase,)
                    ).fetchall()
                    found = np.array(rows, dtype=np.float64).reshape(-1, 2)
                    ids = found[:, 0].astype(np.int64)
                    tf = solve(np, found[:, 1], dl[ids], nrows, len(ids), ntokens)
                    if tf is None:
                        return None
                    out.append({int(d): int(n) for d, n in zip(ids, tf, strict=True)})
            finally:
                conn.execute("INSERT INTO tok (tok) VALUES ('delete-all')")
                conn.commit()
        return out


TOKENIZER = Tokenizer()


def query_words(text: str) -> list[tuple[str, str]] | None:
    """``(indexed word, token as written)`` for each whitespace token of a plain query, or
    ``None`` when a token is not exactly one word (``run-249`` is a phrase of two; ``++`` is
    none). The token is what to give FTS5: its stemmer is not idempotent (``release`` is
    indexed as ``releas``, and ``releas`` would be looked up as ``relea``)."""
    tokens = text.split()
    words: list[tuple[str, str]] = []
    for token, (found, length) in zip(tokens, TOKENIZER.counts(tokens), strict=True):
        if len(found) != 1 or length != 1:
            return None
        words.append((next(iter(found)), token))
    return words or None
