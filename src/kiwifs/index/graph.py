"""Graph navigation over the link index: the graph of pages and links, a one-hop walk from a
page, the shortest path between two pages, and one page's health.

Every answer resolves links the way :mod:`kiwifs.index.links` does (by path, then file name, a
``merged-from`` id by the episode holding it), at query time and in SQL, so it is exact for the
files as they are now. ``prefix`` (a scoped key's, or a request's narrower one) makes the root
look as if it held only the files under it: no node, edge, neighbour or step outside it is
ever read. A node is a markdown page (``*.md``, readable); superseded pages stay nodes, marked,
because a walk that hid them would hide why a link leads nowhere current.

Every answer is bounded, so none holds a whole large root in memory: the graph by ``limit``
nodes (:data:`GRAPH_LIMIT`, at most :data:`GRAPH_MAX`) and ten edges a node, a walk's lists by
:data:`WALK_MAX` and :data:`SIBLINGS_MAX`, the path search by :data:`PATH_MAX_DEPTH` hops and
:data:`PATH_MAX_VISITED` pages.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from kiwifs.frontmatter.reader import split
from kiwifs.index.links import EPISODIC, _file, _params, _resolve, backlinks, outbound
from kiwifs.index.record import db_text, py_text
from kiwifs.index.schema import link_kind
from kiwifs.index.texts import frontmatter_sql, texts
from kiwifs.memory.navigation import outline

GRAPH_LIMIT = 500  # nodes of a graph when no limit is asked
GRAPH_MAX = 5000  # the most nodes a graph answer holds
EDGES_PER_NODE = 10  # edges of a graph answer: at most this many times its nodes
WALK_MAX = 500  # links_out, links_in: the most entries of each
SIBLINGS_MAX = 100  # siblings (same folder, then shared tag): the most entries
PATH_MAX_DEPTH = 12  # hops a shortest path may take
PATH_MAX_VISITED = 20000  # pages a path search may reach before it gives up
STALE_DAYS = 30  # a `reviewed` date older than this is stale
EMPTY_CHARS = 50  # a body shorter than this (stripped) is an empty page, as KiwiFS counts it
RELATED_MAX = 20  # a health check names at most this many duplicates or contradicting pages
_CHUNK = 500  # ids per IN (…) of a path search's step
# Pages that are entry points, never orphans (as the memory report's conventions have them).
_ROOT_PAGES = frozenset({"index.md", "SCHEMA.md", "log.md"})
# Words that record a decision, which belongs under decisions/ (KiwiFS's janitor's pattern).
_DECISION = re.compile(r"(?i)(?:we decided|decision:|chose .+ over .+|agreed to|the decision was)")
_CONTRADICTS = "typed:contradicts"
_SOURCE_OF_TRUTH = "source-of-truth"

_PAGE = "lower({t}.path) LIKE '%.md' AND {t}.unreadable = 0"
_FM = frontmatter_sql("f.frontmatter")  # a row's frontmatter as JSON text
_UNDER = " AND substr({t}.path, 1, length(:prefix)) = :prefix"


def _under(t: str, prefix: str) -> str:
    return _UNDER.format(t=t) if prefix else ""


def _tags(frontmatter: str | None) -> list[str]:
    """A page's ``tags`` (or ``labels``): a list of strings or one string."""
    try:
        fm = json.loads(frontmatter or "{}")
    except ValueError:
        return []
    if not isinstance(fm, dict):
        return []
    value = fm.get("tags", fm.get("labels"))
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list):
        return [t for t in value if isinstance(t, str) and t]
    return []


@dataclass(frozen=True)
class Graph:
    """Pages and the links between them; ``truncated`` when ``limit`` (or the edge bound) cut
    the answer."""

    nodes: list[tuple[str, list[str], bool]]  # path, tags, superseded
    edges: list[tuple[str, str, str]]  # source, target, kind
    truncated: bool

    def to_json(self) -> dict[str, Any]:
        nodes: list[dict[str, Any]] = []
        for path, tags, superseded in self.nodes:
            node: dict[str, Any] = {"path": path}
            if tags:
                node["tags"] = tags
            node["superseded"] = superseded
            nodes.append(node)
        edges = [{"source": s, "target": t, "kind": k} for s, t, k in self.edges]
        return {"nodes": nodes, "edges": edges, "truncated": self.truncated}


def graph(conn: sqlite3.Connection, prefix: str = "", limit: int = GRAPH_LIMIT) -> Graph:
    """The first ``limit`` pages under ``prefix`` in walk order and the links between them
    (one edge a source, target and kind; self-links left out)."""
    limit = max(1, min(limit, GRAPH_MAX))
    q = (
        f"SELECT id, path, {_FM}, superseded FROM files f WHERE {_PAGE.format(t='f')}"
        f"{_under('f', prefix)} ORDER BY key LIMIT :limit"
    )
    rows = conn.execute(q, _params(prefix, limit=limit + 1)).fetchall()
    truncated = len(rows) > limit
    rows = rows[:limit]
    nodes = [(py_text(p), _tags(fm), bool(sup)) for _, p, fm, sup in rows]
    if not rows:
        return Graph(nodes, [], truncated)
    cap = limit * EDGES_PER_NODE
    nodes_sql = (
        f"SELECT id FROM files f WHERE {_PAGE.format(t='f')}{_under('f', prefix)}"
        " ORDER BY key LIMIT :limit"
    )
    q = (
        f"WITH nodes AS ({nodes_sql}) SELECT s.path, t.path, e.kind FROM (SELECT DISTINCT"
        f" l.file_id AS sid, {link_kind()} AS kind, {_resolve(bool(prefix))} AS tid FROM links l"
        " WHERE l.file_id IN nodes) e JOIN files s ON s.id = e.sid JOIN files t ON t.id = e.tid"
        " WHERE e.tid IN nodes AND e.tid != e.sid ORDER BY s.key, t.key, e.kind LIMIT :cap"
    )
    found = conn.execute(q, _params(prefix, limit=limit, cap=cap + 1)).fetchall()
    edges = [(py_text(s), py_text(t), k) for s, t, k in found[:cap]]
    return Graph(nodes, edges, truncated or len(found) > cap)


@dataclass(frozen=True)
class Walk:
    """One hop from a page: where its links lead, who links to it, and its siblings
    (``sibling_dir``: same folder; ``sibling_tag``: a shared tag, named)."""

    path: str
    links_out: list[str]
    links_in: list[str]
    siblings: list[tuple[str, str, str]]  # path, relation, shared tag ("" for none)
    hub_score: float
    in_degree: int
    out_degree: int
    broken: list[str]
    superseded: list[str]

    def to_json(self) -> dict[str, Any]:
        siblings: list[dict[str, Any]] = []
        for path, relation, tag in self.siblings:
            entry = {"path": path, "relation": relation}
            if tag:
                entry["shared_tag"] = tag
            siblings.append(entry)
        return {
            "path": self.path,
            "links_out": self.links_out,
            "links_in": self.links_in,
            "siblings": siblings,
            "hub_score": self.hub_score,
            "in_degree": self.in_degree,
            "out_degree": self.out_degree,
            "broken": self.broken,
            "superseded": self.superseded,
        }


def _superseded(conn: sqlite3.Connection, paths: set[str]) -> list[str]:
    """Which of ``paths`` are superseded, sorted."""
    found: list[str] = []
    names = sorted(paths)
    for start in range(0, len(names), _CHUNK):
        chunk = names[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        q = f"SELECT path FROM files WHERE superseded = 1 AND path IN ({marks})"
        found += [py_text(p) for (p,) in conn.execute(q, [db_text(p) for p in chunk])]
    return sorted(found)


def walk(
    conn: sqlite3.Connection, path: str, prefix: str = "", include_siblings: bool = True
) -> Walk | None:
    """The one-hop walk from ``path`` (``None``: no such page under ``prefix``)."""
    page = _file(conn, path, prefix)
    if page is None:
        return None
    pid = page[0]
    (here,) = conn.execute("SELECT path FROM files WHERE id = ?", (pid,)).fetchone()
    here = py_text(here)
    out: list[str] = []
    broken: list[str] = []
    for link in outbound(conn, here, prefix):
        if link.path is None:
            if link.target not in broken:
                broken.append(link.target)
        elif link.path != here and link.path not in out:
            out.append(link.path)
    sources: list[str] = []
    for b in backlinks(conn, here, prefix):
        if b.path != here and b.path not in sources:
            sources.append(b.path)
    siblings = _siblings(conn, pid, here, prefix) if include_siblings else []
    (pages,) = conn.execute(
        f"SELECT count(*) FROM files f WHERE {_PAGE.format(t='f')}{_under('f', prefix)}",
        _params(prefix),
    ).fetchone()
    hub = round(len(sources) / pages, 4) if pages else 0.0
    named = {here, *out, *sources, *(s for s, _, _ in siblings)}
    return Walk(
        here,
        out[:WALK_MAX],
        sources[:WALK_MAX],
        siblings,
        hub,
        len(sources),
        len(out),
        broken[:WALK_MAX],
        _superseded(conn, named),
    )


def _siblings(
    conn: sqlite3.Connection, pid: int, here: str, prefix: str
) -> list[tuple[str, str, str]]:
    """The pages in ``here``'s folder, then those sharing one of its tags (case-insensitive),
    at most :data:`SIBLINGS_MAX` in all, each in walk order."""
    q = (
        f"SELECT f.path FROM files f WHERE {_PAGE.format(t='f')}{_under('f', prefix)}"
        " AND f.parent = (SELECT parent FROM files WHERE id = :pid) AND f.id != :pid"
        " ORDER BY f.key LIMIT :cap"
    )
    found = [
        (py_text(p), "sibling_dir", "")
        for (p,) in conn.execute(q, _params(prefix, pid=pid, cap=SIBLINGS_MAX))
    ]
    (fm,) = conn.execute(f"SELECT {_FM} FROM files f WHERE id = ?", (pid,)).fetchone()
    tags = {t.lower(): t for t in _tags(fm)}
    room = SIBLINGS_MAX - len(found)
    if tags and room > 0:
        marks = ",".join(f":t{i}" for i in range(len(tags)))
        q = (
            "SELECT f.path, lower(j.value) FROM files f,"
            f" json_each({_FM}, CASE WHEN json_type({_FM}, '$.tags') IS NOT NULL"
            " THEN '$.tags' ELSE '$.labels' END) j"
            f" WHERE {_PAGE.format(t='f')}{_under('f', prefix)} AND f.id != :pid"
            f" AND j.type = 'text' AND lower(j.value) IN ({marks})"
            " ORDER BY f.key LIMIT :cap"
        )
        params = _params(prefix, pid=pid, cap=room, **{f"t{i}": t for i, t in enumerate(tags)})
        found += [(py_text(p), "sibling_tag", tags[t]) for p, t in conn.execute(q, params)]
    return found


def path_between(
    conn: sqlite3.Connection, source: str, target: str, prefix: str = ""
) -> list[str] | None:
    """The shortest chain of links from ``source`` to ``target`` (both included), following
    links in their direction, breadth first; ``None`` when none is found within
    :data:`PATH_MAX_DEPTH` hops and :data:`PATH_MAX_VISITED` pages. Raises ``LookupError``
    naming a page that is not there (under ``prefix``)."""
    start, goal = _file(conn, source, prefix), _file(conn, target, prefix)
    if start is None or goal is None:
        raise LookupError(source if start is None else target)
    sid, gid = start[0], goal[0]
    parent: dict[int, int] = {sid: sid}
    frontier = [sid]
    depth = 0
    while sid != gid and frontier and depth < PATH_MAX_DEPTH and gid not in parent:
        depth += 1
        following: list[int] = []
        for chunk_start in range(0, len(frontier), _CHUNK):
            chunk = frontier[chunk_start : chunk_start + _CHUNK]
            marks = ",".join(f":f{i}" for i in range(len(chunk)))
            q = (
                f"SELECT DISTINCT l.file_id, {_resolve(bool(prefix))} AS tid FROM links l"
                f" WHERE l.file_id IN ({marks}) ORDER BY l.file_id, l.rowid"
            )
            params = _params(prefix, **{f"f{i}": fid for i, fid in enumerate(chunk)})
            for src, tid in conn.execute(q, params):
                if tid is None or tid in parent:
                    continue
                parent[tid] = src
                following.append(tid)
                if tid == gid or len(parent) >= PATH_MAX_VISITED:
                    break
            if gid in parent or len(parent) >= PATH_MAX_VISITED:
                break
        frontier = following
    if gid not in parent:
        return None
    chain = [gid]
    while chain[-1] != sid:
        chain.append(parent[chain[-1]])
    chain.reverse()
    paths = dict(_paths(conn, chain))
    return [paths[i] for i in chain]


def _paths(conn: sqlite3.Connection, ids: list[int]) -> list[tuple[int, str]]:
    marks = ",".join("?" * len(ids))
    q = f"SELECT id, path FROM files WHERE id IN ({marks})"
    return [(i, py_text(p)) for i, p in conn.execute(q, ids)]


def superseded_of(conn: sqlite3.Connection, paths: list[str]) -> list[str]:
    """Which of ``paths`` are superseded (for an answer that lists pages by path)."""
    return _superseded(conn, set(paths))


@dataclass(frozen=True)
class GraphPath:
    """A shortest path: the pages from the first to the last, and which are superseded."""

    path: list[str]
    superseded: list[str]

    @property
    def hops(self) -> int:
        return len(self.path) - 1

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "hops": self.hops, "superseded": self.superseded}


@dataclass(frozen=True)
class Health:
    """One page's health, as KiwiFS reports it, plus whether it is superseded."""

    path: str
    word_count: int
    link_count: int
    backlink_count: int
    days_since_update: float
    quality_score: float | None
    issues: list[str] = field(default_factory=list)
    superseded: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "word_count": self.word_count,
            "link_count": self.link_count,
            "backlink_count": self.backlink_count,
            "days_since_update": self.days_since_update,
        }
        if self.quality_score is not None:
            out["quality_score"] = self.quality_score
        out["issues"] = self.issues
        out["superseded"] = self.superseded
        return out


def _day(value: Any) -> date | None:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.strip().replace("Z", "+00:00")).date()
        except ValueError:
            return None
    return None


def health(conn: sqlite3.Connection, path: str, prefix: str = "") -> Health | None:
    """The health of ``path`` (``None``: no such page under ``prefix``): its counts, and the
    issues KiwiFS's checks find that the index can see, in KiwiFS's ``kind: message`` words:
    a body under 50 characters (KiwiFS's empty page), missing ``owner`` / ``status``, a stale
    ``reviewed`` / past ``next-review`` date, an owner without a ``next-review`` date, broken
    links, decision language outside ``decisions/``, no inbound link (an orphan; entry pages
    and episodes are never orphans), another page with the same title (:func:`_duplicates`),
    contradictions (:func:`_contradictions`), and (ours) being superseded."""
    page = _file(conn, path, prefix)
    if page is None:
        return None
    pid = page[0]
    here, fm_text, mtime_ns, superseded, kind_class = conn.execute(
        f"SELECT path, {_FM}, mtime_ns, superseded, kind_class FROM files f WHERE id = ?",
        (pid,),
    ).fetchone()
    here = py_text(here)
    try:
        fm = json.loads(fm_text or "{}")
    except ValueError:
        fm = {}
    fm = fm if isinstance(fm, dict) else {}
    links = outbound(conn, here, prefix)
    sources = {b.path for b in backlinks(conn, here, prefix) if b.path != here}
    body = split(texts(conn, [pid])[pid].encode("utf-8", "surrogatepass"))[1]
    prose = body.decode("utf-8", "replace")
    words = len(body.split())  # the body's words, as a peek counts them
    issues: list[str] = []
    if len(prose.strip()) < EMPTY_CHARS:  # KiwiFS's rule, in characters of the body
        issues.append(f"empty-page: page has less than {EMPTY_CHARS} characters of content")
    for name in ("owner", "status"):
        if name not in fm:
            issues.append(f"missing-{name}: no {name} field in frontmatter")
    today = date.today()
    reviewed = _day(fm.get("reviewed", fm.get("last-reviewed")))
    if reviewed is not None and (today - reviewed).days > STALE_DAYS:
        issues.append(f"stale: last reviewed {reviewed.isoformat()} ({STALE_DAYS}+ days ago)")
    review = _day(fm.get("next-review"))
    if review is not None and today > review:
        issues.append(f"stale: next-review date {review.isoformat()} is in the past")
    if "owner" in fm and "next-review" not in fm:
        issues.append("no-review-date: has an owner but no next-review date")
    for link in links:
        if link.path is None:
            shown = f"[[{link.target}]]" if link.kind == "wiki" else link.target
            issue = f"broken-link: {shown} doesn't resolve to any file"
            if issue not in issues:
                issues.append(issue)
    if not here.startswith("decisions/") and _DECISION.search(prose):
        issues.append("decision-found: contains decision language but is not in decisions/")
    if not sources and kind_class != EPISODIC and here not in _ROOT_PAGES:
        issues.append("orphan: no inbound links point to this page")
    if not superseded:
        title = _title(fm, prose)
        issues += [
            f"duplicate: identical title {json.dumps(title, ensure_ascii=False)} also found in"
            f" {other}"
            for other in _duplicates(conn, pid, title, prefix)
        ]
    issues += _contradictions(conn, pid, here, fm, prefix)
    if superseded:
        by = fm.get("superseded_by")
        issues.append(f"superseded: superseded by {by}" if by else "superseded: forgotten")
    score = fm.get("quality_score")
    quality = (
        float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None
    )
    days = round(max(0.0, time.time() - mtime_ns / 1e9) / 86400, 1)
    return Health(here, words, len(links), len(sources), days, quality, issues, bool(superseded))


def _title(fm: dict[str, Any], body: str) -> str:
    """A page's title as KiwiFS's duplicate check reads it, lowercased: the frontmatter's
    ``title``, else the text of the body's first level-1 heading, else ``""`` (no title)."""
    title = fm.get("title")
    if isinstance(title, str) and title:
        return title.lower()
    return next((h.text.lower() for h in outline(body) if h.level == 1), "")


def _like(text: str) -> str:
    """A LIKE pattern matching ``text`` anywhere (``\\`` the escape)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _duplicates(conn: sqlite3.Connection, pid: int, title: str, prefix: str) -> list[str]:
    """The other pages under ``prefix`` whose frontmatter ``title`` is ``title`` (case
    ignored), in walk order, at most :data:`RELATED_MAX`. Superseded pages are left out (an old
    version keeps its replacement's title by design). Other pages are compared by their
    frontmatter title only: the index keeps no headings.

    The index reads frontmatter as compact JSON, so an ASCII title is first looked for as the
    text ``"title":"<title>"`` (LIKE ignores ASCII case), which spares parsing the JSON of every
    page; another title, by its length."""
    if not title:
        return []
    if title.isascii():
        near = f"{_FM} LIKE :like ESCAPE '\\'"
        like = _like('"title":' + json.dumps(title, ensure_ascii=False))
    else:
        near = f"{_FM} LIKE '%\"title\"%' AND length(json_extract({_FM}, '$.title')) = :n"
        like = ""
    q = (
        f"SELECT f.path, json_extract({_FM}, '$.title') FROM files f"
        f" WHERE {_PAGE.format(t='f')}{_under('f', prefix)} AND f.id != :pid"
        f" AND f.superseded = 0 AND {near}"
        f" AND json_type({_FM}, '$.title') = 'text' ORDER BY f.key"
    )
    found: list[str] = []
    for path, other in conn.execute(q, _params(prefix, pid=pid, n=len(title), like=like)):
        if other.lower() == title:
            found.append(py_text(path))
            if len(found) >= RELATED_MAX:
                break
    return found


def _contradictions(
    conn: sqlite3.Connection, pid: int, here: str, fm: dict[str, Any], prefix: str
) -> list[str]:
    """KiwiFS's contradiction: this page and another both claim ``source-of-truth: true`` with
    a tag in common (tags compared lowercased); and ours, from the link index: a typed
    ``contradicts`` link from this page to another, or from another to this one. Each names
    the other page, at most :data:`RELATED_MAX` of each."""
    issues: list[str] = []
    mine = [t.lower() for t in _tags(json.dumps(fm))]
    if fm.get(_SOURCE_OF_TRUTH) is True and mine:
        q = (
            f"SELECT f.path, {_FM} FROM files f"
            f" WHERE {_PAGE.format(t='f')}{_under('f', prefix)} AND f.id != :pid"
            f" AND {_FM} LIKE '%\"{_SOURCE_OF_TRUTH}\":true%'"
            f" AND json_type({_FM}, '$.\"{_SOURCE_OF_TRUTH}\"') = 'true'"
            " ORDER BY f.key"
        )
        claims = 0
        for path, other in conn.execute(q, _params(prefix, pid=pid)):
            shared = [t.lower() for t in _tags(other) if t.lower() in mine]
            if shared and claims < RELATED_MAX:
                claims += 1
                issues.append(
                    f"contradiction: both claim source-of-truth with overlapping tags"
                    f" [{' '.join(shared)}]; also: {py_text(path)}"
                )
    said = [o.path for o in outbound(conn, here, prefix) if o.kind == _CONTRADICTS and o.path]
    heard = [b.path for b in backlinks(conn, here, prefix) if b.kind == _CONTRADICTS]
    issues += [f"contradiction: contradicts {p}" for p in dict.fromkeys(said) if p != here][
        :RELATED_MAX
    ]
    issues += [f"contradiction: {p} contradicts this page" for p in heard if p != here][
        :RELATED_MAX
    ]
    return issues
