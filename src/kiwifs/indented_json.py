"""JSON text exactly as ``json.dumps(value, indent=2, ensure_ascii=False)`` writes it, faster.

With ``indent`` set, the standard library falls back to its pure-Python encoder, which spends
more time on a 100,000-episode memory report than the index takes to answer it. This writer
produces the same bytes for the values kiwifs prints (dicts with string keys, lists, strings,
integers, floats, booleans, null) with the C string encoder; a test holds the two equal.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

_encode_str: Callable[[str], str] = (
    getattr(json.encoder, "c_encode_basestring", None) or json.encoder.encode_basestring
)


def dumps_indented(value: Any, depth: int = 0) -> str:
    """``json.dumps(value, indent=2, ensure_ascii=False)``, byte for byte.

    With ``depth``, the text as it appears nested that many levels deep in a larger document
    (its continuation lines indented by ``2 * depth`` more spaces), for :class:`RenderedItems`.
    """
    out: list[str] = []
    _write(value, "\n" + "  " * depth, out)
    return "".join(out)


@dataclass(frozen=True)
class RenderedItems:
    """A JSON array whose items are already text, each made by ``dumps_indented(item, depth)``.

    The index keeps each episode's entry rendered, so a 100,000-entry report is written by
    joining strings instead of encoding 100,000 dicts. ``depth`` must be where the items land.
    """

    items: Sequence[str]
    depth: int


class _BufferedSink:
    """Looks like the ``list`` :func:`_write` appends to; hands the stream ~64 KiB at a time.

    One ``write`` per piece would cost a call per JSON token (hundreds of thousands for a large
    report); one string for everything would double the peak memory. Chunks do neither.
    """

    __slots__ = ("_pieces", "_stream", "_size")

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._pieces: list[str] = []
        self._size = 0

    def append(self, piece: str) -> None:
        self._pieces.append(piece)
        self._size += len(piece)
        if self._size >= CHUNK:
            self.flush()

    def flush(self) -> None:
        if self._pieces:
            self._stream.write("".join(self._pieces))
            self._pieces.clear()
            self._size = 0


CHUNK = 1 << 16


def write_indented(value: Any, stream: TextIO) -> None:
    """Write :func:`dumps_indented`'s text to ``stream`` in chunks.

    A 100,000-episode report is ~17 MB of JSON; building it as one string (and encoding that)
    would double the command's peak memory.
    """
    sink = _BufferedSink(stream)
    _write(value, "\n", sink)  # type: ignore[arg-type]
    sink.flush()


def _write(value: Any, nl: str, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_encode_str(value))
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        inner = nl + "  "
        if all(type(k) is str and type(v) is str for k, v in value.items()):
            pairs = (_encode_str(k) + ": " + _encode_str(v) for k, v in value.items())
            out.append("{" + inner + ("," + inner).join(pairs) + nl + "}")
            return
        first = True
        for key, item in value.items():
            out.append(("{" if first else ",") + inner + _key(key) + ": ")
            first = False
            _write(item, inner, out)
        out.append(nl + "}")
    elif isinstance(value, RenderedItems):
        _write_rendered(value, nl, out)
    elif isinstance(value, (list, tuple)):
        if not value:
            out.append("[]")
            return
        inner = nl + "  "
        if all(type(item) is str for item in value):
            out.append("[" + inner + ("," + inner).join(map(_encode_str, value)) + nl + "]")
            return
        for i, item in enumerate(value):
            out.append(("[" if i == 0 else ",") + inner)
            _write(item, inner, out)
        out.append(nl + "]")
    else:
        out.append(json.dumps(value))


def _write_rendered(value: RenderedItems, nl: str, out: list[str]) -> None:
    items = value.items
    if not items:
        out.append("[]")
        return
    inner = nl + "  "
    if inner != "\n" + "  " * value.depth:
        raise ValueError(f"items of depth {value.depth} written at depth {len(nl) // 2 + 1}")
    sep = "," + inner
    out.append("[" + inner)
    for start in range(0, len(items), RENDERED_BATCH):
        if start:
            out.append(sep)
        out.append(sep.join(items[start : start + RENDERED_BATCH]))
    out.append(nl + "]")


RENDERED_BATCH = 512


def _key(key: Any) -> str:
    return _encode_str(key if isinstance(key, str) else json.dumps(key))
