"""``kiwifs peek``: a glance at one page, as ``kiwi_peek`` gives it (title, frontmatter, first
paragraph, outline, links), for a person or, with ``--json``, KiwiFS's JSON answer; and
``kiwifs links``: a page's outbound links and backlinks, from the link index; and ``kiwifs mv``:
a page or a folder moved, the links to it rewritten, in one commit."""

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


@click.command()
@click.argument("path")
@root_option()
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the links as JSON.")
def links(path: str, root: str, as_json: bool) -> None:
    """PATH's links (each with the page it resolves to, or broken) and the pages linking to it."""
    with Knowledge.open(root, tuning=handed_tuning()) as kb:
        out = kb.outbound_links(path)
        back = kb.backlinks(path)
    if as_json:
        echo_json(
            {
                "path": path,
                "links": [link.to_json() for link in out],
                "backlinks": [link.to_json() for link in back],
            }
        )
        return
    echo(f"links from {path}: {len(out)}")
    for link in out:
        where = link.path if link.path is not None else "BROKEN"
        echo(f"  {link.kind:<14} {link.target} -> {where}")
    echo(f"links to {path}: {len(back)}")
    for b in back:
        mark = " [superseded]" if b.superseded else ""
        echo(f"  {b.kind:<14} {b.path} ({b.count}){mark}")


@click.command()
@click.argument("src")
@click.argument("dst")
@root_option()
@click.option("--actor", default=None, help="Who moves (the commit's author).")
@click.option(
    "--no-update-links", is_flag=True, help="Move only; leave the links to it as they are."
)
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the answer as JSON.")
def mv(
    src: str, dst: str, root: str, actor: str | None, no_update_links: bool, as_json: bool
) -> None:
    """Move the page or folder SRC to DST in one commit, rewriting the links to what moved."""
    with Knowledge.open(root, tuning=handed_tuning()) as kb:
        moved = kb.move(src, dst, actor, update_links=not no_update_links)
    if as_json:
        echo_json(moved.to_json())
        return
    what = f"{moved.renamed} files" if moved.etag is None else "1 file"
    echo(f"moved {moved.src} -> {moved.dst} ({what})")
    for path in moved.updated_links:
        echo(f"  links updated in {path}")
