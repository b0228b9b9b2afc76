"""Counting chosen words in many texts at once, exactly as the text index counts them.

A rebuild makes the term columns of a root's most common words (:mod:`index.search.storedcolumns`)
from the texts it indexes, so a server's first searches find them made. Asking FTS5 for every
(document, word) count costs about a microsecond each, some 150 µs a document for the words of a
typical page; this counts them with a few array operations over a whole batch of texts instead.

**The same words as FTS5.** The index's tokenizer (``unicode61``, then ``porter``) splits ASCII
text into runs of letters and digits, folds them to lower case and stems them. An ASCII text is
split here the same way (a few comparisons a byte), and each new lower-cased run that the
stemmer could change is stemmed by FTS5 itself (:data:`bm25.TOKENIZER`) once, then remembered:
the stems are FTS5's, never a copy of its rules. The one rule taken from the stemmer is which
last letters its suffixes end in (:data:`STEMMED_ENDINGS`): a run ending otherwise (most ids and
numbers) is its own stem, and a test holds that against FTS5. A text with any other character is
counted by FTS5 alone. Each text's number of words comes back too, so the caller can hold it
against FTS5's own (``fts_docsize``) and throw away columns that disagree anywhere.

**Runs as numbers.** A run of up to 16 letters is read as two 64-bit numbers (its bytes, lower
case, zero-padded), an exact key: the forms of the chosen words are looked up by it in a hash
table, all runs of a batch at once. A longer run (rare) goes through a dictionary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kiwifs.index.search import bm25
from kiwifs.index.search.bm25 import STEMMED_ENDINGS

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

TABLE_BITS = 16  # the chosen forms' hash table: 65,536 slots (a root's few hundred forms)
KEY_BYTES = 16  # a run this long at most is looked up by its bytes; a longer one by a dict
MAX_OTHERS = 200_000  # forms of no chosen word remembered (then forgotten: ids are unique)


class WordCounter:
    """Counts of ``words`` (indexed forms: ``releas``, not ``release``) in texts. Not
    thread-safe: one a process (a rebuild's worker makes its own)."""

    def __init__(self, words: Sequence[str]) -> None:
        import numpy

        self.np = numpy
        self.words = list(words)
        self._index = {w: i for i, w in enumerate(self.words)}
        self._masks = numpy.array(
            [(1 << (8 * n)) - 1 for n in range(8)] + [(1 << 64) - 1], dtype=numpy.uint64
        )
        self._stemmed = numpy.zeros(256, dtype=bool)
        self._stemmed[list(STEMMED_ENDINGS)] = True
        self._forms: dict[bytes, int] = {}  # a lower-cased run: its word's index, or -1
        self._others = 0  # how many of them are -1
        # the chosen forms' keys and word indexes, a hash table (-2: an empty slot)
        self._firsts = numpy.zeros(1 << TABLE_BITS, dtype=numpy.uint64)
        self._seconds = numpy.zeros(1 << TABLE_BITS, dtype=numpy.uint64)
        self._ids = numpy.full(1 << TABLE_BITS, -2, dtype=numpy.int64)
        self._probes = 1  # the most slots a key was placed past its own, plus one
        self._count_forms = 0
        self._seed()

    def count(self, texts: Sequence[str]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(counts, lengths)``: ``counts[i, j]`` is how often word ``j`` is in text ``i`` as
        FTS5 indexes it, ``lengths[i]`` the number of words FTS5 indexes in text ``i``."""
        np = self.np
        counts = np.zeros((len(texts), len(self.words)), dtype=np.int64)
        lengths = np.zeros(len(texts), dtype=np.int64)
        plain = [i for i, text in enumerate(texts) if text.isascii()]
        other = [i for i, text in enumerate(texts) if not text.isascii()]
        if other:
            counted = bm25.TOKENIZER.counts([texts[i] for i in other], self.words)
            for i, (found, length) in zip(other, counted, strict=True):
                lengths[i] = length
                for word, n in found.items():
                    counts[i, self._index[word]] = n
        if plain:
            part, sizes = self._count_ascii([texts[i] for i in plain])
            counts[plain] = part
            lengths[plain] = sizes
        return counts, lengths

    def _count_ascii(self, texts: list[str]) -> tuple[Any, Any]:
        np = self.np
        joined = " ".join(texts).encode("ascii")
        starts_of_text = np.zeros(len(texts), dtype=np.int64)
        if len(texts) > 1:
            sizes = np.fromiter((len(t) + 1 for t in texts[:-1]), np.int64, len(texts) - 1)
            starts_of_text[1:] = np.cumsum(sizes)
        data = np.frombuffer(joined, dtype=np.uint8)
        lower = data | 32  # ASCII letters in lower case (digits have the bit already)
        inside = np.zeros(len(data) + 2, dtype=bool)  # a letter or digit, between two non-ones
        inside[1:-1] = ((data >= 48) & (data <= 57)) | ((lower >= 97) & (lower <= 122))
        lower *= inside[1:-1]  # every other byte 0: a run's key is its bytes, zero-padded
        starts = np.flatnonzero(inside[1:] & ~inside[:-1])
        ends = np.flatnonzero(inside[:-1] & ~inside[1:])
        runs = ends - starts
        # each text's runs: a run never spans the space that joins two texts
        firsts = np.searchsorted(starts, starts_of_text)
        lengths = np.diff(firsts, append=len(starts))
        text_of = np.repeat(np.arange(len(texts)), lengths)
        ids = self._ids_of(lower, starts, runs)
        chosen = ids >= 0
        width = len(self.words)
        flat = np.bincount(text_of[chosen] * width + ids[chosen], minlength=len(texts) * width)
        return flat.reshape(len(texts), width), lengths

    def _ids_of(self, lower: Any, starts: Any, runs: Any) -> Any:
        """Each run's word index (``-1``: none of the chosen words); ``lower`` is the texts'
        bytes, letters in lower case and every byte outside a run 0."""
        np = self.np
        padded = np.zeros(len(lower) + 2 * KEY_BYTES, dtype=np.uint8)
        padded[: len(lower)] = lower
        # every 8 bytes from each offset, as a little-endian number (an unaligned view)
        words = np.ndarray((len(lower) + KEY_BYTES,), "<u8", padded, 0, (1,))
        first = np.take(words, starts) & np.take(self._masks, np.minimum(runs, 8))
        second = np.zeros(len(starts), dtype=np.uint64)
        longer = np.flatnonzero(runs > 8)  # a run's second number: its letters past the 8th
        second[longer] = np.take(words, starts[longer] + 8) & np.take(
            self._masks, np.minimum(runs[longer] - 8, 8)
        )
        ids = self._lookup(first, second)
        long = np.flatnonzero(runs > KEY_BYTES)
        # an unknown run that may not be its own stem: FTS5 stems it (once: then it is known)
        stemmed = self._stemmed[padded[starts + runs - 1]]
        unknown = np.flatnonzero((ids == -2) & (runs <= KEY_BYTES) & stemmed)
        if len(unknown):
            pairs = np.stack([first[unknown], second[unknown]], axis=1)
            distinct, back = np.unique(pairs, axis=0, return_inverse=True)
            forms = [_bytes_of(int(a), int(b)) for a, b in distinct]
            found = self._classify(forms)
            ids[unknown] = np.array(found, dtype=np.int64)[back.reshape(-1)]
            chosen = [(f, i) for f, i in zip(forms, found, strict=True) if i >= 0]
            if chosen:
                self._add_forms([f for f, _ in chosen], [i for _, i in chosen])
        if len(long):
            spans = zip(starts[long].tolist(), runs[long].tolist(), strict=True)
            forms = [bytes(padded[start : start + n]) for start, n in spans]
            ids[long] = self._classify(forms)
        ids[ids < -1] = -1  # unknown, and its own stem: no chosen word
        return ids

    def _lookup(self, first: Any, second: Any) -> Any:
        """The word index of each key among the chosen forms' keys; ``-2``: not one of them.
        The keys sit in a hash table with linear probing, a few times as fast as a binary
        search over them: each run looks at :attr:`_probes` slots at most."""
        np = self.np
        ids = np.full(len(first), -2, dtype=np.int64)
        if not self._count_forms:
            return ids
        slot = self._slot(first, second)
        for _ in range(self._probes):
            hit = (self._firsts[slot] == first) & (self._seconds[slot] == second)
            hit &= ids == -2
            ids[hit] = self._ids[slot[hit]]
            slot += 1
            slot &= len(self._ids) - 1
        return ids

    def _slot(self, first: Any, second: Any) -> Any:
        np = self.np
        mixed = first * np.uint64(0x9E3779B97F4A7C15) + second * np.uint64(0xC2B2AE3D27D4EB4F)
        return (mixed >> np.uint64(64 - TABLE_BITS)).astype(np.int64)

    def _remember(self, firsts: Any, seconds: Any, ids: Any) -> None:
        """Add chosen forms to the hash table looked up in bulk."""
        np = self.np
        slots = self._slot(firsts, seconds)
        mask = len(self._ids) - 1
        for at, first, second, index in zip(
            slots.tolist(), firsts.tolist(), seconds.tolist(), ids.tolist(), strict=True
        ):
            if self._count_forms >= len(self._ids) // 2:
                return  # a full table: the forms left out are classified by the dict instead
            probes = 1
            while self._ids[at] != -2:
                if self._firsts[at] == first and self._seconds[at] == second:
                    break  # known already
                at = (at + 1) & mask
                probes += 1
            self._firsts[at], self._seconds[at] = np.uint64(first), np.uint64(second)
            self._ids[at] = index
            self._probes = max(self._probes, probes)
            self._count_forms += 1

    def _seed(self) -> None:
        """The chosen words that are their own stems, as forms: a run that ends in a character
        no suffix rule of the stemmer removes or changes is its own stem, so when it is not
        among the known forms it is no chosen word (see :data:`STEMMED_ENDINGS`)."""
        forms = [w for w in self.words if w.isascii() and w.isalnum() and len(w) <= KEY_BYTES]
        own = [f for f, stem in zip(forms, bm25.TOKENIZER.stems(forms), strict=True) if stem == f]
        if own:
            self._add_forms([f.encode("ascii") for f in own], [self._index[f] for f in own])

    def _add_forms(self, forms: list[bytes], ids: list[int]) -> None:
        np = self.np
        padded = [f.ljust(KEY_BYTES, b"\0") for f in forms]
        firsts = np.array([int.from_bytes(p[:8], "little") for p in padded], dtype=np.uint64)
        seconds = np.array([int.from_bytes(p[8:], "little") for p in padded], dtype=np.uint64)
        self._remember(firsts, seconds, np.array(ids, dtype=np.int64))

    def _classify(self, forms: list[bytes]) -> list[int]:
        """Each lower-cased run's word index (``-1``: none), stemmed by FTS5 when new."""
        if self._others > MAX_OTHERS:
            # forgotten before the new forms are found, never between: a form of this batch
            # known before and forgotten after would have no index (a million files' first
            # fill in one process met that)
            self._forms = {f: i for f, i in self._forms.items() if i >= 0}
            self._others = 0
        new = [f for f in dict.fromkeys(forms) if f not in self._forms]
        if new:
            stems = bm25.TOKENIZER.stems([f.decode("ascii") for f in new])
            for form, word in zip(new, stems, strict=True):
                index = self._index.get(word, -1)
                self._forms[form] = index
                self._others += index < 0
        return [self._forms[f] for f in forms]


def _bytes_of(first: int, second: int) -> bytes:
    """A run's lower-case bytes from its two numbers (zero bytes are padding)."""
    return (first.to_bytes(8, "little") + second.to_bytes(8, "little")).rstrip(b"\0")


def common_words(texts: Sequence[str], share: float, most: int, numbers: bool = True) -> list[str]:
    """The indexed words in at least ``share`` of ``texts`` (a sample of a root), the
    ``most`` most common first: those a rebuild makes columns of. ``numbers=False`` leaves out
    the words that begin with a digit (numbers, and the pieces of dates and times)."""
    df: dict[str, int] = {}
    for found, _ in bm25.TOKENIZER.counts(texts):
        for word in found:
            df[word] = df.get(word, 0) + 1
    least = max(1, share * len(texts))
    ranked = sorted(
        (-n, w) for w, n in df.items() if n >= least and (numbers or not w[:1].isdigit())
    )
    return [w for _, w in ranked[:most]]
