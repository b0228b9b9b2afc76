"""``kiwifs token``: make, list and revoke the scoped keys a root keeps in ``.kiwi/keys.json``.

A thin adapter over :mod:`kiwifs.server.tokens`, where the rules live. ``create`` prints the new
key alone on stdout (so ``KEY=$(kiwifs token create …)`` captures it) and what it made on
stderr; the key is not kept anywhere and cannot be shown again.
"""

from __future__ import annotations

from pathlib import Path

import click

from kiwifs.cli.common import echo, echo_json, root_option
from kiwifs.server.grants import SCOPE_NAMES, Scope
from kiwifs.server.tokens import create_token, list_tokens, revoke_token

_COLUMNS = ("id", "space", "scope", "prefix", "actor", "created")


@click.group()
def token() -> None:
    """Scoped keys made at run time (only their hashes are stored)."""


@token.command("create")
@click.option("--space", required=True, help="The space the key reaches.")
@click.option("--scope", required=True, type=click.Choice(SCOPE_NAMES), help="What it may do.")
@click.option("--prefix", default=None, help="Only paths under this folder.")
@click.option("--actor", default=None, help="The author its writes are committed as.")
@root_option()
def token_create(space: str, scope: str, prefix: str | None, actor: str | None, root: str) -> None:
    """Make a key and print it, once."""
    made = create_token(Path(root), space, Scope.parse(scope), prefix, actor)
    click.echo(made.key)
    t = made.token
    echo(
        f"token {t.id} created: space {t.space}, scope {t.scope}, prefix {t.prefix or '-'}, "
        f"actor {t.actor or '-'} (the key above is shown only this once)",
        err=True,
    )


@token.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@root_option()
def token_list(as_json: bool, root: str) -> None:
    """The stored tokens (never their keys)."""
    tokens = [t.shown() for t in list_tokens(Path(root))]
    if as_json:
        echo_json({"tokens": tokens})
        return
    if not tokens:
        echo("no tokens")
        return
    rows = [[str(t[c] or "-") for c in _COLUMNS] for t in tokens]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(_COLUMNS)]
    for row in [[c.upper() for c in _COLUMNS], *rows]:
        echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


@token.command("revoke")
@click.argument("token_id", metavar="ID")
@root_option()
def token_revoke(token_id: str, root: str) -> None:
    """Remove a token: its key stops working (on a server, at its next reload)."""
    gone = revoke_token(Path(root), token_id)
    echo(f"revoked token {gone.id} (space {gone.space}, scope {gone.scope})")
