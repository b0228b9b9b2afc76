"""How a page's text is cut into the pieces that are embedded: windows of words.

Only the body is embedded (the frontmatter block is metadata, searched by ``/meta``). The body
is cut into windows of ``size`` words, each starting ``size - overlap`` words after the last, so
a sentence that straddles a boundary is whole in one of the two chunks. Words are runs of
non-space characters; a chunk keeps the original text between its first and last word, and its
character offsets into the file's text (the snippet of a semantic hit is its best chunk).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from kiwifs.frontmatter.reader import split

_WORD = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class Chunk:
    """One embedded piece: its number in the page and where it sits in the page's text."""

    seq: int
    start: int
    end: int
    text: str


def body_start(text: str) -> int:
    """Offset (in characters) where the body of ``text`` begins, after any frontmatter block."""
    data = text.encode("utf-8", "surrogatepass")
    _, body = split(data)
    return len(text) - len(body.decode("utf-8", "surrogatepass"))


def chunk_text(text: str, size: int, overlap: int) -> list[Chunk]:
    """The chunks of a page's text; none for a page whose body has no words.

    Word boundaries are found by regular expressions that skip whole runs of words at once
    (one match per chunk, not one per word), which keeps chunking cheaper than embedding.
    """
    first = _WORD.search(text, body_start(text))
    if first is None:
        return []
    step = max(size - overlap, 1)
    chunks: list[Chunk] = []
    begin = first.start()
    while True:
        tail = _skip(size - 1).match(text, begin)
        last = _WORD.match(text, tail.end()) if tail else None
        end = last.end() if last else len(text.rstrip())  # short: runs to the last word
        chunks.append(Chunk(len(chunks), begin, end, text[begin:end]))
        if last is None or _WORD.search(text, end) is None:
            return chunks
        ahead = _skip(step).match(text, begin)
        assert ahead is not None  # more than ``size`` words remain, so ``step`` can be skipped
        begin = ahead.end()


@functools.lru_cache(maxsize=64)
def _skip(words: int) -> re.Pattern[str]:
    """Matches ``words`` words and the space after each (an empty match for zero)."""
    return re.compile(rf"(?:\S+\s+){{{words}}}")
