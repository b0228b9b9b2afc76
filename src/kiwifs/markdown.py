"""Frontmatter: one rule for finding the block, one parser for reading it, one for editing it.

KiwiFS reads and writes frontmatter with two unrelated parsers that disagree.
kiwifs has one block rule: the first line is exactly ``---`` (trailing spaces or ``\\r``
allowed) and the block ends at the next line that is exactly ``---`` or ``...``. Reading uses
PyYAML's safe loader (the C loader when present) with YAML 1.1 typing, except that timestamps stay
the strings they were written as. Anything wrong with the block (unterminated, invalid YAML, not a
mapping, over 1 MiB) reads as empty frontmatter plus a warning, never as an exception.

Editing (provenance, ``merged-from``) goes through ruamel.yaml's round-trip mode so the other keys
keep their order, comments and quoting, and the body is copied byte for byte.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from .errors import InvalidFrontmatter

MAX_FRONTMATTER_BYTES = 1024 * 1024
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_STR_TAG = "tag:yaml.org,2002:str"


def _without_timestamps(base: Any) -> Any:
    """A loader class like ``base`` whose resolver never produces timestamps."""
    resolvers = {
        first: [(tag, rx) for tag, rx in entries if tag != _TIMESTAMP_TAG]
        for first, entries in base.yaml_implicit_resolvers.items()
    }
    return type("KiwiNoTimestamp" + base.__name__, (base,), {"yaml_implicit_resolvers": resolvers})


PlainLoader: Any = _without_timestamps(yaml.SafeLoader)
FastLoader: Any = _without_timestamps(getattr(yaml, "CSafeLoader", yaml.SafeLoader))
_RESOLVER = yaml.SafeLoader("")  # with timestamps: they must be quoted when written


@dataclass(frozen=True, slots=True)
class Block:
    """Where the frontmatter block sits in a file's bytes.

    ``yaml`` is the text between the delimiters; ``body_start`` is the offset of the first body
    byte. ``terminated`` is False for a block with no closing line (then ``body_start`` is the end).
    """

    yaml: bytes
    body_start: int
    terminated: bool


def _is_delimiter(line: bytes, allow_dots: bool) -> bool:
    stripped = line.rstrip(b" \r\n")  # trailing spaces or \r, nothing else
    return stripped == b"---" or (allow_dots and stripped == b"...")


def find_block(data: bytes) -> Block | None:
    """Locate the frontmatter block of ``data`` or return ``None`` when there is none."""
    nl = data.find(b"\n")
    first = data if nl < 0 else data[:nl]
    if not _is_delimiter(first, allow_dots=False):
        return None
    if nl < 0:
        return Block(b"", len(data), False)
    start = pos = nl + 1
    end_of_data = len(data)
    while pos < end_of_data:
        eol = data.find(b"\n", pos)
        line_end = end_of_data if eol < 0 else eol + 1
        if _is_delimiter(data[pos:line_end], allow_dots=True):
            return Block(data[start:pos], line_end, True)
        pos = line_end
    return Block(data[start:], end_of_data, False)


@dataclass(frozen=True, slots=True)
class Frontmatter:
    """Parsed frontmatter: always a dict, plus the reason it was read as empty, if any."""

    data: dict[Any, Any]
    problem: str | None = None


EMPTY = Frontmatter({})


def parse_yaml(text: bytes | str, loader: type = FastLoader) -> Frontmatter:
    """Parse a frontmatter YAML text with YAML 1.1 typing and timestamps kept as strings."""
    if len(text) > MAX_FRONTMATTER_BYTES:
        return Frontmatter({}, f"frontmatter is over {MAX_FRONTMATTER_BYTES} bytes")
    try:
        value = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader subclass
    except yaml.YAMLError as exc:
        return Frontmatter({}, "invalid YAML: " + _one_line(str(exc)))
    except (ValueError, TypeError, RecursionError, UnicodeDecodeError) as exc:
        return Frontmatter({}, "invalid YAML: " + _one_line(str(exc)))
    if value is None:
        return EMPTY
    if not isinstance(value, dict):
        return Frontmatter({}, f"frontmatter is not a mapping (a {_yaml_kind(value)})")
    return Frontmatter(value)


def read_frontmatter(data: bytes, loader: type = FastLoader) -> Frontmatter:
    """Frontmatter of a whole file's bytes; never raises."""
    block = find_block(data)
    if block is None:
        return EMPTY
    if not block.terminated:
        return Frontmatter({}, "frontmatter block not terminated")
    return parse_yaml(block.yaml, loader)


def split(data: bytes) -> tuple[bytes, bytes]:
    """Return ``(frontmatter yaml, body)``; the yaml is empty when there is no block."""
    block = find_block(data)
    if block is None:
        return b"", data
    return block.yaml, data[block.body_start :]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _yaml_kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


# ---------------------------------------------------------------------------------------------
# round-trip editing


def _rt_yaml() -> YAML:
    rt = YAML(typ="rt")
    rt.indent(mapping=2, sequence=4, offset=2)
    rt.width = 1 << 16
    rt.preserve_quotes = True
    return rt


def scalar(value: str) -> str:
    """``value`` as a YAML string that PyYAML's 1.1 reader will read back as the same string.

    ruamel writes YAML 1.2, where ``no`` or ``on`` are plain strings; PyYAML (and KiwiFS) read
    them as booleans. Such values, numbers, nulls and timestamps are written double-quoted.
    Values with a character that is not printable (``\\n``, ``\\t``, NEL, LS, …) are double-quoted
    too: ruamel's plain/single-quoted styles fold NEL and the other YAML line breaks, so an id or
    note holding one came back changed (and a re-run merge no longer recognised its own entry).
    """
    tag = _RESOLVER.resolve(yaml.ScalarNode, value, (True, False))  # type: ignore[no-untyped-call]
    if tag != _STR_TAG or value != value.strip() or value == "" or not value.isprintable():
        quoted: str = DoubleQuotedScalarString(value)
        return quoted
    return value


def edit_frontmatter(data: bytes, mutate: Callable[[CommentedMap], bool]) -> bytes:
    """Apply ``mutate`` to the frontmatter mapping of ``data`` and return the new file bytes.

    ``mutate`` returns False when it changed nothing; the input bytes are then returned as they
    were. The body is kept byte for byte. A file without frontmatter gets a new block.
    Raises :class:`InvalidFrontmatter` (and writes nothing) for an unterminated block, invalid
    YAML or a block that is not a mapping.
    """
    block = find_block(data)
    if block is not None and not block.terminated:
        raise InvalidFrontmatter("frontmatter block not terminated")
    fm_text = block.yaml.decode("utf-8") if block else ""
    body = data[block.body_start :] if block else data
    rt = _rt_yaml()
    try:
        doc = rt.load(fm_text) if fm_text.strip() else None
    except Exception as exc:  # ruamel raises several unrelated error types
        raise InvalidFrontmatter("parse frontmatter: " + _one_line(str(exc))) from exc
    if doc is None:
        doc = CommentedMap()
    if not isinstance(doc, CommentedMap):
        raise InvalidFrontmatter(f"frontmatter is not a mapping (a {_yaml_kind(doc)})")
    if not mutate(doc):
        return data
    out = io.StringIO()
    rt.dump(doc, out)
    dumped = out.getvalue().rstrip("\n")
    if fm_text.strip() and not _has_content(fm_text):
        # a comment-only block: keep its comments above the new keys
        dumped = fm_text.rstrip("\n") + "\n" + dumped
    return b"---\n" + dumped.encode("utf-8") + b"\n---\n" + body


def _has_content(fm_text: str) -> bool:
    for line in fm_text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return True
    return False


def append_entries(doc: CommentedMap, key: str, entries: list[dict[str, str]]) -> None:
    """Append mapping entries to the sequence under ``key`` (created at the end when absent).

    A non-sequence existing value becomes the first item of a new sequence, as KiwiFS does.
    """
    items = [_entry_map(e) for e in entries]
    current = doc.get(key)
    if key not in doc or current is None:
        seq = CommentedSeq(items)
        doc[key] = seq
        return
    if isinstance(current, list):
        if isinstance(current, CommentedSeq) and current.fa.flow_style():
            current.fa.set_block_style()
        current.extend(items)
        return
    doc[key] = CommentedSeq([current, *items])


def _entry_map(entry: dict[str, str]) -> CommentedMap:
    m = CommentedMap()
    for k, v in entry.items():
        m[k] = scalar(v)
    return m
