"""JSON as kiwifs prints it: the text of ``json.dumps(value, indent=2, ensure_ascii=False)``.

With ``indent`` set the standard library encodes in pure Python, which takes longer than the
index needs to answer a 100,000-episode memory report; orjson writes the same bytes in a
fraction of that for text, integers, lists, dicts, booleans and null. Where the two differ,
:func:`dumps` prepares the value or steps aside:

* floats: orjson writes ``1e-05`` as ``0.00001`` (and older releases ``1e+16`` as ``1e16``), so
  each float is handed over as the text the standard library gives it;
* text that is not valid Unicode (a file name that is not UTF-8 decodes to lone surrogates),
  integers beyond 64 bits and keys that are not text: orjson refuses them, and the standard
  library writes the value.

:class:`RawJSON` is text already in this form, written as it is: the index stores each
episode's report entry that way, so a large report is printed without an object per episode.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class RawJSON:
    """JSON text to write as it is; its lines must be indented for where it lands."""

    text: str


@dataclass(frozen=True, slots=True)
class Printed:
    """A whole value already printed by :func:`dumps` (UTF-8 bytes), written as it is: a memory
    report kept in the index, 195 MB at a million episodes, is not copied on its way out."""

    data: bytes


def dumps(value: Any, errors: str = "strict") -> bytes:
    """``json.dumps(value, indent=2, ensure_ascii=False)`` as UTF-8 (``RawJSON`` as its text,
    :class:`Printed` as its bytes).

    ``errors`` encodes lone surrogates, as a text stream's error handler would.
    """
    if isinstance(value, Printed):
        return value.data
    try:
        return orjson.dumps(_prepared(value), option=orjson.OPT_INDENT_2)
    except orjson.JSONEncodeError:
        return _standard(value).encode("utf-8", errors)


# Values orjson writes exactly as the standard library does.
_AS_IS = frozenset({str, int, bool, type(None)})


def _prepared(value: Any) -> Any:
    """``value`` with floats and :class:`RawJSON` as orjson fragments of their final text.

    A dict or list holding only values written alike is passed as it is, so a report's 100,000
    entries cost one look each.
    """
    if isinstance(value, dict):
        for item in value.values():
            if type(item) not in _AS_IS:
                return {key: _prepared(item) for key, item in value.items()}
        return value
    if isinstance(value, (list, tuple)):
        for item in value:
            if type(item) not in _AS_IS:
                return [_prepared(item) for item in value]
        return value
    if isinstance(value, float):
        return orjson.Fragment(json.dumps(value))
    if isinstance(value, RawJSON):
        return orjson.Fragment(value.text)
    return value


def _standard(value: Any) -> str:
    """The standard library's text of ``value``, each :class:`RawJSON` spliced in as written.

    Each raw text goes through ``json.dumps`` as a placeholder string carrying a random token,
    then replaces it: read back instead, a text with a key twice (the frontmatter ``'false':``
    beside ``false:`` gives two ``"false"``) would lose one of them.
    """
    raws: list[str] = []
    token = os.urandom(12).hex()

    def placeholder(item: Any) -> str:
        if not isinstance(item, RawJSON):
            raise TypeError(f"Object of type {type(item).__name__} is not JSON serializable")
        raws.append(item.text)
        return f"{token}{len(raws) - 1}"

    text = json.dumps(value, indent=2, ensure_ascii=False, default=placeholder)
    if not raws:
        return text
    return re.sub(f'"{token}([0-9]+)"', lambda m: raws[int(m.group(1))], text)
