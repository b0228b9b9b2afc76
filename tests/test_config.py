"""``.kiwi/config.toml`` → frozen dataclasses."""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path

import pytest

from kiwifs.config import (
    ApiKey,
    Config,
    MemoryConfig,
    ServerConfig,
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


def test_every_section_parses() -> None:
    c = parse_config(FULL)
    assert c.server == ServerConfig(
        "0.0.0.0", 4444, ("http://a", "http://b"), "https://kb.example/"
    )
    assert c.storage.root == "."
    assert (c.search.engine, c.search.async_index) == ("sqlite", False)
    assert (c.search.index_window_ms, c.search.index_batch_max) == (50, 7)
    assert c.search.vector["enabled"] is True
    assert c.search.vector["embedder"] == {"provider": "ollama", "model": "nomic"}
    v = c.versioning
    assert (v.strategy, v.async_commit, v.batch_window_ms, v.batch_max_size, v.max_versions) == (
        "git",
        False,
        10,
        5,
        9,
    )
    assert (c.auth.type, c.auth.api_key) == ("apikey", "k0")
    assert c.auth.api_keys == (ApiKey("k1", "team", "bot"), ApiKey("k2", "", ""))
    assert (c.auth.oidc.issuer, c.auth.oidc.client_id) == ("https://id.example", "cid")
    assert (c.assets.max_file_size, c.assets.allowed_types) == ("10MiB", ("image/png",))
    assert c.ui.theme_locked is True
    assert (c.backup.remote, c.backup.interval, c.backup.branch) == ("origin", "1h", "main")
    assert (c.janitor.interval, c.janitor.stale_days, c.janitor.startup_scan) == ("12h", 30, True)
    d = c.dataview
    assert (d.max_scan_rows, d.query_timeout, d.max_auto_indexes) == (10, "1s", 2)
    assert (d.computed_fields, d.custom_fields) == (("_age",), {"score": "a + b"})
    assert c.memory == MemoryConfig("raw/")
    assert [(s.name, s.root) for s in c.spaces] == [("team", "/srv/team")]


def test_defaults_match_the_reference() -> None:
    c = parse_config("")
    assert c == Config()
    assert (c.server.host, c.server.port, c.server.cors_origins) == ("", 0, ())
    assert (c.search.async_index, c.search.index_window_ms, c.search.index_batch_max) == (
        True,
        200,
        100,
    )
    v = c.versioning
    assert (v.async_commit, v.batch_window_ms, v.batch_max_size, v.max_versions) == (
        False,  # ours: synchronous commits unless asked for
        200,
        50,
        100,
    )
    assert c.auth.type == "none"
    assert (c.janitor.interval, c.janitor.stale_days, c.janitor.startup_scan) == ("24h", 90, False)
    assert (c.dataview.max_scan_rows, c.dataview.query_timeout) == (10000, "5s")
    assert c.dataview.max_auto_indexes == 20
    assert c.backup.interval == "5m"
    assert c.memory.episodes_path_prefix == ""


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
    assert len(sections) >= 15
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
        "[server]\nhost = 1\n",
        "[server]\ncors_origins = 'http://a'\n",
        "[server]\ncors_origins = [1]\n",
        "[search]\nasync_index = 'yes'\n",
        "[search]\nasync_index = 1\n",
        "[search]\nvector = 3\n",
        "[auth]\napi_keys = 'k'\n",
        "[[auth.api_keys]]\nkey = 1\n",
        "[auth]\noidc = 'x'\n",
        "memory = 'episodes/'\n",
        "[memory]\nepisodes_path_prefix = 1\n",
        "[dataview]\ncustom_fields = ['a']\n",
        "spaces = 'x'\n",
    ],
    ids=[
        "port-string",
        "port-float",
        "port-bool",
        "host-int",
        "list-as-string",
        "list-of-ints",
        "bool-as-string",
        "bool-as-int",
        "table-as-int",
        "array-of-tables-as-string",
        "array-table-key-int",
        "nested-table-as-string",
        "section-as-string",
        "prefix-int",
        "map-as-list",
        "spaces-as-string",
    ],
)
def test_wrong_types_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError, match="my.toml"):
        parse_config(text, source="my.toml")


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


def test_env_expansion_reaches_lists_nested_tables_and_array_tables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KIWI_T_HOST", "h.example")
    monkeypatch.setenv("KIWI_T_KEY", "sekret")
    c = parse_config(
        "[server]\ncors_origins = ['https://${KIWI_T_HOST}']\n"
        "[auth.oidc]\nissuer = 'https://${KIWI_T_HOST}/id'\n"
        "[[auth.api_keys]]\nkey = '${KIWI_T_KEY}'\n"
        "[search.vector.embedder]\napi_key = '${KIWI_T_KEY}'\n"
        "[dataview.custom_fields]\nf = '${KIWI_T_KEY}'\n"
        "[memory]\nepisodes_path_prefix = '${KIWI_T_HOST}/'\n"
    )
    assert c.server.cors_origins == ("https://h.example",)
    assert c.auth.oidc.issuer == "https://h.example/id"
    assert c.auth.api_keys[0].key == "sekret"
    assert c.search.vector["embedder"]["api_key"] == "sekret"
    assert c.dataview.custom_fields == {"f": "sekret"}
    assert c.memory.episodes_path_prefix == "h.example/"


def test_shipped_template_parses_with_a_memory_section() -> None:
    text = (resources.files("kiwifs") / "templates" / "config.toml").read_text(encoding="utf-8")
    c = parse_config(text)
    assert c.memory.episodes_path_prefix == ""
    assert "[memory]" in text
    assert c.versioning.strategy == "git"
