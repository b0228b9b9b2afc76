"""How a page's text is cut into the pieces that are embedded: windows of words.

Only the body is embedded (the frontmatter block is metadata, searched by ``/meta``). The body
is cut into windows of ``size`` words, each starting ``size - overlap`` words after the last, so
a sentence that straddles a boundary is whole in one of the two chunks. Words are runs of
non-space characters; a chunk keeps the original text between its first and last word, and its
character offsets into the file's text (the snippet of a semantic hit is its best chunk).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kiwifs.markdown import split

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
    """The chunks of a page's text; none for a page whose body has no words."""
    start = body_start(text)
    spans = [(m.start(), m.end()) for m in _WORD.finditer(text, start)]
    if not spans:
        return []
    step = max(size - overlap, 1)
    chunks: list[Chunk] = []
    first = 0
    while True:
        last = min(first + size, len(spans)) - 1
        begin, end = spans[first][0], spans[last][1]
        chunks.append(Chunk(len(chunks), begin, end, text[begin:end]))
        if last == len(spans) - 1:
            return chunks
        first += step
