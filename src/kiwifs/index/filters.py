"""What a recall query may return, as one SQL condition over the ``files`` table.

Semantic, hybrid and (when it adopts it) keyword search filter *before* they rank and cut the
top k: a query scoped to ten pages among thousands returns those ten, never the few that
happened to survive a cut made over everything. The condition holds:

* the superseded rule — ``memory_status: superseded`` is left out unless
  ``include_superseded`` (the column ``files.superseded``, set by
  :func:`kiwifs.memory.status.is_superseded` when the row is written);
* ``scope`` — exact equality with the frontmatter's ``scope`` string (the column ``files.scope``,
  set from the frontmatter by :mod:`kiwifs.index.rows`);
* ``path_prefix`` — paths starting with it (case-sensitive, a leading ``/`` ignored);
* ``modified_after`` — files whose modification time is later (RFC 3339 on the wire).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from kiwifs.base.text import check_text
from kiwifs.errors import InvalidQuery, UsageError

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_NS_LIMIT = 2**63 - 1


@dataclass(frozen=True)
class RecallFilter:
    """The filters of one recall query; :meth:`sql` turns them into a WHERE fragment."""

    scope: str | None = None
    path_prefix: str | None = None
    include_superseded: bool = False
    modified_after_ns: int | None = None

    def __post_init__(self) -> None:
        # SQLite binds text as UTF-8: a lone surrogate must be refused here, not crash there
        check_text(self.scope or "", "scope", InvalidQuery)
        check_text(self.path_prefix or "", "path prefix", InvalidQuery)

    def sql(self, alias: str = "f") -> tuple[str, list[Any]]:
        """``(" AND …", params)`` to append to a query over ``files AS <alias>``."""
        parts: list[str] = []
        params: list[Any] = []
        if not self.include_superseded:
            parts.append(f"{alias}.superseded = 0")
        if self.scope:
            parts.append(f"{alias}.scope = ?")
            params.append(self.scope)
        prefix = (self.path_prefix or "").lstrip("/")
        if prefix:
            parts.append(f"substr({alias}.path, 1, length(?)) = ?")
            params += [prefix, prefix]
        if self.modified_after_ns is not None:
            parts.append(f"{alias}.mtime_ns > ?")
            params.append(self.modified_after_ns)
        return "".join(" AND " + p for p in parts), params


def recall_filter(
    scope: str | None, path_prefix: str | None, modified_after: str | None, include: bool
) -> RecallFilter:
    """The filter of a caller's recall query: blank ``scope`` and ``path_prefix`` filter
    nothing, ``modified_after`` is parsed (a bad time is a usage error), superseded pages are
    left out unless ``include``."""
    return RecallFilter(
        scope or None, path_prefix or None, include, parse_modified_after(modified_after)
    )


def parse_modified_after(value: str | None) -> int | None:
    """An RFC 3339 time (``2026-01-02T03:04:05Z``) as nanoseconds since the epoch.

    A date alone (``2026-01-02``) means its midnight UTC; a time without an offset is UTC. A value
    that is not a time is a usage error, never ignored.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        when = dt.datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise UsageError(
            f"modifiedAfter must be an RFC 3339 time such as 2026-01-02T03:04:05Z, got {value!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    nanoseconds = ((when - _EPOCH) // dt.timedelta(microseconds=1)) * 1000
    return max(-_NS_LIMIT, min(_NS_LIMIT, nanoseconds))  # SQLite integers are 64-bit
