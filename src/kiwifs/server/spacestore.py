"""The spaces of a server on disk: which there are, where their roots are, what they hold.

A server's spaces come from two places in the default root: the ``[[spaces]]`` entries of its
``.kiwi/config.toml`` (written by a person, read only) and ``.kiwi/spaces.json`` (written by the
server: the spaces made at run time, and the configured ones deleted at run time), so that both
outlive a restart without the server ever editing a person's config. ``spaces.json`` is kiwifs's
own state, kept out of the default root's history (its ``.gitignore`` from ``init``, and
``.git/info/exclude`` for a root made before spaces existed), and written atomically.

Nothing here opens a space: the listing's numbers come from a walk of the markdown files, so
that a server with a thousand spaces can list them without opening a thousand indexes.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kiwifs.base.walk import walk
from kiwifs.config import Config, SpaceConfig
from kiwifs.errors import ConfigError, StorageError, UsageError
from kiwifs.files.atomic import write_in
from kiwifs.git.repo import exclude_from_history
from kiwifs.memory.leases import rfc3339

STATE_RELPATH = ".kiwi/spaces.json"
SPACES_FOLDER = ".spaces"  # where run-time spaces live, inside the default root
EXCLUDED = (STATE_RELPATH, SPACES_FOLDER + "/")  # kept out of the default root's history


@dataclass(frozen=True)
class SpaceEntry:
    """A space the server serves: its name, its root (absolute) and its visibility."""

    name: str
    root: Path
    visibility: str = "private"


@dataclass
class SpaceState:
    """What ``spaces.json`` holds: the spaces made at run time, and the names of configured
    spaces deleted at run time (the config itself is never edited)."""

    created: list[SpaceEntry] = field(default_factory=list)
    deleted: set[str] = field(default_factory=set)

    def effective(self, default_root: Path, config: Config) -> dict[str, SpaceEntry]:
        """The spaces in force: the configured ones not deleted, then the created ones (a name
        made again at run time after its configured space was deleted is the new one)."""
        spaces = {
            c.name: configured_entry(default_root, c)
            for c in config.spaces
            if c.name not in self.deleted
        }
        spaces.update((e.name, e) for e in self.created)
        return spaces


def configured_entry(default_root: Path, space: SpaceConfig) -> SpaceEntry:
    root = Path(os.path.expanduser(space.root))
    return SpaceEntry(space.name, default_root / root, space.visibility)


def load_state(default_root: Path) -> SpaceState:
    """``spaces.json`` of ``default_root`` (empty when absent); a damaged file stops the
    server rather than silently forgetting spaces."""
    path = default_root / STATE_RELPATH
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return SpaceState()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    try:
        created = [
            SpaceEntry(e["name"], Path(e["root"]), e.get("visibility", "private"))
            for e in data.get("created", [])
        ]
        return SpaceState(created, set(data.get("deleted", [])))
    except (AttributeError, KeyError, TypeError) as exc:
        raise ConfigError(f"invalid {path}: {exc!r}") from exc


def save_state(default_root: Path, state: SpaceState) -> None:
    """Write ``spaces.json`` atomically (a temporary file, fsync, rename), so a crash leaves the
    old list or the new one, never half of one; kept out of git first."""
    exclude_from_history(default_root, EXCLUDED)
    data: dict[str, Any] = {
        "created": [
            {"name": e.name, "root": str(e.root), "visibility": e.visibility} for e in state.created
        ],
        "deleted": sorted(state.deleted),
    }
    path = default_root / STATE_RELPATH
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            write_in(folder, path.name, json.dumps(data, indent=2).encode() + b"\n", mode=0o600)
        finally:
            os.close(folder)
    except OSError as exc:
        raise StorageError(f"cannot save {path}: {exc.strerror or exc}") from exc


def runtime_root(default_root: Path, name: str, root: str | None) -> Path:
    """The root of a space made at run time: ``<default root>/.spaces/NAME`` unless ``root``
    names another place inside ``.spaces/`` (relative to the default root, or absolute).

    A client must not be able to point the server at any folder it can read or write (``/etc``,
    another tenant's root), so anything outside ``.spaces/`` is refused.
    """
    folder = (default_root / SPACES_FOLDER).resolve()
    if root is None or not root.strip():
        return folder / name
    try:
        wanted = (default_root / root).resolve()
    except (OSError, ValueError, RuntimeError) as exc:
        raise UsageError(f"invalid space root {root!r}: {exc}") from None
    if wanted == folder or not wanted.is_relative_to(folder):
        raise UsageError(f"a space's root must be inside {SPACES_FOLDER}/ of the server's root")
    if wanted.exists() and not wanted.is_dir():
        raise UsageError(f"the space root {root!r} exists and is not a folder")
    return wanted


def deleted_root(root: Path, now: float | None = None) -> Path:
    """Where a deleted space's root is kept: ``<root>.deleted-<YYYYMMDDTHHMMSS>`` (UTC), with
    ``-2``, ``-3``… when a space of that root was already deleted within the same second."""
    stamp = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    base = f"{root.name}.deleted-{stamp.strftime('%Y%m%dT%H%M%S')}"
    target, number = root.with_name(base), 1
    while os.path.lexists(target):
        number += 1
        target = root.with_name(f"{base}-{number}")
    return target


def set_aside(root: Path, now: float | None = None) -> Path | None:
    """Rename a deleted space's root out of the way (soft delete: nothing is removed); ``None``
    when there was no root to keep."""
    if not root.is_dir():
        return None
    target = deleted_root(root, now)
    try:
        os.rename(root, target)
    except OSError as exc:
        raise StorageError(f"cannot set {root} aside: {exc.strerror or exc}") from exc
    return target


@dataclass(frozen=True)
class SpaceInfo:
    """A space as ``GET /api/spaces`` lists it (KiwiFS's fields)."""

    name: str
    root: Path
    file_count: int
    last_modified: float
    size_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "root": str(self.root),
            "fileCount": self.file_count,
            "lastModified": rfc3339(self.last_modified),
            "sizeBytes": self.size_bytes,
        }


def space_info(entry: SpaceEntry) -> SpaceInfo:
    """Count, size and newest change of ``entry``'s markdown files, by the walk every other
    part of kiwifs uses (hidden folders and links left out), without opening the space. With no
    files, ``lastModified`` is the root folder's own time (0 when it is not there)."""
    count = size = 0
    newest = 0.0
    for found in walk(entry.root):
        if found.error is not None or found.symlink:
            continue
        try:
            st = os.stat(found.path, follow_symlinks=False)
        except OSError:
            continue
        count, size, newest = count + 1, size + st.st_size, max(newest, st.st_mtime)
    if count == 0:
        try:
            newest = entry.root.stat().st_mtime
        except OSError:
            newest = 0.0
    return SpaceInfo(entry.name, entry.root, count, newest, size)
