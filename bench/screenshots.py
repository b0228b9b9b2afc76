"""Screenshots of the web interface for the docs (docs/img/*.png), on a small realistic root.

    python bench/screenshots.py [--out docs/img] [--chromium /usr/bin/chromium]

Builds a root of three weeks of agent runs (episodes written each day, consolidation pages merging
some of them a day or two later, committed with those dates so the history chart has days to
draw, and a hand-written page with two of the problems ``memory check`` finds), serves it with
``kiwifs serve`` and photographs the dashboard and a consolidated page with headless Chromium
(Playwright with Debian's browser).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

KIWIFS = shutil.which("kiwifs") or str(Path(sys.executable).with_name("kiwifs"))
TOPICS = ["auth", "search", "deploy", "billing", "cache", "onboarding"]
VERBS = ["retried", "fixed", "profiled", "rolled back", "documented", "measured"]
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def git(root: Path, *args: str, when: str | None = None) -> None:
    env = dict(os.environ)
    if when:
        env.update(GIT_AUTHOR_DATE=when, GIT_COMMITTER_DATE=when)
    env.update(
        GIT_AUTHOR_NAME="agent:runner",
        GIT_AUTHOR_EMAIL="kiwifs@internal",
        GIT_COMMITTER_NAME="agent:runner",
        GIT_COMMITTER_EMAIL="kiwifs@internal",
    )
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env=env)


def build(root: Path, days: int = 21, seed: int = 7) -> None:
    rng = random.Random(seed)
    subprocess.run([KIWIFS, "init", "--root", str(root)], check=True, capture_output=True)
    start = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=days - 1)  # ends today
    waiting: list[tuple[str, str, str]] = []  # (id, path, topic)
    for n in range(days):
        day = start + dt.timedelta(days=n)
        for i in range(rng.randint(6, 14)):
            topic = rng.choice(TOPICS)
            ident = f"run-{day:%m%d}-{i:02d}"
            path = f"episodes/{day:%Y/%m}/{ident}.md"
            stamp = f"{day.isoformat()}T{8 + i % 10:02d}:{rng.randint(0, 59):02d}:00Z"
            text = (
                f"---\nmemory_kind: episodic\nepisode_id: {ident}\ncreated: {stamp}\n"
                f"tags: [{topic}]\nderived-from:\n  - type: run\n    id: {ident}\n"
                f"    date: {stamp}\n    actor: agent:runner\n---\n\n"
                f"# {topic.title()} run {ident}\n\n"
                f"The agent {rng.choice(VERBS)} the {topic} job; {rng.randint(1, 9)} steps, "
                f"{rng.randint(0, 3)} retries.\n\n"
                f"- outcome: {rng.choice(['ok', 'flaky', 'failed'])}\n"
            )
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
            waiting.append((ident, path, topic))
        if n % 2 == 1 and n < days - 3:  # a consolidation run every other day, lagging behind
            merged = [w for w in waiting if rng.random() < 0.8]
            for topic in TOPICS:
                batch = [w for w in merged if w[2] == topic]
                if batch:
                    add_merges(root / f"concepts/{topic}.md", topic, batch, day)
            waiting = [w for w in waiting if w not in merged]
        git(root, "add", "-A")
        evening = dt.datetime(day.year, day.month, day.day, 23, tzinfo=dt.UTC)
        when = min(evening, dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1))
        git(root, "commit", "-qm", f"agent:runner: day {day}", when=when.isoformat())
    add_a_hand_written_digest(root, start)


def add_a_hand_written_digest(root: Path, start: dt.date) -> None:
    """A page written by hand, as people do: one id mistyped (a dangling entry) and one episode
    a nightly digest merged already (a double merge), for the dashboard's problems."""
    day = start + dt.timedelta(days=1)
    text = (
        "---\nmemory_kind: semantic\ntitle: Incident review\nmerged-from:\n"
        f"  - {{type: episode, id: run-{day:%m%d}-00, note: the first failure}}\n"
        f"  - {{type: episode, id: run-{day:%m%d}-0, note: mistyped}}\n"
        "---\n\n# Incident review\n\nWhat went wrong in the first week.\n"
    )
    (root / "concepts/incident-review.md").write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "incident review")


def add_merges(page: Path, topic: str, batch: list[tuple[str, str, str]], day: dt.date) -> None:
    head = f"---\nmemory_kind: semantic\ntitle: {topic.title()}\nmerged-from:\n"
    entries = "".join(
        f"  - type: episode\n    id: {ident}\n    date: {day}T21:00:00Z\n"
        f"    actor: consolidator\n    note: nightly {topic} digest\n"
        for ident, _, _ in batch
    )
    if page.exists():
        text = page.read_text()
        fm, body = text.split("\n---\n", 1)
        page.write_text(fm + "\n" + entries.rstrip("\n") + "\n---\n" + body)
        return
    page.parent.mkdir(parents=True, exist_ok=True)
    body = (
        f"\n# {topic.title()}\n\n"
        f"What the agents learned about **{topic}**, folded from their runs.\n\n"
        "| symptom | fix |\n| --- | --- |\n| flaky step | retry with backoff |\n"
        "| slow run | cache the index |\n\nSee also [deploy](deploy.md).\n"
    )
    page.write_text(head + entries + "---\n" + body)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shoot(root: Path, out: Path, chromium: str) -> None:
    from playwright.sync_api import sync_playwright

    port = free_port()
    proc = subprocess.Popen(
        [KIWIFS, "serve", "--root", str(root), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(base + "/ui/overview.json").json()["timeline_current"]:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        out.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=ARGS)
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(base + "/")
            page.wait_for_selector("#live-status[data-state='live']")
            page.wait_for_selector("#problems[data-current='true']")
            page.screenshot(path=str(out / "dashboard.png"), full_page=True)
            page.goto(base + "/file/concepts/auth.md")
            page.screenshot(path=str(out / "file.png"), full_page=False)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs/img"
    )
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiwifs-shots-") as tmp:
        root = Path(tmp) / "knowledge"
        build(root)
        shoot(root, args.out, args.chromium)
    print(f"wrote {args.out / 'dashboard.png'} and {args.out / 'file.png'}")


if __name__ == "__main__":
    main()
