"""``kiwifs token create | list | revoke``, in process through click's runner, on real roots."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kiwifs.cli import cli
from kiwifs.server.keys import Keyring
from kiwifs.server.tokens import KEYS_RELPATH


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), prog_name="kiwifs", env={"NO_COLOR": "1"})


def create(root: Path, *args: str) -> str:
    out = run("token", "create", "--root", str(root), *args)
    assert out.exit_code == 0, out.stderr
    return out.stdout.strip()


def listed(root: Path) -> list[dict[str, object]]:
    out = run("token", "list", "--json", "--root", str(root))
    assert out.exit_code == 0, out.stderr
    tokens: list[dict[str, object]] = json.loads(out.stdout)["tokens"]
    return tokens


def test_create_prints_the_key_once_and_stores_only_its_hash(tmp_path: Path) -> None:
    out = run(
        "token", "create", "--root", str(tmp_path), "--space", "team", "--scope", "read",
        "--prefix", "notes", "--actor", "bot",
    )  # fmt: skip
    assert out.exit_code == 0, out.stderr
    key = out.stdout.strip()
    assert out.stdout == key + "\n"  # the key alone on stdout: KEY=$(kiwifs token create …)
    assert key.startswith("kiwi_")
    assert "shown only this once" in out.stderr and key not in out.stderr
    stored = (tmp_path / KEYS_RELPATH).read_text()
    assert key not in stored and key[5:] not in stored
    assert stat.S_IMODE((tmp_path / KEYS_RELPATH).stat().st_mode) == 0o600
    grant = Keyring.open(tmp_path).resolve(key)
    assert grant is not None
    assert (grant.space, str(grant.scope), grant.prefix, grant.actor) == (
        "team",
        "read",
        "notes/",
        "bot",
    )


def test_list_shows_everything_but_the_key_and_hash(tmp_path: Path) -> None:
    key = create(tmp_path, "--space", "team", "--scope", "write", "--prefix", "/a/b/")
    create(tmp_path, "--space", "default", "--scope", "admin")
    tokens = listed(tmp_path)
    assert [(t["space"], t["scope"], t["prefix"], t["actor"]) for t in tokens] == [
        ("team", "write", "a/b/", None),
        ("default", "admin", None, None),
    ]
    assert all(set(t) == {"id", "space", "scope", "prefix", "actor", "created"} for t in tokens)
    text = run("token", "list", "--root", str(tmp_path))
    assert text.exit_code == 0
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["ID", "SPACE", "SCOPE", "PREFIX", "ACTOR", "CREATED"]
    assert lines[1].split()[:5] == [str(tokens[0]["id"]), "team", "write", "a/b/", "-"]
    assert len(lines) == 3
    stored = json.loads((tmp_path / KEYS_RELPATH).read_text())["tokens"][0]["hash"]
    for out in (text.stdout, json.dumps(tokens)):
        assert key not in out and stored not in out


def test_list_of_no_tokens(tmp_path: Path) -> None:
    assert run("token", "list", "--root", str(tmp_path)).stdout == "no tokens\n"
    assert listed(tmp_path) == []


def test_revoke_round_trip(tmp_path: Path) -> None:
    key = create(tmp_path, "--space", "team", "--scope", "read")
    ring = Keyring.open(tmp_path)
    assert ring.resolve(key) is not None
    token_id = str(listed(tmp_path)[0]["id"])
    out = run("token", "revoke", token_id, "--root", str(tmp_path))
    assert out.exit_code == 0, out.stderr
    assert f"revoked token {token_id}" in out.stdout
    assert listed(tmp_path) == []
    ring.reload()
    assert ring.resolve(key) is None


def test_revoke_unknown_id_exits_2(tmp_path: Path) -> None:
    create(tmp_path, "--space", "team", "--scope", "read")
    out = run("token", "revoke", "0123456789ab", "--root", str(tmp_path))
    assert out.exit_code == 2
    assert out.stderr == "error: no token with id '0123456789ab' ('kiwifs token list' shows them)\n"
    assert len(listed(tmp_path)) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--space", "team", "--scope", "root"], "'root' is not one of"),
        (["--scope", "read"], "Missing option '--space'"),
        (["--space", "team"], "Missing option '--scope'"),
        (["--space", "Team", "--scope", "read"], "invalid space name 'Team'"),
        (["--space", "team", "--scope", "read", "--prefix", "../up"], "invalid prefix"),
        (["--space", "team", "--scope", "read", "--prefix", ".git"], "invalid prefix"),
    ],
)
def test_create_usage_errors_exit_2_and_store_nothing(
    tmp_path: Path, args: list[str], message: str
) -> None:
    out = run("token", "create", "--root", str(tmp_path), *args)
    assert out.exit_code == 2
    assert message in out.stderr
    assert not (tmp_path / KEYS_RELPATH).exists()


@pytest.mark.parametrize("command", [["create", "--space", "a", "--scope", "read"], ["list"]])
def test_a_missing_root_exits_2_and_is_not_created(tmp_path: Path, command: list[str]) -> None:
    out = run("token", *command, "--root", str(tmp_path / "nowhere"))
    assert out.exit_code == 2
    assert "knowledge root not found" in out.stderr
    assert not (tmp_path / "nowhere").exists()


def test_reload_picks_up_a_token_made_by_the_command(tmp_path: Path) -> None:
    ring = Keyring.open(tmp_path)
    key = create(tmp_path, "--space", "default", "--scope", "read")
    assert ring.resolve(key) is None
    ring.reload()
    assert ring.resolve(key) is not None
