"""Files written into a test root: ``write_files(root, {relpath: text or bytes})``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

Files = Mapping[str, str | bytes]


def write_files(root: Path, files: Files) -> Path:
    """Write ``{relpath: text or bytes}`` under ``root`` (parents created) and return ``root``.

    Text is written as UTF-8 bytes exactly (no newline translation).
    """
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_bytes(content.encode("utf-8"))
    return root
