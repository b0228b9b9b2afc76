"""Provenance: who produced a file, recorded as ``derived-from`` in its frontmatter.

``X-Provenance: type:id`` names the run, session or job that produced a write and ``X-Actor`` the
agent. Unlike KiwiFS, a malformed non-empty header is refused (a silent drop loses the audit
trail), and a retry that carries the same type, id and actor adds nothing.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kiwifs.base.text import check_text, without_surrogates
from kiwifs.errors import InvalidProvenance
from kiwifs.frontmatter.edit import append_entries, edit_frontmatter, scalar
from kiwifs.frontmatter.reader import find_block

if TYPE_CHECKING:
    from ruamel.yaml.comments import CommentedMap

DERIVED_FROM = "derived-from"
DEFAULT_ACTOR = "anonymous"
LIBRARY_ACTOR = "kiwifs"  # the author of a library call that names none
MAX_ACTOR_BYTES = 256
_GIT_TRIMMED = " .,:;\"'\\"  # what git strips from both ends of an author name


@dataclass(frozen=True)
class Provenance:
    type: str
    id: str

    def __str__(self) -> str:
        return f"{self.type}:{self.id}"


def parse_provenance(value: str | None) -> Provenance | None:
    """Parse ``type:id`` (split at the first colon, both halves trimmed and non-empty).

    ``None`` or a blank value means "no provenance"; anything else malformed raises.
    """
    if value is None or not value.strip():
        return None
    check_text(value, "X-Provenance", InvalidProvenance)
    typ, sep, ident = value.strip().partition(":")
    typ, ident = typ.strip(), ident.strip()
    if not sep or not typ or not ident:
        raise InvalidProvenance(
            f"X-Provenance must be 'type:id' (for example 'run:run-249'), got {value!r}"
        )
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in typ + ident):
        raise InvalidProvenance("X-Provenance must not contain control characters")
    return Provenance(typ, ident)


def as_provenance(value: str | Provenance | None) -> Provenance | None:
    """A library caller's provenance: a :class:`Provenance` as given, text parsed."""
    return value if isinstance(value, Provenance) else parse_provenance(value)


def library_actor(value: str | None) -> str:
    """A library caller's actor, sanitized as every actor is; :data:`LIBRARY_ACTOR` if none."""
    return sanitize_actor(value, LIBRARY_ACTOR)


def sanitize_actor(value: str | None, default: str = DEFAULT_ACTOR) -> str:
    """Drop control characters, lone surrogates and ``<`` ``>``, cut to 256 bytes (on a
    character boundary), trim spaces and ``.,:;"'\\`` at both ends; else ``default``.

    The result is exactly what git records as the author name (git refuses ``<`` ``>`` and
    trims those characters itself), so the actor of a commit, of a provenance entry and of an
    event is one string, and an actor git would find empty is the default instead of an error.
    """
    if not value:
        return default
    cleaned = "".join(c for c in without_surrogates(value) if _actor_char(c))
    encoded = cleaned.encode("utf-8")[:MAX_ACTOR_BYTES]
    cleaned = encoded.decode("utf-8", errors="ignore").strip(_GIT_TRIMMED)
    return cleaned or default


def _actor_char(c: str) -> bool:
    return ord(c) >= 0x20 and ord(c) != 0x7F and c not in "<>"


def now_utc() -> str:
    """Now in UTC as RFC 3339 seconds, the date format of every recorded entry."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _same_entry(item: Any, prov: Provenance, actor: str) -> bool:
    if not isinstance(item, dict):
        return False
    return (
        str(item.get("type", "")).strip() == prov.type
        and str(item.get("id", "")).strip() == prov.id
        and str(item.get("actor", "") or "").strip() == actor
    )


def inject_provenance(
    content: bytes, prov: Provenance | None, actor: str, date: str | None = None
) -> bytes:
    """Return ``content`` with a ``derived-from`` entry for ``prov`` (body byte for byte).

    Idempotent: an entry with the same type, id and actor already present adds nothing.
    Raises :class:`~kiwifs.errors.InvalidFrontmatter` when the frontmatter cannot be rewritten.
    """
    if prov is None:
        return content
    stamp = date or now_utc()
    fast = _new_block(content, prov, actor, stamp)
    if fast is not None:
        return fast

    def mutate(doc: CommentedMap) -> bool:
        existing = doc.get(DERIVED_FROM)
        if isinstance(existing, list) and any(_same_entry(i, prov, actor) for i in existing):
            return False
        entry = {"type": prov.type, "id": prov.id, "date": stamp}
        if actor:
            entry["actor"] = actor
        append_entries(doc, DERIVED_FROM, [entry])
        return True

    return edit_frontmatter(content, mutate)


# starts with a letter: no YAML 1.1 or 1.2 number (e.g. "0e0", a float only in 1.2) looks like that
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.@+/-]*(?::[A-Za-z0-9_.@+/-]+)*\Z")
_DATE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\Z")


def _new_block(content: bytes, prov: Provenance, actor: str, date: str) -> bytes | None:
    """The common case without a YAML round trip: a file with no frontmatter, simple values.

    Produces exactly what the round-trip editor writes for it (a test holds the two equal);
    ``None`` sends anything else (existing frontmatter, values needing quotes) the long way.
    """
    if find_block(content) is not None or not _DATE.match(date):
        return None
    values = [prov.type, prov.id] + ([actor] if actor else [])
    if not all(_PLAIN.match(v) and scalar(v) is v for v in values):
        return None
    lines = ["---", "derived-from:", f"  - type: {prov.type}", f"    id: {prov.id}"]
    lines.append(f'    date: "{date}"')
    if actor:
        lines.append(f"    actor: {actor}")
    lines.append("---\n")
    return "\n".join(lines).encode() + content
