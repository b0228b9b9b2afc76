"""``.kiwi/config.toml`` → frozen dataclasses: the keys kiwifs reads, checked; the rest ignored."""

from __future__ import annotations

import dataclasses
import os
from importlib import resources
from pathlib import Path

import pytest

from kiwifs.config import (
    AuthConfig,
    BackupConfig,
    Config,
    EmbedderConfig,
    LinksConfig,
    MemoryConfig,
    SearchConfig,
    ServerConfig,
    SpaceConfig,
    VectorConfig,
    VersioningConfig,
    load_config,
    parse_config,
)
from kiwifs.errors import ConfigError
from kiwifs.knowledge import Knowledge

FULL = """
[server]
host = "0.0.0.0"
port = 4444
cors_origins = ["http://a", "http://b"]
public_url = "https://kb.example/"

[storage]
root = "."

[search]
engine = "sqlite"
async_index = false
index_window_ms = 50
index_batch_max = 7

[search.vector]
enabled = true
worker_count = 3

[search.vector.embedder]
provider = "ollama"
model = "nomic"

[versioning]
strategy = "git"
async_commit = false
batch_window_ms = 10
batch_max_size = 5
max_versions = 9

[auth]
type = "apikey"
api_key = "k0"

[[auth.api_keys]]
key = "k1"
space = "team"
actor = "bot"

[[auth.api_keys]]
key = "k2"

[auth.oidc]
issuer = "https://id.example"
client_id = "cid"

[assets]
max_file_size = "10MiB"
allowed_types = ["image/png"]

[ui]
theme_locked = true

[backup]
remote = "origin"
interval = "1h"
branch = "main"

[janitor]
interval = "12h"
stale_days = 30
startup_scan = true

[dataview]
max_scan_rows = 10
query_timeout = "1s"
max_auto_indexes = 2
computed_fields = ["_age"]
custom_fields = { score = "a + b" }

[memory]
episodes_path_prefix = "raw/"

[[spaces]]
name = "team"
root = "/srv/team"
"""


def test_a_full_kiwifs_config_loads_and_gives_the_keys_kiwifs_reads() -> None:
    c = parse_config(FULL)
    assert c == Config(
        server=ServerConfig(port=4444),
        search=SearchConfig(VectorConfig(True, EmbedderConfig("ollama", "nomic"))),
        versioning=VersioningConfig("git", False, 10, 5),
        auth=AuthConfig("apikey", "k0"),
        memory=MemoryConfig("raw/"),
        backup=BackupConfig("origin", "1h", "main"),
        spaces=(SpaceConfig("team", "/srv/team"),),
    )


def test_defaults_match_the_reference() -> None:
    c = parse_config("")
    assert c == Config()
    assert c.server.port == 0
    v = c.versioning
    assert (v.strategy, v.async_commit, v.batch_window_ms, v.batch_max_size) == (
        "",
        False,  # ours: synchronous commits unless asked for
        200,
        50,
    )
    assert (c.auth.type, c.auth.api_key) == ("none", "")
    assert c.memory.episodes_path_prefix == ""
    assert c.links.typed_fields == ("contradicts",)


def _all_dataclasses(value: object) -> list[object]:
    found = [value]
    for f in dataclasses.fields(value):  # type: ignore[arg-type]
        child = getattr(value, f.name)
        if dataclasses.is_dataclass(child):
            found += _all_dataclasses(child)
        elif isinstance(child, tuple):
            for item in child:
                if dataclasses.is_dataclass(item):
                    found += _all_dataclasses(item)
    return found


def test_every_section_is_frozen() -> None:
    sections = _all_dataclasses(parse_config(FULL))
    assert len(sections) == 14  # Config, server, search (…), …, links, backup, replication, a space
    for section in sections:
        first = dataclasses.fields(section)[0].name  # type: ignore[arg-type]
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(section, first, None)


@pytest.mark.parametrize(
    "text",
    [
        "[server]\nport = 1\nfuture_key = true\n",
        "[brand_new_section]\nx = 1\n",
        "top_level = 'x'\n",
        "[memory]\nepisodes_path_prefix = 'e/'\nextra = [1, 2]\n",
        "[auth]\n[[auth.api_keys]]\nkey = 'k'\nscope = 'x'\n",
        "[search.vector.store]\nprovider = 'qdrant'\nurl = 'http://q'\n",
    ],
    ids=[
        "unknown-key",
        "unknown-section",
        "unknown-top-level-key",
        "unknown-key-beside-known",
        "unknown-key-in-array-table",
        "free-form-vector-table",
    ],
)
def test_unknown_keys_are_tolerated(text: str) -> None:
    assert isinstance(parse_config(text), Config)


@pytest.mark.parametrize(
    "text",
    [
        "[server]\nport = 'eighty'\n",
        "[server]\nport = 1.5\n",
        "[server]\nport = true\n",
        "server = 3333\n",
        "[versioning]\nasync_commit = 'yes'\n",
        "[versioning]\nasync_commit = 1\n",
        "[versioning]\nbatch_window_ms = '200'\n",
        "[versioning]\nstrategy = false\n",
        "[auth]\ntype = 1\n",
        "[auth]\napi_key = ['k']\n",
        "memory = 'episodes/'\n",
        "[memory]\nepisodes_path_prefix = 1\n",
    ],
    ids=[
        "port-string",
        "port-float",
        "port-bool",
        "section-as-int",
        "bool-as-string",
        "bool-as-int",
        "int-as-string",
        "string-as-bool",
        "type-int",
        "key-as-list",
        "section-as-string",
        "prefix-int",
    ],
)
def test_wrong_types_in_keys_kiwifs_reads_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError, match="my.toml"):
        parse_config(text, source="my.toml")


@pytest.mark.parametrize(
    "text",
    [
        "[server]\nhost = 1\ncors_origins = 'http://a'\npublic_url = []\n",
        "[search]\nasync_index = 'yes'\nengine = 3\n",
        "[versioning]\nmax_versions = 'many'\n",
        "[auth]\napi_keys = 'k'\noidc = 'x'\n",
        "[[auth.api_keys]]\nkey = 1\n",
        "[dataview]\ncustom_fields = ['a']\n",
        "storage = 1\n[janitor]\nstale_days = 'old'\n",
    ],
    ids=[
        "server-extras",
        "search",
        "max-versions",
        "auth-extras",
        "api-keys-table",
        "dataview",
        "top-level",
    ],
)
def test_sections_and_keys_kiwifs_does_not_read_are_not_checked(text: str) -> None:
    assert parse_config(text, source="my.toml") == Config()


@pytest.mark.parametrize(
    "text",
    ["[server\nport = 1\n", "port = \n", "a = 1\na = 2\n", "[x]\n[x]\n", "s = 'unterminated\n"],
    ids=["unclosed-header", "missing-value", "duplicate-key", "duplicate-table", "open-string"],
)
def test_bad_toml_is_a_config_error_naming_the_file(tmp_path: Path, text: str) -> None:
    (tmp_path / ".kiwi").mkdir()
    config = tmp_path / ".kiwi" / "config.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert str(config) in info.value.message
    assert info.value.exit_code == 2


def test_missing_file_means_defaults(tmp_path: Path) -> None:
    assert load_config(tmp_path) == Config()


def test_unreadable_config_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / ".kiwi" / "config.toml").mkdir(parents=True)
    with pytest.raises(ConfigError, match="config.toml"):
        load_config(tmp_path)


def test_a_fifo_config_is_a_config_error_not_a_hang(tmp_path: Path) -> None:
    (tmp_path / ".kiwi").mkdir()
    os.mkfifo(tmp_path / ".kiwi" / "config.toml")
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(tmp_path)


def test_knowledge_open_reports_a_bad_config(tmp_path: Path) -> None:
    (tmp_path / ".kiwi").mkdir()
    (tmp_path / ".kiwi" / "config.toml").write_text("[memory\n")
    with pytest.raises(ConfigError):
        Knowledge.open(tmp_path)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("${KIWI_T_SET}", "value-1"),
        ("pre-${KIWI_T_SET}-post", "pre-value-1-post"),
        ("${KIWI_T_SET}${KIWI_T_SET}", "value-1value-1"),
        ("${KIWI_T_UNSET}", ""),
        ("$KIWI_T_SET", "$KIWI_T_SET"),
        ("${1BAD}", "${1BAD}"),
        ("${KIWI_T_SET", "${KIWI_T_SET"),
        ("${}", "${}"),
    ],
    ids=[
        "whole",
        "embedded",
        "twice",
        "unset-is-empty",
        "no-braces-untouched",
        "bad-name-untouched",
        "unclosed-untouched",
        "empty-name-untouched",
    ],
)
def test_env_expansion(monkeypatch: pytest.MonkeyPatch, value: str, expected: str) -> None:
    monkeypatch.setenv("KIWI_T_SET", "value-1")
    monkeypatch.delenv("KIWI_T_UNSET", raising=False)
    c = parse_config(f"[auth]\napi_key = '{value}'\n")
    assert c.auth.api_key == expected


def test_env_expansion_reaches_every_key_kiwifs_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIWI_T_HOST", "h.example")
    monkeypatch.setenv("KIWI_T_KEY", "sekret")
    monkeypatch.delenv("KIWI_T_UNSET", raising=False)
    c = parse_config(
        "[auth]\ntype = 'api${KIWI_T_UNSET}key'\napi_key = '${KIWI_T_KEY}'\n"
        "[versioning]\nstrategy = '${KIWI_T_UNSET}git'\n"
        "[memory]\nepisodes_path_prefix = '${KIWI_T_HOST}/'\n"
        "[[auth.api_keys]]\nkey = '${KIWI_T_KEY}'\n"
    )
    assert (c.auth.type, c.auth.api_key) == ("apikey", "sekret")
    assert c.versioning.strategy == "git"
    assert c.memory.episodes_path_prefix == "h.example/"


def test_shipped_template_parses_with_a_memory_section() -> None:
    text = (resources.files("kiwifs") / "templates" / "config.toml").read_text(encoding="utf-8")
    c = parse_config(text)
    assert c.memory.episodes_path_prefix == ""
    assert "[memory]" in text
    assert c.versioning.strategy == "git"


@pytest.mark.parametrize(
    ("strategy", "git"),
    [("", True), ("git", True), ("none", False), ("None", False), ("cow", False)],
)
def test_which_versioning_strategies_use_git(strategy: str, git: bool) -> None:
    assert VersioningConfig(strategy).uses_git is git


def test_backup_defaults_and_keys() -> None:
    assert parse_config("").backup == BackupConfig("", "5m", "", True)
    assert not parse_config("[backup]\nremote = ' '\n").backup.enabled
    text = "[backup]\nremote = '/srv/notes.git'\ninterval = 30\nrebase_before_push = false\n"
    backup = parse_config(text).backup
    assert backup == BackupConfig("/srv/notes.git", "30", "", False)
    assert backup.enabled


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("interval = 'soon'", "backup.interval: invalid duration 'soon'"),
        ("interval = '0s'", r"\[backup\] interval must be more than 0"),
        ("interval = true", "backup.interval must be a number of seconds"),
        ("remote = 1", "backup.remote must be a string"),
        ("rebase_before_push = 'yes'", "backup.rebase_before_push must be true or false"),
        ("branch = '--force'", r"\[backup\] branch '--force' is not a branch name"),
    ],
    ids=["interval-words", "interval-zero", "interval-bool", "remote-int", "rebase-str", "branch"],
)
def test_a_bad_backup_is_a_config_error(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        remote = "" if text.startswith("remote") else "remote = 'r'\n"
        parse_config(f"[backup]\n{remote}{text}\n", source="my.toml")


def test_links_typed_fields() -> None:
    assert parse_config('[links]\ntyped_fields = ["contradicts", "supersedes"]\n').links == (
        LinksConfig(("contradicts", "supersedes"))
    )
    with pytest.raises(ConfigError):
        parse_config("[links]\ntyped_fields = [1]\n")
