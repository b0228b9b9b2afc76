"""The MCP server in process, through the official client: no subprocess, no socket.

``mcp_session(root)`` opens the root, builds the server on it and yields a connected ``Client``;
the root is closed when the block ends. ``call``, ``ok`` and ``fails`` call a tool and read its
one text block. They take any MCP session (``Client`` in process, ``ClientSession`` over stdio or
HTTP), so the tests of the real transports read answers the same way.

The transports themselves (stdio, streamable HTTP) are tested against a real ``kiwifs mcp``
process in test_mcp.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client, ClientSession
from mcp.types import CallToolResult, TextContent

from kiwifs.knowledge import Knowledge
from kiwifs.mcp.server import build_server

Session = Client | ClientSession


@asynccontextmanager
async def mcp_session(root: Path, versioned: bool = False) -> AsyncIterator[Client]:
    """A client of the server on ``root``, opened in process; ``versioned`` makes the root a
    git repository first (``Knowledge.ensure_versioned``)."""
    kb = Knowledge.open(root)
    try:
        if versioned:
            kb.ensure_versioned()
        async with Client(build_server(kb)) as client:
            yield client
    finally:
        kb.close()


@asynccontextmanager
async def mcp_client(kb: Knowledge) -> AsyncIterator[Client]:
    """A client of the server on an open ``kb``, which the caller closes."""
    async with Client(build_server(kb)) as client:
        yield client


def text_of(result: CallToolResult) -> str:
    """The text of a tool's answer (every tool answers with one text block)."""
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def call(session: Session, name: str, args: dict[str, Any]) -> tuple[bool, str]:
    """``(is_error, text)`` of one tool call, for tests that expect either."""
    result = await session.call_tool(name, args)
    return bool(result.is_error), text_of(result)


async def ok(session: Session, name: str, args: dict[str, Any]) -> str:
    """The text of a tool call that must succeed."""
    error, text = await call(session, name, args)
    assert not error, f"{name}({args}) failed: {text}"
    return text


async def fails(session: Session, name: str, args: dict[str, Any]) -> str:
    """The message of a tool call that must be a tool error."""
    error, text = await call(session, name, args)
    assert error, f"{name}({args}) should have failed: {text}"
    return text
