"""MCP on a replica, and the commit in a write's result.

The rules are :mod:`kiwifs.server.replica`'s; this module puts them in MCP's terms:

* a tool that writes, called on a replica, is sent to the primary's ``/mcp`` as the same
  ``tools/call`` (stateless JSON-RPC over HTTP, with the caller's ``Authorization``), and its
  result returned once the commit it names is applied here, so the caller reads its own write
  on this replica at once;
* a write's result names its commit in ``_meta["kiwifs/commit"]`` (REST's ``X-Kiwi-Commit``;
  the text stays KiwiFS's, which clients match);
* ``min_commit`` on any call holds it until that commit is applied here (REST's
  ``X-Kiwi-Min-Commit``), else a tool error saying to try again.
"""

from __future__ import annotations

import itertools
from typing import Any

import anyio
from mcp.types import CallToolResult, TextContent

from kiwifs.knowledge import Knowledge
from kiwifs.server.replica import Follower, committed_head, reached

COMMIT_META = "kiwifs/commit"
FORWARD_TIMEOUT = 60.0
_ids = itertools.count(1)


def with_commit(kb: Knowledge, text: str) -> str | CallToolResult:
    """A write's result with the commit that holds it (none while commits are pending)."""
    commit = committed_head(kb)
    if commit is None:
        return text
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        is_error=False,
        _meta={COMMIT_META: commit},
    )


async def held_until(kb: Knowledge, min_commit: object) -> str | None:
    """``None`` once ``min_commit`` is applied here; else why the call cannot be answered."""
    commit = str(min_commit).strip().lower()
    wait = kb.tuning.min_commit_wait
    if await anyio.to_thread.run_sync(reached, kb, commit, wait):
        return None
    return f"commit {commit} is not applied on this node yet; try again in a second"


async def forward(
    kb: Knowledge, follower: Follower, name: str, arguments: dict[str, Any], request: Any
) -> CallToolResult:
    """Call tool ``name`` on the primary and return its result once its commit is applied."""
    import httpx

    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    authorization = getattr(request, "headers", {}).get("authorization") if request else None
    if authorization:
        headers["Authorization"] = authorization
    if follower.role.space:
        headers["X-Kiwi-Space"] = follower.role.space
    call = {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    primary = follower.role.primary
    try:
        async with httpx.AsyncClient(timeout=FORWARD_TIMEOUT) as client:
            resp = await client.post(f"{primary}/mcp", json=call, headers=headers)
        answer = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        return _error(f"the primary {primary} did not answer: {exc}")
    if resp.status_code != 200 or not isinstance(answer, dict) or "result" not in answer:
        error = answer.get("error") if isinstance(answer, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        return _error(f"the primary {primary} refused the call: {message or resp.status_code}")
    result = CallToolResult.model_validate(answer["result"])
    commit = (result.meta or {}).get(COMMIT_META)
    if isinstance(commit, str):
        await anyio.to_thread.run_sync(follower.wait_for, commit, kb.tuning.apply_wait)
    return result


def _error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
