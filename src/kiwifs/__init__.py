"""kiwifs: a knowledge filesystem for AI agents.

Markdown files with YAML frontmatter in a folder, made safe and useful: atomic writes committed to
git with provenance, an episodic-memory report, search, and REST, MCP and CLI interfaces that all
sit on :class:`Knowledge`.

The names below are imported on first use (:func:`__getattr__`): importing any kiwifs module
runs this file first, and :class:`Knowledge` brings in every subsystem, which a command that
starts its stat walk early (:mod:`kiwifs.index.headstart`) must not wait for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .errors import (
        Busy,
        Conflict,
        InvalidFrontmatter,
        InvalidPath,
        KiwiError,
        NotFound,
        RootNotFound,
        StorageError,
        UsageError,
    )
    from .knowledge import FileContent, Knowledge, MergeResult, RememberResult
    from .memory.rules import EpisodicFile, MemoryReport, MergeEntry

__version__ = "0.1.0"

# where each public name lives
_HOMES = {
    **dict.fromkeys(
        [
            "Busy",
            "Conflict",
            "InvalidFrontmatter",
            "InvalidPath",
            "KiwiError",
            "NotFound",
            "RootNotFound",
            "StorageError",
            "UsageError",
        ],
        ".errors",
    ),
    **dict.fromkeys(["FileContent", "Knowledge", "MergeResult", "RememberResult"], ".knowledge"),
    **dict.fromkeys(["EpisodicFile", "MemoryReport", "MergeEntry"], ".memory.rules"),
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "Busy",
    "Conflict",
    "EpisodicFile",
    "FileContent",
    "InvalidFrontmatter",
    "InvalidPath",
    "KiwiError",
    "Knowledge",
    "MemoryReport",
    "MergeEntry",
    "MergeResult",
    "NotFound",
    "RememberResult",
    "RootNotFound",
    "StorageError",
    "UsageError",
    "__version__",
]
