"""Round-trip editing of frontmatter: one key changed, the rest of the file as it was.

Editing (provenance, ``merged-from``, a page forgotten or restored, a claim) goes through
ruamel.yaml's round-trip mode so the other keys keep their order, comments and quoting, and the
body is copied byte for byte. The text is composed and its aliases bounded
(:func:`kiwifs.frontmatter.yamlload.alias_problem`) before the round-trip load constructs anything:
an alias bomb is refused (:class:`~kiwifs.errors.InvalidFrontmatter`). Values are written so that
the reader (PyYAML, YAML 1.1) reads back the same strings (:func:`scalar`). A page citing
thousands of episodes gets its new ``merged-from`` entries as text instead
(:func:`appended_entries`), checked by parsing the result again.

ruamel.yaml and the bounded loader are imported on first use (the report edits nothing).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kiwifs.base.text import check_text
from kiwifs.errors import InvalidFrontmatter, UsageError
from kiwifs.frontmatter.reader import find_block, one_line, read_frontmatter, yaml_kind

if TYPE_CHECKING:
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

_STR_TAG = "tag:yaml.org,2002:str"


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

    from kiwifs.frontmatter.yamlload import loaders

    tag = loaders().resolver.resolve(yaml.ScalarNode, value, (True, False))
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
        raise InvalidFrontmatter("parse frontmatter: " + one_line(str(exc))) from exc
    if doc is None:
        doc = CommentedMap()
    if not isinstance(doc, CommentedMap):
        raise InvalidFrontmatter(f"frontmatter is not a mapping (a {yaml_kind(doc)})")
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
    from kiwifs.frontmatter.yamlload import alias_problem

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


def merge_patched(data: bytes, patch: Mapping[str, Any]) -> bytes:
    """``data`` with the JSON merge patch ``patch`` applied to its frontmatter (RFC 7386: a key
    set, ``None`` removing one, an object merged into the mapping under its key).

    Everything but the frontmatter's YAML is kept byte for byte: the body, and the block's own
    ``---`` lines (a ``\\r`` or a closing ``...`` stays). Existing keys keep their place, comments
    and quoting (the round-trip of :func:`edit_frontmatter`); new keys come last. A patch that
    changes nothing returns ``data`` itself. Raises :class:`InvalidFrontmatter` as
    :func:`edit_frontmatter` does (the file's block is broken), and :class:`UsageError` for a
    patch YAML cannot hold or whose result the reader would not read back.
    """
    if not isinstance(patch, Mapping):
        raise UsageError("a frontmatter patch is a JSON object")
    _check_patch(patch, 0)
    edited = edit_frontmatter(data, lambda doc: _merge(doc, patch))
    if edited is data:
        return data
    old, new = find_block(data), find_block(edited)
    if old is not None and new is not None:
        start = data.find(b"\n") + 1  # the YAML starts after the opening line
        edited = data[:start] + new.yaml + data[start + len(old.yaml) :]
    problem = read_frontmatter(edited).problem
    if problem is not None:  # the reader must read what was written: never a broken page
        raise UsageError(f"the patched frontmatter would not read back: {problem}")
    return edited


PATCH_DEPTH = 32  # objects and arrays nested deeper than this are refused, not recursed into


def _check_patch(value: Any, depth: int) -> None:
    """Refuse (:class:`UsageError`) what YAML written for the reader cannot hold: text that is
    not Unicode (a lone surrogate), nesting past :data:`PATCH_DEPTH`."""
    if depth > PATCH_DEPTH:
        raise UsageError(f"the frontmatter patch is nested deeper than {PATCH_DEPTH} levels")
    if isinstance(value, str):
        check_text(value, "a frontmatter patch's text")
    elif isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise UsageError("a frontmatter patch's keys are strings")
            check_text(k, "a frontmatter patch's key")
            _check_patch(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _check_patch(v, depth + 1)
    elif not (value is None or isinstance(value, bool | int | float)):
        raise UsageError(f"a frontmatter value cannot be a {type(value).__name__}")


def _merge(doc: CommentedMap, patch: Mapping[str, Any]) -> bool:
    """Merge ``patch`` into ``doc`` in place; whether anything changed."""
    from ruamel.yaml.comments import CommentedMap

    changed = False
    for key, value in patch.items():
        if value is None:
            if key in doc:
                del doc[key]
                changed = True
        elif isinstance(value, Mapping):
            current = doc.get(key)
            if not isinstance(current, CommentedMap):
                current = CommentedMap()
                doc[key if key in doc else _yaml_key(key)] = current
                changed = True
            changed = _merge(current, value) or changed
        else:
            new = _yaml_value(value)
            if key not in doc or not _same(doc[key], value):
                doc[key if key in doc else _yaml_key(key)] = new
                changed = True
    return changed


def _same(current: Any, value: Any) -> bool:
    """Whether the YAML value ``current`` already reads as the JSON value ``value``, type and
    all (``1`` is not ``true``, ``"1"`` not ``1``), so setting it again is no change and no
    commit. A string the 1.1 reader would read as something else counts as the same only when
    it is already quoted."""
    if isinstance(value, list):
        return (
            isinstance(current, list)
            and len(current) == len(value)
            and all(_same(c, v) for c, v in zip(current, value, strict=True))
        )
    if isinstance(value, Mapping) or isinstance(current, Mapping | list):
        return False
    if value is None or current is None:
        return value is None and current is None
    if isinstance(value, bool) or isinstance(current, bool):
        return isinstance(value, bool) and isinstance(current, bool) and value == current
    if isinstance(value, str):
        return (
            isinstance(current, str)
            and str(current) == value
            and (scalar(value) is value or type(current) is not str)
        )
    return isinstance(current, int | float) and not isinstance(current, str) and current == value


def _yaml_key(key: str) -> str:
    """A new key written so the reader reads the same string back (``no:`` would be False)."""
    return scalar(key)


def _yaml_value(value: Any) -> Any:
    """A JSON value as round-trip YAML: strings quoted where the 1.1 reader would read them as
    something else (:func:`scalar`), arrays as block sequences. An object here is an array's
    item, a value set whole (RFC 7386 merges objects only at the patch's own level), so its
    ``null`` members stay."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(value, str):
        return scalar(value)
    if isinstance(value, list):
        return CommentedSeq([_yaml_value(v) for v in value])
    if isinstance(value, Mapping):
        m = CommentedMap()
        for k, v in value.items():
            m[_yaml_key(str(k))] = _yaml_value(v)
        return m
    return value  # null, a boolean or a number (:func:`_check_patch` let nothing else by)
