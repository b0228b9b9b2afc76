"""The consolidation queue against one real ``kiwifs serve`` (uvicorn on 127.0.0.1): many threads
claiming at once never get the same episode; the reference worker drains the queue with the tags
rule and with a user's command; ``kiwifs memory worker`` stops cleanly on SIGTERM, releasing
what it holds. Each test works under its own episodes prefix of the one root.

The plan parser and the built-in rule are pure and are tested without a server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gitrepo import git
from kiwifs.errors import Conflict, ConsolidationFailed, NotFound, UsageError
from kiwifs.knowledge import Knowledge
from kiwifs.worker.client import KiwiClient
from kiwifs.worker.loop import Worker
from kiwifs.worker.steps import CommandStep, Episode, PagePlan, TagRule, parse_plan
from realserver import KIWIFS, serving
from waiting import wait_for

API = "/api/kiwi"
PREFIXES = {"race": 60, "tags": 24, "command": 6, "failing": 3, "sigterm": 4, "renew": 2}


@dataclass
class Server:
    root: Path
    url: str
    proc: subprocess.Popen[bytes]


def episode_text(prefix: str, n: int) -> str:
    tag = ("alpha", "beta", "gamma")[n % 3]
    return f"---\nepisode_id: {prefix}-{n}\ntags: [{tag}]\n---\n# Observation {n} of {prefix}\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, isolated_git: Path) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("queue") / "kb"
    Knowledge.init(root, "blank")
    for prefix, count in PREFIXES.items():
        (root / prefix).mkdir()
        for n in range(count):
            (root / prefix / f"{n:03d}.md").write_text(episode_text(prefix, n))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "episodes")
    with serving(root, probe="/health") as (url, proc):
        yield Server(root, url, proc)


def check(server: Server, prefix: str) -> dict[str, object]:
    resp = httpx.get(f"{server.url}{API}/memory/check", params={"episodes_prefix": prefix})
    assert resp.status_code == 200, resp.text
    data: dict[str, object] = resp.json()
    return data


def claims_of(server: Server, prefix: str) -> list[dict[str, str]]:
    claims = httpx.get(f"{server.url}{API}/claims").json()["claims"]
    return [c for c in claims if c["path"].startswith(prefix + "/")]


# -- the concurrent case -------------------------------------------------------------------------


def test_threads_claiming_at_once_never_get_the_same_episode(server: Server) -> None:
    threads, per_call = 16, 5
    barrier = threading.Barrier(threads)
    got: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def claim(name: str) -> None:
        try:
            with httpx.Client(base_url=server.url, timeout=60) as http:
                barrier.wait()
                body = {"worker": name, "limit": per_call, "episodes_prefix": "race"}
                resp = http.post(f"{API}/memory/claim", json=body)
                assert resp.status_code == 200, resp.text
                got[name] = [c["path"] for c in resp.json()["claimed"]]
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    workers = [threading.Thread(target=claim, args=(f"racer-{n}",)) for n in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert errors == []
    handed = [p for paths in got.values() for p in paths]
    assert len(handed) == len(set(handed)) == PREFIXES["race"]  # 80 asked, 60 there, none twice
    assert sorted(handed) == [f"race/{n:03d}.md" for n in range(PREFIXES["race"])]
    held = {c["path"]: c["holder"] for c in claims_of(server, "race")}
    assert held == {p: name for name, paths in got.items() for p in paths}


# -- the reference worker ------------------------------------------------------------------------


def test_two_workers_drain_the_queue_with_the_tags_rule(server: Server) -> None:
    def drain(name: str) -> None:
        with KiwiClient(server.url, actor=name) as client:
            Worker(
                client,
                name,
                TagRule("tagged"),
                batch=5,
                lease="1m",
                prefix="tags",
                until_empty=True,
                poll=0.1,
            ).run()

    workers = [threading.Thread(target=drain, args=(f"tagger-{n}",)) for n in range(2)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    data = check(server, "tags")
    assert (data["unmerged_count"], data["double_merges"], data["dangling"]) == (0, [], [])
    assert claims_of(server, "tags") == []
    pages = sorted(p.name for p in (server.root / "tagged").iterdir())
    assert pages == ["alpha.md", "beta.md", "gamma.md"]
    alpha = (server.root / "tagged/alpha.md").read_text()
    assert alpha.startswith("---\nmemory_kind: semantic\nmerged-from:\n")
    lines = [line for line in alpha.splitlines() if line.startswith("- tags-")]
    assert sorted(lines) == sorted(
        f"- tags-{n}: Observation {n} of tags" for n in range(0, PREFIXES["tags"], 3)
    )


PLANNER = textwrap.dedent(
    """
    import json, sys
    batch = json.load(sys.stdin)["episodes"]
    ids = [e["episode_id"] for e in batch]
    print(json.dumps({"pages": [
        {"path": "planned/evens.md", "append": "evens\\n",
         "episodes": [i for i in ids if int(i.split("-")[1]) % 2 == 0]},
        {"path": "planned/rest.md", "content": "---\\nmemory_kind: semantic\\n---\\nrest\\n"},
    ]}))
    """
)


def test_a_users_command_plans_the_merge(server: Server, tmp_path: Path) -> None:
    script = tmp_path / "planner.py"
    script.write_text(PLANNER)
    step = CommandStep(f"{sys.executable} {script}")
    with KiwiClient(server.url) as client:
        stats = Worker(
            client,
            "planner",
            step,
            batch=4,
            lease="1m",
            prefix="command",
            until_empty=True,
            poll=0.1,
        ).run()
    assert stats.episodes == PREFIXES["command"] and stats.conflicts == 0
    assert check(server, "command")["unmerged_count"] == 0
    rest = (server.root / "planned/rest.md").read_text()
    assert rest.endswith("---\nrest\n") and "path: command/001.md" in rest


def test_a_failing_command_stops_the_worker_and_releases_its_batch(server: Server) -> None:
    step = CommandStep("echo 'model unavailable' >&2; exit 3")
    with KiwiClient(server.url) as client:
        worker = Worker(client, "failing", step, batch=2, lease="1m", prefix="failing")
        with pytest.raises(ConsolidationFailed, match="exited with 3: model unavailable"):
            worker.run()
    assert claims_of(server, "failing") == []
    assert check(server, "failing")["unmerged_count"] == PREFIXES["failing"]


def test_renew_extends_the_lease_of_everything_held(server: Server) -> None:
    with KiwiClient(server.url) as client:
        first = client.claim_episodes("renewer", 2, "1m", "renew", False)
        Worker(client, "renewer", TagRule(), lease="2h", prefix="renew").renew()
        held = claims_of(server, "renew")
        assert {c["holder"] for c in held} == {"renewer"} and len(held) == 2
        assert all(c["lease_expires"] > first["lease_expires"] for c in held)
        assert client.release_episodes("renewer") == ["renew/000.md", "renew/001.md"]
        with pytest.raises(NotFound):
            client.release_episodes("renewer")
        with pytest.raises(UsageError, match="between 1m and 24h"):
            client.claim_episodes("renewer", 1, "1s", "renew", False)
        with pytest.raises(Conflict):
            client.claim_episodes("renewer", 1, "1m", "renew", False)
            client.merge("x.md", [{"path": "renew/000.md"}], worker="someone-else")


def test_sigterm_stops_the_worker_cleanly_releasing_its_claims(
    server: Server, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    command = f"touch {marker}; sleep 60"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            KIWIFS,
            "memory",
            "worker",
            "--url",
            server.url,
            "--worker",
            "sleepy",
            "--episodes-prefix",
            "sigterm",
            "--batch",
            "3",
            "--lease",
            "1m",
            "--rule",
            "command",
            "--command",
            command,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        wait_for(lambda: marker.exists() or proc.poll() is not None)
        assert marker.exists(), proc.communicate(timeout=10)
        assert [c["holder"] for c in claims_of(server, "sigterm")] == ["sleepy"] * 3
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "sleepy: released 3 claim(s)" in err
    assert claims_of(server, "sigterm") == []
    assert check(server, "sigterm")["unmerged_count"] == PREFIXES["sigterm"]


# -- pure parts ----------------------------------------------------------------------------------


def ep(n: int, tags: str = "[alpha]", body: str = "# First line\nmore\n") -> Episode:
    text = f"---\nepisode_id: e{n}\ntags: {tags}\n---\n{body}"
    return Episode(f"episodes/e{n}.md", f"e{n}", "etag", text)


def test_the_tags_rule() -> None:
    batch = [ep(1), ep(2, "[Beta Release]"), ep(3, "[]", "\n\n  body only\n"), ep(4, "x")]
    plans = TagRule()(batch, threading.Event())
    assert plans == [
        PagePlan("concepts/alpha.md", ("episodes/e1.md",), "- e1: First line\n"),
        PagePlan("concepts/beta-release.md", ("episodes/e2.md",), "- e2: First line\n"),
        PagePlan("concepts/untagged.md", ("episodes/e3.md",), "- e3: body only\n"),
        PagePlan("concepts/x.md", ("episodes/e4.md",), "- e4: First line\n"),
    ]


def test_plans() -> None:
    batch = [ep(1), ep(2), ep(3)]
    text = parse_plan("concepts/all.md\nline one\nline two\n", batch)
    assert text == [
        PagePlan(
            "concepts/all.md",
            ("episodes/e1.md", "episodes/e2.md", "episodes/e3.md"),
            "line one\nline two\n",
        )
    ]
    plan = json.dumps(
        {
            "pages": [
                {"path": "a.md", "episodes": ["e1", "episodes/e2.md"], "append": "x"},
                {"path": "b.md", "content": "whole page"},
            ]
        }
    )
    assert parse_plan(plan, batch) == [
        PagePlan("a.md", ("episodes/e1.md", "episodes/e2.md"), "x"),
        PagePlan("b.md", ("episodes/e3.md",), None, "whole page"),
    ]


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("", "printed no plan"),
        ("{not json", "not valid JSON"),
        ('{"pages": []}', "non-empty"),
        ('{"pages": [{"episodes": ["e1"]}]}', 'needs a "path"'),
        ('{"pages": [{"path": "a.md", "episodes": ["e9"]}]}', "not in the batch"),
        ('{"pages": [{"path": "a.md", "episodes": ["e1"]}]}', r"leaves 2 episode\(s\) out"),
        (
            '{"pages": [{"path": "a.md", "episodes": ["e1", "e2", "e3"]},'
            ' {"path": "b.md", "episodes": ["e1"]}]}',
            "in more than one page",
        ),
        ('{"pages": [{"path": "a.md", "append": 5}]}', '"append" must be a string'),
        ('{"pages": [{"path": "a.md", "episodes": "e1"}]}', "must be a list"),
    ],
)
def test_bad_plans(output: str, message: str) -> None:
    with pytest.raises(ConsolidationFailed, match=message):
        parse_plan(output, [ep(1), ep(2), ep(3)])
