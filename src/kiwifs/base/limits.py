"""Numbers clients send for page sizes and depths, defaulted and capped as KiwiFS does.

KiwiFS clients (agent-memory libraries written for its MCP tools and REST routes) send values
such as ``limit: 100`` that KiwiFS quietly caps; refusing them would break those clients at
setup. So a value that is missing, zero or negative means the default, and one above the maximum
means the maximum. The memory report's ``limit``/``offset`` are not among these: there a
negative value is a usage error and ``limit=0`` asks for the counts only (docs/memory.md); on
MCP, where no number is an error, a negative one means the default there too
(:mod:`kiwifs.mcp.tools.common`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerated:
    """A number with KiwiFS's default and cap: below ``minimum`` (or missing) is the default,
    above ``maximum`` (when there is one) is the maximum."""

    default: int
    maximum: int | None
    minimum: int = 1

    def __call__(self, value: int | None) -> int:
        if value is None or value < self.minimum:
            return self.default
        return value if self.maximum is None else min(value, self.maximum)


MCP_SEARCH_LIMIT = Tolerated(20, 50)  # kiwi_search
MCP_SEMANTIC_LIMIT = Tolerated(5, 50)  # kiwi_search_semantic
MCP_HYBRID_LIMIT = Tolerated(15, 50)  # kiwi_search_hybrid
MCP_META_LIMIT = Tolerated(20, 200)  # kiwi_query_meta
CHANGES_LIMIT = Tolerated(50, 500)  # kiwi_changes and GET /changes
TREE_DEPTH = Tolerated(3, 20)  # kiwi_tree

# The defaults of the library's recall calls, named here (this module imports no other of kiwifs)
# so that ``Knowledge`` and the CLI can show them without importing search or the brief.
SEARCH_LIMIT = 50  # keyword search
SEMANTIC_TOP_K = 10  # semantic search
BRIEF_BUDGET = 4000  # a brief's token budget
BRIEF_MAX_PAGES = 20  # a brief's pages

# The other numbers MCP tools take, read by the same rule (docs/mcp.md, "Numbers"): an offset
# starts at 0 and has no cap; a brief's budget has no cap, its pages stop at the brief's 100; a
# memory claim's limit may be 0 (renew only) up to the queue's 1000.
MCP_OFFSET = Tolerated(0, None, minimum=0)
MCP_BRIEF_BUDGET = Tolerated(BRIEF_BUDGET, None)  # kiwi_brief budget_tokens
MCP_BRIEF_PAGES = Tolerated(BRIEF_MAX_PAGES, 100)  # kiwi_brief max_pages (the brief's MAX_PAGES)
MCP_ELIGIBLE_LIMIT = Tolerated(10, 200)  # kiwi_eligible
MCP_CLAIM_LIMIT = Tolerated(20, 1000, minimum=0)  # kiwi_memory_claim

# The one size limit of every write: no write (REST PUT, append, bulk, remember; every MCP write
# tool; the library) leaves a file bigger than this, checked by the write funnel on the file as it
# would be written (an append: the file it would grow into).
MAX_FILE_BYTES = 32 * 1024 * 1024
# A bulk write's files together, and so the largest JSON body REST reads (a bulk's request).
MAX_BULK_BYTES = 110 * 1024 * 1024

# The largest file kiwifs reads whole (docs/search.md, "Files over the size limit"): the index
# and the memory report skip a bigger one with a warning, and a read of it (GET /file, kiwi_read)
# is refused. The write limit: no file kiwifs writes is one it will not read. (SQLite cannot hold
# a text of 1 GB at all, and reading one whole to index it cost three times its size in memory.)
MAX_READ_BYTES = MAX_FILE_BYTES
TOO_LARGE = f"file over the {MAX_READ_BYTES >> 20} MiB size limit, not indexed"  # its warning
# A folder moved in one commit (POST /rename-dir): its files, and their bytes together (the move's
# journal holds each file twice, as removed and as written, until the commit is made).
MAX_MOVE_FILES = 20_000
MAX_MOVE_BYTES = 256 * 1024 * 1024
