"""Sort keys and signatures of walk entries: what the stat walk needs and nothing more.

Kept apart from :mod:`index.record` (which reads and parses files, with the YAML and git
modules that takes) so that a command can start walking the root before it imports those
(:mod:`index.headstart`).
"""

from __future__ import annotations

import os
import zlib


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


def raw_sig(st: os.stat_result) -> int:
    """Size, mtime, ctime and inode folded into one integer (stable across processes)."""
    return hash((st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))


def error_sig(error: str) -> int:
    """A signature for a walk entry that is an error (broken symlink, unlistable folder)."""
    return -1 - zlib.crc32(error.encode("utf-8", "surrogatepass"))
