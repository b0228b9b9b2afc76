"""``kiwifs memory``: the episodic-memory commands that read and change files (the report,
merging, new episodes, forgetting and restoring, the check, lineage). The claims queue's
commands (:mod:`kiwifs.cli.queue`) join the same group.
"""

from __future__ import annotations

import sys
from typing import BinaryIO

import click

from kiwifs.cli.common import KiwiGroup, echo, echo_json, handed_tuning, root_option
from kiwifs.frontmatter.provenance import LIBRARY_ACTOR
from kiwifs.knowledge import Knowledge, StatusResult
from kiwifs.memory.rules import MergeEntry


@click.group(cls=KiwiGroup)
def memory() -> None:
    """Episodic memory: the report, new episodes, forgetting, merges, the claims queue, check
    and lineage."""


@memory.command("report")
@root_option()
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--episodes-prefix", default="", help="Folder prefix of episodic files.")
@click.option("--limit", type=int, default=None, help="Page size for the file lists.")
@click.option("--offset", type=int, default=0, show_default=True, help="Page start.")
@click.option(
    "--fail-on-unmerged", is_flag=True, help="Exit 1 when any episode is unmerged (for CI)."
)
@click.option(
    "--no-index", "no_index", is_flag=True, help="Read every file instead of using the index."
)
def memory_report(
    root: str,
    as_json: bool,
    episodes_prefix: str,
    limit: int | None,
    offset: int,
    fail_on_unmerged: bool,
    no_index: bool,
) -> None:
    """List the episodes that no page's merged-from cites yet."""
    prefix, use_index = episodes_prefix or None, not no_index
    with Knowledge.open(root, tuning=handed_tuning()) as kb:
        if as_json:
            document = kb.memory_report_document(prefix, limit, offset, use_index=use_index)
            unmerged = document.unmerged_count
        else:
            printed = kb.memory_report_text(prefix, limit, offset, use_index=use_index)
            unmerged = printed.unmerged_count
    if as_json:
        echo_json(document.value)
    else:
        echo(printed.text, nl=False)
        if printed.warnings:  # one write: a million episodes can carry tens of thousands
            echo(printed.warnings, err=True, nl=False)
    if fail_on_unmerged and unmerged:
        sys.exit(1)


@memory.command("merge")
@click.argument("page")
@root_option()
@click.option("--episode", "episodes", multiple=True, help="Episode id merged (repeatable).")
@click.option("--path", "paths", multiple=True, help="Episode path merged (repeatable).")
@click.option("--type", "typ", default="episode", show_default=True, help="Entry type.")
@click.option("--note", default="", help="Note recorded on every entry.")
@click.option(
    "--actor", default=LIBRARY_ACTOR, show_default=True, help="Git author and entry actor."
)
@click.option("--worker", default=None, help="The worker merging: its claims on them end.")
@click.option(
    "--force", is_flag=True, help="Merge even episodes claimed by others or merged elsewhere."
)
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the result as JSON.")
def memory_merge(
    page: str,
    root: str,
    episodes: tuple[str, ...],
    paths: tuple[str, ...],
    typ: str,
    note: str,
    actor: str,
    worker: str | None,
    force: bool,
    as_json: bool,
) -> None:
    """Record in PAGE's merged-from that it consumed the given episodes (idempotent).

    An episode another worker claims under a live lease, or that another page already merged,
    is a conflict (exit 1) unless --force. An entry that cites nothing is written, with a
    warning on stderr."""
    if not episodes and not paths:
        raise click.UsageError("give at least one --episode ID or --path P")
    entries = [MergeEntry(type=typ, id=e, note=note) for e in episodes]
    entries += [MergeEntry(type=typ, path=p, note=note) for p in paths]
    with Knowledge.open(root, tuning=handed_tuning()) as kb:
        result = kb.merge(page, entries, actor=actor, worker=worker, force=force)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        echo_json(result.to_json())
        return
    if result.added:
        echo(
            f"merged {len(result.added)} entr{'y' if len(result.added) == 1 else 'ies'}"
            f" into {result.path}"
        )
    else:
        echo(f"nothing to do: {result.path} already cites every entry")


@memory.command("remember")
@click.argument("file", type=click.File("rb"), default="-", required=False)
@root_option()
@click.option("--episode-id", default=None, help="Id of the episode (default: a new UUID).")
@click.option("--scope", default=None, help="What the episode is about (stored as scope).")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@click.option("--title", default=None, help="Short title (stored as title).")
@click.option("--actor", default=LIBRARY_ACTOR, show_default=True, help="Git author.")
@click.option("--provenance", default=None, help="Where it came from, as type:id.")
@click.option("--json", "-j", "as_json", is_flag=True, help="Print path, episode_id, etag.")
def memory_remember(
    file: BinaryIO,
    root: str,
    episode_id: str | None,
    scope: str | None,
    tags: tuple[str, ...],
    title: str | None,
    actor: str,
    provenance: str | None,
    as_json: bool,
) -> None:
    """Record a new episode from FILE (default: stdin) and print its path."""
    try:
        content = file.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise click.UsageError(f"the content must be UTF-8 text: {exc}") from exc
    with Knowledge.open(root, tuning=handed_tuning()) as kb:
        result = kb.remember(
            content, episode_id, scope, list(tags) or None, actor, provenance, title
        )
    if as_json:
        echo_json({"path": result.path, "episode_id": result.episode_id, "etag": result.etag})
    else:
        echo(result.path)


@memory.command("forget")
@click.argument("path")
@root_option()
@click.option("--reason", default=None, help="Why it is no longer true (superseded_reason).")
@click.option(
    "--superseded-by", default=None, help="Path of the page that replaces it (superseded_by)."
)
@click.option("--actor", default=LIBRARY_ACTOR, show_default=True, help="Git author.")
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the result as JSON.")
def memory_forget(
    path: str, root: str, reason: str | None, superseded_by: str | None, actor: str, as_json: bool
) -> None:
    """Mark PATH superseded: it leaves search, meta, briefs and the unmerged list."""
    with Knowledge.open(root, tuning=handed_tuning()) as kb:
        result = kb.forget(path, reason, superseded_by, actor=actor)
    _echo_status(result, as_json)


@memory.command("restore")
@click.argument("path")
@root_option()
@click.option("--actor", default=LIBRARY_ACTOR, show_default=True, help="Git author.")
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the result as JSON.")
def memory_restore(path: str, root: str, actor: str, as_json: bool) -> None:
    """Undo 'memory forget' on PATH (removes the superseded keys)."""
    with Knowledge.open(root, tuning=handed_tuning()) as kb:
        result = kb.restore(path, actor=actor)
    _echo_status(result, as_json)


def _echo_status(result: StatusResult, as_json: bool) -> None:
    if as_json:
        echo_json(result.to_json())
    elif result.changed:
        echo(f"{'forgot' if result.superseded else 'restored'} {result.path}")
    else:
        state = "already superseded" if result.superseded else "not superseded"
        echo(f"nothing to do: {result.path} is {state}")


@memory.command("check")
@root_option()
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the check as JSON.")
@click.option("--episodes-prefix", default="", help="Folder prefix of episodic files.")
@click.option(
    "--fail-on-problems",
    is_flag=True,
    help="Exit 1 on dangling refs, duplicate ids, double merges.",
)
@click.option(
    "--no-index", "no_index", is_flag=True, help="Read every file instead of using the index."
)
def memory_check(
    root: str, as_json: bool, episodes_prefix: str, fail_on_problems: bool, no_index: bool
) -> None:
    """Check consolidation: dangling merged-from entries, duplicate ids, double merges,
    the oldest unmerged episode, coverage per folder and per day."""
    with Knowledge.open(root, tuning=handed_tuning()) as kb:
        check = kb.memory_check(episodes_prefix or None, use_index=not no_index)
    if as_json:
        echo_json(check.to_json())
    else:
        from kiwifs.memory.render import render_check

        echo(render_check(check), nl=False)
    if fail_on_problems and check.problems:
        sys.exit(1)


@memory.command("lineage")
@click.argument("path_or_id")
@root_option()
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the lineage as JSON.")
@click.option("--episodes-prefix", default="", help="Folder prefix of episodic files.")
def memory_lineage(root: str, path_or_id: str, as_json: bool, episodes_prefix: str) -> None:
    """Show what PATH_OR_ID (a file, or an episode id) was built from and what cites it."""
    with Knowledge.open(root, tuning=handed_tuning()) as kb:
        lineage = kb.lineage(path_or_id=path_or_id, prefix=episodes_prefix or None)
    if as_json:
        echo_json(lineage.to_json())
    else:
        from kiwifs.memory.render import render_lineage

        echo(render_lineage(lineage), nl=False)
