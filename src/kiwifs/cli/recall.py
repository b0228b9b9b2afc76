"""``kiwifs search`` and ``kiwifs brief``: recall, by keyword, by meaning or both, and the
context pack built from it.
"""

from __future__ import annotations

from typing import Any

import click

from kiwifs.base.limits import BRIEF_BUDGET, BRIEF_MAX_PAGES, SEARCH_LIMIT
from kiwifs.cli.common import echo, echo_json, handed_tuning, printable, root_option
from kiwifs.knowledge import Knowledge

MODES = ("keyword", "semantic", "hybrid")


@click.command()
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
    with Knowledge.open(root, tuning=handed_tuning()) as kb:
        if mode == "keyword":
            found: Any = kb.search(
                query,
                limit=SEARCH_LIMIT if limit is None else limit,
                offset=offset,
                **filters,
                recency_weight=recency_weight,
            )
        elif mode == "semantic":
            found = kb.semantic_search(
                query, limit=limit, offset=offset, **filters, threshold=threshold
            )
        else:
            found = kb.hybrid_search(query, limit=limit, offset=offset, **filters)
    if as_json:
        echo_json(found.to_json())
        return
    if not found.results:
        echo("No results found.")
    for n, hit in enumerate(found.results, start=offset + 1):
        if mode == "hybrid":
            from kiwifs.memory.render import hybrid_detail, hybrid_line  # the lines MCP answers

            echo(hybrid_line(n, hit))
            echo(f"   {hybrid_detail(hit)}")
        else:
            echo(f"{n}. {hit.path} (score: {_score_text(mode, hit)})")
        if hit.snippet:
            click.echo(f"   {_plain_snippet(hit.snippet)}")  # its parts made printable


def _score_text(mode: str, hit: Any) -> str:
    return f"{hit.score:.2f}" if mode == "keyword" else f"{hit.score:.3f}"


def _plain_snippet(snippet: str) -> str:
    """Highlights in bold (click drops the styling when stdout is not a terminal), the text
    itself made :func:`printable` first, so the styling is the only escape sequence printed."""
    from kiwifs.knowledge import marked_parts  # loaded by the search that made the snippet

    return "".join(
        click.style(printable(text), bold=True) if hit else printable(text)
        for text, hit in marked_parts(snippet)
    )


@click.command()
@click.argument("query")
@root_option()
@click.option("--budget", type=int, default=BRIEF_BUDGET, show_default=True, help="Token budget.")
@click.option(
    "--max-pages", type=int, default=BRIEF_MAX_PAGES, show_default=True, help="At most (≤100)."
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
    with Knowledge.open(root, tuning=handed_tuning()) as kb:
        pack = kb.brief(
            query,
            budget_tokens=budget,
            max_pages=max_pages,
            path_prefix=path_prefix,
            scope=scope,
            include_superseded=include_superseded,
        )
    if as_json:
        echo_json(pack.to_json())
        return
    from kiwifs.memory.render import render_brief

    echo(render_brief(pack), nl=False)
