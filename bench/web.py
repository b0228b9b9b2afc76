"""Benchmark of the web dashboard on a generated episodic corpus (default 100,000 episodes).

    python bench/web.py [--episodes N] [--seed S] [--repeat 20]

The corpus is the one ``bench/index.py`` uses (``bench/.corpora/``, generated when missing).
Before the first run it is given a git history: one commit per month folder of episodes, dated at
the end of that month, then the rest of the root (the pages that merge them), so the history chart
has points to draw. Then a ``kiwifs serve`` runs on it and the benchmark measures, from the
``Server-Timing`` header of ``GET /`` (the server's own time, template rendering included):

(a) the dashboard with nothing changed since the last request (the figures are cached per index
    generation), median and worst of ``--repeat``;
(b) the dashboard right after a write (each write invalidates the figures, so every one is
    recomputed: the worst case a person sees), median, p90 and worst of ``--repeat``;
(c) how long a new problem (a page whose ``merged-from`` names a missing episode) takes to
    appear in ``/ui/overview.json`` after its write: the background check's delay, end to end;
(d) in-process, right after each write, without HTTP and without other requests, four variants
    back to back: - the dashboard's figures alone with no background check (the dashboard before
    it showed problems), 0 the same while the background check runs (restarted just before, so
    it is checking), A the dashboard as served (its problems read from the check the background
    loop stored in the index), B the dashboard computing ``memory check`` on the request (the
    design the cache replaces); medians of ``--repeat`` rounds, interleaved;
(e) served by uvicorn in the bench process, ``GET /`` right after a write, in pairs: A with the
    background check running, B with it stopped so that the request runs the check;

and checks that the dashboard's numbers equal ``kiwifs memory report --json`` and its problem
count ``kiwifs memory check --json``. It also reports how long the first replay of the history
and the first background check took.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from index import KIWIFS, corpus, free_port  # noqa: E402 - the sibling benchmark's helpers

GOAL_MS = 300.0


def git(root: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, env=env
    )
    return done.stdout


def give_history(root: Path) -> None:
    """Commit the corpus month by month (dated), then the rest; only when it has no git yet."""
    if (root / ".git").exists():
        return
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "bench")
    git(root, "config", "user.email", "bench@kiwifs.invalid")
    months = sorted(p for p in (root / "episodes").glob("*/*") if p.is_dir())
    for folder in months:
        year, month = int(folder.parent.name), int(folder.name)
        end = dt.datetime(year + month // 12, month % 12 + 1, 1, tzinfo=dt.UTC)
        when = (end - dt.timedelta(hours=1)).isoformat()
        env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
        git(root, "add", str(folder.relative_to(root)))
        git(root, "commit", "-qm", f"episodes {year}-{month:02d}", env=env)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "pages and everything else")


def server_ms(response: httpx.Response) -> float:
    match = re.search(r"app;dur=([0-9.]+)", response.headers.get("server-timing", ""))
    if match is None:
        raise RuntimeError("no Server-Timing header")
    return float(match.group(1))


def wait_current(client: httpx.Client, timeout: float = 900.0) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if client.get("/ui/overview.json").json()["timeline_current"]:
            return time.perf_counter() - start
        time.sleep(0.5)
    raise RuntimeError("the timeline did not catch up")


def number(page: str, element: str) -> int:
    match = re.search(rf'id="{element}"[^>]*>\s*([0-9]+)', page)
    if match is None:
        raise RuntimeError(f"no #{element} on the dashboard")
    return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    root = corpus(args.episodes, args.seed)
    started = time.perf_counter()
    give_history(root)
    print(f"corpus {root} (history ready in {time.perf_counter() - started:.1f} s)")
    port = free_port()
    proc = subprocess.Popen(
        [KIWIFS, "serve", "--root", str(root), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        run(root, f"http://127.0.0.1:{port}", args.repeat)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    in_process(root, args.repeat)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def run(root: Path, base: str, repeat: int) -> None:
    with httpx.Client(base_url=base, timeout=600.0) as client:
        deadline = time.monotonic() + 600
        while True:
            try:
                if client.get("/health").status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        replay = wait_current(client)
        print(f"history replayed (in the background) {replay:.1f} s after the server answered")
        checked = wait_checked(client)
        print(f"first memory check stored (in the background) {checked:.1f} s after that")
        client.get("/")
        steady = [server_ms(client.get("/")) for _ in range(repeat)]
        after_write = []
        for i in range(repeat):
            body = f"---\nepisode_id: bench-web-{i}\n---\n# bench\n"
            put = client.put("/api/kiwi/file", params={"path": "inbox/bench-web.md"}, content=body)
            put.raise_for_status()
            time.sleep(0.3)  # let the write's echo reach the watcher, as a person would
            after_write.append(server_ms(client.get("/")))
        delays = [problem_delay(client, i) for i in range(3)]
        print(f"a new problem on the dashboard after its write: {seconds(delays)}")
        page = client.get("/").text
        shown = client.get("/ui/overview.json").json()["check"]["total"]
    check = json.loads(
        subprocess.run(
            [KIWIFS, "memory", "check", "--json", "--root", str(root)],
            capture_output=True,
            check=True,
        ).stdout
    )
    print(
        f"dashboard problems {shown}, memory check --json problems {check['problems']}:"
        f" {'equal' if shown == check['problems'] else 'DIFFERENT'}"
    )
    report = json.loads(
        subprocess.run(
            [KIWIFS, "memory", "report", "--json", "--limit", "0", "--root", str(root)],
            capture_output=True,
            check=True,
        ).stdout
    )
    same = (
        number(page, "episodic-count") == report["episodic_count"]
        and number(page, "unmerged-count") == report["unmerged_count"]
    )
    for name, values in (("unchanged", steady), ("after a write", after_write)):
        print(f"dashboard {name}: {summary(values)}")
    print(f"dashboard numbers equal memory report --json: {'yes' if same else 'NO'}")


def wait_checked(client: httpx.Client, timeout: float = 900.0) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        check = client.get("/ui/overview.json").json()["check"]
        if check["ready"] and check["current"]:
            return time.perf_counter() - start
        time.sleep(0.2)
    raise RuntimeError("the first check did not end")


def problem_delay(client: httpx.Client, i: int) -> float:
    """Seconds from writing a page with a dangling entry until the dashboard counts it."""
    before = client.get("/ui/overview.json").json()["check"]["total"]
    path = f"concepts/bench-dangling-{i}.md"  # removed again below: the corpus stays as it was
    body = f"---\nmerged-from:\n  - {{type: episode, id: bench-missing-{i}}}\n---\n"
    start = time.perf_counter()
    client.put("/api/kiwi/file", params={"path": path}, content=body).raise_for_status()
    while client.get("/ui/overview.json").json()["check"]["total"] == before:
        if time.perf_counter() - start > 300:
            raise RuntimeError("the problem never appeared")
        time.sleep(0.05)
    took = time.perf_counter() - start
    client.delete("/api/kiwi/file", params={"path": path}).raise_for_status()
    while client.get("/ui/overview.json").json()["check"]["total"] != before:
        time.sleep(0.1)
    return took


def seconds(values: list[float]) -> str:
    return ", ".join(f"{v:.2f} s" for v in values) + f" (median {statistics.median(values):.2f} s)"


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    verdict = "ok" if statistics.median(values) <= GOAL_MS else "OVER GOAL"
    return (
        f"median {statistics.median(values):.1f} ms, p90 {p90:.1f} ms, worst {ordered[-1]:.1f} ms"
        f" (goal <= {GOAL_MS:.0f} ms: {verdict})"
    )


def in_process(root: Path, repeat: int) -> None:
    """The dashboard computed in this process right after a write, without HTTP or other
    requests, in rounds: - the figures alone with no background check (the dashboard before it
    showed problems), 0 the same while the background check runs, A as served (problems from the
    stored check), B computing ``memory check`` on the request."""
    from kiwifs.knowledge import Knowledge
    from kiwifs.server.lifecycle import Serving

    with Knowledge.open(root) as kb:
        Serving(kb).start_watching()
        while not kb.ready():
            time.sleep(0.1)
        Serving(kb).start_timeline()
        Serving(kb).start_checking()
        kb.overview()
        quiet, bare, cached, computed = [], [], [], []
        rounds = (("-", quiet), ("0", bare), ("A", cached), ("B", computed))
        for i in range(repeat):
            for variant, costs in rounds:
                if variant == "-":  # no background check at all: the dashboard before it
                    Serving(kb).stop_checking()
                elif variant == "0":
                    Serving(
                        kb
                    ).start_checking()  # it checks at once: the rows moved while it was off
                kb.write("inbox/bench-web.md", f"---\nepisode_id: bench-web-{variant}{i}\n---\n")
                start = time.perf_counter()
                if variant in "-0":  # the figures alone
                    kb.indexing.answers.overview(kb.episodes_prefix(), None, time.time())
                else:
                    kb.overview()
                if variant == "B":  # what the background loop runs (no git look-ups)
                    kb.integrity.problems_now()
                costs.append((time.perf_counter() - start) * 1000)
        keeper = kb.indexing.check_keeper
        took = keeper.last_seconds if keeper is not None else float("nan")
        served_a, served_b = served_ab(kb, repeat)
    print(f"-: the figures alone after a write, no background check: {summary(quiet)}")
    print(f"0: the figures alone after a write, the check running:    {summary(bare)}")
    print(f"A: overview after a write, problems from the stored check: {summary(cached)}")
    print(f"B: overview after a write, memory check on the request:   {summary(computed)}")
    print(f"the background check's last run took {took:.2f} s")
    print(f"served A: GET / after a write, background check running: {summary(served_a)}")
    print(f"served B: GET / after a write, the check in the request:  {summary(served_b)}")


def served_ab(kb: Any, repeat: int) -> tuple[list[float], list[float]]:
    """``GET /`` served from this process (uvicorn on a thread), right after a write, in pairs:
    A with the background check running (the request reads the stored result), B with the loop
    stopped, so that the request itself runs the check (the dashboard without the cache)."""
    import threading

    import uvicorn

    from kiwifs.rest.app import create_app
    from kiwifs.server.lifecycle import Serving

    port = free_port()
    config = uvicorn.Config(create_app(kb), port=port, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    served_a: list[float] = []
    served_b: list[float] = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600.0) as client:
        while not server.started:
            time.sleep(0.1)
        client.get("/")
        for i in range(repeat):
            for variant, costs in (("A", served_a), ("B", served_b)):
                if variant == "B":
                    Serving(kb).stop_checking()
                body = f"---\nepisode_id: bench-web-served-{variant}{i}\n---\n"
                client.put("/api/kiwi/file", params={"path": "inbox/bench-web.md"}, content=body)
                time.sleep(0.3)  # as above: the write's echo reaches the watcher
                costs.append(server_ms(client.get("/")))
                if variant == "B":
                    Serving(kb).start_checking()
    server.should_exit = True
    thread.join(60)
    return served_a, served_b


if __name__ == "__main__":
    main()
