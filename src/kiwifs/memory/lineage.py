"""Lineage: what a file was built from and what was built from it, by the memory rules (pure).

Both directions read ``merged-from`` with the coverage rule of :mod:`kiwifs.memory.rules`: an
entry cites an episode by id when its type is an id type (``episode``, ``run``, ``session``,
``trace``, ``event``, ``ingest``, case-insensitive) and its trimmed id is the episode's, or by path
(any type) when its normalised path is the episode's.

* For an episode: every page whose ``merged-from`` cites it, with that entry's date, actor and note.
* For a page: each of its ``merged-from`` entries resolved to the episode paths it cites; an entry
  that cites nothing is *dangling* and says why.
* For any file: its own ``derived-from`` (provenance: the run or agent that wrote it).

The caller supplies the lookups (:class:`Lookups`: the index answers them), so the same function
serves the web page and any command, route or tool that shows lineage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kiwifs.base.paths import normalize_ref_path
from kiwifs.memory.rules import ID_TYPES, MERGED_FROM, as_id

DERIVED_FROM = "derived-from"
ENTRY_FIELDS = ("type", "id", "path", "date", "actor", "note")

NO_TYPE = "the entry has no type, so it cites nothing"
NO_TARGET = "the entry has neither id nor path"
ESCAPES = "its path leaves the root"
TYPE_NOT_BY_ID = "type {type!r} does not cite episodes by id (only by path)"
NO_EPISODE_ID = "no episode has id {id!r}"
NO_FILE_PATH = "no file at {path}"


@dataclass(frozen=True)
class Entry:
    """One ``merged-from`` or ``derived-from`` entry as written, every field as text."""

    type: str = ""
    id: str = ""
    path: str = ""
    date: str = ""
    actor: str = ""
    note: str = ""

    def to_json(self) -> dict[str, str]:
        return {k: v for k in ENTRY_FIELDS if (v := getattr(self, k))}


@dataclass(frozen=True)
class Citation:
    """A page's ``merged-from`` entry that cites the episode in question (``by``: id or path)."""

    page: str
    entry: Entry
    by: str

    def to_json(self) -> dict[str, Any]:
        return {"page": self.page, "by": self.by, **self.entry.to_json()}


@dataclass(frozen=True)
class Consumed:
    """One ``merged-from`` entry of the page in question, resolved to the episodes it cites."""

    entry: Entry
    targets: tuple[str, ...]
    problem: str = ""

    @property
    def dangling(self) -> bool:
        return not self.targets

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.entry.to_json(), "targets": list(self.targets)}
        if self.dangling:
            out["dangling"] = True
            out["why"] = self.problem
        return out


@dataclass(frozen=True)
class Lineage:
    """Both directions of one file's lineage plus its provenance."""

    path: str
    episodic: bool
    episode_id: str
    merged_by: tuple[Citation, ...]
    merged_from: tuple[Consumed, ...]
    derived_from: tuple[Entry, ...]

    @property
    def dangling_count(self) -> int:
        return sum(1 for c in self.merged_from if c.dangling)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "episodic": self.episodic,
            "episode_id": self.episode_id,
            "merged_by": [c.to_json() for c in self.merged_by],
            "merged_from": [c.to_json() for c in self.merged_from],
            "derived_from": [e.to_json() for e in self.derived_from],
        }


@dataclass(frozen=True)
class Lookups:
    """What resolving entries needs from the root: the episodes with an id, whether a file is
    there."""

    episodes_with_id: Callable[[str], list[str]]
    file_exists: Callable[[str], bool]


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, (dict, list)):
        return ""
    return as_id(value) or str(value)


def entries(fm: Mapping[str, Any], key: str) -> list[Entry]:
    """The mapping entries of a list-valued key (other shapes hold no entries)."""
    raw = fm.get(key)
    if not isinstance(raw, list):
        return []
    return [
        Entry(**{k: _text(item.get(k)) for k in ENTRY_FIELDS})
        for item in raw
        if isinstance(item, dict)
    ]


def cites(entry: Entry, episode_path: str, episode_id: str) -> str | None:
    """How ``entry`` cites the episode (``"id"``, ``"path"``), or ``None`` when it does not."""
    typ = entry.type.strip().lower()
    if not typ:
        return None
    ident = episode_id.strip()
    if ident and typ in ID_TYPES and entry.id.strip() == ident:
        return "id"
    if entry.path.strip() and normalize_ref_path(entry.path) == episode_path:
        return "path"
    return None


def citations(
    pages: Iterable[tuple[str, Mapping[str, Any]]], episode_path: str, episode_id: str
) -> tuple[Citation, ...]:
    """The entries of ``pages`` (path, frontmatter) that cite the episode, in page order."""
    out: list[Citation] = []
    for page, fm in pages:
        for entry in entries(fm, MERGED_FROM):
            by = cites(entry, episode_path, episode_id)
            if by is not None:
                out.append(Citation(page, entry, by))
    return tuple(out)


def resolve(entry: Entry, lookups: Lookups) -> Consumed:
    """The episodes one ``merged-from`` entry cites (by id and by path), or why none."""
    typ = entry.type.strip().lower()
    if not typ:
        return Consumed(entry, (), NO_TYPE)
    ident, cited = entry.id.strip(), entry.path.strip()
    if not ident and not cited:
        return Consumed(entry, (), NO_TARGET)
    targets: list[str] = []
    problems: list[str] = []
    if ident:
        if typ in ID_TYPES:
            found = lookups.episodes_with_id(ident)
            targets.extend(found)
            if not found:
                problems.append(NO_EPISODE_ID.format(id=ident))
        elif not cited:
            problems.append(TYPE_NOT_BY_ID.format(type=entry.type.strip()))
    if cited:
        norm = normalize_ref_path(cited)
        if norm is None:
            problems.append(ESCAPES)
        elif norm and lookups.file_exists(norm):
            if norm not in targets:
                targets.append(norm)
        else:
            problems.append(NO_FILE_PATH.format(path=norm or cited))
    return Consumed(entry, tuple(targets), "" if targets else "; ".join(problems))


def build_lineage(
    path: str,
    fm: Mapping[str, Any],
    episodic: bool,
    episode_id: str,
    citing_pages: Iterable[tuple[str, Mapping[str, Any]]],
    lookups: Lookups,
) -> Lineage:
    """The lineage of the file at ``path`` with frontmatter ``fm``.

    ``citing_pages`` are the files whose ``merged-from`` may cite it (a superset is fine: each
    entry is checked here); they count only when the file is an episode.
    """
    merged_by = citations(citing_pages, path, episode_id) if episodic else ()
    consumed = tuple(resolve(e, lookups) for e in entries(fm, MERGED_FROM))
    return Lineage(
        path=path,
        episodic=episodic,
        episode_id=episode_id,
        merged_by=merged_by,
        merged_from=consumed,
        derived_from=tuple(entries(fm, DERIVED_FROM)),
    )
