"""Frontmatter read: the one rule for finding the block, and the reader.

KiwiFS reads and writes frontmatter with two unrelated parsers that disagree.
kiwifs has one block rule: the first line is exactly ``---`` (trailing spaces or ``\\r``
allowed) and the block ends at the next line that is exactly ``---`` or ``...``. Reading uses
PyYAML's safe loader through :mod:`kiwifs.frontmatter.yamlload` (YAML 1.1 typing, timestamps kept as
the strings they were written as, aliases bounded). Anything wrong with the block (unterminated,
invalid YAML, not a mapping, over 1 MiB, an alias bomb) reads as empty frontmatter plus a warning,
never as an exception; the write funnel refuses an alias bomb instead (:func:`refuse_alias_bomb`).

Editing (provenance, ``merged-from``) is :mod:`kiwifs.frontmatter.edit`'s: ruamel.yaml's
round-trip mode, the same block rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kiwifs.errors import InvalidFrontmatter

# PyYAML (and the loader classes made from it) is imported on first parse: a command that reads
# no frontmatter, such as the memory report from a current index, never needs it.

MAX_FRONTMATTER_BYTES = 1024 * 1024
OVER_LIMIT = f"frontmatter is over {MAX_FRONTMATTER_BYTES} bytes"
NOT_TERMINATED = "frontmatter block not terminated"
# Frontmatter is looked for in a file's first FRONTMATTER_WINDOW bytes (a block of the largest
# size allowed and its delimiter lines fit), so that finding it never means reading a file
# whole: the full scan reads at most this much of a file (and one byte more).
FRONTMATTER_WINDOW = MAX_FRONTMATTER_BYTES + 8192


@dataclass(frozen=True, slots=True)
class Block:
    """Where the frontmatter block sits in a file's bytes.

    ``yaml`` is the text between the delimiters; ``body_start`` is the offset of the first body
    byte. ``terminated`` is False for a block with no closing line (then ``body_start`` is the end).
    """

    yaml: bytes
    body_start: int
    terminated: bool
    cut: bool = False  # not closed inside the window of a longer file (:func:`head_block`)

    @property
    def problem(self) -> str | None:
        """Why the block reads as empty frontmatter before any YAML is parsed, if it does."""
        if self.terminated:
            return None
        return OVER_LIMIT if self.cut else NOT_TERMINATED


# The closing line, found by one search instead of a loop over lines (four times faster over a
# 100,000-file root): ``---`` or ``...`` followed only by spaces or ``\r``, then a newline or the
# end of the data.
_CLOSING_LINE = re.compile(rb"\n(?:---|\.\.\.)[ \r]*+(?:\n|\Z)")


def find_block(data: bytes) -> Block | None:
    """Locate the frontmatter block of ``data`` or return ``None`` when there is none.

    The first line is exactly ``---`` (trailing spaces, ``\\r`` allowed); the block ends at the
    next line that is exactly ``---`` or ``...`` (the same trailing characters allowed).
    """
    nl = data.find(b"\n")
    first = data if nl < 0 else data[:nl]
    if first.rstrip(b" \r") != b"---":
        return None
    if nl < 0:
        return Block(b"", len(data), False)
    closing = _CLOSING_LINE.search(data, nl)
    if closing is None:
        return Block(data[nl + 1 :], len(data), False)
    return Block(data[nl + 1 : closing.start() + 1], closing.end(), True)


def head_block(data: bytes) -> Block | None:
    """:func:`find_block` as the readers of frontmatter see it: in the first
    :data:`FRONTMATTER_WINDOW` bytes of ``data`` only.

    A block that is not closed inside the window of a longer file is ``cut`` (read as over the
    size limit, which a closing line further on would make it anyway). The answer depends only
    on the window and on whether more bytes follow it, so the full scan, which reads no more than
    that, and the index, which has the whole file, always agree.
    """
    if len(data) <= FRONTMATTER_WINDOW:
        return find_block(data)
    head = data[:FRONTMATTER_WINDOW]
    block = find_block(head)
    if block is None or (block.terminated and head[block.body_start - 1 :].startswith(b"\n")):
        return block  # decided inside the window: the closing line ends with its newline there
    return Block(block.yaml, len(data), False, cut=True)


@dataclass(frozen=True, slots=True)
class Frontmatter:
    """Parsed frontmatter: always a dict, plus the reason it was read as empty, if any."""

    data: dict[Any, Any]
    problem: str | None = None


EMPTY = Frontmatter({})


def parse_yaml(text: bytes | str, loader: type | None = None) -> Frontmatter:
    """Parse a frontmatter YAML text with YAML 1.1 typing and timestamps kept as strings
    (``loader``: ``FastLoader``, the default, or ``PlainLoader``)."""
    import yaml

    from kiwifs.frontmatter.yamlload import AliasBomb, loaders

    if len(text) > MAX_FRONTMATTER_BYTES:
        return Frontmatter({}, OVER_LIMIT)
    made = loaders()
    if loader is None:
        loader = made.fast
    if ("*" if isinstance(text, str) else b"*") not in text:  # type: ignore[operator]
        loader = made.alias_free.get(loader, loader)  # the alias walk is a third of a parse
    try:
        value = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader subclass
    except AliasBomb as exc:
        return Frontmatter({}, str(exc))
    except yaml.YAMLError as exc:
        return Frontmatter({}, "invalid YAML: " + one_line(str(exc)))
    except (ValueError, TypeError, RecursionError, UnicodeDecodeError) as exc:
        return Frontmatter({}, "invalid YAML: " + one_line(str(exc)))
    if value is None:
        return EMPTY
    if not isinstance(value, dict):
        return Frontmatter({}, f"frontmatter is not a mapping (a {yaml_kind(value)})")
    return Frontmatter(value)


def read_frontmatter(data: bytes, loader: type | None = None) -> Frontmatter:
    """Frontmatter of a whole file's bytes (as found in its window: :func:`head_block`); never
    raises."""
    block = head_block(data)
    if block is None:
        return EMPTY
    if not block.terminated:
        return Frontmatter({}, block.problem)
    return parse_yaml(block.yaml, loader)


def refuse_alias_bomb(data: bytes) -> None:
    """Raise :class:`InvalidFrontmatter` when the frontmatter of ``data`` is an alias bomb.

    The write funnel calls this for every file it writes, so the check is cheap when there is
    no alias (one search for ``*``). Frontmatter that is otherwise invalid is not refused here:
    it is written and read as empty with a warning, as it always was.
    """
    block = find_block(data)
    if block is None or not block.terminated or b"*" not in block.yaml:
        return
    import yaml

    from kiwifs.frontmatter.yamlload import alias_problem, loaders

    try:
        loader = loaders().fast(block.yaml)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except (yaml.YAMLError, ValueError, TypeError, RecursionError, UnicodeDecodeError):
        return  # not valid YAML: read as empty, nothing expands it
    problem = alias_problem(node) if node is not None else None
    if problem is not None:
        raise InvalidFrontmatter(f"frontmatter refused: {problem}")


def split(data: bytes) -> tuple[bytes, bytes]:
    """Return ``(frontmatter yaml, body)``; the yaml is empty when there is no block."""
    block = find_block(data)
    if block is None:
        return b"", data
    return block.yaml, data[block.body_start :]


def one_line(text: str) -> str:
    """A parser's error message as one line (PyYAML's and ruamel's span several)."""
    return " ".join(text.split())


def yaml_kind(value: Any) -> str:
    """What a frontmatter that is not a mapping holds, as its error message names it."""
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    return type(value).__name__
