"""``kiwifs mcp --root DIR --space NAME`` over stdio serves that space of DIR's server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from kiwifs.knowledge import Knowledge
from kiwifs.server.spaces import SpaceRegistry
from mcpsession import ok
from realserver import KIWIFS

pytestmark = pytest.mark.anyio


def child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(("GIT_", "HOME", "PATH"))}


async def test_mcp_space_serves_that_space(root: Path, tmp_path: Path) -> None:
    with Knowledge.open(root) as kb:
        SpaceRegistry(kb).create("team")
    args = ["mcp", "--root", str(root), "--space", "team"]
    params = StdioServerParameters(command=KIWIFS, args=args, env=child_env())
    with (tmp_path / "stderr.log").open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await ok(session, "kiwi_write", {"path": "t.md", "content": "team only\n"})
    assert (root / ".spaces" / "team" / "t.md").read_text() == "team only\n"
    assert not (root / "t.md").exists()


def test_mcp_unknown_space_exits_2(root: Path) -> None:
    done = subprocess.run(
        [KIWIFS, "mcp", "--root", str(root), "--space", "nope"],
        capture_output=True,
        text=True,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert done.returncode == 2 and "unknown space: nope" in done.stderr
