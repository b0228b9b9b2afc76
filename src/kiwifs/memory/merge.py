"""What recording a merge does to a page, with no disk: the ``merged-from`` entries it gains.

A merge is idempotent: an entry whose key (:meth:`~kiwifs.memory.rules.MergeEntry.key`) the page
already cites is not added again, so a worker that retries after a lost answer changes nothing.
Each new entry is stamped with the merge's time and actor unless it carries its own. A page that
does not exist yet is created as a semantic page holding just those entries. When the existing
``merged-from`` list allows it, the entries are appended as text (the rest of the file byte for
byte); otherwise the round-trip editor adds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kiwifs.markdown import append_entries, appended_entries, edit_frontmatter, read_frontmatter

from .rules import MERGED_FROM, MergeEntry, existing_merge_keys

NEW_PAGE = b"---\nmemory_kind: semantic\n---\n"


@dataclass(frozen=True)
class MergeEdit:
    """A merge applied to a page: its new bytes (``None``: unchanged), the entries added and
    whether the page is new."""

    data: bytes | None
    added: tuple[MergeEntry, ...]
    created: bool


def record_merge(
    current: bytes | None, wanted: Sequence[MergeEntry], stamp: str, actor: str
) -> MergeEdit:
    """``current`` (``None``: no page yet) with the ``wanted`` entries it does not cite yet."""
    data = current if current is not None else NEW_PAGE
    keys = existing_merge_keys(read_frontmatter(data).data) if current else set()
    added: list[MergeEntry] = []
    for entry in wanted:
        if entry.key() in keys:
            continue
        keys.add(entry.key())
        added.append(stamped(entry, stamp, actor))
    created = current is None
    if not added:
        return MergeEdit(None if current is not None else data, (), created)
    return MergeEdit(_with_entries(data, current is not None, added), tuple(added), created)


def stamped(entry: MergeEntry, stamp: str, actor: str) -> MergeEntry:
    """``entry`` with the merge's date and actor where it names none."""
    return MergeEntry(
        type=entry.type,
        id=entry.id,
        path=entry.path,
        date=entry.date or stamp,
        actor=entry.actor or actor,
        note=entry.note,
    )


def _with_entries(data: bytes, existing: bool, added: Sequence[MergeEntry]) -> bytes:
    fields = [e.to_yaml_fields() for e in added]
    if existing:
        fast = appended_entries(data, MERGED_FROM, fields, read_frontmatter(data).data)
        if fast is not None:
            return fast

    def mutate(doc: Any) -> bool:
        append_entries(doc, MERGED_FROM, fields)
        return True

    return edit_frontmatter(data, mutate)
