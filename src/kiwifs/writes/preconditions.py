"""ETags and the conditions a write may put on the file it replaces.

A file's ETag is its git blob id. ``If-Match`` makes a write refuse to replace anything but the
version the writer read (optimistic concurrency: a lost update becomes a conflict the client
re-fetches and retries); ``If-None-Match: *`` makes it create only. Clients send tags quoted,
weak (``W/"…"``) or bare, alone or in comma-separated lists; all of them mean the blob id.
The write pipeline checks the conditions under its lock, so no writer can slip in between.
"""

from __future__ import annotations

from kiwifs.errors import Conflict, UsageError
from kiwifs.files.storage import Storage
from kiwifs.git.repo import blob_id

CONFLICT_MESSAGE = "file modified since last read \u2014 re-fetch and retry"


def bare_etag(tag: str) -> str:
    """An ETag as a client may send it (``"abc"``, ``W/"abc"``, ``abc``) reduced to the blob id."""
    return tag.strip().removeprefix("W/").strip().strip('"')


def etag_list(value: str) -> list[str]:
    """The tags of an ``If-Match`` / ``If-None-Match`` value (``*`` kept as ``*``)."""
    return [bare_etag(part) for part in value.split(",")]


def parse_if_match(value: str | None) -> list[str] | None:
    """The ETags an ``If-Match`` value accepts; ``None`` means "no precondition" (absent or ``*``).

    Quotes and a ``W/`` prefix are stripped; a comma-separated list accepts any of its tags.
    """
    if value is None or not value.strip():
        return None
    tags = etag_list(value)
    if "*" in tags:
        return None
    if not all(tags):
        raise UsageError(f"malformed If-Match header: {value!r}")
    return tags


def check_if_match(storage: Storage, rel: str, if_match: str | None) -> None:
    """Refuse (:class:`Conflict`, with the current ETag) unless ``rel`` is a version accepted."""
    accepted = parse_if_match(if_match)
    if accepted is None:
        return
    current = storage.read_optional(rel)
    if current is not None and (etag := blob_id(current)) not in accepted:
        raise Conflict(CONFLICT_MESSAGE, etag)


def check_if_none_match(storage: Storage, rel: str, if_none_match: str | None) -> None:
    """``*``: create only (the file must not exist); ETags: the file must not be one of them."""
    if if_none_match is None or not if_none_match.strip():
        return
    current = storage.read_optional(rel)
    if current is None:
        return
    tags = etag_list(if_none_match)
    if "*" in tags:
        raise Conflict(f"file already exists: {rel}")
    if (etag := blob_id(current)) in tags:
        raise Conflict(CONFLICT_MESSAGE, etag)
