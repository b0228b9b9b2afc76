"""``FileWrites``: a file written, appended, deleted or written in bulk, past the claims.

Every change of a file goes through the write pipeline; what this adds is the claims' word on it:
a file under another holder's live claim is a :class:`~kiwifs.errors.Conflict`, checked under
the write lock, and the holder's own change keeps, ends or carries its claim (docs/memory.md).
Actors and provenance are made canonical here, once, for every interface.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kiwifs.base.paths import canonical
from kiwifs.base.text import check_text, content_bytes
from kiwifs.base.walk import MARKDOWN_SUFFIX
from kiwifs.claims.desk import ClaimsDesk
from kiwifs.errors import NotFound, UsageError
from kiwifs.frontmatter.provenance import as_provenance, library_actor
from kiwifs.memory.queue import DELETE, WRITE
from kiwifs.writes.pipeline import Pipeline, prepared_content

if TYPE_CHECKING:
    from kiwifs.frontmatter.provenance import Provenance
    from kiwifs.writes.pipeline import WriteResult


class FileWrites:
    """The file changes of one root, each one pipeline call behind the claims' guard."""

    def __init__(self, pipeline: Pipeline, claims: ClaimsDesk) -> None:
        self.pipeline = pipeline
        self.claims = claims

    def write(
        self,
        path: str,
        content: bytes | str,
        actor: str | None,
        if_match: str | None,
        provenance: str | Provenance | None,
        if_none_match: str | None,
    ) -> WriteResult:
        prov = as_provenance(provenance)
        who = library_actor(actor)
        data, unclaimed = self.claims.prepare_write(path, content_bytes(content), who)
        return self.pipeline.write(path, data, who, if_match, prov, if_none_match, unclaimed)

    def append(
        self,
        path: str,
        content: bytes | str,
        actor: str | None,
        separator: str,
        if_match: str | None,
    ) -> WriteResult:
        sep = check_text(separator, "separator").encode("utf-8")
        who = library_actor(actor)
        guard = self.claims.change_guard(WRITE, [path], who)
        return self.pipeline.append(path, content_bytes(content), who, sep, if_match, guard)

    def patch_frontmatter(
        self,
        path: str,
        patch: Mapping[str, Any],
        actor: str | None,
        if_match: str | None,
        provenance: str | Provenance | None,
    ) -> WriteResult:
        """Apply a JSON merge patch to the frontmatter of an existing file, in one commit.

        Read, patched and written under the write lock (:meth:`Pipeline.edit`), so no write
        slips in between; ``if_match`` is checked there too. The body and the block's own
        lines are kept byte for byte (:func:`~kiwifs.frontmatter.edit.merge_patched`); a patch
        that changes nothing writes nothing. The claims guard a patch as any write.
        """
        from kiwifs.frontmatter.edit import merge_patched  # ruamel: only edits load it

        rel = canonical(path)
        if not rel.endswith(MARKDOWN_SUFFIX):
            raise UsageError("frontmatter patch requires a markdown file")
        prov = as_provenance(provenance)
        who = library_actor(actor)

        def change(current: bytes | None) -> bytes:
            if current is None:
                raise NotFound(f"file not found: {rel}")
            patched = merge_patched(current, patch)
            return current if patched is current else prepared_content(patched, prov, who)

        guard = self.claims.change_guard(WRITE, [rel], who)
        return self.pipeline.edit(rel, change, who, if_match, guard=guard)

    def delete(self, path: str, actor: str | None, if_match: str | None) -> str:
        who = library_actor(actor)
        guard = self.claims.change_guard(DELETE, [path], who)
        return self.pipeline.delete(path, who, if_match, guard)

    def bulk_write(
        self,
        files: Sequence[tuple[str, bytes | str]],
        actor: str | None,
        provenance: str | Provenance | None,
        message: str | None,
    ) -> list[WriteResult]:
        prov = as_provenance(provenance)
        who = library_actor(actor)
        items: list[tuple[str, bytes]] = []
        checks: list[Callable[[], None]] = []
        for p, c in files:
            data, check = self.claims.prepare_write(p, content_bytes(c), who)
            items.append((p, data))
            checks.append(check)

        def unclaimed() -> None:
            for check in checks:
                check()

        from kiwifs.writes.bulk import bulk_write  # bulk writes only

        return bulk_write(self.pipeline, items, who, prov, message, unclaimed)
