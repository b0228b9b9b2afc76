"""``.kiwi/config.toml`` read into frozen dataclasses.

The file is KiwiFS's: the same sections and keys, the same defaults, so a config written for KiwiFS
loads unchanged. Only the keys kiwifs reads are modelled and checked (:class:`Config`); every
other section and key — KiwiFS's ``[search]``, ``[storage]``…, or a newer KiwiFS's — is
ignored whatever it holds, since nothing here would use it. A file that is not valid
TOML, or a key kiwifs reads holding the wrong type, is a :class:`~kiwifs.errors.ConfigError` that
names the file. A missing file means "all defaults". ``${VAR}`` in any string is replaced by the
environment value (unset → empty), as KiwiFS does. A key joins :class:`Config` in the change that
first reads it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kiwifs.base.paths import open_regular, read_all
from kiwifs.errors import ConfigError

CONFIG_RELPATH = ".kiwi/config.toml"
DEFAULT_SERVE_PORT = 3333
DEFAULT_MCP_PORT = 8181
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class ServerConfig:
    port: int = 0


EMBEDDER_PROVIDERS = ("local", "ollama", "openai")
VECTOR_STORES = ("sqlite",)


@dataclass(frozen=True)
class EmbedderConfig:
    """``[search.vector.embedder]``: which model turns text into vectors.

    ``model`` is a model name for ``openai`` and ``ollama``, and for ``local`` a model2vec folder
    (absolute, or relative to the knowledge root) or nothing: the model the vector extra bundles.
    ``timeout`` is in seconds or a duration (``"30s"``).
    """

    provider: str = ""
    model: str = ""
    api_key: str = ""
    base_url: str = ""
    dimensions: int = 0
    timeout: str = "30s"


@dataclass(frozen=True)
class VectorStoreConfig:
    provider: str = "sqlite"


@dataclass(frozen=True)
class ChunkConfig:
    """``[search.vector.chunk]``: words per chunk and words shared by neighbouring chunks."""

    size: int = 400
    overlap: int = 50


@dataclass(frozen=True)
class VectorConfig:
    enabled: bool = False
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    store: VectorStoreConfig = field(default_factory=VectorStoreConfig)
    chunk: ChunkConfig = field(default_factory=ChunkConfig)


@dataclass(frozen=True)
class SearchConfig:
    vector: VectorConfig = field(default_factory=VectorConfig)


@dataclass(frozen=True)
class VersioningConfig:
    strategy: str = ""
    async_commit: bool = False  # ours: commit before returning unless asked (KiwiFS: true)
    batch_window_ms: int = 200
    batch_max_size: int = 50

    @property
    def uses_git(self) -> bool:
        """Whether a server makes the root a git repository: any strategy but ``none`` and
        ``cow`` (KiwiFS's copy-on-write versions, which kiwifs does not implement)."""
        return self.strategy.lower() not in ("none", "cow")


AUTH_TYPES = ("none", "apikey", "perspace")


@dataclass(frozen=True)
class AuthConfig:
    type: str = "none"
    api_key: str = ""
    # [[auth.api_keys]] as written (${VAR} expanded): checked by kiwifs.server.keys, and only
    # for type = "perspace", so another type loads whatever it holds; never compared or shown
    api_keys: Any = field(default=(), compare=False, repr=False)


def check_auth_type(auth: AuthConfig) -> None:
    """Refuse an ``[auth] type`` kiwifs does not implement, naming the ones it does.

    Checked by every interface that listens on a socket (:func:`kiwifs.server.auth.api_key_for`),
    not when the file is read: a server that ignored a type it does not know would serve every
    file to anyone, while the local commands (search, reindex, stdio MCP) use no auth and still
    work.
    """
    kind = auth.type.strip().lower()
    if kind in AUTH_TYPES:
        return
    raise ConfigError(
        f"[auth] type = {auth.type!r} in {CONFIG_RELPATH} is not supported; "
        f"supported: {', '.join(AUTH_TYPES)}"
    )


@dataclass(frozen=True)
class MemoryConfig:
    episodes_path_prefix: str = ""


@dataclass(frozen=True)
class LinksConfig:
    """``[links]``: the frontmatter fields whose values are typed links (``typed:<field>``,
    docs/links.md); read by the index when it stores a file's rows."""

    typed_fields: tuple[str, ...] = ("contradicts",)


SPACE_VISIBILITIES = ("private", "unlisted", "public")
DEFAULT_SPACE = "default"  # the name of the --root root among a server's spaces
_SPACE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


def space_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a space, or ``None``: lower-case letters, digits, ``-`` and
    ``_``, 1 to 63 characters, starting with a letter or digit. The name is a path segment
    (``/api/kiwi/NAME/…``) and a folder name (``.spaces/NAME``), so nothing else is allowed."""
    if _SPACE_NAME.fullmatch(name) is None:
        return (
            f"invalid space name {name!r}: use 1-63 lower-case letters, digits, '-' and '_', "
            "starting with a letter or digit"
        )
    return None


@dataclass(frozen=True)
class SpaceConfig:
    """One ``[[spaces]]`` entry: another knowledge root ``kiwifs serve`` serves. ``root`` is
    absolute or relative to the root whose config names it."""

    name: str
    root: str
    visibility: str = "private"


@dataclass(frozen=True)
class BackupConfig:
    """``[backup]``: a server pushes the root's branch to ``remote`` every ``interval`` and when
    it stops (see :mod:`kiwifs.server.backup`). ``remote`` empty: no backup. ``branch`` empty:
    the branch the root is on. ``rebase_before_push``: fetch the remote's branch first and keep
    commits it has that the root lacks (never overwritten, never rewriting the root's history:
    docs/cli.md says why)."""

    remote: str = ""
    interval: str = "5m"
    branch: str = ""
    rebase_before_push: bool = True

    @property
    def enabled(self) -> bool:
        return bool(self.remote.strip())


@dataclass(frozen=True)
class ReplicationConfig:
    """``[replication]``: ``primary``, the base URL of the server this root follows (a replica;
    empty: none, unless ``--replica-of`` says so), and ``key``, the key it sends there
    (``${ENV}`` expanded). See docs/replication.md."""

    primary: str = ""
    key: str = ""
    acks: int = 0  # 1: a primary acknowledges a write once a replica holds its commit


@dataclass(frozen=True)
class Config:
    """The keys kiwifs reads; every other section and key of the file is ignored."""

    server: ServerConfig = field(default_factory=ServerConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    versioning: VersioningConfig = field(default_factory=VersioningConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    links: LinksConfig = field(default_factory=LinksConfig)
    backup: BackupConfig = field(default_factory=BackupConfig)
    replication: ReplicationConfig = field(default_factory=ReplicationConfig)
    spaces: tuple[SpaceConfig, ...] = ()


def load_config(root: Path) -> Config:
    """Read ``<root>/.kiwi/config.toml``; defaults when it does not exist."""
    path = Path(root) / CONFIG_RELPATH
    try:
        fd, st = open_regular(path)  # a FIFO here must not hang every command at start
        raw = read_all(fd, st.st_size)
    except FileNotFoundError:
        return Config()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return parse_config(raw.decode("utf-8", errors="replace"), source=str(path))


def parse_config(text: str, source: str = CONFIG_RELPATH) -> Config:
    """Parse TOML text into a :class:`Config`; errors name ``source``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML in {source}: {exc}") from exc
    data = _expand_env(data)
    try:
        spaces = _spaces(data.pop("spaces", []))
        config: Config = _build(Config, data, "")
        check_vector(config.search.vector)
        check_backup(config.backup)
        config = dataclasses.replace(config, links=_links(config.links))
        if config.replication.acks not in (0, 1):
            raise ValueError("[replication] acks must be 0 or 1")
        return dataclasses.replace(config, spaces=spaces)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid configuration in {source}: {exc}") from exc


def _links(links: LinksConfig) -> LinksConfig:
    """``typed_fields`` as a tuple of strings (TOML gives a list)."""
    fields_ = links.typed_fields
    if not isinstance(fields_, (list, tuple)) or not all(isinstance(f, str) for f in fields_):
        raise TypeError("links.typed_fields must be a list of strings")
    return LinksConfig(tuple(fields_))


def check_vector(vector: VectorConfig) -> None:
    """Refuse a vector setup kiwifs cannot run, naming what it supports.

    Checked only when vectors are enabled: a KiwiFS file naming a store or embedder kiwifs lacks
    (qdrant, cohere, …) loads fine as long as it does not ask for semantic search.
    """
    if not vector.enabled:
        return
    provider = vector.embedder.provider.strip().lower()
    if provider not in EMBEDDER_PROVIDERS:
        shown = f"unknown embedder provider {provider!r}" if provider else "no embedder provider"
        raise ValueError(
            f"{shown} in [search.vector.embedder]; supported: {', '.join(EMBEDDER_PROVIDERS)}"
        )
    if not vector.embedder.model.strip() and provider != "local":
        # local without a model is the model the vector extra installs (index.embedders)
        raise ValueError(f"[search.vector.embedder] model is required for provider {provider!r}")
    store = vector.store.provider.strip().lower()
    if store not in VECTOR_STORES:
        raise ValueError(
            f"unknown vector store provider {store!r} in [search.vector.store]; "
            f"supported: {', '.join(VECTOR_STORES)}"
        )
    chunk = vector.chunk
    if chunk.size < 1 or not 0 <= chunk.overlap < chunk.size:
        raise ValueError("[search.vector.chunk] needs size >= 1 and 0 <= overlap < size")
    if vector.embedder.dimensions < 0:
        raise ValueError("[search.vector.embedder] dimensions must be 0 (the model's) or more")
    if duration_seconds(vector.embedder.timeout) <= 0:
        raise ValueError("[search.vector.embedder] timeout must be more than 0")


def check_backup(backup: BackupConfig) -> None:
    """Refuse a ``[backup]`` a server could not run: a push every 0 s would never rest, and a
    branch name git refuses would fail every push, so both stop the server at start."""
    if duration_seconds(backup.interval) <= 0:
        raise ValueError("[backup] interval must be more than 0")
    branch = backup.branch.strip()
    if branch and (branch.startswith(("-", "/")) or ".." in branch or " " in branch):
        raise ValueError(f"[backup] branch {backup.branch!r} is not a branch name")


def _spaces(value: Any) -> tuple[SpaceConfig, ...]:
    """The ``[[spaces]]`` entries, each checked: a bad one stops a server at start rather than
    leaving a space nobody can reach."""
    if not isinstance(value, list):
        raise TypeError("spaces must be an array of tables ([[spaces]])")
    entries: list[SpaceConfig] = []
    for number, item in enumerate(value, 1):
        entry = _space(item, f"[[spaces]] entry {number}")
        if entry.name in {e.name for e in entries}:
            raise ValueError(f"[[spaces]] names {entry.name!r} twice")
        entries.append(entry)
    return tuple(entries)


def _space(item: Any, where: str) -> SpaceConfig:
    if not isinstance(item, dict):
        raise TypeError(f"{where} must be a table")
    name, root = item.get("name"), item.get("root")
    visibility = item.get("visibility", "private")
    if not isinstance(name, str) or not isinstance(root, str) or not root.strip():
        raise TypeError(f"{where} needs name and root, both strings")
    problem = space_name_problem(name)
    if problem is not None:
        raise ValueError(f"{where}: {problem}")
    if name == DEFAULT_SPACE:
        raise ValueError(f"{where}: {DEFAULT_SPACE!r} is the served root's own space")
    if not isinstance(visibility, str) or visibility not in SPACE_VISIBILITIES:
        raise ValueError(
            f"{where}: visibility must be one of {', '.join(SPACE_VISIBILITIES)}, "
            f"got {visibility!r}"
        )
    return SpaceConfig(name, root, visibility)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def duration_seconds(text: str) -> float:
    """``"30s"``, ``"1.5m"``, ``"500ms"`` or a plain number of seconds, as seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"invalid duration {text!r} (write e.g. 30, '30s', '2m' or '500ms')")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def _expand_env(value: Any) -> Any:
    if isinstance(value, str):
        return _ENV_REF.sub(lambda m: os.environ.get(m.group(1), ""), value)
    if isinstance(value, list):
        return [_expand_env(v) for v in value]
    if isinstance(value, dict):
        return {k: _expand_env(v) for k, v in value.items()}
    return value


def _build(cls: type, data: Any, where: str) -> Any:
    """Build dataclass ``cls`` from a TOML table: known keys checked, the rest ignored."""
    if not isinstance(data, dict):
        raise TypeError(f"[{where or 'root'}] must be a table")
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        name = f"{where}.{f.name}" if where else f.name
        default = getattr(cls(), f.name)
        if hasattr(default, "__dataclass_fields__"):
            kwargs[f.name] = _build(type(default), value, name)
        else:
            kwargs[f.name] = _coerce(default, value, name)
    return cls(**kwargs)


# Fields that take a duration: a TOML number of seconds or a string such as "30s".
_DURATIONS = {"timeout", "interval"}


def _coerce(default: Any, value: Any, name: str) -> Any:
    if name.rsplit(".", 1)[-1] in _DURATIONS and isinstance(default, str):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"{name} must be a number of seconds or a duration string")
        text = value if isinstance(value, str) else str(value)
        try:
            duration_seconds(text)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
        return text
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be true or false")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an integer")
        return value
    if isinstance(default, str):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a string")
        return value
    return value
