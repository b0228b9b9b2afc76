"""Frontmatter: one rule for finding the block, one parser for reading it, one for editing it.

KiwiFS reads and writes frontmatter with two unrelated parsers that disagree.
kiwifs has one block rule: the first line is exactly ``---`` (trailing spaces or ``\\r``
allowed) and the block ends at the next line that is exactly ``---`` or ``...``. Reading uses
PyYAML's safe loader (the C loader when present) with YAML 1.1 typing, except that timestamps stay
the strings they were written as. Anything wrong with the block (unterminated, invalid YAML, not a
mapping, over 1 MiB) reads as empty frontmatter plus a warning, never as an exception.

Editing (provenance, ``merged-from``) goes through ruamel.yaml's round-trip mode so the other keys
keep their order, comments and quoting, and the body is copied byte for byte.

Aliases are bounded. YAML's ``*alias`` names a node written once and used many times; nested
ones make a 400-byte text stand for billions of nodes ("billion laughs"), which anything walking
the value (the JSON for the index, merge keys being flattened) then expands. Both parsers compose
the text into its node graph first, which is cheap (an alias is a reference to a node composed
once); :func:`alias_problem` measures the graph's expanded size there, before anything is
constructed, and a block whose aliases add more than :data:`MAX_ALIAS_NODES` nodes, or refer to
themselves, is not constructed at all: read as empty frontmatter with a warning, refused on write
and edit (:class:`~kiwifs.errors.InvalidFrontmatter`).
"""

from __future__ import annotations

import functools
import io
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import InvalidFrontmatter

# PyYAML and ruamel.yaml are imported on first use (~20 ms together): a command that reads no
# frontmatter, such as the memory report from a current index, never needs them.
if TYPE_CHECKING:
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

MAX_FRONTMATTER_BYTES = 1024 * 1024
MAX_ALIAS_NODES = 100_000
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_STR_TAG = "tag:yaml.org,2002:str"
_SATURATED = 1 << 40  # expanded sizes stop growing here: the count only needs to pass the bound


class AliasBomb(Exception):
    """A YAML document whose aliases expand past the bound (raised before construction)."""


def alias_problem(root: Any) -> str | None:
    """Why the node graph under ``root`` is refused, or ``None`` when its aliases are modest.

    Works on PyYAML's and ruamel's nodes alike (a node's ``value`` is a list of child nodes or
    of key/value node pairs for collections, a string for scalars). Each distinct node is
    visited once and its expanded size computed from its children's, so the cost is that of the
    text, whatever the expansion; the walk is iterative, so depth costs no recursion.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            total = 1 + sum(sizes[id(child)] for child in _children_of(node))
            sizes[key] = min(total, _SATURATED)
            continue
        if key in sizes:
            continue
        if key in on_path:
            return "an alias that contains itself (a recursive alias)"
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children_of(node) if id(child) not in sizes)
    added = sizes[id(root)] - len(sizes)
    if added > MAX_ALIAS_NODES:
        return f"its aliases expand to over {MAX_ALIAS_NODES} nodes (an alias bomb)"
    return None


def _children_of(node: Any) -> list[Any]:
    value = node.value
    if not isinstance(value, list):
        return []
    if value and isinstance(value[0], tuple):
        return [part for pair in value for part in pair]
    return value


def _get_single_data(self: Any) -> Any:
    """``BaseConstructor.get_single_data`` with the alias bound checked between compose and
    construct."""
    node = self.get_single_node()
    if node is None:
        return None
    problem = alias_problem(node)
    if problem is not None:
        raise AliasBomb(problem)
    return self.construct_document(node)


def _plain_single(self: Any) -> Any:
    """``BaseConstructor.get_single_data`` for a text known to hold no alias."""
    node = self.get_single_node()
    return None if node is None else self.construct_document(node)


def _without_timestamps(base: Any) -> Any:
    """A loader class like ``base`` whose resolver never produces timestamps and that refuses
    alias bombs before constructing anything."""
    resolvers = {
        first: [(tag, rx) for tag, rx in entries if tag != _TIMESTAMP_TAG]
        for first, entries in base.yaml_implicit_resolvers.items()
    }
    attributes = {"yaml_implicit_resolvers": resolvers, "get_single_data": _get_single_data}
    return type("KiwiNoTimestamp" + base.__name__, (base,), attributes)


class _Loaders(NamedTuple):  # not a dataclass: making one costs ~0.7 ms at import
    plain: Any  # PyYAML's pure-Python safe loader, timestamps removed, aliases bounded
    fast: Any  # the same on the C loader when present
    alias_free: dict[Any, Any]  # each without the alias walk, for texts without a ``*``
    resolver: Any  # PyYAML's resolver with timestamps: they must be quoted when written


@functools.cache
def _loaders() -> _Loaders:
    import yaml

    plain = _without_timestamps(yaml.SafeLoader)
    fast = _without_timestamps(getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    alias_free = {
        loader: type(loader.__name__ + "AliasFree", (loader,), {"get_single_data": _plain_single})
        for loader in (plain, fast)
    }
    return _Loaders(plain, fast, alias_free, yaml.SafeLoader(""))


def __getattr__(name: str) -> Any:
    """``FastLoader`` and ``PlainLoader``, the loader classes, made on first use (PEP 562)."""
    if name == "FastLoader":
        return _loaders().fast
    if name == "PlainLoader":
        return _loaders().plain
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True, slots=True)
class Block:
    """Where the frontmatter block sits in a file's bytes.

    ``yaml`` is the text between the delimiters; ``body_start`` is the offset of the first body
    byte. ``terminated`` is False for a block with no closing line (then ``body_start`` is the end).
    """

    yaml: bytes
    body_start: int
    terminated: bool


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

    if len(text) > MAX_FRONTMATTER_BYTES:
        return Frontmatter({}, f"frontmatter is over {MAX_FRONTMATTER_BYTES} bytes")
    loaders = _loaders()
    if loader is None:
        loader = loaders.fast
    if ("*" if isinstance(text, str) else b"*") not in text:  # type: ignore[operator]
        loader = loaders.alias_free.get(loader, loader)  # the alias walk is a third of a parse
    try:
        value = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader subclass
    except AliasBomb as exc:
        return Frontmatter({}, str(exc))
    except yaml.YAMLError as exc:
        return Frontmatter({}, "invalid YAML: " + _one_line(str(exc)))
    except (ValueError, TypeError, RecursionError, UnicodeDecodeError) as exc:
        return Frontmatter({}, "invalid YAML: " + _one_line(str(exc)))
    if value is None:
        return EMPTY
    if not isinstance(value, dict):
        return Frontmatter({}, f"frontmatter is not a mapping (a {_yaml_kind(value)})")
    return Frontmatter(value)


def read_frontmatter(data: bytes, loader: type | None = None) -> Frontmatter:
    """Frontmatter of a whole file's bytes; never raises."""
    block = find_block(data)
    if block is None:
        return EMPTY
    if not block.terminated:
        return Frontmatter({}, "frontmatter block not terminated")
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

    try:
        loader = _loaders().fast(block.yaml)
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
    from ruamel.yaml import YAML

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
    import yaml
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    tag = _loaders().resolver.resolve(yaml.ScalarNode, value, (True, False))
    if tag != _STR_TAG or value != value.strip() or value == "" or not value.isprintable():
        quoted: str = DoubleQuotedScalarString(value)
        return quoted
    return value


def edit_frontmatter(data: bytes, mutate: Callable[[CommentedMap], bool]) -> bytes:
    """Apply ``mutate`` to the frontmatter mapping of ``data`` and return the new file bytes.

    ``mutate`` returns False when it changed nothing; the input bytes are then returned as they
    were. The body is kept byte for byte. A file without frontmatter gets a new block; a block
    left with no key and no comment is dropped.
    Raises :class:`InvalidFrontmatter` (and writes nothing) for an unterminated block, invalid
    YAML or a block that is not a mapping.
    """
    block = find_block(data)
    if block is not None and not block.terminated:
        raise InvalidFrontmatter("frontmatter block not terminated")
    try:
        fm_text = block.yaml.decode("utf-8") if block else ""
    except UnicodeDecodeError as exc:
        raise InvalidFrontmatter(f"frontmatter is not valid UTF-8: {exc.reason}") from exc
    body = data[block.body_start :] if block else data
    from ruamel.yaml.comments import CommentedMap

    rt = _rt_yaml()
    try:
        if "*" in fm_text:
            _refuse_rt_bomb(rt, fm_text)
        doc = rt.load(fm_text) if fm_text.strip() else None
    except InvalidFrontmatter:
        raise
    except Exception as exc:  # ruamel raises several unrelated error types
        raise InvalidFrontmatter("parse frontmatter: " + _one_line(str(exc))) from exc
    if doc is None:
        doc = CommentedMap()
    if not isinstance(doc, CommentedMap):
        raise InvalidFrontmatter(f"frontmatter is not a mapping (a {_yaml_kind(doc)})")
    if not mutate(doc):
        return data
    if not doc and not _has_comment(fm_text) and find_block(body) is None:
        return body  # every key removed (a restore of a page that had none): no empty block
    out = io.StringIO()
    rt.dump(doc, out)
    dumped = out.getvalue().rstrip("\n")
    if fm_text.strip() and not _has_content(fm_text):
        # a comment-only block: keep its comments above the new keys
        dumped = fm_text.rstrip("\n") + "\n" + dumped
    return b"---\n" + dumped.encode("utf-8") + b"\n---\n" + body


def _refuse_rt_bomb(rt: YAML, fm_text: str) -> None:
    """Compose with ruamel (cheap: aliases stay references) and check the bound before the
    round-trip load constructs anything."""
    node = rt.compose(fm_text)
    problem = alias_problem(node) if node is not None else None
    if problem is not None:
        raise InvalidFrontmatter(f"frontmatter refused: {problem}")


def _has_comment(fm_text: str) -> bool:
    return any(line.strip().startswith("#") for line in fm_text.splitlines())


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
    from ruamel.yaml.comments import CommentedSeq

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
    from ruamel.yaml.comments import CommentedMap

    m = CommentedMap()
    for k, v in entry.items():
        m[k] = scalar(v)
    return m


_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./+-]*")
FAST_APPEND_MIN = 16 * 1024  # below this a round-trip is quick, and its quoting is kept


def appended_entries(
    data: bytes, key: str, entries: list[dict[str, str]], parsed: Mapping[Any, Any]
) -> bytes | None:
    """:func:`append_entries` through :func:`edit_frontmatter`, fast, for the common shape.

    When ``key`` holds a block sequence in a terminated frontmatter block of at least
    :data:`FAST_APPEND_MIN` bytes, the new items are
    written as text right after its last item, and the result is parsed again: it is returned
    only when it reads as ``parsed`` (the current frontmatter) with exactly these entries
    appended, the rest of the file untouched. Otherwise ``None``: the caller uses the
    round-trip editor. A round-trip costs seconds on a page that cites thousands of episodes;
    this costs two parses.
    """
    block = find_block(data)
    current = parsed.get(key)
    if block is None or not block.terminated or not isinstance(current, list) or not current:
        return None
    if len(block.yaml) < FAST_APPEND_MIN:
        return None
    try:
        text = block.yaml.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.split("\n")
    found = _sequence_end(lines, key)
    items = [_item_text(entry, found[1]) for entry in entries] if found else None
    if found is None or items is None or any(i is None for i in items):
        return None
    if "\r" in text:
        return None
    new_lines = lines[: found[0]] + [line for i in items if i for line in i] + lines[found[0] :]
    start = data.find(b"\n") + 1  # the block's YAML starts after the opening line
    edited = data[:start] + "\n".join(new_lines).encode("utf-8") + data[start + len(block.yaml) :]
    expected = dict(parsed)
    expected[key] = [*current, *(dict(e) for e in entries)]
    again = read_frontmatter(edited)
    if again.problem or again.data != expected:
        return None
    return edited


def _sequence_end(lines: list[str], key: str) -> tuple[int, str] | None:
    """Where the block sequence under ``key:`` ends (line index) and its items' indentation."""
    heads = [n for n, line in enumerate(lines) if line.rstrip() == f"{key}:"]
    if len(heads) != 1:
        return None
    pad: str | None = None
    end = heads[0] + 1
    for n in range(heads[0] + 1, len(lines)):
        line = lines[n]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = line[: len(line) - len(line.lstrip(" "))]
        if pad is None:
            if not line.lstrip(" ").startswith("- "):
                return None
            pad = indent
        elif len(indent) < len(pad) or (len(indent) == len(pad) and not stripped.startswith("-")):
            break
        end = n + 1
    return (end, pad) if pad is not None else None


def _item_text(entry: dict[str, str], pad: str) -> list[str] | None:
    """One mapping item as block YAML lines, or ``None`` when a value needs the full editor."""
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    out: list[str] = []
    for n, (k, v) in enumerate(entry.items()):
        if not _PLAIN.fullmatch(k):
            return None
        if _PLAIN.fullmatch(v) and not isinstance(scalar(v), DoubleQuotedScalarString):
            value = v
        else:
            value = json.dumps(v, ensure_ascii=False)
            if not value.isprintable():
                return None
        out.append(f"{pad}{'- ' if n == 0 else '  '}{k}: {value}")
    return out or None
