"""Tokens made at run time: kept in ``.kiwi/keys.json`` as hashes only, mode 0600, outside git."""

from __future__ import annotations

import json
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from kiwifs.errors import RootNotFound, UsageError
from kiwifs.knowledge import Knowledge
from kiwifs.server.grants import Scope
from kiwifs.server.tokens import (
    KEYS_RELPATH,
    create_token,
    key_hash,
    list_tokens,
    read_tokens,
    revoke_token,
)


def test_create_list_revoke_round_trip(tmp_path: Path) -> None:
    first = create_token(tmp_path, "team", Scope.READ, "/notes/", "bot", clock=lambda: 0.0)
    second = create_token(tmp_path, "default", Scope.ADMIN, clock=lambda: 60.0)
    assert first.key.startswith("kiwi_") and len(first.key) == len("kiwi_") + 43
    assert first.key != second.key and first.token.id != second.token.id
    listed = list_tokens(tmp_path)
    assert [t.shown() for t in listed] == [
        {
            "id": first.token.id,
            "space": "team",
            "scope": "read",
            "prefix": "notes/",
            "actor": "bot",
            "created": "1970-01-01T00:00:00Z",
        },
        {
            "id": second.token.id,
            "space": "default",
            "scope": "admin",
            "prefix": None,
            "actor": None,
            "created": "1970-01-01T00:01:00Z",
        },
    ]
    assert revoke_token(tmp_path, first.token.id) == first.token
    assert [t.id for t in list_tokens(tmp_path)] == [second.token.id]


def test_the_key_is_never_stored_only_its_hash(tmp_path: Path) -> None:
    made = create_token(tmp_path, "team", Scope.WRITE)
    text = (tmp_path / KEYS_RELPATH).read_text()
    assert made.key not in text
    assert made.key[len("kiwi_") :] not in text
    assert key_hash(made.key) in text
    assert json.loads(text)["tokens"][0]["hash"] == key_hash(made.key)
    assert "hash" not in made.token.shown()


def test_the_file_is_only_its_owners(tmp_path: Path) -> None:
    create_token(tmp_path, "team", Scope.READ)
    path = tmp_path / KEYS_RELPATH
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)  # a hand-made copy: the next change makes it the owner's again
    create_token(tmp_path, "team", Scope.READ)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p.name for p in path.parent.iterdir() if p.name.startswith(".kiwi-write-")]


def test_unknown_id_is_a_usage_error(tmp_path: Path) -> None:
    create_token(tmp_path, "team", Scope.READ)
    with pytest.raises(UsageError, match="no token with id 'nope'"):
        revoke_token(tmp_path, "nope")
    assert len(list_tokens(tmp_path)) == 1


@pytest.mark.parametrize("space", ["", "Team", "-x", "a b", "a/b", "x" * 64, "é"])
def test_a_bad_space_name_is_refused(tmp_path: Path, space: str) -> None:
    with pytest.raises(UsageError, match="invalid space name"):
        create_token(tmp_path, space, Scope.READ)
    assert not (tmp_path / KEYS_RELPATH).exists()


@pytest.mark.parametrize("prefix", ["..", "../x", "a/../../b", ".kiwi", "a//b"])
def test_a_hostile_prefix_is_refused(tmp_path: Path, prefix: str) -> None:
    with pytest.raises(UsageError, match="invalid prefix"):
        create_token(tmp_path, "team", Scope.READ, prefix)
    assert not (tmp_path / KEYS_RELPATH).exists()


def test_a_missing_root_is_never_created(tmp_path: Path) -> None:
    with pytest.raises(RootNotFound):
        create_token(tmp_path / "nowhere", "team", Scope.READ)
    with pytest.raises(RootNotFound):
        list_tokens(tmp_path / "nowhere")
    assert not (tmp_path / "nowhere").exists()


def test_no_file_means_no_tokens(tmp_path: Path) -> None:
    assert list_tokens(tmp_path) == [] and read_tokens(tmp_path) == []


def test_concurrent_creates_all_land(tmp_path: Path) -> None:
    made: list[str] = []

    def create() -> None:
        made.append(create_token(tmp_path, "team", Scope.READ).token.id)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(t.id for t in list_tokens(tmp_path)) == sorted(made)


def git_status(root: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--ignored"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_a_new_root_ignores_the_file(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    Knowledge.init(root, "blank")
    assert ".kiwi/keys.json" in (root / ".gitignore").read_text().splitlines()
    create_token(root, "team", Scope.READ)
    status = git_status(root)
    assert "!! .kiwi/keys.json" in status
    assert "?? .kiwi" not in status


def test_an_existing_root_gets_it_in_info_exclude(tmp_path: Path) -> None:
    """A root made before keys were ignored: no such line in .gitignore nor info/exclude."""
    root = tmp_path / "kb"
    Knowledge.init(root, "blank")
    for name in (".gitignore", ".git/info/exclude"):
        path = root / name
        path.write_text(path.read_text().replace(".kiwi/keys.json\n", ""))
    create_token(root, "team", Scope.READ)
    assert (root / ".git/info/exclude").read_text().splitlines().count(".kiwi/keys.json") == 1
    create_token(root, "team", Scope.READ)
    assert (root / ".git/info/exclude").read_text().splitlines().count(".kiwi/keys.json") == 1
    assert "?? .kiwi" not in git_status(root)
    assert "!! .kiwi/keys.json" in git_status(root)
