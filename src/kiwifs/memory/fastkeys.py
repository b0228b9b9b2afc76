"""The frontmatter fast path: read the few keys the memory report needs without a YAML parse.

A full scan parses the frontmatter of every file, and PyYAML's construction layer (Python code
even with the C loader) is most of its time. Nearly all frontmatter is written in a small,
regular subset of YAML, though: ``key: scalar`` lines, ``- item`` block lists, one-line flow lists
and lists of flat ``key: scalar`` mappings (``merged-from``, ``derived-from``). For that subset a
line-based recogniser can *prove* that the text is valid YAML and a mapping, and read the values of
the keys :func:`kiwifs.memory.rules.file_facts` looks at.

The rule of this module: :func:`relevant_frontmatter` returns a dict only when the whole text is
inside the subset; the dict then holds exactly what PyYAML would give for ``memory_kind``,
``memory_status``, ``episode_id``, ``id`` and ``merged-from`` (with each ``merged-from`` mapping
cut down to ``type``, ``id`` and ``path``), so ``file_facts`` gives the same facts. Anything
outside the subset (tabs, anchors, tags, block scalars, multi-line or escaped scalars, trailing
comments, odd indentation, keys that are not plain strings, unusual characters) returns ``None``
and the caller parses the text with PyYAML as before. Scalar typing is PyYAML's own: its resolver
(timestamps removed, as in :data:`kiwifs.frontmatter.yamlload.FastLoader`) and its safe constructors
for null, bool, int and float.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

from kiwifs.frontmatter.reader import (
    MAX_FRONTMATTER_BYTES,
    Frontmatter,
    head_block,
    read_frontmatter,
)
from kiwifs.frontmatter.yamlload import FastLoader
from kiwifs.memory.rules import MERGED_FROM
from kiwifs.memory.status import MEMORY_STATUS

RELEVANT_KEYS = frozenset({"memory_kind", MEMORY_STATUS, "episode_id", "id", MERGED_FROM})
ENTRY_KEYS = frozenset({"type", "id", "path"})

_STR_TAG = "tag:yaml.org,2002:str"
_TYPED_TAGS = frozenset("tag:yaml.org,2002:" + kind for kind in ("null", "bool", "int", "float"))

# YAML 1.1 printable characters, minus everything that is a line break or a tab to YAML
# (``\x85``, ``\u2028``, ``\u2029``), the byte-order mark and ``\r`` (CRLF is folded before).
_OUTSIDE_SUBSET = re.compile(
    "[^\n\x20-\x7e\u00a0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)
# The subset as one regular expression over the whole text (which ends in "\n"), so that
# proving an ordinary block valid costs a single pass in C. Possessive quantifiers (``*+``) only
# stop the engine from retrying what cannot succeed: they can make it accept less, never more.
# Lines: blank or whole-line comments anywhere; top-level ``key: value`` or ``key:`` followed
# by a block list (items at one column, possibly the key's own) or a flat mapping (keys at one
# deeper column). List items are ``- value``, ``-`` (null) or a flat mapping whose first entry
# shares the dash's line.
_SKIP = r"(?:[ ]*+(?:\#[^\n]*+)?\n)*+"
_EOL = r"[ ]*+\n"
_KEY = r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}+"
_DQ = r'"[^"\\\n]*+"'
_SQ = r"'[^'\n]*+'"
_FLOW_ITEM = rf"(?:[A-Za-z_][A-Za-z0-9_./+\-]*+|{_DQ}|{_SQ})"
_FLOW = rf"\[[ ]*+(?:{_FLOW_ITEM}(?:[ ]*+,[ ]*+{_FLOW_ITEM})*+)?+[ ]*+\]"
# a one-line plain scalar: no indicator first (``-`` only before a non-space), no ``: ``, no
# `` #``, no trailing ``:``
_PLAIN = (
    r"(?:[^-?:,\[\]{}\#&*!|>'\"%@`\ \n]|-(?![ \n]))"
    r"(?:[^ \n:\#]++|:(?![ \n])|\#|[ ]++(?![ \#\n]))*+"
)
_VALUE = rf"(?:{_PLAIN}|{_DQ}|{_SQ}|{_FLOW})"
_ENTRY = rf"{_KEY}:(?:[ ]++{_VALUE})?{_EOL}"
_ITEM = rf"-(?:{_EOL}|(?P<s>[ ]++)(?:{_ENTRY}(?:{_SKIP}(?P=d)[ ](?P=s){_ENTRY})*+|{_VALUE}{_EOL}))"
_SEQ = rf"(?=(?P<d>[ ]*)-)(?:{_SKIP}(?P=d){_ITEM})++"
_MAP = rf"(?=(?P<c>[ ]+)[A-Za-z_])(?:{_SKIP}(?P=c){_ENTRY})++"
_TOP = rf"{_KEY}:(?:[ ]++{_VALUE}{_EOL}|{_EOL}(?:{_SKIP}(?:{_SEQ}|{_MAP}))?)"
_SUBSET_DOCUMENT = re.compile(rf"{_SKIP}(?:{_TOP}{_SKIP})*+")

# Typing. PyYAML picks a resolver by the scalar's first character and tries its patterns in
# order; the same lookup is done here without the method call.
_IMPLICIT = FastLoader.yaml_implicit_resolvers
assert None not in _IMPLICIT, "wildcard resolvers would apply to every first character"
_BY_FIRST: dict[str, tuple[tuple[str, re.Pattern[str]], ...]] = {
    first: tuple(entries) for first, entries in _IMPLICIT.items()
}
_CANNOT_FAIL = frozenset({"tag:yaml.org,2002:bool", "tag:yaml.org,2002:null"})


def _resolver_bodies(keep: Any) -> str:
    """PyYAML's own resolver patterns, unanchored and joined, for tags that ``keep`` accepts."""
    bodies: dict[str, None] = {}
    for entries in _IMPLICIT.values():
        for tag, rx in entries:
            text = rx.pattern.strip()
            if keep(tag) and text.startswith("^") and text.endswith("$"):
                flags = "x" if rx.flags & re.X else "-x"
                bodies[f"(?{flags}:{text[1:-1]})"] = None
            elif keep(tag):
                raise AssertionError(f"unexpected resolver pattern for {tag}: {text!r}")
    return "|".join(bodies)


# Where keys and plain values sit on a line (exact once the grammar has matched). The patterns
# start with a literal newline (the text carries one in front) so that the regex engine skips
# ahead to line starts instead of trying every position.
_RESOLVABLE_KEYS = re.compile(
    r"\n[ ]*(?:-[ ]+)?(["
    + "".join(sorted(c for c in _IMPLICIT if c and c.isalpha()))
    + r"][A-Za-z0-9_.\-]*):(?:[ ]|\n)"
)
_NUMBERISH_VALUES = re.compile(
    rf"\n[ ]*(?:-[ ]+(?:{_KEY}:[ ]+)?|{_KEY}:[ ]+)([-+.0-9<=][^\n]*?)[ ]*(?=\n)"
)
# A cheap screen run first: a key that any resolver pattern matches (it is not a string), or a
# plain value that a resolver other than bool/null matches (its constructor may fail). Only a
# text it flags pays for the exact checks above; it may flag too much, never too little.
_TYPING_SCREEN = re.compile(
    r"\n[ ]*+(?:-[ ]++)?+(?:"
    rf"(?=[{''.join(sorted(c for c in _IMPLICIT if c and c.isalpha()))}])"
    rf"(?:{_resolver_bodies(lambda tag: True)}):(?:[ ]|\n)"
    rf"|(?:[A-Za-z_][A-Za-z0-9_.\-]{{0,127}}+:[ ]++)?+"
    rf"(?=[{re.escape(''.join(sorted(c for c in _IMPLICIT if c and not c.isalpha())))}])"
    rf"(?:{_resolver_bodies(lambda tag: tag not in _CANNOT_FAIL)})[ ]*\n)"
)
_RELEVANT_LINE = re.compile(
    r"\n("
    + "|".join(re.escape(k) for k in sorted(RELEVANT_KEYS))
    + r"):(?:[ ]+([^\n]*?))?[ ]*(?=\n)"
)
_NEXT_TOP = re.compile(r"\n[A-Za-z_]")
# First characters a plain scalar cannot start with (YAML indicators); ``-`` is allowed when a
# non-space follows.
_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")
# The whole-frontmatter reader (:func:`simple_frontmatter`): one match per line that holds
# something, read in one ``findall`` once the grammar has proven the block. Groups: a top-level
# key; an item's dash, with the key of its first entry if it has one; an indented entry's key;
# then the value, if any, as exactly one of: double-quoted, single-quoted (both without escapes,
# as the grammar allows), a plain scalar that is text as written, or any other value. A plain
# scalar is text as written when its first character can neither start a YAML indicator nor
# have PyYAML resolve it to another type (no resolver for it), or when none of PyYAML's resolver
# patterns matches it whole: it is then a string to PyYAML too, and needs no Python to read.
_RESOLVER_FIRST = frozenset(c for c in _IMPLICIT if c)
_TEXT_AS_WRITTEN = (
    rf"(?:[^{re.escape(''.join(sorted(_RESOLVER_FIRST | _INDICATORS)))}\ \n]"
    rf"|(?=[{re.escape(''.join(sorted(_RESOLVER_FIRST - _INDICATORS)))}]|-[^ \n])"
    rf"(?!(?:{_resolver_bodies(lambda tag: True)})[ ]*+\n))"
)
_REST_OF_LINE = r"(?:[^ \n]++|[ ]++(?=[^ \n]))"  # up to the line's trailing spaces
_LINE = re.compile(
    rf"\n(?:({_KEY}):|[ ]*+(-)(?:[ ]++({_KEY}):(?=[ \n]))?|[ ]++({_KEY}):)"
    rf"(?:[ ]++(?:(\"[^\"\\\n]*+\")|('[^'\n]*+')|({_TEXT_AS_WRITTEN}{_REST_OF_LINE}*+)"
    rf"|({_REST_OF_LINE}++)))?[ ]*+(?=\n)"
)
# In a proven block: the first line that is not blank or a comment, then item starts and the
# entries a merged-from item is read for.
_FIRST_CONTENT = re.compile(r"(?:\n[ ]*(?:\#[^\n]*)?(?=\n))*\n[ ]*([^ \n\#])")
_ITEM_OR_ENTRY = re.compile(
    r"\n[ ]*(?:-(?:[ ]+([^\n]*?))?|("
    + "|".join(sorted(ENTRY_KEYS))
    + r"):(?:[ ]+([^\n]*?))?)[ ]*(?=\n)"
)

# Reading values.
_KEY_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_.\-]{0,127}):(?: +(.*))?\Z")
_EMPTY_FLOW = re.compile(r"\[[ ]*\]\Z")
_FLOW_ITEM_AT = re.compile(
    r"""[ ]*(?:"([^"\\]*)"|'([^']*)'|([A-Za-z_][A-Za-z0-9_./+\-]*))[ ]*(?:(,)|(\])\Z)"""
)
_DOUBLE_QUOTED = re.compile(r'"([^"\\]*)"\Z')
_SINGLE_QUOTED = re.compile(r"'([^']*)'\Z")


class _Unproven(Exception):
    """The text is outside the subset: the caller must use the full YAML parse."""


class _TypingResolver(Resolver):
    """PyYAML's resolver with the implicit types :data:`FastLoader` uses (no timestamps)."""

    yaml_implicit_resolvers = FastLoader.yaml_implicit_resolvers


_RESOLVER = _TypingResolver()
_CONSTRUCTOR = SafeConstructor()


def relevant_frontmatter(text: bytes) -> dict[str, Any] | None:
    """The report-relevant keys of a frontmatter text, or ``None`` when not provably simple.

    ``None`` is never wrong, only slower: the caller falls back to the full YAML parse.
    """
    source = _subset_source(text)
    if source is None or _SUBSET_DOCUMENT.fullmatch(source) is None:
        return None
    try:
        if _TYPING_SCREEN.search(source):
            _check_typing(source)
        return _relevant(source)
    except _Unproven:
        return None


def simple_frontmatter(text: bytes) -> dict[str, Any] | None:
    """The whole frontmatter mapping of ``text`` exactly as PyYAML builds it (same values, same
    types, same key order), or ``None`` when the text is not provably inside the subset.

    A rebuild of the index needs every key (the frontmatter is stored as JSON for ``/meta``);
    this reads the same subset as :func:`relevant_frontmatter`, without PyYAML's constructor.
    """
    source = _subset_source(text)
    if source is None or _SUBSET_DOCUMENT.fullmatch(source) is None:
        return None
    try:
        return _whole(source)
    except _Unproven:
        return None


def read_simple_first(data: bytes) -> tuple[Frontmatter, bool]:
    """:func:`kiwifs.frontmatter.reader.read_frontmatter` of a whole file's bytes, without PyYAML
    when the block is inside the subset (the same answer either way), and whether it was.

    A mapping read from the subset holds only text keys and strings, integers, floats,
    booleans, nulls, lists and mappings: JSON as it is, but for NaN and the infinities.
    """
    block = head_block(data)
    if block is not None and block.terminated:
        simple = simple_frontmatter(block.yaml)
        if simple is not None:
            return Frontmatter(simple), True
    return read_frontmatter(data), False


def _whole(source: str) -> dict[str, Any]:
    """Every key of a proven block, line by line (see :data:`_LINE`).

    The grammar has proven the shape: a top-level key's block is a list (dash lines) or a flat
    mapping (indented entries), and an indented entry under a list continues that list's last
    item, which is then a mapping. So the lines are read in order without checking columns.
    """
    out: dict[str, Any] = {}
    top = ""  # the top-level key whose block is being read
    block: Any = None  # its list or mapping, once a line of it is read
    item: dict[str, Any] | None = None  # the list's last item, when a mapping
    for key, dash, item_key, entry_key, dq, sq, text, other in _LINE.findall(source):
        if text:
            value: Any = text
        elif dq:
            value = dq[1:-1]
        elif sq:
            value = sq[1:-1]
        else:
            value = _inline_value(other) if other else None
        if key:
            if not _KEY_IS_STR.get(key):
                _check_key(key)
            out[key] = value
            top, block, item = key, None, None
        elif dash:
            if block is None:
                block = out[top] = []
            elif type(block) is not list:
                raise _Unproven  # a dash in a mapping: not what the grammar accepts
            if item_key:
                if not _KEY_IS_STR.get(item_key):
                    _check_key(item_key)
                item = {item_key: value}
                block.append(item)
            else:
                item = None
                block.append(value)
        else:
            if not _KEY_IS_STR.get(entry_key):
                _check_key(entry_key)
            if item is not None:
                item[entry_key] = value
            elif block is None:
                block = out[top] = {entry_key: value}
            elif type(block) is dict:
                block[entry_key] = value
            else:
                raise _Unproven  # an entry under a scalar item: not what the grammar accepts
    return out


def _subset_source(text: bytes) -> str | None:
    """A newline + the text with ``\\n`` line ends; ``None`` when a character is outside."""
    if len(text) > MAX_FRONTMATTER_BYTES:
        return None
    try:
        source = text.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\r" in source:
        source = source.replace("\r\n", "\n")
        if "\r" in source:
            return None
    if _OUTSIDE_SUBSET.search(source):
        return None
    # a leading newline lets the line patterns start with a literal (see above)
    return "\n" + source if source.endswith("\n") else "\n" + source + "\n"


def _check_typing(source: str) -> None:
    """Raise unless every key is a string and every plain value constructs without error.

    Keys starting with a letter PyYAML can resolve (``on:``, ``null:``) are checked; values
    that may be numbers (or merge keys) are built with PyYAML's constructors, which can fail
    (``0b_``). Other plain scalars are strings, booleans or nulls, which always construct.
    """
    for match in _RESOLVABLE_KEYS.finditer(source):
        _check_key(match.group(1))
    for match in _NUMBERISH_VALUES.finditer(source):
        _typed(match.group(1))


def _relevant(source: str) -> dict[str, Any]:
    """The values of the relevant top-level keys (a later duplicate wins, as in PyYAML)."""
    out: dict[str, Any] = {}
    for match in _RELEVANT_LINE.finditer(source):
        rest = match.group(2)
        if rest:
            out[match.group(1)] = _inline_value(rest)
        else:
            out[match.group(1)] = _block_after(source, match.end() + 1)
    return out


def _block_after(source: str, start: int) -> Any:
    """The value of a top-level ``key:`` whose block starts at offset ``start``.

    The grammar has proven the block's shape: a list (every line whose first character is
    ``-`` starts an item), a flat mapping, or nothing. So only item starts and the
    ``type``/``id``/``path`` entries need reading (the other lines are skipped in C).
    """
    nxt = _NEXT_TOP.search(source, start - 1)  # the block ends where a top-level key starts
    block = source[start - 1 : nxt.start() + 1 if nxt else len(source)]
    first = _FIRST_CONTENT.match(block)
    if first is None:
        return None
    if first.group(1) != "-":
        mapping: dict[str, Any] = {}
        for match in _ITEM_OR_ENTRY.finditer(block):
            _, key, rest = match.groups()
            if key is None:
                raise _Unproven  # a dash in a mapping: not what the grammar accepts
            mapping[key] = _inline_value(rest) if rest else None
        return mapping
    items: list[Any] = []
    current: dict[str, Any] | None = None
    for match in _ITEM_OR_ENTRY.finditer(block):
        content, key, rest = match.groups()
        if key is None:  # a dash line: a new item
            current = None
            entry = _KEY_LINE.match(content) if content else None
            if entry is None:
                items.append(_inline_value(content) if content else None)
                continue
            current = {}
            items.append(current)
            key, rest = entry.groups()
            if key not in ENTRY_KEYS:
                continue
        if current is None:
            raise _Unproven  # an entry under a scalar item: not what the grammar accepts
        current[key] = _inline_value(rest) if rest else None
    return items


_KEY_IS_STR: dict[str, bool] = {}


def _check_key(key: str) -> None:
    ok = _KEY_IS_STR.get(key)
    if ok is None:
        ok = _RESOLVER.resolve(ScalarNode, key, (True, False)) == _STR_TAG  # type: ignore[no-untyped-call]
        if len(_KEY_IS_STR) < 4096:
            _KEY_IS_STR[key] = ok
    if not ok:
        raise _Unproven


def _inline_value(text: str) -> Any:
    """A value written on the rest of the line: quoted, a one-line flow list, or plain."""
    first = text[0]
    if first == '"' or first == "'":
        return _quoted(text)
    if first == "[":
        return _flow_list(text)
    return _plain(text)


def _quoted(text: str) -> str:
    pattern = _DOUBLE_QUOTED if text[0] == '"' else _SINGLE_QUOTED
    match = pattern.match(text)
    if match is None:
        raise _Unproven  # escapes, doubled quotes, or text after the closing quote
    return match.group(1)


def _flow_list(text: str) -> list[Any]:
    items: list[Any] = []
    if _EMPTY_FLOW.match(text):
        return items
    pos = 1
    while True:
        match = _FLOW_ITEM_AT.match(text, pos)
        if match is None:
            raise _Unproven  # includes an empty item, e.g. a trailing comma
        double, single, plain, _comma, close = match.groups()
        if plain is not None:
            items.append(_typed(plain))
        else:
            items.append(double if double is not None else single)
        if close:
            return items
        pos = match.end()


def _plain(text: str) -> Any:
    """A one-line plain scalar in block context, typed as PyYAML types it."""
    first = text[0]
    if first in _INDICATORS and (first != "-" or len(text) == 1 or text[1] == " "):
        raise _Unproven
    if ": " in text or text.endswith(":") or " #" in text:
        raise _Unproven
    return _typed(text)


def _typed(text: str) -> Any:
    """PyYAML's value for plain scalar ``text``: its resolver first, then its safe constructor."""
    resolvers = _BY_FIRST.get(text[0])
    if resolvers is None:
        return text
    for tag, regexp in resolvers:  # noqa: B007 - the tag that matched is used below
        if regexp.match(text):
            break
    else:
        return text
    if tag not in _TYPED_TAGS:
        raise _Unproven  # merge keys, ``=`` values, ...
    constructor = SafeConstructor.yaml_constructors[tag]
    try:
        return constructor(_CONSTRUCTOR, ScalarNode(tag, text))
    except (yaml.YAMLError, ValueError, TypeError, KeyError, OverflowError) as exc:
        raise _Unproven from exc
