"""A hostile knowledge root: every interface stays responsive and refuses what it must.

The root holds what a careless sync, a malicious collaborator or a broken disk can leave in it:
symlinks into ``.git``, into ``.kiwi`` and out of the root, a FIFO named ``*.md``, a YAML alias
bomb, invalid UTF-8 (in a file, and in names), a 17 MB file, a git configuration that names
external programs (a diff driver, a textconv, hooks, an fsmonitor) and 2,000 files added at once.
REST is driven in-process through httpx's ASGI transport, MCP through the official client on the
in-process server (and over stdio, where a name that is not UTF-8 once killed the server), the
CLI through click's runner, and one real ``kiwifs serve`` shows that SIGTERM still stops a server
that was asked to read a FIFO. Nothing of ours is mocked.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from click.testing import CliRunner
from fastapi import FastAPI
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import TextResourceContents

from fifovalve import fifo_valve
from kiwifs.cli import cli
from kiwifs.knowledge import Knowledge
from kiwifs.rest.app import create_app
from mcpsession import fails as tool_fails
from mcpsession import mcp_session, text_of
from mcpsession import ok as tool_ok
from realserver import KIWIFS, launch, wait_ready

API = "/api/kiwi"
BIG_BYTES = 17 * 1024 * 1024
MANY = 2000
BOMB_REL = "episodes/2024-01-01/bomb.md"
OK_EPISODE = "episodes/2024-01-01/fine.md"


def billion_laughs() -> str:
    """A ~400-byte frontmatter of nested anchors that expands to 9**9 strings."""
    lines = [
        "memory_kind: episodic",
        "episode_id: bomb",
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
    ]
    previous = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    return "---\n" + "\n".join(lines) + "\n---\nboom\n"


# Each: a path an API caller may name, and where it really leads.
LINKS = {
    "gitlink": ".git",
    "kiwilink": ".kiwi",
    "outdir": "../outside",
    "leak.md": ".git/config",
    "kiwileak.md": ".kiwi/config.toml",
    "secret.md": "../outside/secret.md",
    "hooked.md": ".git/hooks/post-commit",  # dangling: a write would create a hook
    "episodes/head.md": "../.git/HEAD",
}
REFUSED = [
    "gitlink/config",
    "gitlink/hooks/post-commit",
    "gitlink/new.md",
    "kiwilink/config.toml",
    "kiwilink/state/x.md",
    "outdir/secret.md",
    "outdir/new.md",
    "leak.md",
    "kiwileak.md",
    "secret.md",
    "hooked.md",
    "episodes/head.md",
]
# What the walk must say about each symlinked *.md file (the folder links are not descended).
LINK_WARNINGS = {
    "leak.md": "symlink points to a hidden path",
    "kiwileak.md": "symlink points to a hidden path",
    "hooked.md": "symlink points to a hidden path",
    "episodes/head.md": "symlink points to a hidden path",
    "secret.md": "symlink points outside the root",
}
SECRET_WORDS = ("repositoryformatversion", "TOPSECRETWORD", "refsheadsmain")


@dataclass
class Hostile:
    root: Path
    outside: Path
    marker: Path  # exists once any program named by the repository has run
    snapshot: dict[str, bytes]

    def untouched(self) -> None:
        """Nothing behind the links changed, and no program of the repository ran."""
        assert not self.marker.exists(), self.marker.read_text()
        assert _snapshot(self.root, self.outside) == self.snapshot


def _snapshot(root: Path, outside: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for base, name in ((root / ".git", ".git"), (root / ".kiwi", ".kiwi"), (outside, "outside")):
        for path in sorted(base.rglob("*")):
            rel = f"{name}/{path.relative_to(base)}"
            if rel.startswith((".git/objects", ".git/refs", ".git/logs", ".kiwi/state")):
                continue  # kiwifs's own writes (commits, index) land there
            if rel in (".git/index", ".git/HEAD", ".git/ORIG_HEAD", ".git/COMMIT_EDITMSG"):
                continue
            files[rel] = path.read_bytes() if path.is_file() else b"<dir>"
    return files


def plant_programs(root: Path, tmp: Path) -> Path:
    """Make the repository name an external program everywhere git could run one."""
    marker = tmp / "programs-ran"
    script = tmp / "evil.sh"
    script.write_text(f"#!/bin/sh\necho \"$0 $*\" >> '{marker}'\necho hijacked\n")
    script.chmod(0o755)
    hooks = tmp / "hooks"
    hooks.mkdir()
    for hook in (
        "pre-commit",
        "post-commit",
        "commit-msg",
        "post-index-change",
        "reference-transaction",
    ):
        for folder in (hooks, root / ".git" / "hooks"):
            shutil.copy(script, folder / hook)
    with open(root / ".git" / "config", "a") as config:
        config.write(
            f"[diff]\n\texternal = {script}\n"
            f'[diff "evil"]\n\ttextconv = {script}\n\tcommand = {script}\n'
            f'[filter "evil"]\n\tclean = {script}\n\tsmudge = {script}\n\trequired = true\n'
            f"[core]\n\thooksPath = {hooks}\n\tfsmonitor = {script}\n\tpager = {script}\n"
            f"[log]\n\tshowSignature = true\n[gpg]\n\tprogram = {script}\n"
        )
    with open(root / ".gitattributes", "a") as attributes:
        attributes.write("*.md diff=evil filter=evil\n")
    return marker


def build_hostile(base: Path) -> Hostile:
    root, outside = base / "kb", base / "outside"
    Knowledge.init(root)
    outside.mkdir()
    (outside / "secret.md").write_text(
        "---\nmemory_kind: episodic\nepisode_id: stolen\n---\nTOPSECRETWORD\n"
    )
    episodes = root / "episodes" / "2024-01-01"
    episodes.mkdir(parents=True)
    (episodes / "fine.md").write_text("---\nmemory_kind: episodic\nepisode_id: fine\n---\nok\n")
    (root / BOMB_REL).write_text(billion_laughs())
    (root / "bad-utf8.md").write_bytes(b"---\ntitle: caf\xe9 \xff\n---\nbody \xc3\x28 end\n")
    (root / "big.md").write_bytes(
        b"# big\n" + b"lorem ipsum dolor\n" * (BIG_BYTES // 18) + b"zebrafinale\n"
    )
    os.mkfifo(root / "pipe.md")
    os.mkfifo(root / "episodes" / "pipe.md")
    for name, target in LINKS.items():
        os.symlink(target, root / name)
    # the git config trick of the attack, already in place: with it a diff runs the script
    marker = plant_programs(root, base)
    return Hostile(root, outside, marker, _snapshot(root, outside))


# The app serving each module-scoped root (the hostile one), built once: an app costs ~0.15 CPU-s
# to build and to route its first request, and the REST tests on that root are a dozen and more.
# A server serves many requests on one root; every test still checks its own effects.
SHARED_APPS: dict[Path, FastAPI] = {}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, isolated_git: Path) -> Iterator[Hostile]:
    built = build_hostile(tmp_path_factory.mktemp("hostile"))
    kb = Knowledge.open(built.root)
    SHARED_APPS[built.root] = create_app(kb)
    yield built
    del SHARED_APPS[built.root]
    kb.close()


@asynccontextmanager
async def rest(root: Path) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app serving ``root``: the module's shared one, or one made for the call."""
    if root in SHARED_APPS:
        async with _client(SHARED_APPS[root]) as client:
            yield client
        return
    kb = Knowledge.open(root)
    try:
        async with _client(create_app(kb)) as client:
            yield client
    finally:
        kb.close()


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://kiwi")


def refused(response: httpx.Response, *words: str) -> str:
    """Assert a 400 with a JSON error (containing ``words``) and return its message."""
    assert response.status_code == 400, (response.status_code, response.text[:300])
    message = response.json()["error"]
    assert isinstance(message, str)
    for word in words:
        assert word in message, message
    return message


# ---------------------------------------------------------------------------------------------
# symlinks into .git, .kiwi and out of the root (read and write, every route)


@pytest.mark.anyio
@pytest.mark.parametrize("path", REFUSED)
async def test_rest_refuses_every_file_route_through_a_link(hostile: Hostile, path: str) -> None:
    async with rest(hostile.root) as client:
        refused(await client.get(f"{API}/file", params={"path": path}), "symlink")
        refused(await client.get(f"{API}/file", params={"path": path, "metadata_only": "true"}))
        refused(await client.put(f"{API}/file", params={"path": path}, content=b"owned\n"))
        refused(
            await client.put(
                f"{API}/file",
                params={"path": path},
                content=b"owned\n",
                headers={"X-Provenance": "run:attack"},
            )
        )
        refused(await client.delete(f"{API}/file", params={"path": path}))
        refused(await client.post(f"{API}/file/append", params={"path": path}, content=b"x"))
        refused(await client.get(f"{API}/versions", params={"path": path}))
        refused(await client.get(f"{API}/version", params={"path": path, "version": "HEAD"}))
        refused(
            await client.get(f"{API}/diff", params={"path": path, "from": "HEAD", "to": "HEAD"})
        )
        refused(await client.post(f"{API}/rename", json={"from": path, "to": "stolen.md"}))
        refused(await client.post(f"{API}/rename", json={"from": "index.md", "to": path}))
        bulk = {"files": [{"path": "bulk-ok.md", "content": "x"}, {"path": path, "content": "y"}]}
        refused(await client.post(f"{API}/bulk", json=bulk))
        merge = {"path": path, "entries": [{"id": "fine"}]}
        refused(await client.post(f"{API}/memory/merge", json=merge))
    assert not (hostile.root / "bulk-ok.md").exists()  # all or nothing
    assert (hostile.root / "index.md").is_file()
    hostile.untouched()


@pytest.mark.anyio
@pytest.mark.parametrize("folder", ["gitlink", "kiwilink", "outdir", "gitlink/hooks"])
async def test_rest_tree_refuses_a_link_and_lists_none_that_escape(
    hostile: Hostile, folder: str
) -> None:
    async with rest(hostile.root) as client:
        refused(await client.get(f"{API}/tree", params={"path": folder}), "symlink")
        listing = (await client.get(f"{API}/tree")).json()
    names = {child["name"] for child in listing["children"]}
    assert {"index.md", "episodes", "big.md"} <= names
    assert not names & set(LINKS) - {"episodes/head.md"}, names
    hostile.untouched()


@pytest.mark.anyio
async def test_rest_search_and_meta_never_show_what_a_link_leads_to(hostile: Hostile) -> None:
    async with rest(hostile.root) as client:
        for word in SECRET_WORDS:
            found = (await client.get(f"{API}/search", params={"q": word})).json()
            assert found["results"] == [], (word, found)
        meta = (await client.get(f"{API}/meta", params={"where": "$.episode_id=stolen"})).json()
        assert meta["results"] == []
    hostile.untouched()


@pytest.mark.anyio
async def test_mcp_tools_and_resources_refuse_links(hostile: Hostile) -> None:
    async with mcp_session(hostile.root) as client:
        for path in REFUSED:
            for name, args in (
                ("kiwi_read", {"path": path}),
                ("kiwi_read", {"path": path, "metadata_only": True}),
                ("kiwi_write", {"path": path, "content": "owned"}),
                ("kiwi_append", {"path": path, "content": "owned"}),
                ("kiwi_delete", {"path": path}),
                ("kiwi_rename", {"from": path, "to": "stolen.md"}),
                ("kiwi_rename", {"from": "index.md", "to": path}),
                ("kiwi_bulk_write", {"files": [{"path": path, "content": "x"}]}),
                ("kiwi_versions", {"path": path}),
                ("kiwi_memory_merge", {"path": path, "entries": [{"id": "fine"}]}),
            ):
                assert "symlink" in await tool_fails(client, name, args), (name, path)
        for folder in ("gitlink", "kiwilink", "outdir"):
            assert "symlink" in await tool_fails(client, "kiwi_tree", {"path": folder})
        for uri in (
            "kiwi://file/gitlink%2Fconfig",
            "kiwi://file/gitlink/config",
            "kiwi://file/leak.md",
            "kiwi://file/kiwilink%2Fconfig.toml",
            "kiwi://file/secret.md",
            "kiwi://tree/gitlink",
        ):
            with pytest.raises(MCPError, match="symlink"):
                await client.read_resource(uri)
    hostile.untouched()


@pytest.mark.anyio
async def test_remember_refuses_an_episodes_folder_that_is_a_link_into_git(
    tmp_path: Path,
) -> None:
    root = tmp_path / "kb"
    Knowledge.init(root)
    shutil.rmtree(root / "episodes", ignore_errors=True)
    os.symlink(".git", root / "episodes")
    before = sorted(str(p.relative_to(root)) for p in (root / ".git").rglob("*"))
    async with mcp_session(root) as client:
        text = await tool_fails(client, "kiwi_remember", {"content": "what happened"})
        assert "symlink" in text
    async with rest(root) as http:
        remembered = await http.post(f"{API}/memory/remember", json={"content": "what happened"})
        refused(remembered, "symlink")
    result = CliRunner().invoke(
        cli, ["memory", "remember", "--root", str(root)], input="what happened\n"
    )
    assert result.exit_code == 2 and "symlink" in result.output, result.output
    after = sorted(str(p.relative_to(root)) for p in (root / ".git").rglob("*"))
    assert [p for p in after if not p.startswith((".git/objects", ".git/refs", ".git/logs"))] == [
        p for p in before if not p.startswith((".git/objects", ".git/refs", ".git/logs"))
    ]


def test_cli_refuses_a_merge_target_through_a_link(hostile: Hostile) -> None:
    runner = CliRunner()
    for page in ("gitlink/config", "leak.md", "kiwilink/config.toml", "outdir/x.md", "hooked.md"):
        result = runner.invoke(
            cli, ["memory", "merge", page, "--root", str(hostile.root), "--episode", "fine"]
        )
        assert result.exit_code == 2, (page, result.output)
        assert "symlink" in result.output
    hostile.untouched()


# ---------------------------------------------------------------------------------------------
# FIFOs and other files that are not regular files


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["pipe.md", "episodes/pipe.md"])
async def test_rest_never_opens_a_fifo(hostile: Hostile, path: str) -> None:
    fifo = hostile.root / path
    with fifo_valve(fifo):
        async with rest(hostile.root) as client:
            refused(await client.get(f"{API}/file", params={"path": path}), "not a regular file")
            refused(await client.get(f"{API}/file", params={"path": path, "metadata_only": "1"}))
            refused(await client.post(f"{API}/file/append", params={"path": path}, content=b"x"))
            refused(await client.put(f"{API}/file", params={"path": path}, content=b"x"))
            bulk = {"files": [{"path": path, "content": "x"}]}
            refused(await client.post(f"{API}/bulk", json=bulk))
            refused(await client.post(f"{API}/rename", json={"from": path, "to": "p2.md"}))
            merge = {"path": path, "entries": [{"id": "fine"}]}
            refused(await client.post(f"{API}/memory/merge", json=merge))
            # the write lock is free: another write goes through at once
            done = await client.put(f"{API}/file", params={"path": "after-fifo.md"}, content=b"y")
            assert done.status_code == 200, done.text
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO, never replaced
    hostile.untouched()


@pytest.mark.anyio
async def test_mcp_and_cli_never_open_a_fifo(hostile: Hostile) -> None:
    fifo = hostile.root / "pipe.md"
    with fifo_valve(fifo):
        async with mcp_session(hostile.root) as client:
            for name, args in (
                ("kiwi_read", {"path": "pipe.md"}),
                ("kiwi_append", {"path": "pipe.md", "content": "x"}),
                ("kiwi_write", {"path": "pipe.md", "content": "x"}),
                ("kiwi_memory_merge", {"path": "pipe.md", "entries": [{"id": "fine"}]}),
            ):
                assert "not a regular file" in await tool_fails(client, name, args)
            with pytest.raises(MCPError, match="not a regular file"):
                await client.read_resource("kiwi://file/pipe.md")
        result = CliRunner().invoke(
            cli, ["memory", "merge", "pipe.md", "--root", str(hostile.root), "--episode", "x"]
        )
        assert result.exit_code == 2, result.output
        assert "not a regular file" in result.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


# ---------------------------------------------------------------------------------------------
# YAML alias bombs


@pytest.mark.anyio
async def test_rest_refuses_to_write_a_yaml_bomb(hostile: Hostile) -> None:
    bomb = billion_laughs().encode()
    async with rest(hostile.root) as client:
        put = client.put(f"{API}/file", params={"path": "new-bomb.md"}, content=bomb)
        refused(await put, "alias")
        with_provenance = client.put(
            f"{API}/file",
            params={"path": "new-bomb.md"},
            content=bomb,
            headers={"X-Provenance": "run:r1"},
        )
        refused(await with_provenance, "alias")
        bulk = {
            "files": [{"path": "ok.md", "content": "x"}, {"path": "b.md", "content": bomb.decode()}]
        }
        refused(await client.post(f"{API}/bulk", json=bulk), "alias")
        # appending to a file whose frontmatter is a bomb, and merging into it
        refused(await client.post(f"{API}/file/append", params={"path": BOMB_REL}, content=b"x"))
        merge = {"path": BOMB_REL, "entries": [{"id": "fine"}]}
        refused(await client.post(f"{API}/memory/merge", json=merge), "alias")
        # the file itself can still be read (as bytes) and its frontmatter reads as empty
        got = await client.get(f"{API}/file", params={"path": BOMB_REL})
        assert got.status_code == 200 and got.content == bomb
        meta = await client.get(f"{API}/file", params={"path": BOMB_REL, "metadata_only": "1"})
        assert meta.status_code == 200 and meta.json() == {}
    assert not (hostile.root / "new-bomb.md").exists()
    assert not (hostile.root / "ok.md").exists()
    assert (hostile.root / BOMB_REL).read_bytes() == bomb


def test_memory_merge_cli_refuses_a_bomb_page(hostile: Hostile) -> None:
    result = CliRunner().invoke(
        cli, ["memory", "merge", BOMB_REL, "--root", str(hostile.root), "--episode", "fine"]
    )
    assert result.exit_code == 1, result.output
    assert "alias" in result.output


# ---------------------------------------------------------------------------------------------
# the report, the index and search over the whole root


def expected_warnings(report: dict[str, Any]) -> None:
    warnings = "\n".join(report["warnings"])
    for path, why in LINK_WARNINGS.items():
        assert f"cannot read {path}: {why}" in warnings, (path, warnings)
    assert "cannot read pipe.md: not a regular file" in warnings
    assert "cannot read episodes/pipe.md: not a regular file" in warnings
    assert f"invalid frontmatter in {BOMB_REL}:" in warnings
    assert "alias" in warnings.split(f"invalid frontmatter in {BOMB_REL}:")[1].split("\n")[0]
    assert "invalid frontmatter in bad-utf8.md:" in warnings
    paths = [f["path"] for f in report["episodic_files"]]
    assert OK_EPISODE in paths
    assert not any("stolen" in json.dumps(f) for f in report["episodic_files"])


@pytest.mark.anyio
async def test_report_search_and_reindex_on_every_interface(hostile: Hostile) -> None:
    with fifo_valve(hostile.root / "pipe.md", hostile.root / "episodes" / "pipe.md"):
        async with rest(hostile.root) as client:
            report = (await client.get(f"{API}/memory/report")).json()
            expected_warnings(report)
            big = await client.get(f"{API}/search", params={"q": "zebrafinale"})
            assert [r["path"] for r in big.json()["results"]] == ["big.md"]
            whole = await client.get(f"{API}/file", params={"path": "big.md"})
            assert len(whole.content) == (hostile.root / "big.md").stat().st_size > BIG_BYTES - 32
            bad = await client.get(f"{API}/file", params={"path": "bad-utf8.md"})
            assert bad.content == (hostile.root / "bad-utf8.md").read_bytes()
        with Knowledge.open(hostile.root) as kb:
            scanned = kb.memory_report(use_index=False).to_json()
            assert kb.reindex() >= 5
            indexed = kb.memory_report().to_json()
        expected_warnings(scanned)
        assert indexed == scanned
        runner = CliRunner()
        cli_report = runner.invoke(cli, ["memory", "report", "--json", "--root", str(hostile.root)])
        assert cli_report.exit_code == 0, cli_report.output
        expected_warnings(json.loads(cli_report.stdout))
        reindexed = runner.invoke(cli, ["reindex", "--root", str(hostile.root)])
        assert reindexed.exit_code == 0, reindexed.output
        for word in SECRET_WORDS:
            found = runner.invoke(cli, ["search", word, "--root", str(hostile.root)])
            assert found.exit_code == 0 and "No results found." in found.stdout, found.output
        async with mcp_session(hostile.root) as client:
            text = await tool_ok(client, "kiwi_memory_report", {"format": "json"})
            expected_warnings(json.loads(text))
    hostile.untouched()


# ---------------------------------------------------------------------------------------------
# git runs no program the repository names


@pytest.mark.anyio
async def test_history_routes_run_no_program_the_repository_names(hostile: Hostile) -> None:
    async with rest(hostile.root) as client:
        for text in (b"# one\n", b"# two\n"):
            put = await client.put(f"{API}/file", params={"path": "history.md"}, content=text)
            assert put.status_code == 200, put.text
        versions = (await client.get(f"{API}/versions", params={"path": "history.md"})).json()
        first, last = versions["versions"][-1]["hash"], versions["versions"][0]["hash"]
        diff = await client.get(
            f"{API}/diff", params={"path": "history.md", "from": first, "to": last}
        )
        assert diff.status_code == 200
        assert "-# one\n+# two\n" in diff.text and "hijacked" not in diff.text
        old = await client.get(f"{API}/version", params={"path": "history.md", "version": first})
        assert old.content == b"# one\n"
        changes = (await client.get(f"{API}/changes")).json()["changes"]
        assert changes[0]["path"] == "history.md"
        deleted = await client.delete(f"{API}/file", params={"path": "history.md"})
        assert deleted.status_code == 200
    hostile.untouched()


# ---------------------------------------------------------------------------------------------
# 2,000 files at once


@pytest.mark.anyio
async def test_two_thousand_files_added_at_once_are_seen_everywhere(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    Knowledge.init(root)
    with Knowledge.open(root) as kb:
        before = kb.memory_report().episodic_count  # the index now exists
    folder = root / "episodes" / "2024-02-02"
    folder.mkdir(parents=True)
    for n in range(MANY):
        (folder / f"e{n:04}.md").write_text(
            f"---\nmemory_kind: episodic\nepisode_id: e{n}\n---\nword{n}x\n"
        )
    async with rest(root) as client:
        report = (await client.get(f"{API}/memory/report", params={"limit": "1"})).json()
        assert report["episodic_count"] == before + MANY
        hits = (await client.get(f"{API}/search", params={"q": f"word{MANY - 1}x"})).json()
        assert [h["path"] for h in hits["results"]] == [f"episodes/2024-02-02/e{MANY - 1:04}.md"]
        assert (await client.get("/health")).status_code == 200
    result = CliRunner().invoke(cli, ["memory", "report", "--json", "--root", str(root)])
    assert json.loads(result.stdout)["episodic_count"] == before + MANY
    with Knowledge.open(root) as kb:
        assert kb.reindex() >= MANY


# ---------------------------------------------------------------------------------------------
# a real server: a FIFO does not stop SIGTERM from stopping it


def test_real_server_answers_around_a_fifo_and_stops_on_sigterm(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    Knowledge.init(root)
    os.mkfifo(root / "pipe.md")
    log = tmp_path / "serve.log"
    with fifo_valve(root / "pipe.md"):
        proc, base = launch(["serve", "--root", str(root)], log)
    try:
        with fifo_valve(root / "pipe.md"), httpx.Client(base_url=base, timeout=60) as client:
            wait_ready(base, proc, log, "/health")
            refused(client.get(f"{API}/file", params={"path": "pipe.md"}), "not a regular file")
            refused(client.post(f"{API}/file/append", params={"path": "pipe.md"}, content=b"x"))
            ok = client.put(f"{API}/file", params={"path": "after.md"}, content=b"# after\n")
            assert ok.status_code == 200, ok.text
        proc.terminate()
        assert proc.wait(timeout=60) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert stat.S_ISFIFO(os.lstat(root / "pipe.md").st_mode)


# ---------------------------------------------------------------------------------------------
# names that are not UTF-8: one rule on every interface (each such byte shown as \xNN, and the
# name shown is the name to read it by)

LATIN1_CONTENT = b"---\nmemory_kind: episodic\nepisode_id: cafe\nstatus: odd\n---\nquokkaname one\n"
SHOWN_FILE = "caf\\xe9.md"  # the file b"caf\xe9.md", as shown
SHOWN_INNER = "f\\xe9/in.md"  # b"f\xe9/in.md"


def latin1_root(base: Path) -> Path:
    """A root holding ``caf<E9>.md`` (an episode) and ``f<E9>/in.md``: Latin-1 names."""
    root = base / "kb"
    Knowledge.init(root)
    raw = os.fsencode(root)
    os.mkdir(raw + b"/f\xe9")
    for name, content in ((b"/caf\xe9.md", LATIN1_CONTENT), (b"/f\xe9/in.md", b"quokkaname two\n")):
        fd = os.open(raw + name, os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, content)
        os.close(fd)
    return root


@pytest.fixture
def latin1(tmp_path: Path) -> Path:
    return latin1_root(tmp_path)


def shows_both(text: str) -> None:
    assert SHOWN_FILE in text and "\ufffd" not in text, text[:500]


@asynccontextmanager
async def stdio_mcp(root: Path, errlog: Path) -> AsyncIterator[ClientSession]:
    """The installed ``kiwifs mcp`` over stdio, as an MCP host runs it."""
    passed = ("GIT_", "HOME", "PATH", "PYTHONPATH")  # the isolated git config; the same kiwifs
    env = {k: v for k, v in os.environ.items() if k.startswith(passed)}
    params = StdioServerParameters(command=KIWIFS, args=["mcp", "--root", str(root)], env=env)
    with errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


@pytest.mark.anyio
async def test_stdio_mcp_shows_and_reads_a_name_that_is_not_utf8(
    latin1: Path, tmp_path: Path
) -> None:
    """Each of these calls used to kill the stdio server (its writer cannot encode a lone
    surrogate) and leave the client waiting: the bound turns a hang into a failure."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("kiwi_tree", {}),
        ("kiwi_search", {"query": "quokkaname"}),
        ("kiwi_search_hybrid", {"query": "quokkaname"}),
        ("kiwi_query_meta", {"filters": ["$.status=odd"]}),
        ("kiwi_memory_report", {}),
        ("kiwi_memory_report", {"format": "json"}),
        ("kiwi_brief", {"query": "quokkaname"}),
    ]
    with anyio.fail_after(60):
        async with stdio_mcp(latin1, tmp_path / "stderr.log") as session:
            for name, args in calls:
                result = await session.call_tool(name, args)
                assert not result.is_error, (name, text_of(result))
                shows_both(text_of(result))
            tree = await session.read_resource("kiwi://tree/")
            block = tree.contents[0]
            assert isinstance(block, TextResourceContents)
            assert SHOWN_INNER.split("/")[0] + "/" in block.text
            shows_both(block.text)
            read = await session.call_tool("kiwi_read", {"path": SHOWN_FILE})
            assert not read.is_error and "quokkaname one" in text_of(read)
            inner = await session.call_tool("kiwi_read", {"path": SHOWN_INNER})
            assert not inner.is_error and "quokkaname two" in text_of(inner)
            missing = await session.call_tool("kiwi_read", {"path": "caf\\xe8.md"})
            assert missing.is_error and "caf\\xe8.md" in text_of(missing)
            assert (await session.call_tool("kiwi_tree", {})).content  # still alive


@pytest.mark.anyio
async def test_rest_shows_and_reads_a_name_that_is_not_utf8(latin1: Path) -> None:
    async with rest(latin1) as client:
        tree = await client.get(f"{API}/tree")
        names = [c["name"] for c in tree.json()["children"]]
        assert SHOWN_FILE in names and "f\\xe9" in names
        found = (await client.get(f"{API}/search", params={"q": "quokkaname"})).json()
        assert {r["path"] for r in found["results"]} == {SHOWN_FILE, SHOWN_INNER}
        meta = (await client.get(f"{API}/meta", params={"where": "$.status=odd"})).json()
        assert [r["path"] for r in meta["results"]] == [SHOWN_FILE]
        report = (await client.get(f"{API}/memory/report")).json()
        assert SHOWN_FILE in [f["path"] for f in report["episodic_files"]]
        got = await client.get(f"{API}/file", params={"path": SHOWN_FILE})
        assert got.status_code == 200 and got.content == LATIN1_CONTENT
        inner = await client.get(f"{API}/tree", params={"path": "f\\xe9"})
        assert [c["path"] for c in inner.json()["children"]] == [SHOWN_INNER]
        missing = await client.get(f"{API}/file", params={"path": "caf\\xe8.md"})
        assert missing.status_code == 404 and "caf\\xe8.md" in missing.json()["error"]
        # read, never written: the journal, git, the index and the events hold valid Unicode
        for write in (
            client.put(f"{API}/file", params={"path": SHOWN_FILE}, content=b"x"),
            client.put(f"{API}/file", params={"path": "new\\xff.md"}, content=b"x"),
            client.post(f"{API}/file/append", params={"path": SHOWN_FILE}, content=b"x"),
            client.delete(f"{API}/file", params={"path": SHOWN_INNER}),
            client.post(f"{API}/rename", json={"from": SHOWN_FILE, "to": "plain.md"}),
        ):
            refused(await write, "not UTF-8", "can be read but not written")
    assert (latin1 / os.fsdecode(b"caf\xe9.md")).read_bytes() == LATIN1_CONTENT
    assert not (latin1 / "plain.md").exists()


@pytest.mark.anyio
async def test_web_pages_show_a_name_that_is_not_utf8(latin1: Path) -> None:
    """``/browse`` of a folder holding such a name was a plain-text 500."""
    async with rest(latin1) as client:
        for url in ("/browse", "/browse/", "/search?q=quokkaname"):
            page = await client.get(url)
            assert page.status_code == 200, (url, page.text[:300])
            assert "text/html" in page.headers["content-type"]
            assert "caf\\xe9.md" in page.text, url
        assert 'href="/file/caf%5Cxe9.md"' in (await client.get("/browse")).text
        folder = await client.get("/browse/f%5Cxe9")  # the link the root's page gives
        assert folder.status_code == 200 and 'href="/file/f%5Cxe9/in.md"' in folder.text
        page = await client.get("/file/caf%5Cxe9.md")
        assert page.status_code == 200 and "quokkaname one" in page.text
        raw = await client.get("/raw/f%5Cxe9/in.md")
        assert raw.content == b"quokkaname two\n"
        for url in ("/browse/%E9", "/browse/f%E9", "/file/caf%E9.md"):  # not this rule's names
            missing = await client.get(url)
            assert missing.status_code == 404, (url, missing.text[:300])
            assert "text/html" in missing.headers["content-type"]


def test_cli_shows_a_name_that_is_not_utf8(latin1: Path) -> None:
    runner = CliRunner()
    report = runner.invoke(cli, ["memory", "report", "--root", str(latin1)])
    assert report.exit_code == 0, report.output
    shows_both(report.stdout)
    as_json = runner.invoke(cli, ["memory", "report", "--json", "--root", str(latin1)])
    assert SHOWN_FILE in [f["path"] for f in json.loads(as_json.stdout)["episodic_files"]]
    found = runner.invoke(cli, ["search", "quokkaname", "--root", str(latin1)])
    assert found.exit_code == 0, found.output
    shows_both(found.stdout)
    assert SHOWN_INNER in found.stdout
    hits = runner.invoke(cli, ["search", "quokkaname", "--json", "--root", str(latin1)])
    assert {r["path"] for r in json.loads(hits.stdout)["results"]} == {SHOWN_FILE, SHOWN_INNER}
