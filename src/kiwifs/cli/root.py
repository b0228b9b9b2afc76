"""Setting a knowledge root up and keeping its index: ``kiwifs version``, ``init`` and
``reindex`` (with its progress bar).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from kiwifs import __version__
from kiwifs.cli.common import handed_tuning, root_option
from kiwifs.knowledge import Knowledge

if TYPE_CHECKING:
    from kiwifs.knowledge import IndexRefresh


@click.command()
def version() -> None:
    """Print the kiwifs version."""
    click.echo(f"kiwifs {__version__}")


@click.command()
@root_option()
@click.option(
    "--template",
    type=click.Choice(["knowledge", "blank"]),
    default="knowledge",
    show_default=True,
    help="What to lay out.",
)
def init(root: str, template: str) -> None:
    """Create a knowledge root (never overwrites existing files) and commit it to git."""
    result = Knowledge.init(root, template)
    click.echo(f"Initialized knowledge at {result.root} (template: {template})")
    if not result.created:
        click.echo("nothing to add: every template file already exists")


def progress_bar() -> Any:
    """``reindex``'s bar: done/total, rate, elapsed time and ETA, on stderr.

    Redrawn by :func:`_advance`, by the thread doing the work: rich's own refresh thread would
    make the process threaded, and a threaded process does not fork the rebuild's parsers
    (:func:`kiwifs.base.forking.fork_is_safe`); ``reindex`` then parsed in one process.
    """
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        auto_refresh=False,
    )


def _advance(bar: Any, task: Any, done: int, total: int, unit: str) -> None:
    """Move a progress bar, show its rate (rich computes the speed and the ETA), redraw it."""
    bar.update(task, completed=done, total=total)
    speed = next(t.speed for t in bar.tasks if t.id == task)
    bar.update(task, rate=f"{speed:,.0f} {unit}/s" if speed else "")
    bar.refresh()


@click.command()
@root_option()
@click.option("--fts-only", is_flag=True, help="Rebuild the text index only; keep the vectors.")
@click.option("--vector", "vector_only", is_flag=True, help="Re-embed every page only.")
def reindex(root: str, fts_only: bool, vector_only: bool) -> None:
    """Rebuild the search and memory index from the files, and the vectors when enabled."""
    if fts_only and vector_only:
        raise click.UsageError("--fts-only and --vector exclude each other")
    with Knowledge.open(root, tuning=handed_tuning()) as kb:
        vectors = kb.config.search.vector.enabled and not fts_only
        kb.prepare_vectors()  # a bad model fails here, before anything is rebuilt
        with progress_bar() as bar:
            if not vector_only:
                task = bar.add_task("indexing", total=None, rate="")
                done = kb.reindex_or_reconcile(
                    lambda done, total: _advance(bar, task, done, total, "files")
                )
                if not done.rebuilt:
                    _checked_in_place(done, vectors)
                    return
            if vector_only or vectors:
                job = bar.add_task("embedding", total=None, rate="")
                embedded = kb.reindex_vectors(
                    lambda done, total: _advance(bar, job, done, total, "pages")
                )
    if not vector_only:
        click.echo(f"indexed {done.files} files")
    if vector_only or vectors:
        click.echo(
            f"embedded {embedded.embedded} pages"
            + (
                f"; {embedded.failed} failed and stay queued (see /health)"
                if embedded.failed
                else ""
            )
        )
        if embedded.failed:
            sys.exit(1)


def _checked_in_place(done: IndexRefresh, vectors: bool) -> None:
    """A server keeps this index current: say what the in-place check found instead."""
    click.echo(
        f"a kiwifs server keeps this index current: checked it against the {done.files} files"
        f" in place ({done.updated} re-read, {done.removed} removed) instead of rebuilding it"
        " under the server" + ("; the vectors follow the same check" if vectors else "")
    )
    click.echo("to rebuild from scratch, stop the server, run kiwifs reindex, start it", err=True)
