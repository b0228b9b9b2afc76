"""Docs are part of the product: every command is documented and every doc is reachable.

Routes are checked in test_rest.py (against the OpenAPI paths) and tools in test_mcp.py.
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from kiwifs.cli import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _commands(group: click.Group, prefix: str = "") -> list[str]:
    names: list[str] = []
    for name, command in sorted(group.commands.items()):
        full = f"{prefix}{name}"
        if isinstance(command, click.Group):
            names.extend(_commands(command, full + " "))
        else:
            names.append(full)
    return names


@pytest.mark.parametrize("command", _commands(cli))
def test_every_cli_command_is_documented(command: str) -> None:
    text = (DOCS / "cli.md").read_text()
    assert f"kiwifs {command}" in text, f"docs/cli.md does not document 'kiwifs {command}'"
    assert f"kiwifs {command.split()[0]}" in (ROOT / "README.md").read_text()


def test_every_doc_linked_from_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for doc in sorted(DOCS.glob("*.md")):
        assert f"docs/{doc.name}" in readme, f"README.md does not link docs/{doc.name}"
