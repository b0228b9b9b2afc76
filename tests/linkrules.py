"""The documented link resolution worked out from the files alone, for tests to compare the link
index with: a target matches by path first, then by file name, the first in walk order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kiwifs.index.linkparse import Link, parse_links


def resolved(root: Path) -> Iterator[tuple[str, Link, str | None]]:
    """Each body link of each page under ``root`` with the page it resolves to (or ``None``)."""
    files = sorted(
        p.relative_to(root).as_posix() for p in root.rglob("*.md") if ".kiwi" not in p.parts
    )
    keyed = sorted(files, key=lambda p: p.split("/"))
    for src in files:
        for link in parse_links(src, (root / src).read_text(), {}):
            hit = [f for f in keyed if f.lower() == link.norm]
            if not hit and link.name:
                hit = [f for f in keyed if f.rpartition("/")[2].lower() == link.name]
            yield src, link, hit[0] if hit else None
