"""A replica that follows a primary over git, with real ``kiwifs serve`` processes on loopback:
it clones an empty root, converges, serves reads, forwards writes (read at once on the replica)
and holds reads for ``X-Kiwi-Min-Commit``."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

import realserver
from asgiclient import serve_in_process
from kiwifs.knowledge import Knowledge
from kiwifs.rest.app import create_app
from kiwifs.tuning import Tuning
from mcpsession import fails, ok

API = "/api/kiwi"
SHA = "0" * 40


def head(root: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, check=True
    )
    return done.stdout.decode().strip()


def files(root: Path) -> dict[str, bytes]:
    done = subprocess.run(
        ["git", "-C", str(root), "ls-tree", "-r", "--name-only", "HEAD"],
        capture_output=True,
        check=True,
    )
    return {rel: (root / rel).read_bytes() for rel in done.stdout.decode().splitlines()}


def applied(base: str, commit: str) -> None:
    """Wait (bounded) until the node at ``base`` reports ``commit`` applied."""
    deadline = time.monotonic() + 30
    status: dict[str, object] = {}
    while time.monotonic() < deadline:
        status = httpx.get(base + "/api/replication").json()
        if status["applied_commit"] == commit:
            return
        time.sleep(0.05)
    raise AssertionError(f"never applied {commit}: {status}")


def test_a_replica_clones_follows_and_forwards(knowledge_root: Path, tmp_path: Path) -> None:
    """With ``acks = 1`` on the primary: every write below is acknowledged once the replica
    holds it."""
    with Knowledge.open(knowledge_root) as kb:
        for i in range(20):
            kb.write(f"notes/n{i:02}.md", f"# Note {i}\n\nthe okapi number {i}\n")
    config = knowledge_root / ".kiwi" / "config.toml"
    config.write_text(config.read_text() + "\n[replication]\nacks = 1\n")
    commit_all(knowledge_root, "acks = 1")
    replica = tmp_path / "replica"
    with (
        realserver.serving(knowledge_root, tmp_path / "primary.log") as (primary, _),
        realserver.serving(replica, tmp_path / "replica.log", ["--replica-of", primary]) as (
            follower,
            _,
        ),
    ):
        assert httpx.get(primary + "/api/replication").json()["role"] == "primary"
        status = httpx.get(follower + "/api/replication").json()
        assert status["role"] == "replica" and status["primary"] == primary
        applied(follower, head(knowledge_root))
        assert files(replica) == files(knowledge_root)
        found = httpx.get(follower + API + "/search", params={"q": "okapi"}).json()
        assert len(found["results"]) == 20
        report = API + "/memory/report"
        assert httpx.get(follower + report).json() == httpx.get(primary + report).json()

        # a write on the primary, acknowledged once the replica holds it
        wrote = httpx.put(primary + API + "/file", params={"path": "p.md"}, content=b"# P\n")
        assert wrote.status_code == 200, wrote.text
        commit = wrote.headers["X-Kiwi-Commit"]
        assert commit == head(knowledge_root)
        (heard,) = httpx.get(primary + "/api/replication").json()["replicas"]
        assert heard["commit"] == commit and str(replica) in heard["replica"]
        read = httpx.get(
            follower + API + "/file", params={"path": "p.md"}, headers={"X-Kiwi-Min-Commit": commit}
        )
        assert read.status_code == 200 and read.text == "# P\n"

        # a write sent to the replica: made by the primary, read on the replica at once
        sent = httpx.put(
            follower + API + "/file",
            params={"path": "r.md"},
            content=b"# R\n",
            headers={"X-Actor": "agent:r"},
        )
        assert sent.status_code == 200, sent.text
        assert sent.headers["X-Kiwi-Commit"] == head(knowledge_root)
        assert (knowledge_root / "r.md").read_bytes() == b"# R\n"
        assert httpx.get(follower + API + "/file", params={"path": "r.md"}).text == "# R\n"
        deleted = httpx.delete(follower + API + "/file", params={"path": "notes/n00.md"})
        assert deleted.status_code == 200
        assert (
            httpx.get(follower + API + "/file", params={"path": "notes/n00.md"}).status_code == 404
        )

        # claims have one authority, whichever node they are asked of
        taken = httpx.post(follower + API + "/claim", json={"path": "notes/n01.md", "holder": "a"})
        assert taken.status_code in (200, 201), taken.text
        again = httpx.post(primary + API + "/claim", json={"path": "notes/n01.md", "holder": "b"})
        assert again.status_code == 409, again.text
        listed = httpx.get(follower + API + "/claims").json()
        assert [c["path"] for c in listed["claims"]] == ["notes/n01.md"]

        # a commit the node does not have: 503 with Retry-After, never a stale answer (asked of
        # the primary, which knows at once; a replica waits 5 s for it first)
        late = httpx.get(
            primary + API + "/file", params={"path": "p.md"}, headers={"X-Kiwi-Min-Commit": SHA}
        )
        assert late.status_code == 503 and late.headers["Retry-After"] == "1"
        assert files(replica) == files(knowledge_root)


def test_with_acks_1_a_write_no_replica_holds_is_not_acknowledged(knowledge_root: Path) -> None:
    config = knowledge_root / ".kiwi" / "config.toml"
    config.write_text(config.read_text() + "\n[replication]\nacks = 1\n")
    with Knowledge.open(knowledge_root, tuning=Tuning(ack_wait=0.2)) as kb:
        with serve_in_process(create_app(kb, web=False)) as client:
            sent = client.put(API + "/file", params={"path": "a.md"}, content=b"# A\n")
            assert sent.status_code == 503 and sent.headers["Retry-After"] == "1"
            assert "no replica holds it" in sent.json()["error"]
            assert sent.headers["X-Kiwi-Commit"] == head(knowledge_root)  # written, named
            assert (knowledge_root / "a.md").read_bytes() == b"# A\n"
            held = {"replica": "r1", "commit": head(knowledge_root)}
            assert client.post("/api/replication/ack", json=held).status_code == 200
            again = client.put(API + "/file", params={"path": "a.md"}, content=b"# A\n")
            assert again.status_code == 200  # nothing new to commit: held already
            bad = client.post("/api/replication/ack", json={"replica": "r1", "commit": "x"})
            assert bad.status_code == 400


def test_failover_loses_no_acknowledged_write_and_the_old_primary_rejoins(
    knowledge_root: Path, tmp_path: Path
) -> None:
    """``acks = 1``: the primary is killed (``kill -9``) while a client writes; the replica,
    promoted, holds every write that was answered 2xx; a replica restarted meanwhile catches up;
    the old primary comes back as a replica of the new one."""
    config = knowledge_root / ".kiwi" / "config.toml"
    config.write_text(config.read_text() + "\n[replication]\nacks = 1\n")
    commit_all(knowledge_root, "acks = 1")
    replica = tmp_path / "replica"
    acknowledged: list[str] = []
    with realserver.serving(knowledge_root, tmp_path / "primary.log") as (primary, proc):
        with realserver.serving(replica, tmp_path / "replica.log", ["--replica-of", primary]):
            pass  # cloned, then stopped: it follows again when restarted, without the flag
        for i in range(3):  # written while no replica runs: never acknowledged, but written
            with contextlib.suppress(httpx.ReadTimeout):  # the answer would wait for an ack
                httpx.put(
                    primary + API + "/file",
                    params={"path": f"gap/{i}.md"},
                    content=b"x",
                    timeout=0.5,
                )
        assert (knowledge_root / "gap/2.md").exists()
        with realserver.serving(replica, tmp_path / "replica.log") as (follower, _):
            applied(follower, head(knowledge_root))  # caught up with what it missed
            stop = threading.Event()

            def write() -> None:
                i = 0
                with httpx.Client(base_url=primary, timeout=30) as client:
                    while not stop.is_set():
                        path = f"load/{i:04}.md"
                        try:
                            sent = client.put(API + "/file", params={"path": path}, content=path)
                        except httpx.HTTPError:
                            return  # the primary died mid-request: not acknowledged
                        if sent.status_code == 200:
                            acknowledged.append(path)
                        i += 1

            writer = threading.Thread(target=write, daemon=True)
            writer.start()
            while len(acknowledged) < 20:
                time.sleep(0.01)
            proc.kill()  # kill -9, mid-load
            proc.wait()
            stop.set()
            writer.join(30)
            promoted = httpx.post(follower + "/api/replication/promote", json={"url": follower})
            assert promoted.status_code == 200 and promoted.json()["role"] == "primary"
            for path in acknowledged:
                got = httpx.get(follower + API + "/file", params={"path": path})
                assert got.status_code == 200 and got.text == path, path

            # the old primary comes back as a primary, on its old address, by mistake: the
            # promoted node tells it to follow, and it does (what it had kept aside, not lost)
            port = primary.rsplit(":", 1)[1]
            with (tmp_path / "old.log").open("ab") as log:  # the child keeps its own copy
                back = subprocess.Popen(
                    [realserver.KIWIFS, "serve", "--root", str(knowledge_root), "--port", port],
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                )
            try:
                deadline = time.monotonic() + 30
                status: dict[str, object] = {}
                while time.monotonic() < deadline and status.get("role") != "replica":
                    with contextlib.suppress(httpx.TransportError, ValueError):
                        status = httpx.get(primary + "/api/replication").json()
                    time.sleep(0.1)
                assert status.get("primary") == follower, status
                applied(primary, head(replica))
                assert files(knowledge_root) == files(replica)
                fence = httpx.get(follower + "/api/replication").json()
                assert fence["former_primary"] == primary and fence["stepped_down"] is True
                # and it acknowledges the new primary's writes, and forwards its own to it
                new = httpx.put(follower + API + "/file", params={"path": "after.md"}, content=b"a")
                assert new.status_code == 200, new.text
                sent = httpx.put(
                    primary + API + "/file", params={"path": "via-old.md"}, content=b"o"
                )
                assert sent.status_code == 200 and (replica / "via-old.md").read_bytes() == b"o"
                read = httpx.get(
                    primary + API + "/file",
                    params={"path": "after.md"},
                    headers={"X-Kiwi-Min-Commit": new.headers["X-Kiwi-Commit"]},
                )
                assert read.text == "a"
            finally:
                realserver.stop(back)


def commit_all(root: Path, message: str) -> None:
    subprocess.run(
        ["git", "-C", str(root), "commit", "-qam", message],
        check=True,
        env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
        | {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"},
    )


@pytest.mark.anyio
async def test_mcp_on_a_replica_forwards_writes_and_waits_for_min_commit(
    knowledge_root: Path, tmp_path: Path
) -> None:
    """The official MCP client on a replica's ``/mcp``: a writing tool is made by the primary
    and read back on the replica at once; its result names the commit (``_meta``), which
    ``min_commit`` on a read waits for."""
    replica = tmp_path / "replica"
    with (
        realserver.serving(knowledge_root, tmp_path / "primary.log") as (primary, _),
        realserver.serving(replica, tmp_path / "replica.log", ["--replica-of", primary]) as (
            follower,
            _,
        ),
    ):
        async with (
            httpx2.AsyncClient(timeout=30.0) as http,
            streamable_http_client(follower + "/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            wrote = await session.call_tool("kiwi_write", {"path": "m.md", "content": "# M\n"})
            assert not wrote.is_error, wrote
            commit = (wrote.meta or {})["kiwifs/commit"]
            assert commit == head(knowledge_root) and (knowledge_root / "m.md").exists()
            assert "# M" in await ok(session, "kiwi_read", {"path": "m.md"})
            held = await ok(session, "kiwi_read", {"path": "m.md", "min_commit": commit})
            assert "# M" in held
            late = await fails(session, "kiwi_read", {"path": "m.md", "min_commit": "x" * 40})
            assert "not applied on this node yet" in late


def test_a_space_follows_the_primary_s_space_of_its_name(
    knowledge_root: Path, tmp_path: Path
) -> None:
    """Roles are per space: a node whose own root is a primary holds a space that follows
    another server's space of the same name (``POST /api/spaces`` with ``replica_of``)."""
    root = tmp_path / "node"
    Knowledge.init(root)
    with (
        realserver.serving(knowledge_root, tmp_path / "primary.log") as (primary, _),
        realserver.serving(root, tmp_path / "node.log") as (node, _),
    ):
        made = httpx.post(primary + "/api/spaces", json={"name": "alpha"})
        assert made.status_code == 201
        wrote = httpx.put(primary + API + "/alpha/file", params={"path": "a.md"}, content=b"A")
        commit = wrote.headers["X-Kiwi-Commit"]
        follows = httpx.post(
            node + "/api/spaces", json={"name": "alpha", "replica_of": primary}, timeout=60
        )
        assert follows.status_code == 201, follows.text
        read = httpx.get(
            node + API + "/alpha/file",
            params={"path": "a.md"},
            headers={"X-Kiwi-Min-Commit": commit},
        )
        assert read.status_code == 200 and read.text == "A"
        sent = httpx.put(node + API + "/alpha/file", params={"path": "b.md"}, content=b"B")
        assert sent.status_code == 200, sent.text
        alpha = Path(made.json()["root"])
        assert (alpha / "b.md").read_bytes() == b"B"  # made by the primary's space
        assert httpx.get(node + API + "/alpha/file", params={"path": "b.md"}).text == "B"
        own = httpx.put(node + API + "/file", params={"path": "mine.md"}, content=b"M")
        assert own.status_code == 200 and (root / "mine.md").exists()  # the node's own root
        assert not (knowledge_root / "mine.md").exists()


KEYS = """
[auth]
type = "perspace"

[[auth.api_keys]]
key = "k-admin"

[[auth.api_keys]]
key = "k-read"
scope = "read"

[[auth.api_keys]]
key = "k-write"
scope = "write"
actor = "agent:w"
"""


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_forwarding_keeps_each_key_s_scope_and_acks_0_loses_only_the_newest(
    knowledge_root: Path, tmp_path: Path
) -> None:
    """Scoped keys hold through a replica (the primary decides a forwarded write); with
    ``acks = 0`` a primary killed under load loses, on the promoted replica, only writes newer
    than every write it kept: what no replica had fetched yet."""
    config = knowledge_root / ".kiwi" / "config.toml"
    config.write_text(config.read_text().replace('[auth]\ntype = "none"', KEYS.strip()))
    commit_all(knowledge_root, "keys")
    replica = tmp_path / "replica"
    with realserver.serving(knowledge_root, tmp_path / "primary.log") as (primary, proc):
        args = ["--replica-of", primary, "--replica-key", "k-admin"]
        with realserver.serving(replica, tmp_path / "replica.log", args) as (follower, _):
            url = follower + API + "/file"
            assert httpx.put(url, params={"path": "x.md"}, content=b"x").status_code == 401
            refused = httpx.put(
                url, params={"path": "x.md"}, content=b"x", headers=bearer("k-read")
            )
            assert refused.status_code == 403 and not (knowledge_root / "x.md").exists()
            made = httpx.put(url, params={"path": "x.md"}, content=b"x", headers=bearer("k-write"))
            assert made.status_code == 200 and (knowledge_root / "x.md").exists()
            author = subprocess.run(
                ["git", "-C", str(knowledge_root), "log", "-1", "--format=%an"],
                capture_output=True,
                check=True,
            )
            assert author.stdout.decode().strip() == "agent:w"  # the key's actor, at the primary
            read = httpx.get(url, params={"path": "x.md"}, headers=bearer("k-read"))
            assert read.status_code == 200 and read.text == "x"

            acknowledged: list[str] = []
            stop = threading.Event()

            def write() -> None:
                with httpx.Client(base_url=primary, timeout=30, headers=bearer("k-write")) as c:
                    for i in range(100_000):
                        if stop.is_set():
                            return
                        path = f"load/{i:05}.md"
                        try:
                            if c.put(API + "/file", params={"path": path}, content=path).is_success:
                                acknowledged.append(path)
                        except httpx.HTTPError:
                            return

            writer = threading.Thread(target=write, daemon=True)
            writer.start()
            while len(acknowledged) < 50:
                time.sleep(0.01)
            proc.kill()
            proc.wait()
            stop.set()
            writer.join(30)
            promote = httpx.post(follower + "/api/replication/promote", headers=bearer("k-admin"))
            assert promote.status_code == 200
            kept = [
                httpx.get(url, params={"path": p}, headers=bearer("k-read")).status_code == 200
                for p in acknowledged
            ]
            assert kept[0] and kept == sorted(kept, reverse=True), kept  # a prefix, then none
