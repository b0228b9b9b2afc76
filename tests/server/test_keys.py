"""``[[auth.api_keys]]`` read into grants, and the keyring: a key resolved to its grant by
constant-time comparisons of digests, config keys and stored tokens together, reloaded."""

from __future__ import annotations

import hmac
from pathlib import Path

import pytest

from kiwifs.config import CONFIG_RELPATH, parse_config
from kiwifs.errors import ConfigError
from kiwifs.server import keys
from kiwifs.server.grants import Grant, Scope, key_digest
from kiwifs.server.keys import Keyring, config_entries
from kiwifs.server.tokens import KEYS_RELPATH, create_token

PERSPACE = """
[auth]
type = "perspace"

[[auth.api_keys]]
key = "k-team-read"
space = "team"
scope = "read"
actor = "reader-bot"
prefix = "/notes/"

[[auth.api_keys]]
key = "k-all"
"""


def grants_of(toml: str) -> list[Grant]:
    return [grant for _, grant in config_entries(parse_config(toml))]


def write_config(root: Path, toml: str) -> None:
    (root / CONFIG_RELPATH).parent.mkdir(parents=True, exist_ok=True)
    (root / CONFIG_RELPATH).write_text(toml)


def test_perspace_entries_become_grants() -> None:
    assert grants_of(PERSPACE) == [
        Grant("team", Scope.READ, "notes/", "reader-bot", "config entry 1"),
        Grant(None, Scope.ADMIN, None, None, "config entry 2"),  # KiwiFS's defaults
    ]


def test_entries_are_ignored_unless_perspace() -> None:
    assert grants_of(PERSPACE.replace("perspace", "apikey")) == []
    assert grants_of('[auth]\ntype = "none"\n[[auth.api_keys]]\nkey = 1\n') == []


def test_perspace_type_is_case_insensitive() -> None:
    assert len(grants_of(PERSPACE.replace("perspace", " PerSpace "))) == 2


def test_env_expansion(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIWI_T_SCOPED", "from-the-env")
    ring = Keyring.of(
        config_entries(
            parse_config('[auth]\ntype = "perspace"\n[[auth.api_keys]]\nkey = "${KIWI_T_SCOPED}"\n')
        )
    )
    assert ring.resolve("from-the-env") is not None
    assert ring.resolve("${KIWI_T_SCOPED}") is None


def test_unset_env_key_is_an_empty_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIWI_T_UNSET", raising=False)
    with pytest.raises(ConfigError, match=r"entry 1 .*key is empty \(is a \$\{VAR\}"):
        grants_of('[auth]\ntype = "perspace"\n[[auth.api_keys]]\nkey = "${KIWI_T_UNSET}"\n')


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('key = "k"\nscope = "superuser"', r"entry 2 .*unknown scope 'superuser'"),
        ('key = ""', "entry 2 .*key is empty"),
        ('key = "   "', "entry 2 .*key is empty"),
        ('space = "team"', "entry 2 .*key is empty"),
        ('key = "k"\nprefix = "../out"', r"entry 2 .*invalid prefix.*'\.\.'"),
        ('key = "k"\nprefix = "team/../../etc"', "entry 2 .*invalid prefix"),
        ('key = "k"\nprefix = ".git/hooks"', "entry 2 .*invalid prefix.*hidden"),
        ('key = "k"\nprefix = "a//b"', "entry 2 .*invalid prefix.*empty segment"),
        ("key = 7", "entry 2 .*key must be a string"),
        ('key = "k"\nscope = 3\nspace = false', "entry 2 .*space, scope must be a string"),
        ('key = "k-all"', "config entry 1 and config entry 2 hold the same key"),
        ('key = " k-all "', "config entry 1 and config entry 2 hold the same key"),
    ],
)
def test_bad_entries_are_config_errors(entry: str, message: str) -> None:
    first = '[auth]\ntype = "perspace"\n[[auth.api_keys]]\nkey = "k-all"\n'
    toml = f"{first}[[auth.api_keys]]\n{entry}\n"
    with pytest.raises(ConfigError, match=message) as caught:
        grants_of(toml)
    assert CONFIG_RELPATH in caught.value.message


def test_errors_never_show_a_key() -> None:
    secret = "sekret-value-123"
    for toml in (
        f'[[auth.api_keys]]\nkey = "{secret}"\nscope = "root"\n',
        f'[[auth.api_keys]]\nkey = "{secret}"\n[[auth.api_keys]]\nkey = "{secret}"\n',
        f'[[auth.api_keys]]\nkey = "{secret}"\nprefix = "../x"\n',
    ):
        with pytest.raises(ConfigError) as caught:
            grants_of('[auth]\ntype = "perspace"\n' + toml)
        assert secret not in str(caught.value)
    config = parse_config(f'[auth]\ntype = "perspace"\n[[auth.api_keys]]\nkey = "{secret}"\n')
    assert secret not in repr(config)
    assert secret not in repr(Keyring.of(config_entries(config)))


@pytest.mark.parametrize("value", ["'k'", "[1, 2]", "{ key = 'k' }"])
def test_api_keys_that_are_not_an_array_of_tables(value: str) -> None:
    with pytest.raises(ConfigError, match="api_keys"):
        grants_of(f'[auth]\ntype = "perspace"\napi_keys = {value}\n')


def test_resolve_right_key_wrong_key_blank() -> None:
    ring = Keyring.of(config_entries(parse_config(PERSPACE)))
    team = ring.resolve("k-team-read")
    assert team is not None and (team.space, team.scope, team.prefix) == (
        "team",
        Scope.READ,
        "notes/",
    )
    assert ring.resolve("k-all") == Grant(None, Scope.ADMIN, None, None, "config entry 2")
    for wrong in ("k-team-rea", "k-team-read-", "K-ALL", "", None, "k-all\x00"):
        assert ring.resolve(wrong) is None
    assert len(ring) == 2


def test_resolve_compares_every_digest_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """hmac.compare_digest over 32-byte digests, once per stored key, none skipped: the first
    key matching stops nothing, and a wrong key costs the same comparisons."""
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(keys.hmac, "compare_digest", spy)
    ring = Keyring.of((key_digest(f"k{n}"), Grant(None, Scope.READ)) for n in range(5))
    for presented in ("k0", "k4", "nope"):
        calls.clear()
        ring.resolve(presented)
        assert len(calls) == 5
        assert all(a == key_digest(presented) and len(a) == len(b) == 32 for a, b in calls)


def test_keyring_refuses_one_key_twice() -> None:
    entries = [(key_digest("k"), Grant("a", Scope.READ)), (key_digest("k"), Grant("b", Scope.READ))]
    with pytest.raises(ConfigError, match="same key"):
        Keyring.of(entries)


def test_open_reads_config_keys_and_stored_tokens(tmp_path: Path) -> None:
    write_config(tmp_path, PERSPACE)
    made = create_token(tmp_path, "team", Scope.WRITE, "drafts", "writer")
    ring = Keyring.open(tmp_path)
    assert len(ring) == 3
    assert ring.resolve(made.key) == Grant(
        "team", Scope.WRITE, "drafts/", "writer", f"token {made.token.id}"
    )
    assert ring.resolve("k-all") is not None


def test_open_with_tokens_only_when_not_perspace(tmp_path: Path) -> None:
    write_config(tmp_path, PERSPACE.replace("perspace", "apikey"))
    made = create_token(tmp_path, "team", Scope.READ)
    ring = Keyring.open(tmp_path)
    assert len(ring) == 1
    assert ring.resolve(made.key) is not None
    assert ring.resolve("k-all") is None


def test_reload_picks_up_a_new_token_and_a_revocation(tmp_path: Path) -> None:
    from kiwifs.server.tokens import revoke_token

    ring = Keyring.open(tmp_path)
    assert len(ring) == 0
    made = create_token(tmp_path, "default", Scope.READ)
    assert ring.resolve(made.key) is None  # not before the reload
    assert ring.reload() == 1
    assert ring.resolve(made.key) is not None
    revoke_token(tmp_path, made.token.id)
    ring.reload()
    assert ring.resolve(made.key) is None


def test_reload_picks_up_config_edits(tmp_path: Path) -> None:
    write_config(tmp_path, PERSPACE)
    ring = Keyring.open(tmp_path)
    write_config(tmp_path, PERSPACE.replace("k-all", "k-new"))
    ring.reload()
    assert ring.resolve("k-all") is None
    assert ring.resolve("k-new") is not None


def test_a_failed_reload_keeps_the_keys_in_force(tmp_path: Path) -> None:
    write_config(tmp_path, PERSPACE)
    ring = Keyring.open(tmp_path)
    write_config(tmp_path, PERSPACE + '[[auth.api_keys]]\nkey = "k"\nscope = "root"\n')
    with pytest.raises(ConfigError, match="entry 3"):
        ring.reload()
    assert ring.resolve("k-all") is not None
    assert len(ring) == 2


def test_a_damaged_keys_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / ".kiwi").mkdir()
    for text in ("{not json", '{"tokens": 1}', '{"tokens": [{"id": "x"}]}'):
        (tmp_path / KEYS_RELPATH).write_text(text)
        with pytest.raises(ConfigError, match="keys.json"):
            Keyring.open(tmp_path)
