"""Counting words in bulk: every count and every text's length is FTS5's own, whatever the
text (punctuation, digits, long runs, other scripts, every ending the stemmer knows)."""

from __future__ import annotations

import random
import string

import pytest

from kiwifs.index.search import bm25, wordcounts
from kiwifs.index.search.wordcounts import STEMMED_ENDINGS, WordCounter, common_words

ENDINGS = ["s", "es", "ies", "ed", "ing", "y", "ational", "ization", "ness", "ment", "ful"]
ENDINGS += ["ous", "ive", "ize", "al", "ance", "er", "ic", "able", "ant", "ion", "ism", "ll"]
CHANGED = {"c": "electric", "d": "hoped", "e": "relate", "g": "running", "i": "formaliti"}
CHANGED |= {"l": "national", "m": "criticism", "n": "adoption", "r": "airliner", "s": "runs"}
CHANGED |= {"t": "adjustment", "u": "homologou", "y": "happy"}


def texts(seed: int, count: int) -> list[str]:
    """Texts of a small vocabulary in many forms (stemmed suffixes, cases, digits), with
    punctuation between words, runs longer than 16 letters, and one text in ten with accents
    or another script."""
    rng = random.Random(seed)
    stems = ["releas", "run", "deploy", "index", "nation", "hope", "sky", "agre", "frontmatter"]
    out = []
    for n in range(count):
        words = []
        for _ in range(rng.randint(0, 60)):
            pick = rng.random()
            if pick < 0.6:
                word = rng.choice(stems) + rng.choice(["", *ENDINGS])
            elif pick < 0.75:
                word = "".join(rng.choices(string.ascii_lowercase + string.digits, k=8))
            elif pick < 0.8:
                word = "consolidationally" + rng.choice(["", "s", "ing"])  # over 16 letters
            elif pick < 0.9:
                word = str(rng.randint(0, 3000))
            else:
                word = rng.choice(["a", "I", "x1", "ies", "day", "Day", "RUNS"])
            if rng.random() < 0.2:
                word = word.upper() if rng.random() < 0.5 else word.capitalize()
            words.append(word)
        separators = [" ", "\n", "-", ", ", "_", "'", "(", ") ", ": ", "**", "[[", "]] ", "\t"]
        text = "".join(w + rng.choice(separators) for w in words)
        if n % 10 == 3:
            text += rng.choice([" café résumé", " Ünïcödé naïve", " 日本語 テキスト", " ﬁle"])
        out.append(text)
    return out


def chosen(sample: list[str]) -> list[str]:
    return common_words(sample, 0.02, 500)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_counts_are_fts5s(seed: int) -> None:
    sample = texts(seed, 300)
    words = chosen(sample)
    assert "releas" in words and len(words) > 20
    counter = WordCounter(words)
    for start in range(0, len(sample), 70):  # batches: the forms learnt carry over
        batch = sample[start : start + 70]
        counts, lengths = counter.count(batch)
        exact = bm25.TOKENIZER.fts_counts(batch, words)
        for i, (found, length) in enumerate(exact):
            assert int(lengths[i]) == length, batch[i]
            mine = {words[j]: int(n) for j, n in enumerate(counts[i]) if n}
            assert mine == dict(found), batch[i]


def test_counts_stay_fts5s_while_forgetting_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    """The forms of no chosen word are forgotten past MAX_OTHERS: a batch whose forms were
    partly known before the forgetting is still counted whole, and counted right."""
    monkeypatch.setattr(wordcounts, "MAX_OTHERS", 3)
    # no run over 16 letters: those are classified in a call of their own, which would
    # forget (and so hide) the forms of the batch before
    sample = [t.replace("consolidationally", "deploy") for t in texts(4, 200)]
    words = ["releas", "run", "index"]  # the other stems' forms come back as others
    counter = WordCounter(words)
    for start in range(0, len(sample), 20):
        batch = sample[start : start + 20]
        counts, lengths = counter.count(batch)
        for i, (found, length) in enumerate(bm25.TOKENIZER.fts_counts(batch, words)):
            assert int(lengths[i]) == length
            assert {words[j]: int(n) for j, n in enumerate(counts[i]) if n} == dict(found)


def test_words_past_the_counter_are_not_counted() -> None:
    counter = WordCounter(["run"])
    counts, lengths = counter.count(["runs running ran RUN run-away", "", "nothing here"])
    assert counts[:, 0].tolist() == [4, 0, 0]  # runs, running, RUN, run (not ran, away)
    assert lengths.tolist() == [6, 0, 2]


@pytest.mark.parametrize("ending", sorted(set(string.ascii_lowercase + string.digits)))
def test_runs_ending_past_the_stemmed_endings_are_their_own_stems(ending: str) -> None:
    """The rule the counter leans on to skip FTS5 for most new runs: a run whose last
    character is not in STEMMED_ENDINGS is its own stem."""
    rng = random.Random(ending)
    forms = ["".join(rng.choices(string.ascii_lowercase, k=n)) + ending for n in range(0, 12)]
    forms += [stem + suffix + ending for stem in ("nation", "hop", "agre") for suffix in ENDINGS]
    forms += [ending * 3, "a" + ending, "ie" + ending]
    stems = bm25.TOKENIZER.stems(forms)
    if ending.encode() not in STEMMED_ENDINGS:
        assert stems == forms
    else:  # listed for a reason: a word of that ending the stemmer changes
        word = CHANGED[ending]
        assert word.endswith(ending) and bm25.TOKENIZER.stems([word]) != [word]


def test_common_words_are_the_sample_s() -> None:
    sample = ["the fox runs", "a fox ran", "fox and river", "river"]
    assert common_words(sample, 0.5, 10) == ["fox", "river"]
    assert common_words(sample, 0.5, 1) == ["fox"]
    assert common_words([], 0.5, 10) == []
    dated = ["fox 2025 06 1st", "fox 2025 v2", "river 2025 1st"]
    assert common_words(dated, 0.5, 10) == ["2025", "1st", "fox"]  # ties by word
    assert common_words(dated, 0.5, 10, numbers=False) == ["fox"]
