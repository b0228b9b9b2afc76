"""The full scan: read every knowledge file of a root and turn it into :class:`FileFacts`.

This is the path with no index: it must be right for every file and fast for 100,000 of them.
Only the frontmatter is read (the first block of bytes, more only when the block runs on).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from .markdown import find_block, parse_yaml
from .memory import FileFacts, file_facts, unreadable_facts
from .storage import WalkEntry, walk

HEAD_BYTES = 16 * 1024


def read_head(path: str) -> bytes:
    """The file's bytes up to the end of its frontmatter block (all of it when unterminated)."""
    with open(path, "rb") as fh:
        head = fh.read(HEAD_BYTES)
        if len(head) < HEAD_BYTES:
            return head
        block = find_block(head)
        if block is None or block.terminated:
            return head
        return head + fh.read()


def facts_of_bytes(rel: str, data: bytes) -> FileFacts:
    """Facts of a file whose bytes (at least through its frontmatter) are ``data``."""
    block = find_block(data)
    if block is None:
        return file_facts(rel, {})
    if not block.terminated:
        return file_facts(rel, {}, "frontmatter block not terminated")
    fm = parse_yaml(block.yaml)
    return file_facts(rel, fm.data, fm.problem)


def facts_of_entry(entry: WalkEntry) -> FileFacts:
    """Facts of one walked file; unreadable files become a warning, never an exception."""
    if entry.error is not None:
        return unreadable_facts(entry.rel, entry.error)
    try:
        data = read_head(entry.path)
    except OSError as exc:
        return unreadable_facts(entry.rel, exc.strerror or str(exc))
    return facts_of_bytes(entry.rel, data)


def scan_facts(root: Path) -> Iterator[FileFacts]:
    """Facts of every knowledge file under ``root``, in walk order."""
    for entry in walk(os.fspath(root)):
        yield facts_of_entry(entry)
