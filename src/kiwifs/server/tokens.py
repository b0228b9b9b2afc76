"""Keys made at run time (``kiwifs token create``), kept in ``.kiwi/keys.json`` as hashes.

A token is a random key (``kiwi_`` and 32 random bytes, URL-safe) shown once, when it is made:
the file keeps only its SHA-256 (hex), with its grant, an id and when it was made, so neither a
copy of the file nor a backup gives a key away. The file is the root's but no part of its
history (git ignores it, through the scaffold's ``.gitignore`` and the repository's
``info/exclude``: a revoked token must not live on in a commit); it is written atomically, mode
0600, and a change is a read-modify-write under an exclusive ``flock`` of ``.kiwi``, so two
``token create`` at once both land. A server reads it through
:class:`~kiwifs.server.keys.Keyring`, again on :meth:`~kiwifs.server.keys.Keyring.reload`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiwifs.base.paths import open_regular, read_all
from kiwifs.config import space_name_problem
from kiwifs.errors import ConfigError, InvalidPath, RootNotFound, UsageError
from kiwifs.files.atomic import write_in
from kiwifs.frontmatter.provenance import sanitize_actor
from kiwifs.git.repo import exclude_from_history
from kiwifs.memory.leases import rfc3339
from kiwifs.server.grants import Grant, Scope, canonical_prefix, key_digest

KEYS_RELPATH = ".kiwi/keys.json"
KEY_PREFIX = "kiwi_"
KEY_BYTES = 32
FILE_MODE = 0o600
FORMAT_VERSION = 1
_HASH = re.compile(r"[0-9a-f]{64}")
_ID = re.compile(r"[0-9a-f]{12}")


@dataclass(frozen=True)
class StoredToken:
    """One token as the file holds it: its hash, never the key."""

    id: str
    digest: str  # SHA-256 of the key, hex
    space: str
    scope: Scope
    prefix: str | None
    actor: str | None
    created: str  # RFC 3339, seconds, UTC

    def grant(self) -> Grant:
        return Grant(self.space, self.scope, self.prefix, self.actor, f"token {self.id}")

    def shown(self) -> dict[str, Any]:
        """What ``token list`` prints: everything but the hash."""
        return {
            "id": self.id,
            "space": self.space,
            "scope": str(self.scope),
            "prefix": self.prefix,
            "actor": self.actor,
            "created": self.created,
        }


@dataclass(frozen=True)
class NewToken:
    """A token just made: ``key`` is shown to the user once and kept nowhere."""

    key: str
    token: StoredToken


def create_token(
    root: Path,
    space: str,
    scope: Scope,
    prefix: str | None = None,
    actor: str | None = None,
    clock: Callable[[], float] = time.time,
) -> NewToken:
    """Make a key for ``space`` at ``scope`` (under ``prefix``, writing as ``actor``), store
    its hash and return it. A bad space name or prefix is a :class:`UsageError`."""
    problem = space_name_problem(space)  # the spaces' own rule: a token names a space
    if problem is not None:
        raise UsageError(problem)
    try:
        folder = canonical_prefix(prefix)
    except InvalidPath as exc:
        raise UsageError(f"invalid prefix: {exc.message}") from None
    key = KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)
    with _locked(_existing(root)) as (fd, tokens):
        token = StoredToken(
            id=_new_id({t.id for t in tokens}),
            digest=key_hash(key),
            space=space,
            scope=scope,
            prefix=folder,
            actor=sanitize_actor(actor, "") or None,
            created=rfc3339(clock()),
        )
        exclude_from_history(root)  # before the file exists, so no commit can ever take it
        _write(fd, [*tokens, token])
    return NewToken(key, token)


def list_tokens(root: Path) -> list[StoredToken]:
    """The stored tokens in the order they were made (the file's: each is appended)."""
    return read_tokens(_existing(root))


def revoke_token(root: Path, token_id: str) -> StoredToken:
    """Remove token ``token_id``; an id the file does not hold is a :class:`UsageError`."""
    with _locked(_existing(root)) as (fd, tokens):
        kept = [t for t in tokens if t.id != token_id]
        if len(kept) == len(tokens):
            raise UsageError(f"no token with id {token_id!r} ('kiwifs token list' shows them)")
        _write(fd, kept)
    return next(t for t in tokens if t.id == token_id)


def key_hash(key: str) -> str:
    """The hex SHA-256 the file keeps of a key."""
    return key_digest(key).hex()


def read_tokens(root: Path) -> list[StoredToken]:
    """The tokens of ``root``'s ``.kiwi/keys.json`` (none when it does not exist). A file that
    is not what kiwifs writes is a :class:`ConfigError` naming it: a server must not start with
    keys it cannot read, nor silently without them."""
    path = Path(root) / KEYS_RELPATH
    try:
        fd, st = open_regular(path)  # a FIFO here must not hang a server's start
        raw = read_all(fd, st.st_size)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return _parse(json.loads(raw))
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"invalid {path}: {exc}") from None


def _parse(data: Any) -> list[StoredToken]:
    if not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
        raise ValueError('expected {"version": 1, "tokens": [...]}')
    return [_token(entry, n) for n, entry in enumerate(data["tokens"], 1)]


def _token(entry: Any, number: int) -> StoredToken:
    if not isinstance(entry, dict):
        raise TypeError(f"token {number} is not an object")
    values = {name: entry.get(name) for name in ("id", "hash", "space", "scope", "created")}
    if not all(isinstance(v, str) for v in values.values()):
        raise TypeError(f"token {number} needs id, hash, space, scope and created as strings")
    text: dict[str, str] = {name: str(value) for name, value in values.items()}
    if not _ID.fullmatch(text["id"]) or not _HASH.fullmatch(text["hash"]):
        raise ValueError(f"token {number} has a malformed id or hash")
    prefix, actor = entry.get("prefix"), entry.get("actor")
    if not isinstance(prefix, str | None) or not isinstance(actor, str | None):
        raise TypeError(f"token {number}: prefix and actor must be strings or null")
    try:
        folder = canonical_prefix(prefix)
    except InvalidPath as exc:
        raise ValueError(f"token {number}: invalid prefix: {exc.message}") from None
    return StoredToken(
        text["id"],
        text["hash"],
        text["space"],
        Scope.parse(text["scope"] or "?"),  # a blank scope here is damage, not "admin"
        folder,
        actor or None,
        text["created"],
    )


def _existing(root: Path) -> Path:
    path = Path(root)
    if not path.exists():
        raise RootNotFound(f"knowledge root not found: {path} (create it with 'kiwifs init')")
    if not path.is_dir():
        raise RootNotFound(f"knowledge root is not a folder: {path}")
    return path


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[tuple[int, list[StoredToken]]]:
    """``.kiwi`` opened (made when missing) and locked exclusively, with the tokens it holds:
    one change at a time, so a concurrent ``create`` is never lost."""
    folder = root / ".kiwi"
    folder.mkdir(exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd, read_tokens(root)
    finally:
        os.close(fd)  # releases the lock


def _write(folder: int, tokens: list[StoredToken]) -> None:
    entries = [{**t.shown(), "hash": t.digest} for t in tokens]
    data = json.dumps({"version": FORMAT_VERSION, "tokens": entries}, indent=2) + "\n"
    write_in(folder, Path(KEYS_RELPATH).name, data.encode("utf-8"), mode=FILE_MODE)


def _new_id(taken: set[str]) -> str:
    while (token_id := secrets.token_hex(6)) in taken:
        pass
    return token_id
