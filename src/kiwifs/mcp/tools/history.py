"""The MCP tools of history: the changes feed of the whole root, one file's versions, and who
last changed each of its lines (KiwiFS's blame answer, as JSON)."""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import Field

from kiwifs.base.limits import CHANGES_LIMIT
from kiwifs.knowledge import Knowledge
from kiwifs.mcp.render import render_changes, render_versions
from kiwifs.mcp.tools.common import NUMBER, Path_, number


class HistoryTools:
    """Tools over the git history of one root (``kb``, set by :class:`kiwifs.mcp.tools.Tools`)."""

    kb: Knowledge

    def kiwi_changes(
        self,
        since: Annotated[
            str | None, Field(description="last_seq from a previous call; only newer changes.")
        ] = None,
        limit: Annotated[
            int,
            number(CHANGES_LIMIT),
            NUMBER,
            Field(description="How many changes (default 50, max 500)."),
        ] = CHANGES_LIMIT.default,
    ) -> str:
        """Recent changes to the knowledge base, newest first."""
        return render_changes(self.kb.changes(since or None, limit), since)

    def kiwi_versions(self, path: Path_) -> str:
        """The git history of one file (commit, date, author, message), newest first."""
        return render_versions(path, self.kb.versions(path))

    def kiwi_blame(self, path: Path_) -> str:
        """Who last changed each line of a file: JSON {path, lines: [{line, author, date, hash,
        text}], total_lines, truncated} (only the first 10000 lines are blamed)."""
        lines, total = self.kb.blame(path)
        rows = [
            {"line": b.line, "author": b.author, "date": b.date, "hash": b.hash, "text": b.text}
            for b in lines
        ]
        answer = {
            "path": path.lstrip("/"),
            "lines": rows,
            "total_lines": total,
            "truncated": total > len(rows),
        }
        return json.dumps(answer, ensure_ascii=False)
