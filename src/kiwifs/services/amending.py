"""A page's frontmatter patched and its lines blamed: two per-file operations of the facade.

:class:`FileAmendments` is a part of the facade: ``Knowledge`` inherits its one-line methods
(through ``Wiring``), so the facade module stays the size it is. The work is the file writes'
(:meth:`~kiwifs.services.filewrites.FileWrites.patch_frontmatter`: under the write lock, past
the claims) and the history's (:meth:`~kiwifs.services.history.History.blame`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiwifs.frontmatter.provenance import Provenance
    from kiwifs.git.log import BlameLine
    from kiwifs.services.filewrites import FileWrites
    from kiwifs.services.history import History
    from kiwifs.writes.pipeline import WriteResult


class FileAmendments:
    """The frontmatter patch and the blame, over the parts ``files`` and ``history``."""

    files: FileWrites
    history: History

    def patch_frontmatter(
        self,
        path: str,
        patch: Mapping[str, Any],
        actor: str | None = None,
        if_match: str | None = None,
        provenance: str | Provenance | None = None,
    ) -> WriteResult:
        """Apply the JSON merge patch ``patch`` (RFC 7386: ``None`` removes a key, an object
        is merged) to the frontmatter of the markdown file ``path``; the body is kept byte for
        byte. One commit, none when nothing changes; a stale ``if_match`` is a Conflict."""
        return self.files.patch_frontmatter(path, patch, actor, if_match, provenance)

    def blame(self, path: str) -> tuple[list[BlameLine], int]:
        """Each line of ``path`` with the commit, author and date that last changed it (the
        first :data:`~kiwifs.git.log.BLAME_LINES` lines), and the file's number of lines."""
        return self.history.blame(path)
