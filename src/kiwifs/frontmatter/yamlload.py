"""The bounded YAML loader: PyYAML's safe loaders as frontmatter reads them, aliases bounded.

Reading uses PyYAML's safe loader (the C loader when present) with YAML 1.1 typing, except that
timestamps stay the strings they were written as. The loader classes (:data:`FastLoader`,
:data:`PlainLoader`) are made on first use, PyYAML with them: a command that parses no
frontmatter, such as the memory report from a current index, never loads this module.

Aliases are bounded. YAML's ``*alias`` names a node written once and used many times; nested
ones make a 400-byte text stand for billions of nodes ("billion laughs"), which anything walking
the value (the JSON for the index, merge keys being flattened) then expands. Both parsers (these
loaders and the round-trip editor's ruamel) compose the text into its node graph first, which is
cheap (an alias is a reference to a node composed once); :func:`alias_problem` measures the
graph's expanded size there, before anything is constructed, and a block whose aliases add more
than :data:`MAX_ALIAS_NODES` nodes, or refer to themselves, is not constructed at all.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

MAX_ALIAS_NODES = 100_000
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
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
def loaders() -> _Loaders:
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
        return loaders().fast
    if name == "PlainLoader":
        return loaders().plain
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
