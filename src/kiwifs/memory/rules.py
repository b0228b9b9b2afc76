"""The episodic-memory rules (docs/memory.md), as pure functions.

Nothing here touches the disk. :func:`file_facts` turns one file's parsed frontmatter into the few
facts the report needs; :func:`build_report` folds the facts of a whole root, in walk order, into a
:class:`MemoryReport`. The full scan and the SQLite index both feed the same two functions, which is
what keeps their answers identical.

Vocabulary: an *episodic* file is raw per-run material (``memory_kind: episodic``, or any file under
the episodes prefix unless it says ``semantic`` or ``consolidation``). A page *covers* an episode
when its ``merged-from`` list (or single mapping) cites the episode's id (types ``episode``,
``run``, ``session``, ``trace``, ``event``, ``ingest``) or its path (any type). The *unmerged* list
is the consolidation queue: episodes neither covered nor forgotten (``memory_status:
superseded``, :mod:`kiwifs.memory.status`), since a forgotten episode needs no consolidation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kiwifs.base.paths import normalize_prefix, normalize_ref_path
from kiwifs.base.text import check_text
from kiwifs.errors import UsageError
from kiwifs.memory.status import is_superseded

DEFAULT_PREFIX = "episodes/"
ID_TYPES = ("episode", "run", "session", "trace", "event", "ingest")
NOT_EPISODIC_KINDS = ("semantic", "consolidation")
MERGED_FROM = "merged-from"
SHAPE_WARNING = "memory: merged-from has unsupported shape in {page}"
ESCAPE_WARNING = "merged-from path escapes the root in {page}"
MISSING_ID_WARNING = (
    "missing episode_id in {path} \u2014 set memory_kind: episodic and episode_id, "
    "or match merged-from by path"
)
DUPLICATE_ID_WARNING = "duplicate episode_id {id!r} in {path} (also in {first})"
FRONTMATTER_WARNING = "invalid frontmatter in {path}: {why}"
UNREADABLE_WARNING = "cannot read {path}: {why}"


@dataclass(frozen=True, slots=True)
class FileFacts:
    """What one file contributes to the memory report (independent of the prefix).

    ``episode_id`` is the id as :func:`episode_identity` computes it (raw, possibly with spaces);
    ``id_keys`` are
    ``type:id`` keys and ``path_keys`` normalised paths cited by its ``merged-from``.
    ``warnings`` are the file's own, in order; ``unreadable`` files are never episodic.
    ``superseded``: the file was forgotten (``memory_status: superseded``).
    """

    path: str
    memory_kind: str = ""
    episode_id: str = ""
    refs: int = 0
    id_keys: tuple[str, ...] = ()
    path_keys: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    unreadable: bool = False
    superseded: bool = False


def as_id(value: Any) -> str:
    """An id as kiwifs reads it: a string as written, a number as ``str()``, else ``""``."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return ""


def _as_str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def episode_identity(fm: Mapping[Any, Any]) -> str:
    """The episode id: ``episode_id`` (kept raw), else the trimmed ``id``."""
    ident = as_id(fm.get("episode_id"))
    if not ident.strip():
        alt = as_id(fm.get("id")).strip()
        if alt:
            ident = alt
    return ident


def file_facts(path: str, fm: Mapping[Any, Any], problem: str | None = None) -> FileFacts:
    """Facts of one readable file from its frontmatter (``{}`` when it had none or was bad)."""
    warnings: list[str] = []
    if problem:
        warnings.append(FRONTMATTER_WARNING.format(path=path, why=problem))
    refs = 0
    id_keys: list[str] = []
    path_keys: list[str] = []
    raw = merged_from_items(fm)
    if raw is not None:
        for item in raw:
            if item is None:
                refs += 1
                continue
            if not isinstance(item, dict):
                continue
            refs += 1
            typ = _as_str(item.get("type")).strip().lower()
            if not typ:
                continue
            ident = as_id(item.get("id")).strip()
            if ident:
                id_keys.append(typ + ":" + ident)
            cited = _as_str(item.get("path"))
            if cited.strip():
                norm = normalize_ref_path(cited)
                if norm is None:
                    warnings.append(ESCAPE_WARNING.format(page=path))
                elif norm:
                    path_keys.append(norm)
    elif fm.get(MERGED_FROM) is not None:
        warnings.append(SHAPE_WARNING.format(page=path))
    return FileFacts(
        path=path,
        memory_kind=_as_str(fm.get("memory_kind")),
        episode_id=episode_identity(fm),
        refs=refs,
        id_keys=tuple(id_keys),
        path_keys=tuple(path_keys),
        warnings=tuple(warnings),
        superseded=is_superseded(fm),
    )


def merged_from_items(fm: Mapping[Any, Any]) -> list[Any] | None:
    """The items of ``merged-from``: its list, a single mapping as a list of one (newer KiwiFS
    scans read it so), ``None`` for any other shape (absent, scalar, null)."""
    raw = fm.get(MERGED_FROM)
    if isinstance(raw, list):
        return raw
    if isinstance(raw, dict):
        return [raw]
    return None


def unreadable_facts(path: str, why: str) -> FileFacts:
    """Facts of a file that could not be read: skipped, with a warning naming it."""
    return FileFacts(
        path=path, warnings=(UNREADABLE_WARNING.format(path=path, why=why),), unreadable=True
    )


def is_episodic(path: str, memory_kind: str, prefix: str) -> bool:
    """Classification (docs/memory.md) with a normalised ``prefix`` (ending in ``/``)."""
    kind = memory_kind.strip().lower()
    if kind in NOT_EPISODIC_KINDS:
        return False
    if kind == "episodic":
        return True
    return path.startswith(prefix)


def resolve_prefix(*candidates: str | None) -> str:
    """The first candidate that normalises to something, else ``episodes/``."""
    for candidate in candidates:
        norm = normalize_prefix(candidate)
        if norm:
            return norm
    return DEFAULT_PREFIX


@dataclass(frozen=True)
class ClaimMark:
    """Who holds an episode under a live lease, and until when (RFC 3339 UTC)."""

    holder: str
    lease_expires: str


@dataclass(frozen=True)
class EpisodicFile:
    """An episode as the report lists it; an unmerged one held by a live claim carries the
    claim (``claimed_by``, ``lease_expires``)."""

    path: str
    episode_id: str = ""
    memory_kind: str = ""
    claim: ClaimMark | None = None

    def to_json(self) -> dict[str, str]:
        out = {"path": self.path}
        if self.episode_id:
            out["episode_id"] = self.episode_id
        if self.memory_kind:
            out["memory_kind"] = self.memory_kind
        if self.claim is not None:
            out["claimed_by"] = self.claim.holder
            out["lease_expires"] = self.claim.lease_expires
        return out


Claims = Mapping[str, ClaimMark]  # live claims by path


def claims_within(claims: Claims, path_prefix: str | None) -> Claims:
    """The live ``claims`` on paths starting with ``path_prefix`` (all without one): what a
    report confined to a prefix marks and counts."""
    prefix = (path_prefix or "").lstrip("/")
    if not prefix or not claims:
        return claims
    return {path: mark for path, mark in claims.items() if path.startswith(prefix)}


def mark_claimed(items: Iterable[EpisodicFile], claims: Claims) -> tuple[EpisodicFile, ...]:
    """``items`` with the live claim of each one that is claimed."""
    if not claims:
        return tuple(items)
    return tuple(
        EpisodicFile(e.path, e.episode_id, e.memory_kind, claims[e.path]) if e.path in claims else e
        for e in items
    )


@dataclass(frozen=True)
class MemoryReport:
    """The consolidation queue of a root. Lists are already paged; counts are always totals."""

    episodic_count: int
    merged_from_refs: int
    episodic_files: tuple[EpisodicFile, ...]
    unmerged: tuple[EpisodicFile, ...]
    warnings: tuple[str, ...]
    unmerged_count: int
    episodes_prefix: str
    limit: int | None = None
    offset: int = 0
    superseded_count: int = 0
    claimed_count: int = 0  # unmerged episodes held by a live claim
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The report's JSON object, keys in the documented order."""
        return {
            "episodic_count": self.episodic_count,
            "merged_from_refs": self.merged_from_refs,
            "episodic_files": [e.to_json() for e in self.episodic_files],
            "unmerged": [e.to_json() for e in self.unmerged],
            "warnings": list(self.warnings),
            "unmerged_count": self.unmerged_count,
            "episodes_prefix": self.episodes_prefix,
            "superseded_count": self.superseded_count,
            "claimed_count": self.claimed_count,
        }


@dataclass(frozen=True)
class ReportDocument:
    """A report as the JSON value to print (its lists possibly stored text, a
    ``printed_json.RawJSON``), with the one number a caller still needs for its exit status."""

    value: dict[str, Any] | Any  # a dict, or the whole document as printed (printed_json.Printed)
    unmerged_count: int


@dataclass(frozen=True)
class ReportText:
    """A report as the CLI prints it: the text for stdout, the warnings for stderr (one line
    each, ``warning: `` first), and the unmerged count for the exit status."""

    text: str
    warnings: str
    unmerged_count: int


# The largest limit or offset accepted anywhere: the largest integer every JSON client reads
# exactly, far beyond any real page, and small enough that offset + limit still fits SQLite's
# 64-bit integers (a bigger value was an OverflowError deep in the query).
MAX_PAGING = 2**53 - 1


def coverage_share(episodic: int, unmerged: int) -> float:
    """The merged share of ``episodic`` episodes, 0–1; 1 when there are none (nothing waits)."""
    return (episodic - unmerged) / episodic if episodic else 1.0


def check_paging(limit: int | None, offset: int | None) -> tuple[int | None, int]:
    """Validate ``limit``/``offset``: whole numbers from 0 to :data:`MAX_PAGING`."""
    if limit is not None:
        _check_page_number("limit", limit)
    off = 0 if offset is None else offset
    _check_page_number("offset", off)
    return limit, off


def _check_page_number(name: str, value: int) -> None:
    if value < 0:
        raise UsageError(f"{name} must be 0 or more, got {value}")
    if value > MAX_PAGING:
        raise UsageError(f"{name} must be at most {MAX_PAGING}, got {value}")


def _page(items: list[EpisodicFile], limit: int | None, offset: int) -> tuple[EpisodicFile, ...]:
    end = None if limit is None else offset + limit
    return tuple(items[offset:end])


def build_report(
    facts: Iterable[FileFacts],
    prefix: str,
    limit: int | None = None,
    offset: int = 0,
    claims: Claims | None = None,
    path_prefix: str | None = None,
) -> MemoryReport:
    """Fold the facts of every file, in walk order, into the report; ``claims`` (live claims by
    path) mark the unmerged episodes they hold and give ``claimed_count``.

    ``path_prefix`` (a scoped key's): the episodes, ``merged-from`` entries and warnings of the
    files whose path starts with it, and no warning naming a file outside it; coverage and the
    first file with an id are still the whole root's (an episode cited from outside stays
    covered). Without it, every file counts."""
    limit, offset = check_paging(limit, offset)
    within = (path_prefix or "").lstrip("/")
    id_keys: set[str] = set()
    path_keys: set[str] = set()
    refs = 0
    episodes: list[tuple[int, FileFacts]] = []
    per_file_warnings: list[tuple[str, ...]] = []
    first_with_id: dict[str, str] = {}
    duplicates: dict[int, str] = {}
    for index, f in enumerate(facts):
        inside = f.path.startswith(within)
        per_file_warnings.append(f.warnings if inside else ())
        if f.unreadable:
            continue
        refs += f.refs if inside else 0
        id_keys.update(f.id_keys)
        path_keys.update(f.path_keys)
        if is_episodic(f.path, f.memory_kind, prefix):
            if inside:
                episodes.append((index, f))
            ident = f.episode_id.strip()
            if ident:
                first = first_with_id.setdefault(ident, f.path)
                if first != f.path and inside and first.startswith(within):
                    duplicates[index] = DUPLICATE_ID_WARNING.format(
                        id=ident, path=f.path, first=first
                    )
    all_files: list[EpisodicFile] = []
    unmerged: list[EpisodicFile] = []
    late: dict[int, list[str]] = {}
    superseded = 0
    for index, f in episodes:
        record = EpisodicFile(f.path, f.episode_id, f.memory_kind)
        all_files.append(record)
        superseded += f.superseded
        if f.superseded or _covered(f, id_keys, path_keys):
            continue
        unmerged.append(record)
        if f.episode_id == "":
            late.setdefault(index, []).append(MISSING_ID_WARNING.format(path=f.path))
    for index, text in duplicates.items():
        late.setdefault(index, []).append(text)
    warnings: list[str] = []
    for index, own in enumerate(per_file_warnings):
        warnings.extend(own)
        warnings.extend(late.get(index, ()))
    claims = claims_within(claims or {}, path_prefix)
    return MemoryReport(
        episodic_count=len(all_files),
        merged_from_refs=refs,
        episodic_files=_page(all_files, limit, offset),
        unmerged=mark_claimed(_page(unmerged, limit, offset), claims),
        warnings=tuple(warnings),
        unmerged_count=len(unmerged),
        episodes_prefix=prefix,
        limit=limit,
        offset=offset,
        superseded_count=superseded,
        claimed_count=sum(1 for e in unmerged if e.path in claims),
    )


def _covered(f: FileFacts, id_keys: set[str], path_keys: set[str]) -> bool:
    ident = f.episode_id.strip()
    if ident and any(t + ":" + ident in id_keys for t in ID_TYPES):
        return True
    return f.path in path_keys


# ---------------------------------------------------------------------------------------------
# recording consolidation


@dataclass(frozen=True)
class MergeEntry:
    """One ``merged-from`` entry to record."""

    type: str = "episode"
    id: str = ""
    path: str = ""
    date: str = ""
    actor: str = ""
    note: str = ""

    def key(self) -> tuple[str, str, str]:
        """The idempotency key: ``(type, "id", id)``, or ``(type, "path", normalised path)``.

        Ids and paths are separate namespaces: the id ``path:episodes/a.md`` and the path
        ``episodes/a.md`` are different entries.
        """
        typ = self.type.strip().lower()
        if self.id.strip():
            return (typ, "id", self.id.strip())
        return (typ, "path", normalize_ref_path(self.path) or "")

    def to_yaml_fields(self) -> dict[str, str]:
        """Fields in contract order; ``id`` is omitted for path-only entries."""
        out = {"type": self.type}
        if self.id:
            out["id"] = self.id
        if self.path:
            out["path"] = self.path
        out["date"] = self.date
        if self.actor:
            out["actor"] = self.actor
        if self.note:
            out["note"] = self.note
        return out


def existing_merge_keys(fm: Mapping[Any, Any]) -> set[tuple[str, str, str]]:
    """Keys of the ``merged-from`` entries a page already has (for idempotent merges)."""
    keys: set[tuple[str, str, str]] = set()
    for item in merged_from_items(fm) or ():
        if not isinstance(item, dict):
            continue
        typ = _as_str(item.get("type"))
        if not typ.strip():
            continue
        entry = MergeEntry(type=typ, id=as_id(item.get("id")), path=_as_str(item.get("path")))
        keys.add(entry.key())
    return keys


def validate_entry(entry: MergeEntry) -> MergeEntry:
    """Check and normalise one entry to record; raises :class:`UsageError` on bad input."""
    for name in ("type", "id", "path", "date", "actor", "note"):
        check_text(getattr(entry, name), f"merged-from entry {name}")
    if not entry.type.strip():
        raise UsageError("memory: merged-from entry needs type")
    if not entry.id.strip() and not entry.path.strip():
        raise UsageError("memory: merged-from entry needs id or path")
    path = ""
    if entry.path.strip():
        norm = normalize_ref_path(entry.path)
        if norm is None:
            raise UsageError(f"merged-from path must not contain '..': {entry.path!r}")
        if not norm:
            raise UsageError(f"merged-from path is empty after normalisation: {entry.path!r}")
        path = norm
    return MergeEntry(
        type=entry.type.strip(),
        id=entry.id.strip(),
        path=path,
        date=entry.date,
        actor=entry.actor,
        note=entry.note,
    )
