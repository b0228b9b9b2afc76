"""``.kiwi/config.toml`` read into frozen dataclasses.

The file is KiwiFS's: the same sections and keys, the same defaults, so a config written for KiwiFS
loads unchanged. Only the keys kiwifs reads are modelled and checked (:class:`Config`); every
other section and key — KiwiFS's ``[search]``, ``[storage]``, ``[[spaces]]``…, or a newer
KiwiFS's — is ignored whatever it holds, since nothing here would use it. A file that is not valid
TOML, or a key kiwifs reads holding the wrong type, is a :class:`~kiwifs.errors.ConfigError` that
names the file. A missing file means "all defaults". ``${VAR}`` in any string is replaced by the
environment value (unset → empty), as KiwiFS does. A key joins :class:`Config` in the change that
first reads it.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .paths import open_regular, read_all

CONFIG_RELPATH = ".kiwi/config.toml"
DEFAULT_SERVE_PORT = 3333
DEFAULT_MCP_PORT = 8181
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class ServerConfig:
    port: int = 0


@dataclass(frozen=True)
class VersioningConfig:
    strategy: str = ""
    async_commit: bool = False  # ours: commit before returning unless asked (KiwiFS: true)
    batch_window_ms: int = 200
    batch_max_size: int = 50


@dataclass(frozen=True)
class AuthConfig:
    type: str = "none"
    api_key: str = ""


@dataclass(frozen=True)
class MemoryConfig:
    episodes_path_prefix: str = ""


@dataclass(frozen=True)
class Config:
    """The keys kiwifs reads; every other section and key of the file is ignored."""

    server: ServerConfig = field(default_factory=ServerConfig)
    versioning: VersioningConfig = field(default_factory=VersioningConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)


def load_config(root: Path) -> Config:
    """Read ``<root>/.kiwi/config.toml``; defaults when it does not exist."""
    path = Path(root) / CONFIG_RELPATH
    try:
        fd, _ = open_regular(path)  # a FIFO here must not hang every command at start
        raw = read_all(fd)
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
    return value
