"""``kiwifs memory claim | release | worker``: the consolidation queue, its leases, and the worker
that drains it against a server.
"""

from __future__ import annotations

import signal
import threading

import click

from kiwifs.cli.common import echo, echo_json, handed_tuning, root_option
from kiwifs.config import DEFAULT_SERVE_PORT
from kiwifs.knowledge import Knowledge
from kiwifs.memory.queue import DEFAULT_LEASE_TEXT, Released
from kiwifs.memory.queue import DEFAULT_LIMIT as DEFAULT_CLAIM_LIMIT


@click.command("claim")
@root_option()
@click.option("--worker", required=True, help="Who claims (the lease holder).")
@click.option(
    "--limit", type=int, default=DEFAULT_CLAIM_LIMIT, show_default=True, help="Episodes to hold."
)
@click.option(
    "--lease", default=DEFAULT_LEASE_TEXT, show_default=True, help="Lease: 90s, 10m, 2h (1m-24h)."
)
@click.option("--episodes-prefix", default="", help="Folder prefix of episodic files.")
@click.option("--with-content", is_flag=True, help="Print each episode's content too.")
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the batch as JSON.")
def memory_claim(
    root: str,
    worker: str,
    limit: int,
    lease: str,
    episodes_prefix: str,
    with_content: bool,
    as_json: bool,
) -> None:
    """Claim up to --limit unmerged episodes no live claim holds, in report order.

    The worker's own live claims are renewed and count in the batch."""
    with Knowledge.open(root, tuning=handed_tuning()) as kb:
        batch = kb.claim_episodes(worker, limit, lease, episodes_prefix or None, with_content)
    if as_json:
        echo_json(batch.to_json())
    else:
        from kiwifs.memory.render import render_batch

        echo(render_batch(batch), nl=False)


@click.command("release")
@click.argument("paths", nargs=-1)
@root_option()
@click.option("--worker", required=True, help="The holder whose claims end.")
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the result as JSON.")
def memory_release(root: str, paths: tuple[str, ...], worker: str, as_json: bool) -> None:
    """End the worker's claims on PATHS (all of its claims when none are given)."""
    with Knowledge.open(root, tuning=handed_tuning()) as kb:
        released = Released.of(worker, kb.release_episodes(worker, list(paths) or None))
    if as_json:
        echo_json(released.to_json())
    else:
        from kiwifs.memory.render import render_released

        echo(render_released(released), nl=False)


@click.command("worker")
@click.option(
    "--url", default=f"http://127.0.0.1:{DEFAULT_SERVE_PORT}", show_default=True, help="The server."
)
@click.option("--worker", "name", required=True, help="This worker's name (the lease holder).")
@click.option(
    "--batch", type=int, default=DEFAULT_CLAIM_LIMIT, show_default=True, help="Episodes per claim."
)
@click.option(
    "--lease", default=DEFAULT_LEASE_TEXT, show_default=True, help="Lease per batch (1m-24h)."
)
@click.option(
    "--rule",
    type=click.Choice(["tags", "command"]),
    default="tags",
    show_default=True,
    help="tags: one line per episode into concepts/<tag>.md; command: run --command.",
)
@click.option("--command", "command", default=None, help="Consolidation command (--rule command).")
@click.option("--folder", default="concepts", show_default=True, help="Pages folder (tags rule).")
@click.option("--episodes-prefix", default="", help="Folder prefix of episodic files.")
@click.option("--until-empty", is_flag=True, help="Exit once nothing is left unmerged.")
@click.option("--poll", type=float, default=2.0, show_default=True, help="Idle wait, seconds.")
@click.option(
    "--api-key", envvar="KIWIFS_API_KEY", default=None, help="Bearer key (or KIWIFS_API_KEY)."
)
def memory_worker(
    url: str,
    name: str,
    batch: int,
    lease: str,
    rule: str,
    command: str | None,
    folder: str,
    episodes_prefix: str,
    until_empty: bool,
    poll: float,
    api_key: str | None,
) -> None:
    """Run a consolidation worker against a kiwifs server: claim, consolidate, merge, repeat.

    SIGTERM or Ctrl-C stops it cleanly: it releases what it holds."""
    from kiwifs.worker.client import KiwiClient
    from kiwifs.worker.loop import Worker
    from kiwifs.worker.steps import CommandStep, Step, TagRule

    if (rule == "command") != (command is not None):
        raise click.UsageError("--command is required with --rule command, and only then")
    step: Step = CommandStep(command) if command is not None else TagRule(folder)
    with KiwiClient(url, api_key=api_key, actor=name) as client:
        worker = Worker(
            client,
            name,
            step,
            batch=batch,
            lease=lease,
            prefix=episodes_prefix or None,
            until_empty=until_empty,
            poll=poll,
            log=lambda line: echo(line, err=True),
        )
        _stop_on_signals(worker.stop)
        stats = worker.run()
    echo(
        f"{name}: {stats.episodes} episodes in {stats.batches} batches,"
        f" {stats.pages} page merges, {stats.conflicts} conflicts",
        err=True,
    )


def _stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT ask the worker to stop after the call in flight."""

    def handler(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
