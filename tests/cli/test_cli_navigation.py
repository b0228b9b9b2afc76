"""``kiwifs peek``, ``kiwifs links`` and ``kiwifs mv`` on a real root: what a person reads, the
JSON answers, and a move that rewrites links in one commit (the installed command once, the rest
in process with click's runner)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kiwifs.cli import cli
from kiwifs.knowledge import Knowledge


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), prog_name="kiwifs", env={"NO_COLOR": "1"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def root(tmp_path: Path) -> Path:
    Knowledge.init(tmp_path / "kb", template="blank")
    with Knowledge.open(tmp_path / "kb") as kb:
        kb.write("notes/auth.md", "---\ntitle: Auth\n---\n# Auth\n\nTokens.\n\n## Setup\n\nx\n")
        kb.write("index.md", "[[notes/auth]] [[gone]]\n")
    return tmp_path / "kb"


def test_peek_for_a_person_and_as_json(root: Path) -> None:
    code, out, _ = run("peek", "notes/auth.md", "--root", str(root))
    assert code == 0 and "Auth" in out and "Setup" in out
    code, out, _ = run("peek", "notes/auth.md", "--root", str(root), "--json")
    glance = json.loads(out)
    assert code == 0 and glance["path"] == "notes/auth.md"
    code, _, err = run("peek", "nope.md", "--root", str(root))
    assert code == 1 and "not found" in err


def test_links_lists_both_ways(root: Path) -> None:
    code, out, _ = run("links", "index.md", "--root", str(root))
    assert code == 0
    assert "wiki" in out and "notes/auth.md" in out and "BROKEN" in out
    code, out, _ = run("links", "notes/auth.md", "--root", str(root), "--json")
    answer = json.loads(out)
    assert [b["path"] for b in answer["backlinks"]] == ["index.md"]


def test_mv_moves_a_folder_and_rewrites_links(root: Path) -> None:
    kiwifs = shutil.which("kiwifs", path=os.path.dirname(sys.executable))
    assert kiwifs is not None, "pip install -e . puts kiwifs next to this Python"
    done = subprocess.run(
        [kiwifs, "mv", "notes", "kb/notes", "--root", str(root), "--actor", "ann"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "moved notes -> kb/notes (1 files)\n  links updated in index.md\n"
    assert (root / "index.md").read_text() == "[[kb/notes/auth]] [[gone]]\n"
    log = subprocess.run(
        ["git", "-C", str(root), "log", "-1", "--format=%an"], capture_output=True, text=True
    )
    assert log.stdout == "ann\n"
    code, out, _ = run("mv", "kb/notes/auth.md", "auth.md", "--root", str(root), "--json")
    assert code == 0 and json.loads(out)["updated_links"] == ["index.md"]
    code, _, err = run("mv", "auth.md", "index.md", "--root", str(root), "--no-update-links")
    assert code == 1 and "already exists" in err
