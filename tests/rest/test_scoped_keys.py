"""Scoped keys enforced over REST (``[auth] type = "perspace"``, :mod:`kiwifs.server.access`):
401 and 403 per scope, isolation between spaces (a key for one space learns nothing of another,
``/api/spaces`` included), prefixes on reads, writes, search, tree and events, the key's actor
as the commit's author, and one real ``kiwifs serve`` reloading its keys on SIGHUP."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import realserver
from asgiclient import AppClient, serve_in_process
from kiwifs.errors import ConfigError
from kiwifs.knowledge import Knowledge
from kiwifs.rest.spaces import create_spaces_app
from kiwifs.server.access import Gate
from kiwifs.server.grants import Scope
from kiwifs.server.spaces import SpaceRegistry
from kiwifs.server.tokens import create_token
from kiwifs.tuning import Tuning

TUNING = Tuning(commit_process=False)
API = "/api/kiwi"
CONFIG = """\
[auth]
type = "perspace"

[[auth.api_keys]]
key = "k-admin"

[[auth.api_keys]]
key = "k-read"
space = "default"
scope = "read"

[[auth.api_keys]]
key = "k-write"
space = "default"
scope = "write"
actor = "agent:writer"

[[auth.api_keys]]
key = "k-team"
space = "default"
scope = "write"
prefix = "team"
actor = "agent:team"

[[auth.api_keys]]
key = "k-alpha"
space = "alpha"
scope = "admin"
"""


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def git_log(root: Path, path: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), "log", "--format=%an", "--", path],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@pytest.fixture
def scoped_root(root: Path) -> Path:
    (root / ".kiwi" / "config.toml").write_text(CONFIG)
    (root / "team").mkdir()
    (root / "team" / "plan.md").write_text("# Plan\n\nthe walrus plan\n")
    (root / "secret.md").write_text("# Secret\n\nthe walrus secret\n")
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-q", "-m", "fixture"], check=True)
    return root


@pytest.fixture
def client(scoped_root: Path) -> Iterator[AppClient]:
    with Knowledge.open(scoped_root, tuning=TUNING) as kb:
        registry = SpaceRegistry(kb, dashboard=False)
        with serve_in_process(create_spaces_app(kb, registry, web=False)) as c:
            made = c.post("/api/spaces", json={"name": "alpha"}, headers=bearer("k-admin"))
            assert made.status_code == 201, made.text
            yield c


def test_no_or_unknown_key_is_401(client: AppClient) -> None:
    for headers in ({}, bearer("nope"), {"Authorization": "k-admin"}):
        for method, url in (("GET", "/tree"), ("PUT", "/file?path=x.md"), ("GET", "/search?q=a")):
            resp = client.request(method, API + url, headers=headers)
            assert resp.status_code == 401, (headers, url)
            assert resp.headers["www-authenticate"] == "Bearer"
        assert client.get("/api/spaces", headers=headers).status_code == 401
        # a space named by path or header: 401 too, not 404, whether it exists or not
        for name in ("alpha", "nowhere"):
            assert client.get(f"{API}/{name}/tree", headers=headers).status_code == 401
    assert client.get("/healthz").status_code == 200  # the probes stay open


def test_scope_per_route(client: AppClient) -> None:
    read, write = bearer("k-read"), bearer("k-write")
    for url in ("/tree", "/file?path=secret.md", "/search?q=walrus", "/memory/report", "/claims"):
        assert client.get(API + url, headers=read).status_code == 200, url
    assert client.get(API + "/brief?q=walrus", headers=read).status_code == 200
    assert client.post(API + "/search/semantic", json={"q": "x"}, headers=read).status_code != 403
    writes = [
        ("PUT", "/file?path=r.md", {"content": b"# r\n"}),
        ("DELETE", "/file?path=secret.md", {}),
        ("POST", "/memory/remember", {"json": {"content": "an episode"}}),
        ("POST", "/memory/forget", {"json": {"path": "secret.md", "reason": "old"}}),
        ("POST", "/memory/merge", {"json": {"path": "secret.md", "entries": [{"id": "e"}]}}),
        ("POST", "/claim", {"json": {"path": "secret.md", "holder": "h"}}),
        ("POST", "/rename", {"json": {"from": "secret.md", "to": "s2.md"}}),
    ]
    for method, url, kwargs in writes:
        resp = client.request(method, API + url, headers=read, **kwargs)  # type: ignore[arg-type]
        assert resp.status_code == 403, (url, resp.text)
        assert "needs write" in resp.json()["error"]
    assert client.put(API + "/file?path=w.md", content=b"# w\n", headers=write).status_code == 200
    for headers in (read, write):  # the spaces' routes are admin's
        assert client.get("/api/spaces", headers=headers).status_code == 403
        assert client.post("/api/spaces", json={"name": "b"}, headers=headers).status_code == 403
    assert client.get("/api/spaces", headers=bearer("k-admin")).status_code == 200


def test_a_key_never_reaches_or_learns_of_another_space(client: AppClient, root: Path) -> None:
    admin, alpha = bearer("k-admin"), bearer("k-alpha")
    put = client.put(
        API + "/alpha/file?path=a.md", content=b"# A\nthe alpha walrus\n", headers=alpha
    )
    assert put.status_code == 200, put.text
    # k-alpha is bound to alpha: the default space and every other name are the same 403
    for name in ("default", "nowhere", "beta"):
        for url in (f"{API}/{name}/tree", f"{API}/{name}/file?path=secret.md"):
            resp = client.get(url, headers=alpha)
            assert resp.status_code == 403, url
            assert resp.json() == {"error": f"this key does not reach space {name}"}
        by_header = client.get(API + "/search?q=walrus", headers={**alpha, "X-Kiwi-Space": name})
        assert by_header.status_code == 403
    assert client.get(API + "/search?q=walrus", headers=alpha).status_code == 403  # default
    # a key bound to default never reads alpha
    read = bearer("k-read")
    assert client.get(f"{API}/alpha/file?path=a.md", headers=read).status_code == 403
    # /api/spaces lists only the reachable ones; the others are 403 whether they exist or not
    listed = client.get("/api/spaces", headers=alpha).json()["spaces"]
    assert [s["name"] for s in listed] == ["alpha"]
    everything = client.get("/api/spaces", headers=admin).json()["spaces"]
    assert [s["name"] for s in everything] == ["default", "alpha"]
    for name in ("default", "nowhere"):
        assert client.get(f"/api/spaces/{name}", headers=alpha).status_code == 403
        assert client.delete(f"/api/spaces/{name}", headers=alpha).status_code == 403
    assert client.post("/api/spaces", json={"name": "beta"}, headers=alpha).status_code == 403
    assert client.get("/api/spaces/alpha", headers=alpha).status_code == 200
    assert client.get("/api/spaces/nowhere", headers=admin).status_code == 404


def test_prefix_confines_reads_writes_and_listings(client: AppClient, scoped_root: Path) -> None:
    team = bearer("k-team")
    assert client.get(API + "/file?path=team/plan.md", headers=team).status_code == 200
    for method, url in (
        ("GET", "/file?path=secret.md"),
        ("GET", "/file?path=team/../secret.md"),
        ("GET", "/file?path=teamx.md"),
        ("PUT", "/file?path=secret.md"),
        ("DELETE", "/file?path=secret.md"),
        ("GET", "/versions?path=secret.md"),
        ("GET", "/tree"),
        ("GET", "/search?q=walrus&path_prefix=other"),
    ):
        resp = client.request(method, API + url, headers=team, content=b"# x\n")
        assert resp.status_code == 403, (method, url, resp.text)
    moved = client.post(
        API + "/rename", json={"from": "team/plan.md", "to": "out.md"}, headers=team
    )
    assert moved.status_code == 403
    bulk = {"files": [{"path": "team/a.md", "content": "a"}, {"path": "b.md", "content": "b"}]}
    assert client.post(API + "/bulk", json=bulk, headers=team).status_code == 403
    assert not (scoped_root / "b.md").exists()
    found = client.get(API + "/search?q=walrus&limit=1", headers=team).json()["results"]
    assert [hit["path"] for hit in found] == ["team/plan.md"]  # filtered before the cut
    tree = client.get(API + "/tree?path=team", headers=team)
    assert tree.status_code == 200 and "plan.md" in tree.text
    wrote = client.put(API + "/file?path=team/new.md", content=b"# New\n", headers=team)
    assert wrote.status_code == 200, wrote.text


def put_drafts(client: AppClient) -> None:
    """3 drafts under ``team/`` and 5 outside it (one ``teamx.md``), each its own commit."""
    for rel in ("team/d1.md", "a/d1.md", "team/d2.md", "a/d2.md", "teamx.md", "team/d3.md"):
        draft = b"---\nstatus: draft\n---\n# " + rel.encode() + b"\n"
        wrote = client.put(f"{API}/file?path={rel}", content=draft, headers=bearer("k-admin"))
        assert wrote.status_code == 200, wrote.text
    for rel in ("z/d1.md", "z/d2.md"):  # the last commits are outside: a cut first would miss
        draft = b"---\nstatus: draft\n---\n# z\n"
        wrote = client.put(f"{API}/file?path={rel}", content=draft, headers=bearer("k-admin"))
        assert wrote.status_code == 200, wrote.text


def test_meta_with_a_prefix_answers_only_under_it(client: AppClient) -> None:
    put_drafts(client)
    url = API + "/meta?where=$.status=draft&limit=3"
    team = client.get(url, headers=bearer("k-team"))
    assert team.status_code == 200, team.text
    body = team.json()
    assert body["count"] == 3  # counted under the prefix, before the page
    assert [hit["path"] for hit in body["results"]] == ["team/d1.md", "team/d2.md", "team/d3.md"]
    asked = client.get(url + "&path=secret.md&path=team/d2.md", headers=bearer("k-team")).json()
    assert [hit["path"] for hit in asked["results"]] == ["team/d2.md"]
    whole = client.get(API + "/meta?where=$.status=draft", headers=bearer("k-read")).json()
    assert whole["count"] == 8  # no prefix on the key: everything, as before


def test_changes_with_a_prefix_answer_only_under_it(client: AppClient) -> None:
    put_drafts(client)
    moved = client.post(
        API + "/rename", json={"from": "a/d1.md", "to": "team/in.md"}, headers=bearer("k-admin")
    )
    assert moved.status_code == 200, moved.text  # names a/d1.md: never shown to team/
    team = client.get(API + "/changes?limit=3", headers=bearer("k-team"))
    assert team.status_code == 200, team.text
    found = team.json()["changes"]
    assert [(c["action"], c["path"]) for c in found] == [
        ("write", "team/d3.md"),
        ("write", "team/d2.md"),
        ("write", "team/d1.md"),
    ]
    assert team.json()["last_seq"] == found[0]["seq"]
    everything = client.get(API + "/changes?limit=500", headers=bearer("k-read")).json()
    paths = [c["path"] for c in everything["changes"]]
    assert paths[:4] == ["team/in.md", "z/d2.md", "z/d1.md", "team/d3.md"]  # as before


def test_the_memory_report_with_a_prefix_answers_only_under_it(client: AppClient) -> None:
    admin = bearer("k-admin")
    episode = "---\nmemory_kind: episodic\nepisode_id: {}\n---\nran\n"
    for n in range(5):  # 5 episodes under episodes/, first in walk order, and 3 under team/
        made = client.post(API + "/memory/remember", json={"content": "x"}, headers=admin)
        assert made.status_code in (200, 201), made.text
        if n < 3:
            put = client.put(
                f"{API}/file?path=team/ep{n}.md", content=episode.format(f"t{n}"), headers=admin
            )
            assert put.status_code == 200, put.text
    page = "---\nmemory_kind: semantic\nmerged-from:\n  - type: episode\n    id: t0\n---\n"
    cited = client.put(API + "/file?path=digest.md", content=page, headers=admin)
    assert cited.status_code == 200  # a page outside the prefix covers team/ep0.md
    team = client.get(API + "/memory/report?limit=3", headers=bearer("k-team"))
    assert team.status_code == 200, team.text
    body = team.json()
    assert [e["path"] for e in body["episodic_files"]] == [f"team/ep{n}.md" for n in range(3)]
    assert [e["path"] for e in body["unmerged"]] == ["team/ep1.md", "team/ep2.md"]
    assert (body["episodic_count"], body["unmerged_count"], body["merged_from_refs"]) == (3, 2, 0)
    assert all("team/" in w for w in body["warnings"])
    whole = client.get(API + "/memory/report", headers=bearer("k-read")).json()
    assert (whole["episodic_count"], whole["unmerged_count"], whole["merged_from_refs"]) == (
        8,
        7,
        1,
    )
    assert list(whole) == list(body)  # the same shape


def test_a_symlink_inside_the_prefix_leading_out_is_refused(
    client: AppClient, scoped_root: Path
) -> None:
    team = bearer("k-team")
    (scoped_root / "team" / "link.md").symlink_to("../secret.md")
    (scoped_root / "team" / "out").symlink_to("..", target_is_directory=True)
    for url in ("/file?path=team/link.md", "/versions?path=team/link.md", "/tree?path=team/out"):
        resp = client.get(API + url, headers=team)
        assert resp.status_code == 403, (url, resp.text)
    wrote = client.put(API + "/file?path=team/link.md", content=b"# x\n", headers=team)
    assert wrote.status_code == 403
    assert b"secret" in (scoped_root / "secret.md").read_bytes()
    into = client.put(API + "/file?path=team/out/new.md", content=b"# x\n", headers=team)
    assert into.status_code == 403
    whole = client.get(API + "/file?path=team/link.md", headers=bearer("k-write"))
    assert whole.status_code == 200  # no prefix: the link is read as before


def test_the_keys_actor_is_the_commit_author(client: AppClient, scoped_root: Path) -> None:
    headers = {**bearer("k-write"), "X-Actor": "agent:impostor"}
    assert (
        client.put(API + "/file?path=by.md", content=b"# by\n", headers=headers).status_code == 200
    )
    author = git_log(scoped_root, "by.md")
    assert author.strip().splitlines()[0] == "agent:writer", author
    open_key = client.put(API + "/file?path=free.md", content=b"# f\n", headers=bearer("k-admin"))
    assert open_key.status_code == 200  # no actor on the key: the request's, as before


def test_perspace_with_a_key_on_the_command_line_refuses(scoped_root: Path) -> None:
    with Knowledge.open(scoped_root, tuning=TUNING) as kb:
        with pytest.raises(ConfigError, match="cannot be used with it"):
            Gate.of(kb.config, kb.root, "flag-key")
        assert Gate.of(kb.config, kb.root).grant("Bearer k-read").scope is Scope.READ


def test_sighup_reloads_the_keys(root: Path, tmp_path: Path) -> None:
    (root / ".kiwi" / "config.toml").write_text('[auth]\ntype = "perspace"\n')
    with realserver.serving(root, tmp_path / "serve.log") as (base, proc):
        made = create_token(root, "default", Scope.READ)
        url = base + API + "/tree"
        assert httpx.get(url, headers=bearer(made.key)).status_code == 401  # not yet
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        status = 0
        while time.monotonic() < deadline:
            status = httpx.get(url, headers=bearer(made.key)).status_code
            if status == 200:
                break
            time.sleep(0.1)
        assert status == 200
        assert httpx.get(url).status_code == 401


def test_mcp_admits_keys_of_its_space_without_a_prefix(scoped_root: Path) -> None:
    from kiwifs.mcp.lazy import lazy_mount_mcp

    with Knowledge.open(scoped_root, tuning=TUNING) as kb:
        registry = SpaceRegistry(kb, dashboard=False)
        app = create_spaces_app(
            kb, registry, web=False, mounts=lambda space_kb: lazy_mount_mcp(space_kb)
        )
        with serve_in_process(app) as c:
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            accept = {"Accept": "application/json, text/event-stream"}
            for key, status in (
                ("nope", 401),
                ("k-team", 403),  # a prefix the tools cannot keep to
                ("k-alpha", 404),  # to its own space, never made here
            ):
                resp = c.post("/mcp/", json=ping, headers={**bearer(key), **accept})
                assert resp.status_code == status, (key, resp.text)
            for key in ("k-admin", "k-read", "k-write"):  # scope and actor: call by call
                ok = c.post("/mcp/", json=ping, headers={**bearer(key), **accept})
                # past the gate (the SDK then checks the test client's host name itself)
                assert ok.status_code not in (401, 403), (key, ok.text)


def test_events_leave_out_what_lies_outside_the_prefix(scoped_root: Path) -> None:
    """A real event stream for a prefixed key: the writes under the prefix come through, the
    ones outside it never do, and a rename out of it shows only as its file leaving."""
    with Knowledge.open(scoped_root, tuning=TUNING) as kb:
        registry = SpaceRegistry(kb, dashboard=False)
        with realserver.in_thread(create_spaces_app(kb, registry, web=False)) as base:
            seen: queue.Queue[dict[str, Any]] = queue.Queue()
            connected = threading.Event()

            def read() -> None:
                with (
                    httpx.Client(base_url=base, timeout=30, headers=bearer("k-team")) as sse,
                    sse.stream("GET", API + "/events") as resp,
                ):
                    for line in resp.iter_lines():
                        if line.startswith(":"):
                            connected.set()
                        elif line.startswith("data: "):
                            data = json.loads(line[len("data: ") :])
                            seen.put(data)
                            if data.get("path") == "team/last.md":
                                return

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            assert connected.wait(30), "no event stream"
            with httpx.Client(base_url=base, timeout=30, headers=bearer("k-admin")) as admin:
                for path in ("outside.md", "team/a.md", "team/b.md"):
                    assert admin.put(API + "/file", params={"path": path}, content=b"x").is_success
                moved = admin.post(API + "/rename", json={"from": "team/b.md", "to": "out.md"})
                assert moved.is_success, moved.text
                assert admin.put(API + "/file?path=team/last.md", content=b"x").is_success
            reader.join(30)
            assert not reader.is_alive()
            paths = [seen.get_nowait() for _ in range(seen.qsize())]
            shown = [(d["op"], d.get("path"), d.get("paths")) for d in paths]
            # the rename out of the prefix shows as its file leaving the prefix, no more
            assert shown == [
                ("write", "team/a.md", None),
                ("write", "team/b.md", None),
                ("delete", "team/b.md", None),
                ("write", "team/last.md", None),
            ], shown


def test_links_under_a_prefix_name_nothing_outside_it(client: AppClient) -> None:
    """Backlinks, broken links and orphans over REST: a key with a prefix sees only the links
    whose both ends lie under it; a link from inside to a file outside shows as broken."""
    admin = bearer("k-admin")
    for path, text in (
        ("secret-links.md", b"[[plan]] from outside\n"),
        ("team/x.md", b"see [[plan]] and [[secret]]\n"),
    ):
        made = client.put(API + "/file", params={"path": path}, content=text, headers=admin)
        assert made.status_code == 200, made.text
    whole = client.get(API + "/backlinks", params={"path": "team/plan.md"}, headers=admin)
    assert [b["path"] for b in whole.json()["backlinks"]] == ["secret-links.md", "team/x.md"]
    team = bearer("k-team")
    mine = client.get(API + "/backlinks", params={"path": "team/plan.md"}, headers=team)
    assert mine.status_code == 200 and [b["path"] for b in mine.json()["backlinks"]] == [
        "team/x.md"
    ]
    outside = client.get(API + "/backlinks", params={"path": "secret.md"}, headers=team)
    assert outside.status_code == 403
    broken = client.get(API + "/links/broken", headers=team).json()
    assert [(b["source"], b["target"]) for b in broken["broken"]] == [("team/x.md", "secret")]
    orphans = client.get(API + "/links/orphans", headers=team).json()["orphans"]
    assert all(path.startswith("team/") for path in orphans) and "team/x.md" in orphans
    peeked = client.get(API + "/peek", params={"path": "team/plan.md"}, headers=team).json()
    assert peeked["links_in"] == ["team/x.md"]
