"""What every ``kiwifs`` command shares: the ``--root`` option, JSON printing and the group that
turns a :class:`~kiwifs.errors.KiwiError` into one ``error:`` line and its exit code (2 for usage
errors and a missing root, 1 otherwise): the CLI's one place that maps the error tree.
"""

from __future__ import annotations

import codecs
import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from kiwifs.base.printed_json import dumps
from kiwifs.base.text import SHOWN_JSON, shown
from kiwifs.errors import KiwiError
from kiwifs.tuning import Tuning

ROOT_HELP = "Knowledge root folder."
DEFAULT_ROOT = "./knowledge"

F = TypeVar("F", bound=Callable[..., Any])


def root_option(default: str | None = DEFAULT_ROOT) -> Callable[[F], F]:
    return click.option(
        "--root", "-r", default=default, show_default=True, help=ROOT_HELP, type=click.Path()
    )


def handed_tuning() -> Tuning | None:
    """The :class:`~kiwifs.tuning.Tuning` handed to the command line as its context's object
    (a benchmark runs ``cli.main(args, obj=Tuning(...))`` to compare a plain path with the
    fast one), else ``None``: :class:`~kiwifs.knowledge.Knowledge` reads the environment's."""
    return click.get_current_context().find_object(Tuning)


# What a terminal would act on instead of showing: C0 controls but tab and newline (ESC starts
# the CSI/OSC sequences that move the cursor, retitle the window, or hide text), DEL, the C1
# controls (U+009B is a one-character CSI on some terminals) and the bidirectional overrides
# that make a line read differently from what it holds.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """``text`` with every character a terminal would act on written as a visible escape
    (``\\x1b``, ``\\u202e``): an ``episode_id``, a path or a page's text is data, and printing
    it must not let it drive the terminal."""
    return _UNSAFE.sub(_escaped, text)


def printable(text: str) -> str:
    """``text`` as the CLI prints it: a name that is not UTF-8 shown by the name rule
    (:func:`~kiwifs.base.text.shown`: a lone surrogate would crash a strict stdout), then
    :func:`terminal_safe`."""
    return terminal_safe(shown(text))


def echo(message: str, err: bool = False, nl: bool = True) -> None:
    """``click.echo`` of human-readable text, made :func:`printable` first (JSON output goes
    through :func:`echo_json`, whose escapes already keep control characters out). Text that
    carries the CLI's own styling is made printable piece by piece before it is styled."""
    click.echo(printable(message), err=err, nl=nl)


def echo_json(value: Any) -> None:
    """Print ``json.dumps(value, indent=2, ensure_ascii=False)`` and a newline to stdout.

    A name that is not UTF-8 is written by the name rule (:data:`~kiwifs.base.text.SHOWN_JSON`: each
    undecodable byte as ``\\xNN``), as REST and MCP answer it. The bytes go straight to a UTF-8
    stdout; any other stdout gets them as text.
    """
    stream = sys.stdout
    if codecs.lookup(stream.encoding).name != "utf-8" or not hasattr(stream, "buffer"):
        stream.write(dumps(value, SHOWN_JSON).decode("utf-8") + "\n")
    else:
        data = dumps(value, SHOWN_JSON)
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
            echo(f"error: {exc.message}", err=True)
            ctx.exit(exc.exit_code)
