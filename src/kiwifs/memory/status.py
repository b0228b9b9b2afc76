"""A page's ``memory_status``: the one rule for "this memory was forgotten".

``memory_status: superseded`` (set when a page is forgotten) takes the page out of recall —
keyword, semantic and hybrid search and the brief leave it out unless asked to include it —
while reading it by path still works. The rule lives here once, as a pure predicate over parsed
frontmatter, which the index also applies when it writes a row (its column ``files.superseded``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MEMORY_STATUS = "memory_status"
SUPERSEDED = "superseded"


def is_superseded(frontmatter: Mapping[Any, Any]) -> bool:
    """True when ``memory_status`` is the string ``superseded`` (any case, spaces around)."""
    value = frontmatter.get(MEMORY_STATUS)
    return isinstance(value, str) and value.strip(" ").lower() == SUPERSEDED
