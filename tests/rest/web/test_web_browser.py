"""The web interface as a person uses it: a real headless Chromium (Debian's ``chromium``, driven
by Playwright) against a real ``kiwifs serve`` subprocess.

Skipped only outside CI when Chromium or Playwright is missing; in CI (``CI`` set) a missing
browser fails the run, because ``.ci/run`` installs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import realserver
from kiwifs.cli import cli
from kiwifs.knowledge import Knowledge

CHROMIUM = os.environ.get("KIWIFS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
KEY = "browser-s3cret"
EVIL = (
    "---\nepisode_id: evil\n---\n# Evil\n\n<script>window.pwned = 1; alert('x')</script>\n\n"
    '<img src=x onerror="window.pwned = 2">\n\n[click me](javascript:window.pwned=3)\n'
)


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed"
    if not Path(CHROMIUM).exists():
        return f"chromium not found at {CHROMIUM} (apt-get install chromium)"
    return None


MISSING = _missing()
if MISSING and os.environ.get("CI"):
    raise RuntimeError(f"browser tests must run in CI: {MISSING}")  # .ci/run installs it
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


# -- the server ---------------------------------------------------------------------------------


@dataclass
class Server:
    root: Path
    base: str
    proc: subprocess.Popen[bytes]
    key: str | None = None

    def api(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        return httpx.Client(base_url=self.base, timeout=30.0, headers=headers)


def make_root(path: Path) -> Path:
    """A root as ``kiwifs init`` lays it out, made in process (the command is tested in
    test_cli.py; a subprocess here only costs its imports)."""
    Knowledge.init(path)
    return path


def start(root: Path, *args: str) -> Server:
    # ready: the routes built and the index current (/health answers before that)
    base, proc = realserver.start(root, root.parent / f"serve-{root.name}.log", args)
    return Server(root, base, proc)


def stop(server: Server) -> None:
    realserver.stop(server.proc, timeout=15)


def seed(server: Server) -> None:
    with server.api() as api:
        for i in range(4):
            body = f"---\nepisode_id: ep-{i}\ncreated: 2026-01-0{i + 1}T08:00:00Z\n---\n# Run {i}\n"
            path = f"episodes/2026/0{i % 2 + 1}/run-{i}.md"
            resp = api.put(
                "/api/kiwi/file",
                params={"path": path},
                content=body,
                headers={"X-Provenance": f"run:ep-{i}", "X-Actor": "agent:runner"},
            )
            assert resp.status_code == 200, resp.text
        resp = api.put("/api/kiwi/file", params={"path": "episodes/evil.md"}, content=EVIL)
        assert resp.status_code == 200
        merge = {"path": "concepts/login.md", "entries": [{"id": "ep-0", "note": "login flow"}]}
        assert api.post("/api/kiwi/memory/merge", json=merge).status_code == 200


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start(make_root(tmp_path_factory.mktemp("web") / "kb"))
    seed(srv)
    yield srv
    stop(srv)


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start(make_root(tmp_path_factory.mktemp("locked") / "kb"), "--api-key", KEY)
    srv.key = KEY
    seed(srv)
    yield srv
    stop(srv)


# -- the browser --------------------------------------------------------------------------------


@dataclass
class Tab:
    page: Any
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def tab(browser: Any) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15000)
    found = Tab(page)
    page.on("console", lambda m: found.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: found.errors.append(str(e)))

    def on_dialog(dialog: Any) -> None:
        found.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    yield found
    context.close()


def number(tab: Tab, selector: str) -> int:
    return int(tab.page.text_content(selector).strip())


# -- tests --------------------------------------------------------------------------------------


def test_dashboard_numbers_equal_the_memory_report(server: Server, tab: Tab) -> None:
    tab.page.goto(server.base + "/")
    # the command in process (its process is tested in test_cli.py)
    out = CliRunner().invoke(cli, ["memory", "report", "--json", "--root", str(server.root)])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert number(tab, "#episodic-count") == report["episodic_count"]
    assert number(tab, "#unmerged-count") == report["unmerged_count"]
    assert number(tab, "#merged-count") == report["episodic_count"] - report["unmerged_count"]
    assert tab.page.locator("#timeline-chart").count() == 1
    assert tab.errors == []


def test_a_merge_through_the_api_shows_within_two_seconds(server: Server, tab: Tab) -> None:
    page = tab.page
    page.goto(server.base + "/")
    page.wait_for_selector("#live-status[data-state='live']")
    before = number(tab, "#unmerged-count")
    page.evaluate("window.__sameDocument = true")
    with server.api() as api:
        merge = {"path": "concepts/search.md", "entries": [{"id": "ep-1"}, {"id": "ep-2"}]}
        assert api.post("/api/kiwi/memory/merge", json=merge).status_code == 200
        merged_at = time.monotonic()
    # polled from here: the page's CSP forbids the eval that wait_for_function would need
    while number(tab, "#unmerged-count") != before - 2:
        assert time.monotonic() - merged_at < 2.0, "the dashboard did not update within 2 s"
        page.wait_for_timeout(50)
    assert page.evaluate("window.__sameDocument") is True  # no reload
    assert tab.errors == []


def test_lineage_links_lead_from_episode_to_page_and_back(server: Server, tab: Tab) -> None:
    page = tab.page
    page.goto(server.base + "/file/episodes/2026/01/run-0.md")
    page.click("#merged-by a.lineage-page")
    page.wait_for_url("**/file/concepts/login.md")
    assert "login flow" in page.text_content("#merged-from")
    page.click("#merged-from a.lineage-episode")
    page.wait_for_url("**/file/episodes/2026/01/run-0.md")
    assert "ep-0" in page.text_content("#provenance")
    assert tab.errors == []


def test_a_script_in_a_file_does_not_run(server: Server, tab: Tab) -> None:
    page = tab.page
    page.goto(server.base + "/file/episodes/evil.md")
    page.wait_for_timeout(300)
    assert page.evaluate("typeof window.pwned") == "undefined"
    assert "<script>window.pwned" in page.text_content("#content")
    page.click("text=click me")
    page.wait_for_timeout(200)
    assert page.evaluate("typeof window.pwned") == "undefined"
    assert tab.dialogs == []


def test_a_new_problem_appears_on_the_open_dashboard(server: Server, tab: Tab) -> None:
    page = tab.page
    page.goto(server.base + "/")
    page.wait_for_selector("#live-status[data-state='live']")
    page.wait_for_selector("#problems[data-state='ready']")  # the first background check ended
    before = number(tab, "#problem-count")
    page.evaluate("window.__sameDocument = true")
    body = "---\nmerged-from:\n  - {type: episode, id: never-ran}\n---\n# Wishful\n"
    with server.api() as api:
        resp = api.put("/api/kiwi/file", params={"path": "concepts/wishful.md"}, content=body)
        assert resp.status_code == 200
    # the check runs in the background after a quiet second; the page hears its result
    deadline = time.monotonic() + 30
    while number(tab, "#problem-count") != before + 1:
        assert time.monotonic() < deadline, "the problem did not appear on the dashboard"
        page.wait_for_timeout(100)
    row = page.locator("#problem-list tr", has_text="concepts/wishful.md")
    assert "no episode has id 'never-ran'" in row.text_content()
    assert row.locator("a.problem-path").get_attribute("href") == "/file/concepts/wishful.md"
    assert page.evaluate("window.__sameDocument") is True  # no reload
    row.locator("a.problem-path").click()
    page.wait_for_url("**/file/concepts/wishful.md")
    assert tab.errors == []


PAGES = [
    "/",
    "/queue",
    "/warnings",
    "/queue?prefix=episodes/2026/01/",
    "/file/concepts/login.md",
    "/file/episodes/2026/01/run-0.md",
    "/browse",
    "/browse/episodes/2026",
    "/search?q=run",
]


def test_without_the_key_every_page_redirects_to_login(locked: Server, tab: Tab) -> None:
    page = tab.page
    for url in [*PAGES, "/raw/concepts/login.md"]:
        page.goto(locked.base + url)
        assert page.url.startswith(locked.base + "/login?next="), (url, page.url)
        assert "ep-0" not in page.content()
    page.fill("input[name=key]", "wrong")
    page.click("section.login button[type=submit]")
    page.wait_for_selector("#login-error")
    # the refused sign-in answers 401, which the browser itself logs; nothing else may appear
    assert [e for e in tab.errors if "401" not in e] == []
    tab.errors.clear()
    page.fill("input[name=key]", KEY)
    page.click("section.login button[type=submit]")
    page.wait_for_url(locked.base + "/raw/concepts/login.md")
    page.goto(locked.base + "/")
    page.wait_for_selector("#live-status[data-state='live']")  # the event stream signs in too
    assert number(tab, "#episodic-count") >= 5
    assert page.context.cookies()[0]["httpOnly"] is True
    assert page.context.cookies()[0]["sameSite"] == "Strict"
    assert tab.errors == []


def is_favicon(request: Any) -> bool:
    """The last request a page without scripts makes: Chromium asks for the icon after the load
    event. Once it is answered the page has asked for everything, and any console error of its
    own has been logged (the test once waited for 500 ms of network quiet instead, per page)."""
    return str(request.url).endswith("/static/favicon.svg")


def test_no_console_errors_on_any_page(server: Server, tab: Tab) -> None:
    page = tab.page
    with server.api() as api:
        versions = api.get("/api/kiwi/versions", params={"path": "concepts/login.md"}).json()
    hashes = [v["hash"] for v in versions["versions"]]
    extra = ["/docs", "/login", "/file/episodes/evil.md"]
    if len(hashes) > 1:
        extra.append(f"/diff/concepts/login.md?from={hashes[1]}&to={hashes[0]}")
    for url in [*PAGES, *extra]:
        if url == "/":  # its event stream never ends: the page as loaded
            page.goto(server.base + url)
        else:
            with page.expect_request_finished(is_favicon):
                page.goto(server.base + url)
        if url == "/docs":
            page.wait_for_selector(".swagger-ui .opblock")  # rendered from the package, offline
        assert tab.errors == [], (url, tab.errors)
