"""The ``kiwifs`` command: parse flags, make one :class:`~kiwifs.knowledge.Knowledge` call,
print the answer.

One module per kind of command: :mod:`.root` (version, init, reindex), :mod:`.memory` (the
``memory`` group), :mod:`.queue` (the claims queue and the worker, in the ``memory`` group),
:mod:`.recall` (search, brief), :mod:`.navigation` (peek, links, mv), :mod:`.servers` (serve, mcp),
:mod:`.tokens` (the ``token`` group: scoped keys made at run time); what they share (the
``--root`` option, JSON printing, the error → exit code mapping) is in :mod:`.common`. Errors
from the core are :class:`~kiwifs.errors.KiwiError`; the group prints them as one ``error:`` line
on stderr with the error's exit code (2 for usage errors and a missing root, 1 otherwise).
"""

from __future__ import annotations

import click

from kiwifs.cli.common import KiwiGroup
from kiwifs.cli.memory import memory
from kiwifs.cli.navigation import links, mv, peek
from kiwifs.cli.queue import memory_claim, memory_release, memory_worker
from kiwifs.cli.recall import brief, search
from kiwifs.cli.root import init, reindex, version
from kiwifs.cli.servers import mcp, serve
from kiwifs.cli.tokens import token


@click.group(cls=KiwiGroup, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """kiwifs: a knowledge filesystem for AI agents."""


for command in (version, init, memory, search, brief, peek, links, mv, reindex, serve, mcp, token):
    cli.add_command(command)
for command in (memory_claim, memory_release, memory_worker):
    memory.add_command(command)


def main() -> None:
    cli(prog_name="kiwifs")
