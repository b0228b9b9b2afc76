"""The MCP tools of files and folders: read (with the ETag, or "not modified"), write, append,
delete, bulk write and rename, the folder tree, and the navigation reads (peek, section,
context), which answer KiwiFS's JSON or text. The size limit of a write is the core's
(:data:`kiwifs.base.limits.MAX_FILE_BYTES`), the same for every interface.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from kiwifs.base.limits import MAX_FILE_BYTES, TREE_DEPTH
from kiwifs.errors import UsageError
from kiwifs.knowledge import Knowledge
from kiwifs.mcp.render import NOT_MODIFIED, render_backlinks, render_read, render_tree
from kiwifs.mcp.tools.common import (
    MCP_ACTOR,
    NUMBER,
    Actor,
    IfMatch,
    Path_,
    Provenance_,
    number,
    section_index,
)
from kiwifs.server.payloads import FileItem
from kiwifs.writes.preconditions import bare_etag


class FileTools:
    """Tools over the files of one root (``kb``, set by :class:`kiwifs.mcp.tools.Tools`)."""

    kb: Knowledge

    def kiwi_read(
        self,
        path: Path_,
        resolve_links: Annotated[
            bool, Field(description="Accepted for KiwiFS compatibility; links are returned as is.")
        ] = False,
        metadata_only: Annotated[
            bool, Field(description="Return only the frontmatter, as JSON.")
        ] = False,
        if_not_etag: Annotated[
            str | None,
            Field(description="ETag you already have; if unchanged, the content is not resent."),
        ] = None,
    ) -> str:
        """Read a markdown file. The answer starts with '[ETag: <etag>]'; pass that ETag as
        if_match to kiwi_write to avoid overwriting someone else's change."""
        file = self.kb.read(path)
        if if_not_etag and bare_etag(if_not_etag) == file.etag:
            return NOT_MODIFIED.format(etag=file.etag)
        fm = self.kb.frontmatter(path) if metadata_only else {}
        return render_read(file, metadata_only, fm)

    def kiwi_write(
        self,
        path: Path_,
        content: Annotated[
            str, Field(description=f"Full markdown content (max {MAX_FILE_BYTES >> 20} MiB).")
        ],
        actor: Actor = MCP_ACTOR,
        provenance: Provenance_ = None,
        if_match: IfMatch = None,
    ) -> str:
        """Create or replace a file (committed to git). Provenance 'type:id' is recorded in the
        file's derived-from frontmatter."""
        if not content:
            raise UsageError("content is required")
        result = self.kb.write(path, content, actor, if_match, provenance)
        return f"Written {result.path} (ETag: {result.etag})"

    def kiwi_patch_frontmatter(
        self,
        path: Path_,
        fields: Annotated[
            dict[str, Any],
            Field(
                description="A JSON merge patch of the frontmatter: keys to set; null removes a "
                "key; an object is merged into the mapping under its key."
            ),
        ],
        actor: Actor = MCP_ACTOR,
        provenance: Provenance_ = None,
        if_match: IfMatch = None,
    ) -> str:
        """Change some frontmatter keys of a markdown file without resending it: the body and
        the other keys stay exactly as they are (committed to git)."""
        if not fields:
            raise UsageError("fields is required")
        result = self.kb.patch_frontmatter(path, fields, actor, if_match, provenance)
        return f"Patched the frontmatter of {result.path} (ETag: {result.etag})"

    def kiwi_append(
        self,
        path: Path_,
        content: Annotated[str, Field(description="Text to add at the end of the file.")],
        separator: Annotated[
            str, Field(description="Inserted between the old content and the new.")
        ] = "\n",
        actor: Actor = MCP_ACTOR,
        if_match: IfMatch = None,
    ) -> str:
        """Append text to a file (creating it if missing), e.g. a log line."""
        if not content:
            raise UsageError("content is required")
        result = self.kb.append(path, content, actor, separator, if_match)
        return f"Appended to {result.path} (ETag: {result.etag})"

    def kiwi_delete(self, path: Path_, actor: Actor = MCP_ACTOR, if_match: IfMatch = None) -> str:
        """Delete a file (the deletion is committed; kiwi_versions still shows its history)."""
        rel = self.kb.delete(path, actor, if_match)
        return f"Deleted {rel}"

    def kiwi_bulk_write(
        self,
        files: Annotated[list[FileItem], Field(description="The files to write.")],
        actor: Actor = MCP_ACTOR,
        provenance: Provenance_ = None,
    ) -> str:
        """Write several files in a single git commit: all of them or none."""
        results = self.kb.bulk_write([(f.path, f.content) for f in files], actor, provenance)
        lines = [f"Written {len(results)} files in a single commit"]
        lines += [f"  - {r.path} (ETag: {r.etag})" for r in results]
        return "\n".join(lines)

    def kiwi_rename(
        self,
        from_: Annotated[str, Field(alias="from", description="Current path of the file.")],
        to: Annotated[str, Field(description="New path; must not exist yet.")],
        actor: Actor = MCP_ACTOR,
        update_links: Annotated[
            bool,
            Field(description="Rewrite the links to the file in other files (default true)."),
        ] = True,
    ) -> str:
        """Move a file to a new path; the links to it are rewritten, all in one commit."""
        moved = self.kb.rename(from_, to, actor, update_links=update_links)
        lines = [f"Renamed {from_} \u2192 {moved.path} (ETag: {moved.etag})"]
        if moved.updated_links:
            lines.append(f"Updated links in {len(moved.updated_links)} files:")
            lines += [f"  - {path}" for path in moved.updated_links]
        return "\n".join(lines)

    def kiwi_tree(
        self,
        path: Annotated[str, Field(description="Folder to list; empty for the root.")] = "",
        depth: Annotated[
            int,
            number(TREE_DEPTH),
            NUMBER,
            Field(description="How many folder levels to show (default 3, max 20)."),
        ] = TREE_DEPTH.default,
        include_permalinks: Annotated[
            bool, Field(description="Accepted for KiwiFS compatibility; has no effect.")
        ] = False,
    ) -> str:
        """List folders and files (with sizes) under a folder."""
        return render_tree(self.kb.tree(path or None, depth))

    def kiwi_peek(self, path: Path_) -> str:
        """Quick glance at a file: title, frontmatter, first paragraph snippet, outbound links,
        inbound backlinks, heading outline and word count, as JSON (~200 tokens). Use it to
        decide whether a page is worth reading whole."""
        return json.dumps(self.kb.peek(path).to_json(), indent=2, ensure_ascii=False)

    def kiwi_backlinks(self, path: Path_) -> str:
        """List the pages that link to a file (wiki links, markdown links, typed frontmatter
        links and the memory edges merged-from, derived-from, superseded_by)."""
        found = self.kb.backlinks(path)
        return render_backlinks(path, [(b.path, b.count, b.superseded) for b in found])

    def kiwi_section(
        self,
        path: Path_,
        heading: Annotated[
            str | None,
            Field(description="Heading text to find (case-insensitive partial match; first)."),
        ] = None,
        index: Annotated[
            int | None,
            BeforeValidator(section_index),
            NUMBER,
            Field(description="Section index (0-based); -1 or absent: by heading."),
        ] = None,
    ) -> str:
        """Read one heading's section of a file (from the heading to the next heading of the same
        or a higher level), as JSON. Give heading or index; use after kiwi_peek."""
        return json.dumps(
            self.kb.section(path, heading, index).to_json(), indent=2, ensure_ascii=False
        )

    def kiwi_context(self) -> str:
        """The knowledge base's schema, agent playbook, current index, rules and memory
        conventions in one call. Call this first when connecting."""
        return self.kb.context().to_text()
