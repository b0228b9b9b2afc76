"""The queue's REST routes in-process: memory claims, release, merges that honour claims, the
report's claims, check, lineage, and KiwiFS's generic claims; bad input is a 4xx that changes
nothing. (The concurrent case runs against a real server in test_worker.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from asgiclient import AppClient, serve_in_process
from filetree import write_files
from gitrepo import commit_count
from kiwifs.knowledge import Knowledge
from kiwifs.rest.app import create_app
from queuekit import Clock, add_episodes

API = "/api/kiwi"


@pytest.fixture
def queue_root(root: Path) -> Path:
    """The blank root with four episodes (e0-e3) and one todo task."""
    add_episodes(root, 4)
    return write_files(root, {"tasks/a.md": "---\nstatus: todo\n---\nDo A.\n"})


@pytest.fixture
def client(queue_root: Path, clock: Clock) -> Iterator[AppClient]:
    kb = Knowledge.open(queue_root, clock=clock)
    kb.ensure_versioned()
    with serve_in_process(create_app(kb)) as c:
        yield c


def error_of(resp: httpx.Response, status: int) -> str:
    assert resp.status_code == status, (resp.status_code, resp.text)
    body = resp.json()
    assert set(body) == {"error"}
    return str(body["error"])


def claim(client: AppClient, **body: Any) -> httpx.Response:
    return client.post(f"{API}/memory/claim", json=body)


def test_memory_claim_wire_shape(client: AppClient, queue_root: Path) -> None:
    resp = claim(client, worker="w1", limit=2, lease="5m", with_content=True)
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert list(data) == ["worker", "lease_expires", "claimed"]
    assert data["worker"] == "w1" and data["lease_expires"] == "2026-11-30T18:01:59Z"
    assert [list(c) for c in data["claimed"]] == [
        ["path", "episode_id", "etag", "lease_expires", "content"]
    ] * 2
    assert data["claimed"][0]["content"] == (queue_root / "episodes/e0.md").read_text()
    other = claim(client, worker="w2", lease=3600).json()
    assert [c["path"] for c in other["claimed"]] == ["episodes/e2.md", "episodes/e3.md"]
    assert "content" not in other["claimed"][0]
    assert claim(client, worker="w3").json()["claimed"] == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "worker is required"),
        ({"worker": "  "}, "worker is required"),
        ({"worker": "w", "limit": -1}, "limit must be between 0 and 1000"),
        ({"worker": "w", "limit": "5"}, "limit must be a whole number"),
        ({"worker": "w", "lease": "30s"}, "lease must be between 1m and 24h"),
        ({"worker": "w", "lease": 86401}, "lease must be between 1m and 24h"),
        ({"worker": "w", "lease": True}, "lease must be a duration"),
        ({"worker": "w", "with_content": "yes"}, "with_content must be true or false"),
        ({"worker": "w", "episodes_prefix": "../up"}, ".."),
    ],
)
def test_bad_memory_claims_are_400(client: AppClient, body: dict[str, Any], message: str) -> None:
    assert message in error_of(claim(client, **body), 400)
    assert client.get(f"{API}/claims").json() == {"claims": []}


def test_release(client: AppClient) -> None:
    claim(client, worker="w1", limit=2)
    claim(client, worker="w2", limit=1)
    release = f"{API}/memory/release"
    resp = client.post(release, json={"worker": "w1", "paths": ["episodes/e1.md"]})
    assert resp.json() == {"worker": "w1", "released": ["episodes/e1.md"]}
    conflict = client.post(release, json={"worker": "w1", "paths": ["episodes/e2.md"]})
    assert "claimed by w2, not w1" in error_of(conflict, 409)
    gone = client.post(release, json={"worker": "w1", "paths": ["episodes/e3.md"]})
    assert "no live claim" in error_of(gone, 404)
    outside = client.post(release, json={"worker": "w1", "paths": ["../x.md"]})
    assert error_of(outside, 400)
    assert client.post(release, json={"worker": "w1"}).json()["released"] == ["episodes/e0.md"]
    assert "holds no live claims" in error_of(client.post(release, json={"worker": "w1"}), 404)
    assert "worker is required" in error_of(client.post(release, json={}), 400)


def test_merge_honours_claims(client: AppClient, queue_root: Path, clock: Clock) -> None:
    claim(client, worker="w1", limit=1, lease="1m")
    merge = f"{API}/memory/merge"
    body = {"path": "concepts/p.md", "entries": [{"id": "e0"}]}
    before = commit_count(queue_root)
    assert "claimed by w1" in error_of(client.post(merge, json={**body, "worker": "w2"}), 409)
    assert "claimed by w1" in error_of(client.post(merge, json=body), 409)
    assert commit_count(queue_root) == before and not (queue_root / "concepts/p.md").exists()
    clock.now += 120
    expired = client.post(merge, json={**body, "worker": "w1"})
    assert "expired" in error_of(expired, 409)
    claim(client, worker="w1", limit=1)
    done = client.post(merge, json={**body, "worker": "w1"})
    assert done.status_code == 200 and done.json()["created"] is True
    assert client.get(f"{API}/claims").json() == {"claims": []}
    report = client.get(f"{API}/memory/report").json()
    assert report["unmerged_count"] == 3 and report["claimed_count"] == 0


def test_report_shows_claims(client: AppClient) -> None:
    claim(client, worker="w1", limit=1)
    report = client.get(f"{API}/memory/report", params={"limit": 2}).json()
    assert list(report)[-1] == "claimed_count" and report["claimed_count"] == 1
    assert report["unmerged"][0]["claimed_by"] == "w1"
    assert report["unmerged"][0]["lease_expires"] == "2026-11-30T18:06:59Z"
    assert "claimed_by" not in report["unmerged"][1]


def test_generic_claims(client: AppClient, queue_root: Path) -> None:
    made = client.post(
        f"{API}/claim",
        json={"path": "tasks/a.md", "lease_duration": "30m"},
        headers={"X-Actor": "alice"},
    )
    assert made.status_code == 200, made.text
    assert made.json() == {
        "path": "tasks/a.md",
        "holder": "alice",
        "claimed_at": "2026-11-30T17:56:59Z",
        "lease_expires": "2026-11-30T18:26:59Z",
    }
    assert "claimed-by: alice" in (queue_root / "tasks/a.md").read_text()
    taken = client.post(f"{API}/claim", json={"path": "tasks/a.md", "holder": "bob"})
    assert "claimed by alice" in error_of(taken, 409)
    claim(client, worker="w1", limit=1)
    listed = client.get(f"{API}/claims").json()["claims"]
    assert [(c["path"], c["holder"]) for c in listed] == [
        ("episodes/e0.md", "w1"),
        ("tasks/a.md", "alice"),
    ]
    refused = client.delete(f"{API}/claim", params={"path": "tasks/a.md", "holder": "bob"})
    assert "claimed by alice, not bob" in error_of(refused, 409)
    released = client.delete(
        f"{API}/claim", params={"path": "tasks/a.md"}, headers={"X-Actor": "alice"}
    )
    assert released.json() == {"released": "tasks/a.md", "holder": "alice"}
    assert (queue_root / "tasks/a.md").read_text() == "---\nstatus: todo\n---\nDo A.\n"
    again = client.delete(f"{API}/claim", params={"path": "tasks/a.md", "holder": "alice"})
    assert "no claim on tasks/a.md by alice" in error_of(again, 404)


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"path": "../outside.md", "holder": "a"}, 400, "'..'"),
        ({"path": "tasks/missing.md", "holder": "a"}, 404, "file not found"),
        ({"path": "tasks/a.md", "holder": "a", "lease_duration": "59s"}, 400, "between 1m and 24h"),
        ({"path": "tasks/a.md", "holder": "a", "lease_duration": "25h"}, 400, "between 1m and 24h"),
        ({"path": "tasks/a.md", "holder": "a", "lease_duration": "1 hour"}, 400, "duration"),
        ({"holder": "a"}, 400, "path is required"),
    ],
)
def test_bad_generic_claims_change_nothing(
    client: AppClient, queue_root: Path, body: dict[str, Any], status: int, message: str
) -> None:
    before = (queue_root / "tasks/a.md").read_bytes(), commit_count(queue_root)
    assert message in error_of(client.post(f"{API}/claim", json=body), status)
    assert ((queue_root / "tasks/a.md").read_bytes(), commit_count(queue_root)) == before


def test_check_and_lineage(client: AppClient) -> None:
    body = {"path": "concepts/p.md", "entries": [{"id": "e0"}, {"id": "nope"}]}
    assert client.post(f"{API}/memory/merge", json=body).status_code == 200
    check = client.get(f"{API}/memory/check").json()
    assert check["unmerged_count"] == 3 and check["problems"] == 1
    (dangling,) = check["dangling"]
    assert (dangling["page"], dangling["why"]) == ("concepts/p.md", "no episode has id 'nope'")
    assert dangling["entry"]["id"] == "nope" and dangling["entry"]["actor"] == "anonymous"
    by_id = client.get(f"{API}/memory/lineage", params={"episode_id": "e0"}).json()
    by_path = client.get(f"{API}/memory/lineage", params={"path": "episodes/e0.md"}).json()
    assert by_id == by_path and by_id["merged_by"][0]["page"] == "concepts/p.md"
    page = client.get(f"{API}/memory/lineage", params={"path": "concepts/p.md"}).json()
    assert [e["targets"] for e in page["merged_from"]] == [["episodes/e0.md"], []]
    for params, status in (
        ({}, 400),
        ({"path": "a.md", "episode_id": "e0"}, 400),
        ({"path": "missing.md"}, 404),
        ({"episode_id": "missing"}, 404),
        ({"path": "../x.md"}, 400),
    ):
        assert error_of(client.get(f"{API}/memory/lineage", params=params), status)
    assert error_of(client.get(f"{API}/memory/check", params={"episodes_prefix": ".."}), 400)


def test_a_late_merge_is_refused_force_merges_and_warnings_come_back(
    client: AppClient, queue_root: Path, clock: Clock
) -> None:
    merge = f"{API}/memory/merge"
    claim(client, worker="A", limit=1, lease="1m")
    clock.now += 62
    claim(client, worker="B", limit=1)
    body = {"path": "concepts/b.md", "entries": [{"id": "e0"}], "worker": "B"}
    assert client.post(merge, json=body).json()["warnings"] == []
    late = {"path": "concepts/a.md", "entries": [{"id": "e0"}], "worker": "A"}
    before = commit_count(queue_root)
    assert "already merged into concepts/b.md" in error_of(client.post(merge, json=late), 409)
    assert commit_count(queue_root) == before
    assert client.get(f"{API}/memory/check").json()["double_merges"] == []
    assert "force must be" in error_of(client.post(merge, json={**late, "force": "yes"}), 400)
    forced = client.post(merge, json={**late, "force": True})
    assert forced.status_code == 200, forced.text
    unknown = client.post(merge, json={"path": "concepts/c.md", "entries": [{"id": "nope"}]})
    assert unknown.status_code == 200 and unknown.json()["warnings"] == [
        "episode nope cites nothing yet (no episode has id 'nope'); memory check lists it as"
        " dangling until the episode exists"
    ]


def test_claims_hold_their_paths_over_rest(client: AppClient, queue_root: Path) -> None:
    claim(client, worker="w1", limit=1)
    generic = client.delete(f"{API}/claim", params={"path": "episodes/e0.md", "holder": "w1"})
    assert "held by a memory claim of w1" in error_of(generic, 400)
    moved = client.post(
        f"{API}/rename",
        json={"from": "episodes/e0.md", "to": "episodes/x.md"},
        headers={"X-Actor": "bob"},
    )
    assert "only w1 may rename it" in error_of(moved, 409)
    gone = client.delete(f"{API}/file", params={"path": "episodes/e0.md"})
    assert "only w1 may delete it" in error_of(gone, 409)
    client.post(f"{API}/claim", json={"path": "tasks/a.md"}, headers={"X-Actor": "alice"})
    before = (queue_root / "tasks/a.md").read_bytes()
    put = client.put(
        f"{API}/file", params={"path": "tasks/a.md"}, content="mine", headers={"X-Actor": "bob"}
    )
    assert "tasks/a.md is claimed by alice until" in error_of(put, 409)
    assert (queue_root / "tasks/a.md").read_bytes() == before
    listed = client.get(f"{API}/claims").json()["claims"]
    assert [(c["path"], c["holder"]) for c in listed] == [
        ("episodes/e0.md", "w1"),
        ("tasks/a.md", "alice"),
    ]
