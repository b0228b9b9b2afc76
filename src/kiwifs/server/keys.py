"""Scoped keys: ``[[auth.api_keys]]`` read into grants, and the :class:`Keyring` that tells which
grant a presented key carries.

KiwiFS's ``[auth] type = "perspace"`` gives each key a space, a scope and an actor (and kiwifs a
path prefix); ``kiwifs token create`` adds keys at run time (:mod:`kiwifs.server.tokens`). The
keyring holds both as SHA-256 digests and their grants (:mod:`kiwifs.server.grants`), compares a
presented key with every one of them in constant time, and reads both sources again on
:meth:`Keyring.reload` (a running server's SIGHUP). A key never appears in an error, a log line
or a ``repr``: an entry is named by its number or a token by its id.

Nothing here decides whether a server uses the keyring: the interfaces do, for
``type = "perspace"`` (until they enforce grants on requests, that type keeps refusing to start,
:func:`kiwifs.config.check_auth_type`).
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from kiwifs.config import CONFIG_RELPATH, Config, load_config
from kiwifs.errors import ConfigError, InvalidPath
from kiwifs.frontmatter.provenance import sanitize_actor
from kiwifs.server.grants import Grant, Scope, canonical_prefix, key_digest
from kiwifs.server.tokens import KEYS_RELPATH, read_tokens

PERSPACE = "perspace"
Entry = tuple[bytes, Grant]  # a key's SHA-256 digest and what the key may do
_FIELDS = ("key", "space", "actor", "scope", "prefix")


def config_entries(config: Config) -> list[Entry]:
    """The keys of ``[[auth.api_keys]]`` when ``[auth] type = "perspace"`` (else none: another
    type does not use them, and loads whatever they hold). A bad entry is a
    :class:`ConfigError` naming it by number, never by its key."""
    if config.auth.type.strip().lower() != PERSPACE:
        return []
    raw = config.auth.api_keys
    if not isinstance(raw, list | tuple):
        raise ConfigError(f"[auth] api_keys in {CONFIG_RELPATH} must be an array of tables")
    entries = [parse_entry(entry, number) for number, entry in enumerate(raw, 1)]
    return unique(entries, CONFIG_RELPATH)


def parse_entry(entry: Any, number: int) -> Entry:
    """One ``[[auth.api_keys]]`` table: ``key`` (required; ``${VAR}`` already expanded),
    ``space`` (blank: every space), ``actor``, ``scope`` (``read`` | ``write`` | ``admin``,
    blank: ``admin``, as KiwiFS) and ``prefix`` (a folder, by the path rules)."""
    where = f"[[auth.api_keys]] entry {number} in {CONFIG_RELPATH}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table")
    values = {name: entry.get(name, "") for name in _FIELDS}
    wrong = [name for name, value in values.items() if not isinstance(value, str)]
    if wrong:
        raise ConfigError(f"{where}: {', '.join(wrong)} must be a string")
    key = values["key"].strip()  # no header can carry spaces around a key
    if not key:
        raise ConfigError(f"{where}: key is empty (is a ${{VAR}} it names unset?)")
    try:
        scope = Scope.parse(values["scope"])
        prefix = canonical_prefix(values["prefix"])
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except InvalidPath as exc:
        raise ConfigError(f"{where}: invalid prefix: {exc.message}") from None
    space = values["space"].strip() or None
    actor = sanitize_actor(values["actor"], "") or None
    return key_digest(key), Grant(space, scope, prefix, actor, f"config entry {number}")


def token_entries(root: Path) -> list[Entry]:
    """The tokens stored in ``root``'s ``.kiwi/keys.json``."""
    return [(bytes.fromhex(t.digest), t.grant()) for t in read_tokens(root)]


def root_entries(root: Path) -> list[Entry]:
    """Every key of a root: its configuration's and its stored tokens."""
    entries = config_entries(load_config(root)) + token_entries(root)
    return unique(entries, f"{CONFIG_RELPATH} and {KEYS_RELPATH}")


def unique(entries: list[Entry], where: str) -> list[Entry]:
    """``entries`` unless two hold the same key, which is a :class:`ConfigError`: one key with
    two grants would leave which one applies to the order of a file."""
    seen: dict[bytes, Grant] = {}
    for digest, grant in entries:
        other = seen.setdefault(digest, grant)
        if other is not grant:
            raise ConfigError(f"{other.origin} and {grant.origin} hold the same key ({where})")
    return entries


class Keyring:
    """The keys a server accepts and the grant each carries.

    Built from a loader (:meth:`open` reads a root's configuration and stored tokens) so that
    :meth:`reload` can read them again. A reload that fails keeps the keys in force: a broken
    edit must not open the server, nor lock everyone out before the mistake is seen.
    """

    def __init__(self, load: Callable[[], Sequence[Entry]]) -> None:
        self._load = load
        self._lock = threading.Lock()  # one reload at a time
        self._entries: tuple[Entry, ...] = tuple(unique(list(load()), "the keyring"))

    @classmethod
    def open(cls, root: Path) -> Keyring:
        """The keyring of ``root``: ``[[auth.api_keys]]`` (for ``perspace``) and the tokens."""
        path = Path(root)
        return cls(lambda: root_entries(path))

    @classmethod
    def of(cls, entries: Iterable[Entry]) -> Keyring:
        """A keyring of fixed ``entries`` (a reload keeps them)."""
        fixed = list(entries)
        return cls(lambda: fixed)

    def resolve(self, key: str | None) -> Grant | None:
        """The grant of ``key``, or ``None`` for a key the keyring does not hold (blank
        included). The key's digest is compared with every stored digest, each comparison in
        constant time and none skipped, so the answer's time tells nothing of which key, or how
        much of one, matched."""
        if not key:
            return None
        digest = key_digest(key.strip())
        found: Grant | None = None
        for stored, grant in self._entries:  # one snapshot: a reload swaps the whole tuple
            if hmac.compare_digest(digest, stored):
                found = grant
        return found

    def reload(self) -> int:
        """Read the keys again; the number now held. On a :class:`ConfigError` the keys in
        force stay and the error is raised for the caller to report."""
        with self._lock:
            entries = tuple(unique(list(self._load()), "the keyring"))
            self._entries = entries
        return len(entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Keyring({len(self._entries)} keys)"
