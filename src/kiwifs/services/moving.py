"""Files moved: one file renamed, or a folder, in one commit, the links to them rewritten.

A rename that breaks every link to the page it moved makes agents search again for what they
had; so, as KiwiFS does, a rename rewrites the links that led to the moved files (``update_links``,
on unless asked off), and a moved page's relative markdown links are made relative to its new
folder. What is rewritten and how is :mod:`kiwifs.index.linkrewrite`'s rule; which files link
to the moved ones is the link index's answer, asked under the write lock (the index answers
for every write that returned, :mod:`kiwifs.index.writeback`). Everything, the moved files and
the rewritten ones, is one commit, written through the bulk journal: after a crash it is made
whole or undone, never left half moved.

Claims follow the moved files (the claims guard, ``moves``); a file whose links would be
rewritten but that another holder has claimed refuses the whole move, as a write to it would be
refused. ``prefix`` (a scoped key's) limits the rewriting to the files under it: a key never
changes, nor learns of, a file outside its prefix; links from outside stay as they were.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kiwifs.base.limits import MAX_MOVE_BYTES, MAX_MOVE_FILES
from kiwifs.base.paths import canonical, confine
from kiwifs.base.walk import MARKDOWN_SUFFIX
from kiwifs.errors import Conflict, NotFound, PayloadTooLarge, UsageError
from kiwifs.frontmatter.provenance import library_actor
from kiwifs.git.repo import blob_id
from kiwifs.index.linkparse import file_name
from kiwifs.index.linkrewrite import relocation, rewrite_file
from kiwifs.memory.queue import RENAME
from kiwifs.writes.bulk import apply_changes
from kiwifs.writes.pipeline import check_file_size

if TYPE_CHECKING:
    from kiwifs.claims.desk import ClaimsDesk
    from kiwifs.index.upkeep import IndexKeeper
    from kiwifs.writes.pipeline import Pipeline

ARROW = "\u2192"


@dataclass(frozen=True)
class Moved:
    """What a rename did: ``renamed`` files moved from ``src`` to ``dst``, the links rewritten
    in ``updated_links`` (their paths after the move), and the moved file's ETag (one file)."""

    src: str
    dst: str
    renamed: int
    updated_links: tuple[str, ...] = ()
    etag: str | None = None

    @property
    def path(self) -> str:
        return self.dst

    def to_json(self) -> dict[str, Any]:
        """KiwiFS's answer: ``from``, ``to``, then ``etag`` (a file) or ``renamed`` (a folder);
        ``updated_links`` when some were."""
        out: dict[str, Any] = {"from": self.src, "to": self.dst}
        if self.etag is not None:
            out["etag"] = self.etag
        else:
            out["renamed"] = self.renamed
        if self.updated_links:
            out["updated_links"] = list(self.updated_links)
        return out


class Moves:
    """Renames of files and folders on one root, past the claims, links kept."""

    def __init__(self, pipeline: Pipeline, claims: ClaimsDesk, indexing: IndexKeeper) -> None:
        self.pipeline = pipeline
        self.claims = claims
        self.indexing = indexing

    def rename(
        self,
        src: str,
        dst: str,
        actor: str | None,
        update_links: bool = True,
        prefix: str = "",
    ) -> Moved:
        """Move one file; with ``update_links`` the links to it follow (see the module)."""
        old, new = canonical(src), canonical(dst)
        who = library_actor(actor)
        guard = self.claims.change_guard(RENAME, [old, new], who, to=new)
        pipeline = self.pipeline
        with pipeline.locked():
            if not update_links or old == new or not old.endswith(MARKDOWN_SUFFIX):
                result = pipeline.rename(old, new, who, guard)
                return Moved(old, result.path, 1, (), result.etag)
            data = pipeline.storage.read_optional(old)
            if data is None:
                raise NotFound("source file not found")
            if pipeline.storage.exists(new):
                raise Conflict(f"target already exists: {new}")
            hint = file_name(old).removesuffix(MARKDOWN_SUFFIX)
            changes, updated = self._rewritten({old: new}, {old: data}, hint, prefix, who)
            if not updated:
                result = pipeline.rename(old, new, who, guard)
                return Moved(old, result.path, 1, (), result.etag)
            text = f"{who}: rename {old} {ARROW} {new} (links updated in {_files(len(updated))})"
            with guard:
                apply_changes(pipeline, changes, who, text)
        return Moved(old, new, 1, tuple(updated), _etag(changes[new]))

    def rename_dir(
        self,
        src: str,
        dst: str,
        actor: str | None,
        update_links: bool = True,
        prefix: str = "",
    ) -> Moved:
        """Move every file under the folder ``src`` to the folder ``dst`` in one commit; with
        ``update_links`` the links to them follow. ``dst`` must not exist yet."""
        old_dir, new_dir = canonical(src), canonical(dst)
        who = library_actor(actor)
        if new_dir.startswith(old_dir + "/"):
            raise UsageError(f"cannot move the folder {old_dir} into itself ({new_dir})")
        pipeline = self.pipeline
        with pipeline.locked():
            files = self._folder_files(old_dir)
            if old_dir == new_dir:
                return Moved(old_dir, new_dir, 0)
            if os.path.lexists(pipeline.storage.abspath(new_dir)):
                raise Conflict(f"target already exists: {new_dir}")
            moves = {rel: new_dir + rel[len(old_dir) :] for rel in files}
            for target in moves.values():
                canonical(target)  # a name too long under the new folder is refused here
            contents = dict(zip(files, pipeline.storage.read_many(files), strict=True))
            _check_move_size(contents)
            if update_links:
                changes, updated = self._rewritten(moves, contents, old_dir, prefix, who)
            else:
                changes, updated = _plain_moves(moves, contents), []
            guard = self.claims.change_guard(RENAME, [*moves, *moves.values()], who, moves=moves)
            text = f"{who}: rename {old_dir}/ {ARROW} {new_dir}/ ({_files(len(moves))}"
            text += f", links updated in {_files(len(updated))})" if updated else ")"
            known = {**contents, **dict.fromkeys(moves.values())}  # the target folder is new
            with guard:
                apply_changes(pipeline, changes, who, text, known)
        return Moved(old_dir, new_dir, len(moves), tuple(updated))

    # -- the plan ---------------------------------------------------------------------------

    def _rewritten(
        self,
        moves: dict[str, str],
        contents: dict[str, bytes | None],
        hint: str,
        prefix: str,
        actor: str,
    ) -> tuple[dict[str, bytes | None], list[str]]:
        """The changes of the move (old paths removed, new ones written, linking files
        rewritten) and the paths, after the move, whose links were rewritten. Lock held."""
        fields = self.indexing.link_fields
        linked = self._linking(moves, prefix)
        changes = _plain_moves(moves, contents)
        updated: list[str] = []
        for old, new in moves.items():
            data = contents[old]
            if data is None or not old.endswith(MARKDOWN_SUFFIX):
                continue
            where = relocation(moves, hint, linked.get(old, ()))
            out = rewrite_file(data, old, new, where, fields, frontmatter=old in linked)
            if out != data:
                check_file_size(out)
                changes[new] = out
                updated.append(new)
        checks: list[Callable[[], None]] = []
        storage = self.pipeline.storage
        for source, targets in linked.items():
            if source in moves:
                continue
            data = storage.read_optional(source)
            if data is None:
                continue
            out = rewrite_file(data, source, source, relocation(moves, hint, targets), fields)
            if out != data:
                check_file_size(out)
                out, check = self.claims.prepare_write(source, out, actor)
                checks.append(check)
                changes[source] = out
                updated.append(source)
        for check in checks:
            check()  # another holder's live claim on a linking file refuses the move
        return changes, sorted(updated)

    def _linking(self, moves: dict[str, str], prefix: str) -> dict[str, list[str]]:
        """Each file under ``prefix`` that links to a moved page, with the pages it links to
        (old paths), from the link index."""
        lookups = self.indexing.lookups
        out: dict[str, list[str]] = {}
        for old in moves:
            if not old.endswith(MARKDOWN_SUFFIX):
                continue
            for link in lookups.backlinks(old, prefix):
                targets = out.setdefault(link.path, [])
                if old not in targets:
                    targets.append(old)
        return out

    def is_folder(self, path: str) -> bool:
        """Whether ``path`` names a folder (not a symlink to one) of the root."""
        found = self.pipeline.storage.abspath(canonical(path))
        return os.path.isdir(found) and not os.path.islink(found)

    def _folder_files(self, rel: str) -> list[str]:
        """Every file under the folder ``rel``, hidden names left where they are; refused when
        it is no folder, or holds a symlink or a special file (moved by hand, not here)."""
        storage = self.pipeline.storage
        path = confine(storage.root, rel)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            raise NotFound(f"source directory not found: {rel}") from None
        if stat.S_ISREG(mode):
            raise UsageError(f"{rel} is a file, not a folder: rename it with /rename")
        if not stat.S_ISDIR(mode):
            raise UsageError(f"{rel} is not a folder")
        files = sorted(_files_under(os.fspath(path), rel))
        if not files:
            raise NotFound(f"source directory holds no files: {rel}")
        if len(files) > MAX_MOVE_FILES:
            raise PayloadTooLarge(
                f"{rel} holds {len(files)} files, over the {MAX_MOVE_FILES} a move takes at "
                "once: move its sub-folders one at a time"
            )
        return files


def _files_under(path: str, rel: str) -> Iterator[str]:
    with os.scandir(path) as it:
        entries = list(it)
    for entry in entries:
        if entry.name.startswith("."):
            continue
        child = f"{rel}/{entry.name}"
        if entry.is_symlink():
            raise UsageError(f"{child} is a symlink: move the folder on disk instead")
        if entry.is_dir(follow_symlinks=False):
            yield from _files_under(entry.path, child)
        elif entry.is_file(follow_symlinks=False):
            yield child
        else:
            raise UsageError(f"{child} is not a regular file: move the folder on disk instead")


def _plain_moves(
    moves: dict[str, str], contents: dict[str, bytes | None]
) -> dict[str, bytes | None]:
    """The move itself: each old path removed, each new one written with the same bytes."""
    changes: dict[str, bytes | None] = dict.fromkeys(moves)
    for old, new in moves.items():
        data = contents[old]
        if data is None:
            raise Conflict(f"{old} changed during the move; send it again")
        changes[new] = data
    return changes


def _check_move_size(contents: dict[str, bytes | None]) -> None:
    total = sum(len(d) for d in contents.values() if d is not None)
    if total > MAX_MOVE_BYTES:
        raise PayloadTooLarge(
            f"the folder holds {total} bytes, over the {MAX_MOVE_BYTES >> 20} MiB a move takes "
            "at once: move its sub-folders one at a time"
        )


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def _etag(data: bytes | None) -> str | None:
    return None if data is None else blob_id(data)


class FileMoves:
    """The renames of the facade: ``Knowledge`` inherits them (through ``Wiring``), so the
    facade module stays the size it is."""

    moves: Moves

    def rename(
        self,
        src: str,
        dst: str,
        actor: str | None = None,
        update_links: bool = True,
        prefix: str = "",
    ) -> Moved:
        """Move a file. With ``update_links`` (the default, as KiwiFS) the links to it are
        rewritten, in the same commit (``updated_links`` names the files). One under another
        holder's live claim is a :class:`Conflict`; the holder's rename carries its claim.
        ``prefix``: rewrite only files under it (a scoped key's)."""
        return self.moves.rename(src, dst, actor, update_links, prefix)

    def rename_dir(
        self,
        src: str,
        dst: str,
        actor: str | None = None,
        update_links: bool = True,
        prefix: str = "",
    ) -> Moved:
        """Move every file under the folder ``src`` to the new folder ``dst``, one commit,
        the links to them rewritten (``update_links``); claims follow the files."""
        return self.moves.rename_dir(src, dst, actor, update_links, prefix)

    def move(
        self, src: str, dst: str, actor: str | None = None, update_links: bool = True
    ) -> Moved:
        """:meth:`rename_dir` when ``src`` is a folder, else :meth:`rename` (``kiwifs mv``)."""
        if self.moves.is_folder(src):
            return self.moves.rename_dir(src, dst, actor, update_links)
        return self.moves.rename(src, dst, actor, update_links)
