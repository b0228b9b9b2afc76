"""The tokenizer's counts: an ASCII text split in Python counts exactly what FTS5 counts.

:meth:`bm25.Tokenizer.counts` splits ASCII texts itself and asks FTS5 only for the stems of new
runs; :meth:`bm25.Tokenizer.fts_counts` is FTS5 alone, the plain result it must equal."""

from __future__ import annotations

import random
import string
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from kiwifs.index.search import bm25

WORDS = ["release", "releases", "running", "ran", "happy", "national", "electric", "id42"]
ascii_texts = st.lists(
    st.text(alphabet=st.sampled_from(list(string.printable) + ["\0", "\x7f", "\x01"]), max_size=80)
    | st.lists(st.sampled_from(WORDS + [" ", "-", "_", ".", "\n", "'"]), max_size=30).map("".join),
    max_size=6,
)

FORMS = ["releas", "run", "deploy", "nation", "hope", "sky", "agre"]
ENDS = ["", "s", "es", "ies", "ed", "ing", "y", "ational", "ization", "ness", "ous", "al"]
ENDS += ["er", "ic"]
OTHER = [" café résumé", " Ünïcödé naïve", " 日本語 テキスト", " ﬁle"]


def mixed_texts(seed: int, count: int) -> list[str]:
    """Words in many forms, cases, digits and separators; one text in five not ASCII."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        words = []
        for _ in range(rng.randint(0, 40)):
            word = rng.choice(FORMS) + rng.choice(ENDS)
            if rng.random() < 0.2:
                word = "".join(rng.choices(string.ascii_letters + string.digits, k=9))
            words.append(word.upper() if rng.random() < 0.1 else word)
        text = "".join(w + rng.choice([" ", "\n", "-", "_", ", ", "**", "'"]) for w in words)
        out.append(text + (rng.choice(OTHER) if n % 5 == 3 else ""))
    return out


@settings(max_examples=300, deadline=None)
@given(ascii_texts)
def test_every_ascii_text_counts_as_in_fts5(batch: list[str]) -> None:
    tokenizer = bm25.Tokenizer()  # a fresh one: its first runs are all new
    assert tokenizer.counts(batch) == tokenizer.fts_counts(batch)
    assert tokenizer.counts(batch) == tokenizer.fts_counts(batch)  # now from remembered stems


def test_mixed_texts_and_chosen_terms_count_as_in_fts5() -> None:
    """Texts with accents and other scripts (counted by FTS5) beside ASCII ones, with and
    without a list of terms."""
    tokenizer = bm25.Tokenizer()
    batch = mixed_texts(7, 120)
    assert any(not t.isascii() for t in batch) and any(t.isascii() for t in batch)
    assert tokenizer.counts(batch) == tokenizer.fts_counts(batch)
    terms = ["releas", "run", "nation", "hope", "caf", "naïv", "absent"]
    assert tokenizer.counts(batch, terms) == tokenizer.fts_counts(batch, terms)


def test_a_remembered_stem_is_fts5s() -> None:
    tokenizer = bm25.Tokenizer()
    assert tokenizer.counts(["Releases RELEASED release_notes x1"]) == [
        ({"releas": 3, "note": 1, "x1": 1}, 5)
    ]
    assert tokenizer.counts(["released"])[0][0] == {"releas": 1}


def test_the_remembered_stems_are_bounded(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(bm25, "MAX_FORMS", 10)
    tokenizer = bm25.Tokenizer()
    # each text shares half its words with the one before: some of a text's forms are known
    # when the rest overflow the bound, and are forgotten with them
    batch = [" ".join(f"word{n}s" for n in range(k, k + 8)) for k in range(0, 80, 4)]
    assert tokenizer.counts(batch) == tokenizer.fts_counts(batch)
    assert len(tokenizer._stems) <= 10


def test_threads_counting_at_once_agree_with_fts5() -> None:
    """Runs learnt by one thread are never read half-made by another."""
    tokenizer = bm25.Tokenizer()
    batches = [mixed_texts(seed, 40) for seed in range(8)]
    expected = [tokenizer.fts_counts(b) for b in batches]
    got: dict[int, object] = {}

    def count(i: int) -> None:
        got[i] = tokenizer.counts(batches[i])

    threads = [threading.Thread(target=count, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[i] for i in range(8)] == expected
