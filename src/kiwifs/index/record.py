"""What the index keeps for one file: stat signature, ETag, frontmatter JSON, text and memory facts.

A :class:`FileRecord` is made from the file on disk in one read and is everything the index needs
to answer search, ``/meta`` and the memory report without going back to the file. The memory
facts are exactly :class:`~kiwifs.memory.rules.FileFacts`, produced by the same pure rule as the
full scan.

Change detection is by a *stat signature* (size, mtime, ctime and inode) taken **before** the file
is read. A file modified within :data:`RACY_NS` of being read may change again inside the same
timestamp tick without its signature changing (git's "racily clean" problem), so such a record gets
no signature at all and is re-read by the next reconcile until it is old enough to be trusted.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kiwifs.base.limits import MAX_READ_BYTES, TOO_LARGE
from kiwifs.base.paths import LinkRefused, NotRegularFile, open_regular, read_all
from kiwifs.base.text import valid_unicode
from kiwifs.errors import os_error_text
from kiwifs.frontmatter.reader import Frontmatter
from kiwifs.git.repo import blob_id
from kiwifs.memory.rules import FileFacts, file_facts, unreadable_facts

RACY_NS = 2_000_000_000


def path_key(rel: str) -> bytes | None:
    """The walk-order sort key of a root-relative path (``None`` if it cannot name a file).

    Segments are encoded as the filesystem bytes and joined with NUL, which sorts before every
    byte a name can hold, so ``memcmp`` order is the depth-first walk order with names in byte
    order: ``a/z.md`` < ``a.md`` because the segment ``a`` ends first.
    """
    try:
        return b"\0".join(os.fsencode(seg) for seg in rel.split("/"))
    except UnicodeEncodeError:
        return None


def parent_key(key: bytes) -> bytes:
    """The sort key of the folder holding the entry ``key`` (``b""`` for the root)."""
    return key.rpartition(b"\0")[0]


def key_to_rel(key: bytes) -> str:
    return os.fsdecode(key.replace(b"\0", b"/"))


def stat_sig(st: os.stat_result, now_ns: int | None = None) -> int | None:
    """The stat signature of a file, or ``None`` while its timestamps are too recent to trust."""
    now = time.time_ns() if now_ns is None else now_ns
    if now - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_NS:
        return None
    return raw_sig(st)


def raw_sig(st: os.stat_result) -> int:
    """Size, mtime, ctime and inode folded into one integer (stable across processes)."""
    return hash((st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))


def error_sig(error: str) -> int:
    """A signature for a walk entry that is an error (broken symlink, unlistable folder)."""
    return -1 - zlib.crc32(error.encode("utf-8", "surrogatepass"))


def db_text(value: str) -> str | bytes:
    """``value`` as SQLite can store it: TEXT, or UTF-8 with surrogates as a BLOB."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")
    return value


def py_text(value: str | bytes | None) -> str:
    """Inverse of :func:`db_text`."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogatepass")
    return value


def stored_keys(stored: str) -> tuple[str, ...]:
    """A row's ``id_keys`` or ``path_keys`` (the JSON list the row was written with) as a tuple.
    Most rows cite nothing: their ``[]`` is not parsed (a tenth of the time a million rows took
    to read back)."""
    return () if stored == "[]" else tuple(json.loads(stored))


@dataclass(frozen=True, slots=True)
class FileRecord:
    """One indexed file. ``sig`` is ``None`` for a racy (too recent) or error record."""

    key: bytes
    facts: FileFacts
    sig: int | None
    size: int = 0
    mtime_ns: int = 0
    etag: str = ""
    frontmatter: str = "{}"
    text: str = ""
    created: float | None = None  # the frontmatter's ``created`` as POSIX seconds
    # the raw stat signature of the file as read (even when racy): what :meth:`Index.apply`
    # compares with the file under the writer lock, so a record read before a newer write never
    # replaces that write's row. ``None`` for records that are no read of a file.
    stamp: int | None = None


def error_record(key: bytes, rel: str, error: str) -> FileRecord:
    """A walk entry that cannot be used: listed with a warning, never episodic."""
    return FileRecord(key, unreadable_facts(rel, error), error_sig(error))


def read_record(
    key: bytes, rel: str, path: str | bytes, real_root: str | None = None
) -> FileRecord | None:
    """Open, stat and read the file at ``path``; ``None`` when it vanished in between.

    The signature comes from ``fstat`` on the descriptor that is read, before reading. A FIFO
    (or any file that is not regular) and, with ``real_root``, a descriptor that turns out to lie
    outside the root or in a hidden path are error records, never read. A file over the size
    limit (:data:`~kiwifs.base.limits.MAX_READ_BYTES`, told by that ``fstat``) is not read either:
    its record is an unreadable one with a warning, signed, so that no reconcile reads it again
    until it changes.
    """
    try:
        fd, st = open_regular(path, real_root)
    except FileNotFoundError:
        return None
    except (NotRegularFile, LinkRefused, IsADirectoryError) as exc:
        return error_record(key, rel, os_error_text(exc))
    except OSError as exc:
        return _unreadable_record(key, rel, path, exc)
    sig = stat_sig(st)
    if st.st_size > MAX_READ_BYTES:
        os.close(fd)
        facts = unreadable_facts(rel, TOO_LARGE)
        return FileRecord(key, facts, sig, st.st_size, st.st_mtime_ns, stamp=raw_sig(st))
    try:
        data = read_all(fd, st.st_size)
    except OSError as exc:
        facts = unreadable_facts(rel, os_error_text(exc))
        return FileRecord(key, facts, sig, st.st_size, st.st_mtime_ns, stamp=raw_sig(st))
    return record_of_bytes(key, rel, data, sig, st.st_mtime_ns, raw_sig(st))


def same_bytes_stat(
    path: str | bytes, real_root: str, etag: str
) -> tuple[os.stat_result, int | None] | None:
    """The ``fstat`` and stat signature of the file at ``path`` when its bytes have blob id
    ``etag`` (the signature taken before reading, as :func:`read_record` takes it); ``None``
    otherwise (other bytes, gone, refused, unreadable: the caller reads it in full).

    Reading and hashing a file costs a tenth of parsing it; a reconcile that meets a file whose
    row holds its bytes already needs only its new stat."""
    try:
        fd, st = open_regular(path, real_root)
    except OSError:
        return None
    if st.st_size > MAX_READ_BYTES:  # never read whole: its record says it is too large
        os.close(fd)
        return None
    sig = stat_sig(st)
    try:
        data = read_all(fd, st.st_size)
    except OSError:
        return None
    return (st, sig) if blob_id(data) == etag else None


def _unreadable_record(key: bytes, rel: str, path: str | bytes, exc: OSError) -> FileRecord:
    """A file that exists but cannot be opened (permissions): signed, so that a reconcile does
    not retry it until it changes."""
    try:
        st = os.stat(path)
    except OSError:
        return error_record(key, rel, os_error_text(exc))
    facts = unreadable_facts(rel, os_error_text(exc))
    return FileRecord(key, facts, stat_sig(st), st.st_size, st.st_mtime_ns, stamp=raw_sig(st))


def record_of_bytes(
    key: bytes, rel: str, data: bytes, sig: int | None, mtime_ns: int = 0, stamp: int | None = None
) -> FileRecord:
    """Parse ``data`` once into frontmatter JSON, memory facts and searchable text.

    Frontmatter inside the simple subset is read without PyYAML (memory/fastkeys.py,
    held equal to PyYAML's reading by tests/memory/test_scan.py): the same mapping, 3-4x faster."""
    fm, simple = (_subset_reader or _load_subset_reader())(data)
    return FileRecord(
        key=key,
        facts=file_facts(rel, fm.data, fm.problem),
        sig=sig,
        size=len(data),
        mtime_ns=mtime_ns,
        etag=blob_id(data),
        frontmatter=frontmatter_json(fm.data, simple),
        text=data.decode("utf-8", errors="replace"),
        created=created_time(fm.data.get("created")),
        stamp=stamp,
    )


# The subset reader compiles its big regexes at import, with PyYAML (~30 ms), which a command
# that re-reads no file (a report from a current index) should not pay: it is loaded by the first
# record made, and kept here (an import statement in the function costs ~1 µs per file).
_subset_reader: Callable[[bytes], tuple[Frontmatter, bool]] | None = None


def _load_subset_reader() -> Callable[[bytes], tuple[Frontmatter, bool]]:
    global _subset_reader
    from kiwifs.memory.fastkeys import read_simple_first

    _subset_reader = read_simple_first
    return read_simple_first


def frontmatter_json(data: dict[Any, Any], simple: bool = False) -> str:
    """The frontmatter as the JSON text ``/meta`` queries. ``simple`` says ``data`` came from
    the subset reader, whose values are JSON already (NaN and infinities aside): the copy that
    :func:`json_safe` makes would be the same, and is most of the cost."""
    if simple:
        try:
            return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=_COMPACT)
        except ValueError:
            pass  # NaN or an infinity: json_safe writes its text
    return json.dumps(json_safe(data), ensure_ascii=False, allow_nan=False, separators=_COMPACT)


_COMPACT = (",", ":")  # no spaces: 7 % of the stored JSON, which only SQL and json.loads read


def created_time(value: Any) -> float | None:
    """A ``created`` value as POSIX seconds: an RFC 3339 / ISO 8601 text, a date or a datetime
    (without a zone: UTC); anything else is no time."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    if isinstance(value, dt.datetime):
        stamp = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return stamp.timestamp()
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC).timestamp()
    return None


def json_safe(value: Any, _seen: frozenset[int] = frozenset()) -> Any:
    """A JSON-representable copy of parsed YAML.

    Strings, finite numbers, booleans and null stay as they are; dates become ISO strings; sets
    become lists; other values (bytes, NaN, infinities) become their text. Mapping keys become
    strings the way JSON writes scalars (``true``, ``null``, ``42``). A recursive YAML alias is cut
    to null rather than looping.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return valid_unicode(value) if isinstance(value, str) else value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if id(value) in _seen:
        return None
    seen = _seen | {id(value)}
    if isinstance(value, Mapping):
        return {_key_text(k): json_safe(v, seen) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, seen) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((json_safe(v, seen) for v in value), key=str)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return valid_unicode(key)
    if key is None or isinstance(key, bool):
        return json.dumps(key)
    if isinstance(key, (int, float)):
        return str(key)
    return valid_unicode(str(json_safe(key)))
