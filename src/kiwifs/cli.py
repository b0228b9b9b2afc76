"""The ``kiwifs`` command: parse flags, make one :class:`Knowledge` call, print the answer.

Errors from the core are :class:`KiwiError`; :func:`main` turns them into a one-line message on
stderr and the error's exit code (2 for usage errors and a missing root, 1 otherwise).
"""

from __future__ import annotations

import codecs
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any, BinaryIO, TypeVar

import click

from . import __version__
from .config import DEFAULT_MCP_PORT, DEFAULT_SERVE_PORT
from .errors import CannotListen, KiwiError
from .index.search import marked_parts
from .knowledge import Knowledge, StatusResult
from .memory.brief import DEFAULT_BUDGET, DEFAULT_MAX_PAGES
from .memory.rules import MergeEntry
from .printed_json import dumps

ROOT_HELP = "Knowledge root folder."
DEFAULT_ROOT = "./knowledge"
# The servers (FastAPI, uvicorn, the mcp SDK) and rich are imported by the commands that use
# them: together they take about a second to import, which every `kiwifs memory report` would
# otherwise pay.


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


@click.group(cls=KiwiGroup, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """kiwifs: a knowledge filesystem for AI agents."""


@cli.command()
def version() -> None:
    """Print the kiwifs version."""
    click.echo(f"kiwifs {__version__}")


@cli.command()
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


@cli.group(cls=KiwiGroup)
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
    with Knowledge.open(root) as kb:
        if as_json:
            document = kb.memory_report_document(prefix, limit, offset, use_index=use_index)
            unmerged = document.unmerged_count
        else:
            report = kb.memory_report(prefix, limit, offset, use_index=use_index)
            unmerged = report.unmerged_count
    if as_json:
        echo_json(document.value)
    else:
        from .memory.render import render_cli

        click.echo(render_cli(report), nl=False)
        for warning in report.warnings:
            click.echo(f"warning: {warning}", err=True)
    if fail_on_unmerged and unmerged:
        sys.exit(1)


@memory.command("merge")
@click.argument("page")
@root_option()
@click.option("--episode", "episodes", multiple=True, help="Episode id merged (repeatable).")
@click.option("--path", "paths", multiple=True, help="Episode path merged (repeatable).")
@click.option("--type", "typ", default="episode", show_default=True, help="Entry type.")
@click.option("--note", default="", help="Note recorded on every entry.")
@click.option("--actor", default="kiwifs", show_default=True, help="Git author and entry actor.")
@click.option("--worker", default=None, help="The worker merging: its claims on them end.")
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
    as_json: bool,
) -> None:
    """Record in PAGE's merged-from that it consumed the given episodes (idempotent).

    An episode another worker claims under a live lease is a conflict (exit 1)."""
    if not episodes and not paths:
        raise click.UsageError("give at least one --episode ID or --path P")
    entries = [MergeEntry(type=typ, id=e, note=note) for e in episodes]
    entries += [MergeEntry(type=typ, path=p, note=note) for p in paths]
    with Knowledge.open(root) as kb:
        result = kb.merge(page, entries, actor=actor, worker=worker)
    if as_json:
        payload = {
            "path": result.path,
            "etag": result.etag,
            "created": result.created,
            "added": [e.to_yaml_fields() for e in result.added],
        }
        echo_json(payload)
        return
    if result.added:
        click.echo(
            f"merged {len(result.added)} entr{'y' if len(result.added) == 1 else 'ies'}"
            f" into {result.path}"
        )
    else:
        click.echo(f"nothing to do: {result.path} already cites every entry")


@memory.command("remember")
@click.argument("file", type=click.File("rb"), default="-", required=False)
@root_option()
@click.option("--episode-id", default=None, help="Id of the episode (default: a new UUID).")
@click.option("--scope", default=None, help="What the episode is about (stored as scope).")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@click.option("--title", default=None, help="Short title (stored as title).")
@click.option("--actor", default="kiwifs", show_default=True, help="Git author.")
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
    with Knowledge.open(root) as kb:
        result = kb.remember(
            content, episode_id, scope, list(tags) or None, actor, provenance, title
        )
    if as_json:
        echo_json({"path": result.path, "episode_id": result.episode_id, "etag": result.etag})
    else:
        click.echo(result.path)


@memory.command("forget")
@click.argument("path")
@root_option()
@click.option("--reason", default=None, help="Why it is no longer true (superseded_reason).")
@click.option(
    "--superseded-by", default=None, help="Path of the page that replaces it (superseded_by)."
)
@click.option("--actor", default="kiwifs", show_default=True, help="Git author.")
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the result as JSON.")
def memory_forget(
    path: str, root: str, reason: str | None, superseded_by: str | None, actor: str, as_json: bool
) -> None:
    """Mark PATH superseded: it leaves search, meta, briefs and the unmerged list."""
    with Knowledge.open(root) as kb:
        result = kb.forget(path, reason, superseded_by, actor=actor)
    _echo_status(result, as_json)


@memory.command("restore")
@click.argument("path")
@root_option()
@click.option("--actor", default="kiwifs", show_default=True, help="Git author.")
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the result as JSON.")
def memory_restore(path: str, root: str, actor: str, as_json: bool) -> None:
    """Undo 'memory forget' on PATH (removes the superseded keys)."""
    with Knowledge.open(root) as kb:
        result = kb.restore(path, actor=actor)
    _echo_status(result, as_json)


def _echo_status(result: StatusResult, as_json: bool) -> None:
    if as_json:
        echo_json(result.to_json())
    elif result.changed:
        click.echo(f"{'forgot' if result.superseded else 'restored'} {result.path}")
    else:
        state = "already superseded" if result.superseded else "not superseded"
        click.echo(f"nothing to do: {result.path} is {state}")


@memory.command("claim")
@root_option()
@click.option("--worker", required=True, help="Who claims (the lease holder).")
@click.option("--limit", type=int, default=20, show_default=True, help="Episodes to hold.")
@click.option("--lease", default="10m", show_default=True, help="Lease: 90s, 10m, 2h (1m-24h).")
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
    with Knowledge.open(root) as kb:
        batch = kb.claim_episodes(worker, limit, lease, episodes_prefix or None, with_content)
    if as_json:
        echo_json(batch.to_json())
    else:
        from .memory.render import render_batch

        click.echo(render_batch(batch), nl=False)


@memory.command("release")
@click.argument("paths", nargs=-1)
@root_option()
@click.option("--worker", required=True, help="The holder whose claims end.")
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the result as JSON.")
def memory_release(root: str, paths: tuple[str, ...], worker: str, as_json: bool) -> None:
    """End the worker's claims on PATHS (all of its claims when none are given)."""
    with Knowledge.open(root) as kb:
        released = kb.release_episodes(worker, list(paths) or None)
    if as_json:
        echo_json({"worker": worker.strip(), "released": released})
    else:
        from .memory.render import render_released

        click.echo(render_released(worker.strip(), released), nl=False)


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
    with Knowledge.open(root) as kb:
        check = kb.memory_check(episodes_prefix or None, use_index=not no_index)
    if as_json:
        echo_json(check.to_json())
    else:
        from .memory.render import render_check

        click.echo(render_check(check), nl=False)
    if fail_on_problems and check.problems:
        sys.exit(1)


@memory.command("lineage")
@click.argument("path_or_id")
@root_option()
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the lineage as JSON.")
@click.option("--episodes-prefix", default="", help="Folder prefix of episodic files.")
def memory_lineage(root: str, path_or_id: str, as_json: bool, episodes_prefix: str) -> None:
    """Show what PATH_OR_ID (a file, or an episode id) was built from and what cites it."""
    with Knowledge.open(root) as kb:
        lineage = kb.lineage_of(path_or_id, episodes_prefix or None)
    if as_json:
        echo_json(lineage.to_json())
    else:
        from .memory.render import render_lineage

        click.echo(render_lineage(lineage), nl=False)


@memory.command("worker")
@click.option("--url", default="http://127.0.0.1:3333", show_default=True, help="The server.")
@click.option("--worker", "name", required=True, help="This worker's name (the lease holder).")
@click.option("--batch", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--lease", default="10m", show_default=True, help="Lease per batch (1m-24h).")
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
    from .client import KiwiClient
    from .memory.worker import CommandStep, Step, TagRule, Worker

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
            log=lambda line: click.echo(line, err=True),
        )
        _stop_on_signals(worker.stop)
        stats = worker.run()
    click.echo(
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


MODES = ("keyword", "semantic", "hybrid")


@cli.command()
@click.argument("query")
@root_option()
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default="keyword",
    show_default=True,
    help="keyword (BM25), semantic (by meaning) or hybrid (both, fused).",
)
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option(
    "--limit", type=int, default=None, help="Results (default 50 keyword, 10 semantic, 15 hybrid)."
)
@click.option("--offset", type=int, default=0, show_default=True, help="Results to skip.")
@click.option("--path-prefix", default=None, help="Only files whose path starts with this.")
@click.option("--scope", default=None, help="Only pages whose frontmatter scope is this.")
@click.option("--threshold", type=float, default=None, help="Minimum similarity (semantic).")
@click.option("--recency-weight", type=float, default=None, help="0-1: rank newer files higher.")
@click.option("--modified-after", default=None, help="Only files modified after (RFC 3339).")
@click.option("--include-superseded", is_flag=True, help="Also return forgotten pages.")
def search(
    query: str,
    root: str,
    mode: str,
    as_json: bool,
    limit: int | None,
    offset: int,
    path_prefix: str | None,
    scope: str | None,
    threshold: float | None,
    recency_weight: float | None,
    modified_after: str | None,
    include_superseded: bool,
) -> None:
    """Search: full-text (BM25, the default), by meaning (semantic) or both fused (hybrid)."""
    if recency_weight is not None and mode != "keyword":
        raise click.UsageError("--recency-weight needs --mode keyword")
    if threshold is not None and mode != "semantic":
        raise click.UsageError("--threshold needs --mode semantic")
    filters: dict[str, Any] = {
        "scope": scope,
        "path_prefix": path_prefix,
        "modified_after": modified_after,
        "include_superseded": include_superseded,
    }
    with Knowledge.open(root) as kb:
        if mode == "keyword":
            found: Any = kb.search(
                query,
                50 if limit is None else limit,
                offset,
                path_prefix,
                scope=scope,
                recency_weight=recency_weight,
                modified_after=modified_after,
                include_superseded=include_superseded,
            )
        elif mode == "semantic":
            found = kb.semantic_search(query, limit, offset, threshold, **filters)
        else:
            found = kb.hybrid_search(query, limit, offset, **filters)
    if as_json:
        echo_json(found.to_json())
        return
    if not found.results:
        click.echo("No results found.")
    for n, hit in enumerate(found.results, start=offset + 1):
        click.echo(f"{n}. {hit.path} (score: {_score_text(mode, hit)})")
        if hit.snippet:
            click.echo(f"   {_plain_snippet(hit.snippet)}")


def _score_text(mode: str, hit: Any) -> str:
    if mode == "keyword":
        return f"{hit.score:.2f}"
    if mode == "semantic":
        return f"{hit.score:.3f}"
    sides = [
        f"{s} #{r}"
        for s, r in (("keyword", hit.keyword_rank), ("semantic", hit.semantic_rank))
        if r
    ]
    return f"{hit.score:.4f}; {hit.match}: {', '.join(sides)}"


def _plain_snippet(snippet: str) -> str:
    """Highlights in bold (click drops the styling when stdout is not a terminal)."""
    return "".join(
        click.style(text, bold=True) if hit else text for text, hit in marked_parts(snippet)
    )


@cli.command()
@click.argument("query")
@root_option()
@click.option("--budget", type=int, default=DEFAULT_BUDGET, show_default=True, help="Token budget.")
@click.option(
    "--max-pages", type=int, default=DEFAULT_MAX_PAGES, show_default=True, help="At most (≤100)."
)
@click.option("--path-prefix", default=None, help="Only pages whose path starts with this.")
@click.option("--scope", default=None, help="Only pages whose frontmatter scope is this.")
@click.option("--include-superseded", is_flag=True, help="Also pack forgotten pages.")
@click.option("--json", "-j", "as_json", is_flag=True, help="Print the pack as JSON.")
def brief(
    query: str,
    root: str,
    budget: int,
    max_pages: int,
    path_prefix: str | None,
    scope: str | None,
    include_superseded: bool,
    as_json: bool,
) -> None:
    """A context pack for QUERY: best pages within a token budget, and what was left out."""
    with Knowledge.open(root) as kb:
        pack = kb.brief(query, budget, max_pages, path_prefix, scope, include_superseded)
    if as_json:
        echo_json(pack.to_json())
        return
    from .memory.render import render_brief

    click.echo(render_brief(pack), nl=False)


def progress_bar() -> Any:
    """``reindex``'s bar: done/total, rate, elapsed time and ETA, on stderr.

    Redrawn by :func:`_advance`, by the thread doing the work: rich's own refresh thread would
    make the process threaded, and a threaded process does not fork the rebuild's parsers
    (:func:`kiwifs.forking.fork_is_safe`); ``reindex`` then parsed in one process.
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


@cli.command()
@root_option()
@click.option("--fts-only", is_flag=True, help="Rebuild the text index only; keep the vectors.")
@click.option("--vector", "vector_only", is_flag=True, help="Re-embed every page only.")
def reindex(root: str, fts_only: bool, vector_only: bool) -> None:
    """Rebuild the search and memory index from the files, and the vectors when enabled."""
    if fts_only and vector_only:
        raise click.UsageError("--fts-only and --vector exclude each other")
    with Knowledge.open(root) as kb:
        vectors = kb.config.search.vector.enabled and not fts_only
        kb.prepare_vectors()  # a bad model fails here, before anything is rebuilt
        with progress_bar() as bar:
            if not vector_only:
                task = bar.add_task("indexing", total=None, rate="")
                count = kb.reindex(lambda done, total: _advance(bar, task, done, total, "files"))
            if vector_only or vectors:
                job = bar.add_task("embedding", total=None, rate="")
                embedded = kb.reindex_vectors(
                    lambda done, total: _advance(bar, job, done, total, "pages")
                )
    if not vector_only:
        click.echo(f"indexed {count} files")
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


@cli.command()
@root_option()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", "-p", type=int, default=None, help="Port (default: config, else 3333).")
@click.option(
    "--api-key",
    envvar="KIWIFS_API_KEY",
    default=None,
    help="Require 'Authorization: Bearer KEY' (also KIWIFS_API_KEY or [auth] in config).",
)
@click.option(
    "--async-commit/--sync-commit",
    default=None,
    help="Commit in background batches (a write returns once on disk and journaled) "
    "instead of before returning. Default: [versioning] async_commit, else sync.",
)
@click.option(
    "--batch-window", type=click.IntRange(1, 60_000), default=None, help="Async batch window, ms."
)
@click.option(
    "--batch-max-size", type=click.IntRange(1, 100_000), default=None, help="Paths per batch."
)
def serve(
    root: str,
    host: str,
    port: int | None,
    api_key: str | None,
    async_commit: bool | None,
    batch_window: int | None,
    batch_max_size: int | None,
) -> None:
    """Serve the REST API, MCP at /mcp and the web interface at / for a knowledge root."""
    import uvicorn

    from .auth import LOOPBACK_HOSTS, api_key_for
    from .rest.probes import Probes
    from .rest.starting import StartingApp  # FastAPI and the routes load once it listens
    from .rest.stopping import SHUTDOWN_GRACE, StoppingServer

    kb = Knowledge.open(root, sweep=True)
    kb.acquire_server_lock()
    key = api_key_for(kb.config, api_key or None)  # a key asked for but not given: no start
    bind_port = port or kb.config.server.port or DEFAULT_SERVE_PORT
    sock = listen_socket(host, bind_port)
    kb.ensure_versioned()
    kb.prepare_vectors()
    versioning = kb.config.versioning
    if async_commit if async_commit is not None else versioning.async_commit:
        window = (batch_window or versioning.batch_window_ms) / 1000
        kb.enable_async_commit(window, batch_max_size or versioning.batch_max_size)

    def build(probes: Probes) -> Any:
        from .mcp.lazy import lazy_mount_mcp  # the MCP SDK itself loads later still
        from .rest.app import create_app

        # the commit process imports pygit2 while the routes are built, once /health answers
        kb.start_commit_process()
        mcp = lazy_mount_mcp(kb, host)
        return create_app(kb, api_key=key, extra_mounts=mcp, host=host, probes=probes)

    def stop() -> None:
        server.should_exit = True

    app = StartingApp(kb, build, loopback=host in LOOPBACK_HOSTS, on_failure=stop)
    click.echo(f"kiwifs {__version__} serving {kb.root} on http://{host}:{bind_port}", err=True)
    # no WebSocket route exists: "none" also spares importing a WebSocket library; requests
    # still running SHUTDOWN_GRACE seconds after SIGTERM/SIGINT are cancelled
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", ws="none", timeout_graceful_shutdown=SHUTDOWN_GRACE
    )
    server = StoppingServer(config, kb.events)
    server.run(sockets=[sock])
    if app.error:
        raise KiwiError(app.error)


def listen_socket(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound before anything says "serving".

    A port in use (or an address that is not ours) is one ``error:`` line and exit 2, instead of
    a start-up banner followed by the server's own traceback.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    except (OverflowError, UnicodeError) as exc:
        sock.close()
        raise CannotListen(f"cannot listen on {host}:{port}: {exc}") from None
    sock.set_inheritable(True)
    return sock


REMOTE_UNSUPPORTED = (
    "kiwifs serves MCP in-process, next to the files: run 'kiwifs mcp --root DIR' on the "
    "machine that holds the knowledge root, or point the MCP host at the /mcp endpoint of "
    "'kiwifs serve' (http://HOST:3333/mcp); --remote, --space and --api-key are KiwiFS remote "
    "mode, which kiwifs does not have"
)


@cli.command()
@click.option("--root", "-r", default=None, type=click.Path(), help=ROOT_HELP + " (required)")
@click.option(
    "--remote", default=None, help="KiwiFS remote mode: not supported (the error says what to do)."
)
@click.option("--space", default=None, hidden=True, help="KiwiFS remote mode (not supported).")
@click.option("--api-key", default=None, hidden=True, help="KiwiFS remote mode (not supported).")
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP instead of stdio.")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help=f"HTTP port (only with --http; default {DEFAULT_MCP_PORT}).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP address to bind.")
def mcp(
    root: str | None,
    remote: str | None,
    space: str | None,
    api_key: str | None,
    use_http: bool,
    port: int | None,
    host: str,
) -> None:
    """Serve the MCP tools for a knowledge root (stdio by default)."""
    if remote is not None or space is not None or api_key is not None:
        raise click.UsageError(REMOTE_UNSUPPORTED)
    if root is None:
        raise click.UsageError("Missing option '--root' / '-r'.")
    if port is not None and not use_http:
        raise click.UsageError("--port requires --http")
    if host != "127.0.0.1" and not use_http:
        raise click.UsageError("--host requires --http")
    from .mcp.server import run_http, run_stdio

    kb = Knowledge.open(root, sweep=True)
    sock = listen_socket(host, port or DEFAULT_MCP_PORT) if use_http else None
    kb.ensure_versioned()
    kb.prepare_vectors()
    if sock is not None:
        run_http(kb, sock)
    else:
        run_stdio(kb)


def main() -> None:
    cli(prog_name="kiwifs")
