"""``.kiwi/config.toml`` read into frozen dataclasses.

The file is KiwiFS's: the same sections and keys, the same defaults, so a config written for KiwiFS
loads unchanged. Unknown keys and sections are tolerated (a newer KiwiFS may add some); a file that
is not valid TOML, or a key with the wrong type, is a :class:`~kiwifs.errors.ConfigError` that names
the file. A missing file means "all defaults". ``${VAR}`` in any string is replaced by the
environment value (unset → empty), as KiwiFS does.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import ConfigError

CONFIG_RELPATH = ".kiwi/config.toml"
DEFAULT_SERVE_PORT = 3333
DEFAULT_MCP_PORT = 8181
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class ServerConfig:
    host: str = ""
    port: int = 0
    cors_origins: tuple[str, ...] = ()
    public_url: str = ""


@dataclass(frozen=True)
class StorageConfig:
    root: str = ""


@dataclass(frozen=True)
class SearchConfig:
    engine: str = ""
    async_index: bool = True
    index_window_ms: int = 200
    index_batch_max: int = 100
    vector: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VersioningConfig:
    strategy: str = ""
    async_commit: bool = False  # ours: commit before returning unless asked (KiwiFS: true)
    batch_window_ms: int = 200
    batch_max_size: int = 50
    max_versions: int = 100


@dataclass(frozen=True)
class ApiKey:
    key: str = ""
    space: str = ""
    actor: str = ""


@dataclass(frozen=True)
class OidcConfig:
    issuer: str = ""
    client_id: str = ""


@dataclass(frozen=True)
class AuthConfig:
    type: str = "none"
    api_key: str = ""
    api_keys: tuple[ApiKey, ...] = ()
    oidc: OidcConfig = field(default_factory=OidcConfig)


@dataclass(frozen=True)
class AssetsConfig:
    max_file_size: str = "100MiB"
    allowed_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class UIConfig:
    theme_locked: bool = False


@dataclass(frozen=True)
class BackupConfig:
    remote: str = ""
    interval: str = "5m"
    branch: str = ""


@dataclass(frozen=True)
class JanitorConfig:
    interval: str = "24h"
    stale_days: int = 90
    startup_scan: bool = False


@dataclass(frozen=True)
class DataviewConfig:
    max_scan_rows: int = 10000
    query_timeout: str = "5s"
    max_auto_indexes: int = 20
    computed_fields: tuple[str, ...] = ()
    custom_fields: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MemoryConfig:
    episodes_path_prefix: str = ""


@dataclass(frozen=True)
class SpaceConfig:
    name: str = ""
    root: str = ""


@dataclass(frozen=True)
class Config:
    """The whole configuration of one knowledge root."""

    server: ServerConfig = field(default_factory=ServerConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    versioning: VersioningConfig = field(default_factory=VersioningConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    assets: AssetsConfig = field(default_factory=AssetsConfig)
    ui: UIConfig = field(default_factory=UIConfig)
    backup: BackupConfig = field(default_factory=BackupConfig)
    janitor: JanitorConfig = field(default_factory=JanitorConfig)
    dataview: DataviewConfig = field(default_factory=DataviewConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    spaces: tuple[SpaceConfig, ...] = ()


def load_config(root: Path) -> Config:
    """Read ``<root>/.kiwi/config.toml``; defaults when it does not exist."""
    path = Path(root) / CONFIG_RELPATH
    try:
        raw = path.read_bytes()
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
        config: Config = _build(Config, data, "")
        return config
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid configuration in {source}: {exc}") from exc


def _expand_env(value: Any) -> Any:
    if isinstance(value, str):
        return _ENV_REF.sub(lambda m: os.environ.get(m.group(1), ""), value)
    if isinstance(value, list):
        return [_expand_env(v) for v in value]
    if isinstance(value, dict):
        return {k: _expand_env(v) for k, v in value.items()}
    return value


# Sub-tables whose TOML key differs from a plain nested dataclass field.
_LIST_OF: dict[tuple[type, str], type] = {
    (AuthConfig, "api_keys"): ApiKey,
    (Config, "spaces"): SpaceConfig,
}


def _build(cls: type, data: Any, where: str) -> Any:
    """Build dataclass ``cls`` from a TOML table, ignoring unknown keys, checking types."""
    if not isinstance(data, dict):
        raise TypeError(f"[{where or 'root'}] must be a table")
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        name = f"{where}.{f.name}" if where else f.name
        default = getattr(cls(), f.name)
        item_cls = _LIST_OF.get((cls, f.name))
        if item_cls is not None:
            if not isinstance(value, list):
                raise TypeError(f"{name} must be an array of tables")
            kwargs[f.name] = tuple(_build(item_cls, v, name) for v in value)
        elif hasattr(default, "__dataclass_fields__"):
            kwargs[f.name] = _build(type(default), value, name)
        else:
            kwargs[f.name] = _coerce(default, value, name)
    return cls(**kwargs)


def _coerce(default: Any, value: Any, name: str) -> Any:
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
    if isinstance(default, tuple):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"{name} must be an array of strings")
        return tuple(value)
    if isinstance(default, dict):
        if not isinstance(value, dict):
            raise TypeError(f"{name} must be a table")
        return dict(value)
    return value
