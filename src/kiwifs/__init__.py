"""kiwifs: a knowledge filesystem for AI agents.

Markdown files with YAML frontmatter in a folder, made safe and useful: atomic writes committed to
git with provenance, an episodic-memory report, search, and REST, MCP and CLI interfaces that all
sit on :class:`Knowledge`.
"""

from kiwifs.errors import (
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
from kiwifs.knowledge import FileContent, Knowledge, MergeResult, RememberResult
from kiwifs.memory.rules import EpisodicFile, MemoryReport, MergeEntry
from kiwifs.server.lifecycle import Serving

__version__ = "0.1.0"

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
    "Serving",
    "StorageError",
    "UsageError",
    "__version__",
]
