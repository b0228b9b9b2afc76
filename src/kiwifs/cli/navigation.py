"""``kiwifs peek``: a glance at one page, as ``kiwi_peek`` gives it (title, frontmatter, first
paragraph, outline, links), for a person or, with ``--json``, KiwiFS's JSON answer."""

from __future__ import annotations

import click

from kiwifs.cli.common import echo, echo_json, handed_tuning, root_option
from kiwifs.knowledge import Knowledge


@click.command()
@click.argument("path")
@root_option()
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the peek as JSON.")
def peek(path: str, root: str, as_json: bool) -> None:
    """A glance at PATH: title, frontmatter, first paragraph, heading outline, links."""
    with Knowledge.open(root, tuning=handed_tuning()) as kb:
        glance = kb.peek(path)
    if as_json:
        echo_json(glance.to_json())
    else:
        echo(glance.to_text())
