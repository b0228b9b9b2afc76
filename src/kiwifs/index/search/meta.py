"""Frontmatter queries (``/meta``): KiwiFS's filter syntax (docs/search.md) compiled to SQL.

A filter is ``<field><op><value>``: operators are looked for in the order ``!=``, ``<=``, ``>=``,
``<>``, ``=``, ``<``, ``>`` (the first found after the start wins), then `` not like `` /
`` like ``. Fields are JSON paths (``$.status``, ``$.a.b``, ``$.list[*]``, ``$.list[*].sub``)
and are always bound as parameters, never spliced into SQL.

Unlike KiwiFS, values are typed: ``5`` or ``0.8`` compare as numbers with numeric
frontmatter (and ``=`` still matches the same text in a string value), ``true``/``false`` match
booleans (or those strings), ``null`` matches a null or missing key. Order comparisons with a
number only ever match numbers; with any other value they compare text with text.

Filters may also come as a mapping ``{field: value}`` (:func:`equality_filters`): equalities
joined by AND, as a KiwiFS client sends them. Superseded pages (``memory_status: superseded``)
are left out unless ``include_superseded``.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kiwifs.base.text import check_text
from kiwifs.errors import InvalidQuery
from kiwifs.index.record import db_text, py_text
from kiwifs.index.search.keyword import check_limits
from kiwifs.index.texts import frontmatter_sql

OPERATORS = ("!=", "<=", ">=", "<>", "=", "<", ">")
_FIELD = re.compile(r"^\$\.[\w\-.\[\]*]+$")
_LIKE = re.compile(r"\s+(not\s+like|like)\s+", re.IGNORECASE)
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
NUMERIC = "('integer', 'real')"


@dataclass(frozen=True)
class Filter:
    field: str
    op: str
    value: str


@dataclass(frozen=True)
class MetaHit:
    path: str
    frontmatter: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "frontmatter": self.frontmatter}


@dataclass(frozen=True)
class MetaResults:
    """``count`` is the number of matching files in total; ``results`` is one page of them."""

    count: int
    limit: int
    offset: int
    results: list[MetaHit] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "limit": self.limit,
            "offset": self.offset,
            "results": [r.to_json() for r in self.results],
        }


def parse_filter(text: str, index: int = 0) -> Filter:
    """Split one filter; raises :class:`InvalidQuery` naming the filter's position."""
    check_text(text, f"filter[{index}]", InvalidQuery)
    for op in OPERATORS:
        at = text.find(op)
        if at > 0:
            return _checked(Filter(text[:at].strip(), op, text[at + len(op) :].strip()), index)
    found = _LIKE.search(text)
    if found and found.start() > 0:
        op = "not like" if found.group(1).lower().startswith("not") else "like"
        return _checked(
            Filter(text[: found.start()].strip(), op, text[found.end() :].strip()), index
        )
    raise InvalidQuery(f"filter[{index}]: no operator in {text!r}")


def equality_filters(fields: Mapping[str, Any]) -> list[Filter]:
    """``{field: value}`` as ``field = value`` filters (``status`` means ``$.status``).

    A value is a string, a number, a boolean or null; each compares as a typed filter value
    written the same way would (``5`` also matches ``"5"``, ``true`` also matches ``"true"``).
    """
    out: list[Filter] = []
    for index, (name, value) in enumerate(fields.items()):
        path = name if name.startswith("$.") else "$." + name
        if value is None:
            text = "null"
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float, str)):
            text = str(value)
        else:
            raise InvalidQuery(
                f"filters.{name} must be a string, number, boolean or null, got {value!r}"
            )
        out.append(_checked(Filter(path, "=", text), index))
    return out


def _checked(flt: Filter, index: int) -> Filter:
    check_field(flt.field, f"filter[{index}]: invalid field")
    return flt


def check_field(name: str, message: str) -> None:
    if not _FIELD.match(name) or name.count("[*]") > 1 or ("*" in name.replace("[*]", "")):
        raise InvalidQuery(f"{message} {name!r}")


def split_field(name: str) -> tuple[str, str | None]:
    """``$.list[*].sub`` → (``$.list``, ``$.sub``); ``$.list[*]`` → (``$.list``, ``$``)."""
    if "[*]" not in name:
        return name, None
    head, tail = name.split("[*]", 1)
    return head, "$" + tail


def literal(value: str) -> tuple[str, Any]:
    """The type a filter value is compared as: ``number``, ``bool``, ``null`` or ``text``."""
    low = value.lower()
    if low == "null":
        return "null", None
    if low in ("true", "false"):
        return "bool", low
    if _NUMBER.match(value):
        num = float(value)
        return "number", int(num) if num.is_integer() and abs(num) < 2**63 else num
    return "text", value


def condition(flt: Filter, n: int) -> tuple[str, dict[str, Any]]:
    """SQL (a boolean expression over ``frontmatter``) and its named parameters, filter ``n``."""
    path, sub = split_field(flt.field)
    names = {"path": f"p{n}", "sub": f"s{n}", "lit": f"l{n}", "text": f"t{n}"}
    params: dict[str, Any] = {names["path"]: path}
    if sub is None:
        typ = f"json_type(frontmatter, :{names['path']})"
        val = f"json_extract(frontmatter, :{names['path']})"
        return _typed(typ, val, flt, names, params), params
    if sub == "$":
        typ, val = "je.type", "je.atom"
    else:
        params[names["sub"]] = sub
        typ = f"(CASE WHEN je.type = 'object' THEN json_type(je.value, :{names['sub']}) END)"
        val = f"(CASE WHEN je.type = 'object' THEN json_extract(je.value, :{names['sub']}) END)"
    inner = _typed(typ, val, flt, names, params)
    sql = (
        f"(json_type(frontmatter, :{names['path']}) = 'array' AND EXISTS (SELECT 1 FROM "
        f"json_each(frontmatter, :{names['path']}) AS je WHERE {inner}))"
    )
    return sql, params


def _typed(typ: str, val: str, flt: Filter, names: dict[str, str], params: dict[str, Any]) -> str:
    """The typed comparison of ``val`` (whose JSON type is ``typ``) with the filter's value."""
    op, value = flt.op, flt.value
    lit, text = ":" + names["lit"], ":" + names["text"]
    params[names["text"]] = value
    if op in ("like", "not like"):
        neg = "NOT " if op == "not like" else ""
        return f"({typ} = 'text' AND {neg}{val} LIKE {text})"
    kind, parsed = literal(value)
    negate = op in ("!=", "<>")
    if kind == "null":
        if op == "=":
            return f"({typ} IS NULL OR {typ} = 'null')"
        if negate:
            return f"({typ} IS NOT NULL AND {typ} != 'null')"
        raise InvalidQuery(f"null can only be compared with = or !=: {flt.field}{op}{value}")
    params[names["lit"]] = parsed
    if kind == "bool" and op in ("=", "!=", "<>"):
        eq = f"({typ} = {lit} OR ({typ} = 'text' AND {val} = {text}))"
    elif kind == "number" and op in ("=", "!=", "<>"):
        eq = f"(({typ} IN {NUMERIC} AND {val} = {lit}) OR ({typ} = 'text' AND {val} = {text}))"
    elif kind == "number":
        return f"({typ} IN {NUMERIC} AND {val} {op} {lit})"
    else:
        sql_op = "=" if negate else op
        eq = f"({typ} = 'text' AND {val} {sql_op} {text})"
        if not negate:
            return eq
    return f"({typ} IS NOT NULL AND {typ} != 'null' AND NOT {eq})" if negate else eq


def where_clause(where: Sequence[str | Filter], or_: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """All ``where`` filters AND-ed, with the ``or`` filters as one OR-group AND-ed to them."""
    parts: list[str] = []
    params: dict[str, Any] = {}
    for i, text in enumerate(where):
        flt = text if isinstance(text, Filter) else parse_filter(text, i)
        sql, p = condition(flt, i)
        parts.append(sql)
        params.update(p)
    if or_:
        group: list[str] = []
        for j, text in enumerate(or_, start=len(where)):
            sql, p = condition(parse_filter(text, j), j)
            group.append(sql)
            params.update(p)
        parts.append("(" + " OR ".join(group) + ")")
    return (" AND ".join(parts) if parts else "1"), params


def order_clause(sort: str | None, order: str | None) -> tuple[str, dict[str, Any]]:
    """``ORDER BY`` for ``sort`` (a field, no ``[*]``) and ``order``; default ``path ASC``.

    ``order`` is ``asc`` or ``desc`` (any case; empty means ``asc``): anything else is refused
    rather than read as ``asc``, so a typo never silently reverses a page.
    """
    direction = (order or "asc").strip().upper()
    if direction not in ("ASC", "DESC"):
        raise InvalidQuery(f"order must be 'asc' or 'desc', got {order!r}")
    if not sort:
        return f"ORDER BY path {direction}", {}
    if not _FIELD.match(sort) or "*" in sort:
        raise InvalidQuery(f"invalid sort field {sort!r}")
    return f"ORDER BY json_extract(frontmatter, :sort) {direction}, path ASC", {"sort": sort}


# the file rows with their frontmatter as JSON text (stored compressed: index/texts.py); the
# filters and the ordering name ``frontmatter``, and every mention reads the row's JSON
_FILES = f"(SELECT id, path, unreadable, superseded, {frontmatter_sql()} AS frontmatter FROM files)"


def _frontmatter_of(conn: sqlite3.Connection, ids: list[int]) -> dict[int, str]:
    """The frontmatter JSON of the rows ``ids`` (a page: at most a few hundred)."""
    marks = ", ".join("?" * len(ids))
    sql = f"SELECT id, {frontmatter_sql()} FROM files WHERE id IN ({marks})"
    return dict(conn.execute(sql, ids).fetchall()) if ids else {}


def query(
    conn: sqlite3.Connection,
    where: Sequence[str | Filter] = (),
    or_: Sequence[str] = (),
    sort: str | None = None,
    order: str | None = "asc",
    limit: int | None = 50,
    offset: int = 0,
    paths: Sequence[str] | None = None,
    include_superseded: bool = False,
    path_prefix: str | None = None,
) -> MetaResults:
    """Files whose frontmatter matches the filters; ``paths`` restricts them to those paths,
    ``path_prefix`` to the paths starting with it (as search takes it: a leading ``/`` ignored),
    in the query itself, so ``count`` and the page hold only those (a scoped key's prefix)."""
    lim, off = check_limits(limit, offset)
    prefix = check_text(path_prefix or "", "path prefix", InvalidQuery).lstrip("/")
    cond, params = where_clause(where, or_)
    ordering, sort_params = order_clause(sort, order)
    params.update(sort_params)
    cheap = "unreadable = 0"  # the row's own columns, tested before its frontmatter is read
    if paths is not None:
        names = [f"path{i}" for i in range(len(paths))]
        params.update({n: db_text(p.lstrip("/")) for n, p in zip(names, paths, strict=True)})
        cheap += " AND path IN (" + ", ".join(":" + n for n in names) + ")" if names else " AND 0"
    if prefix:
        cheap += " AND substr(path, 1, length(:prefix)) = :prefix"
        params["prefix"] = prefix
    if not include_superseded:
        cheap += " AND superseded = 0"  # the column the index computes by the one rule
    base = f"FROM {_FILES} WHERE {cheap} AND {cond}"
    params.update({"lim": lim, "off": off})
    try:
        # one pass counts the matches and cuts the page (each row's frontmatter decompressed
        # once; a count, then the page, read every row twice); the page's JSON read after
        page = conn.execute(
            f"SELECT id, path, count(*) OVER () {base} {ordering} LIMIT :lim OFFSET :off", params
        ).fetchall()
        if page:
            count = page[0][2]
        elif off or not lim:  # past the end, or no page: the count is not in the page
            count = conn.execute(f"SELECT count(*) {base}", params).fetchone()[0]
        else:
            count = 0
        found = _frontmatter_of(conn, [row[0] for row in page])
    except sqlite3.OperationalError as exc:
        raise InvalidQuery(f"invalid meta query: {exc}") from exc
    hits = [MetaHit(py_text(path), json.loads(found[i])) for i, path, _ in page]
    return MetaResults(count, lim, off, hits)
