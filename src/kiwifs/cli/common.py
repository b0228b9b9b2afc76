"""What every ``kiwifs`` command shares: the ``--root`` option, JSON printing and the group that
turns a :class:`~kiwifs.errors.KiwiError` into one ``error:`` line and its exit code (2 for usage
errors and a missing root, 1 otherwise): the CLI's one place that maps the error tree.
"""

from __future__ import annotations

import codecs
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from kiwifs.errors import KiwiError
from kiwifs.printed_json import dumps

ROOT_HELP = "Knowledge root folder."
DEFAULT_ROOT = "./knowledge"

F = TypeVar("F", bound=Callable[..., Any])


def root_option(default: str | None = DEFAULT_ROOT) -> Callable[[F], F]:
    return click.option(
        "--root", "-r", default=default, show_default=True, help=ROOT_HELP, type=click.Path()
    )


def echo_json(value: Any) -> None:
    """Print ``json.dumps(value, indent=2, ensure_ascii=False)`` and a newline to stdout.

    The bytes go straight to a UTF-8 stdout (lone surrogates encoded by its error handler, as
    text written to it would be); any other stdout gets them as text.
    """
    stream = sys.stdout
    if codecs.lookup(stream.encoding).name != "utf-8" or not hasattr(stream, "buffer"):
        stream.write(dumps(value, "surrogatepass").decode("utf-8", "surrogatepass") + "\n")
    else:
        data = dumps(value, stream.errors or "strict")
        stream.flush()
        stream.buffer.write(data)
        stream.buffer.write(b"\n")
    stream.flush()


class KiwiGroup(click.Group):
    """A click group that reports :class:`KiwiError` as one line with its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KiwiError as exc:
            click.echo(f"error: {exc.message}", err=True)
            ctx.exit(exc.exit_code)
