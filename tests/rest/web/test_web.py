"""The web interface in-process (httpx over ASGI): what each page renders, what it escapes, and
that every page needs a session when a key is set. The real browser tests are in
test_web_browser.py."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from kiwifs.errors import TooManyRequests
from kiwifs.knowledge import Knowledge
from kiwifs.memory.rules import MergeEntry
from kiwifs.rest.app import create_app
from kiwifs.rest.web.render import markdown_html
from kiwifs.rest.web.session import COOKIE, safe_next
from kiwifs.server.auth import LOGIN_ATTEMPTS, LOGIN_WINDOW, LoginLimiter, Sessions
from queuekit import Clock

KEY = "web-s3cret"
EVIL = (
    '---\nepisode_id: evil\ntitle: "<img src=x onerror=alert(1)>"\n---\n'
    "# Evil\n\n<script>window.pwned = 1</script>\n\n"
    "[click](javascript:alert(1)) [data](data:text/html;base64,PHNjcmlwdD4=)\n"
)


@dataclass
class Web:
    """A client of one in-process app that keeps cookies like a browser."""

    app: Any
    client: httpx.AsyncClient = field(init=False)

    def __post_init__(self) -> None:
        transport = httpx.ASGITransport(app=self.app)
        self.client = httpx.AsyncClient(transport=transport, base_url="http://testserver")

    @property
    def cookies(self) -> httpx.Cookies:
        return self.client.cookies

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            return await self.client.request(method, url, **kwargs)

        return anyio.run(go)

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)


def seeded(root: Path) -> Knowledge:
    """A knowledge root with episodes (one with a script), a merged page and its history."""
    Knowledge.init(root, "knowledge")
    kb = Knowledge.open(root)
    kb.write(
        "episodes/2026/run-1.md",
        "---\nepisode_id: run-1\n---\n# Run 1\n",
        provenance="run:run-1",
    )
    kb.write("episodes/2026/run-2.md", "---\nepisode_id: run-2\n---\n# Run 2\n")
    kb.write("episodes/evil.md", EVIL)
    kb.merge("concepts/auth.md", [MergeEntry(id="run-1", note="login"), MergeEntry(id="gone")])
    kb.write(
        "concepts/auth.md",
        kb.read("concepts/auth.md").text + "\nSee [run 2](../episodes/2026/run-2.md).\n",
    )
    return kb


@pytest.fixture(scope="module")
def seeded_kb(tmp_path_factory: pytest.TempPathFactory, isolated_git: Path) -> Iterator[Knowledge]:
    """One seeded root, and one open and one keyed app on it, for the module's tests, which only
    read it (the one test that writes has a root of its own): building an app costs ~0.15 CPU-s.
    Each test still gets its own client, so no cookie or session carries over."""
    kb = seeded(tmp_path_factory.mktemp("web") / "kb")
    yield kb
    kb.close()


@pytest.fixture(scope="module")
def open_app(seeded_kb: Knowledge) -> Any:
    return create_app(seeded_kb)


@pytest.fixture
def web(open_app: Any) -> Web:
    return Web(open_app)


def text_of(resp: httpx.Response, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)<', resp.text, re.S)
    assert match, f"no #{element_id}"
    return html.unescape(match.group(1)).strip()


# -- pages --------------------------------------------------------------------------------------


def test_dashboard_numbers_are_the_reports(web: Web, seeded_kb: Knowledge) -> None:
    resp = web.get("/")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    report = seeded_kb.memory_report()
    assert int(text_of(resp, "episodic-count")) == report.episodic_count
    assert int(text_of(resp, "unmerged-count")) == report.unmerged_count
    merged = report.episodic_count - report.unmerged_count
    assert int(text_of(resp, "merged-count")) == merged
    assert '<svg class="chart"' in resp.text and "<script>" not in resp.text.split("<footer")[0]
    data = web.get("/ui/overview.json").json()
    assert data["unmerged_count"] == report.unmerged_count
    assert data["folders"][0]["folder"] == "episodes/"


def test_warnings_page_lists_the_reports_warnings(tmp_path: Path) -> None:
    with seeded(tmp_path / "kb") as kb:  # a root of its own: this test writes
        kb.write("episodes/noid.md", "just text\n")
        resp = Web(create_app(kb)).get("/warnings")
        warnings = kb.memory_report().warnings
    assert resp.status_code == 200
    assert warnings  # the file without an episode id is one
    for warning in warnings:
        assert html.escape(warning, quote=False) in resp.text


def test_pages_send_a_strict_content_security_policy(web: Web) -> None:
    for url in (
        "/",
        "/queue",
        "/warnings",
        "/file/concepts/auth.md",
        "/browse",
        "/search?q=run",
        "/nope",
    ):
        resp = web.get(url)
        csp = resp.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp, url
        assert resp.headers["x-content-type-options"] == "nosniff"


def test_queue_lists_pages_and_filters(web: Web, seeded_kb: Knowledge) -> None:
    resp = web.get("/queue")
    assert resp.status_code == 200
    for item in seeded_kb.memory_report().unmerged:
        assert f'href="/file/{item.path}"' in resp.text
    filtered = web.get("/queue", params={"prefix": "episodes/2026/"})
    assert "episodes/2026/run-2.md" in filtered.text and "example-episode" not in filtered.text
    assert web.get("/queue", params={"page": "0"}).status_code == 400
    assert web.get("/queue", params={"page": "x"}).status_code == 400


def test_file_page_renders_markdown_frontmatter_lineage_and_history(web: Web) -> None:
    page = web.get("/file/concepts/auth.md")
    assert page.status_code == 200
    assert '<a href="/file/episodes/2026/run-2.md">run 2</a>' in page.text  # relative link
    assert 'class="lineage-episode" href="/file/episodes/2026/run-1.md"' in page.text
    assert "dangling" in page.text and "no episode has id &#39;gone&#39;" in page.text
    assert '<table class="frontmatter"' in page.text and "memory_kind" in page.text
    versions = re.findall(r'href="/file/concepts/auth.md\?rev=([0-9a-f]{40})"', page.text)
    assert len(versions) == 2
    diff = web.get(f"/diff/concepts/auth.md?from={versions[1]}&to={versions[0]}")
    assert diff.status_code == 200 and '<span class="add">+See [run 2]' in diff.text
    old = web.get(f"/file/concepts/auth.md?rev={versions[1]}")
    assert "run 2" not in old.text.split('id="content"')[1].split("</article>")[0]

    episode = web.get("/file/episodes/2026/run-1.md")
    assert 'class="lineage-page" href="/file/concepts/auth.md"' in episode.text
    assert "login" in episode.text and "run-1" in episode.text.split('id="provenance"')[1]
    assert 'id="not-merged"' in web.get("/file/episodes/2026/run-2.md").text


def test_file_content_is_escaped_and_links_are_sanitised(web: Web) -> None:
    page = web.get("/file/episodes/evil.md")
    body = page.text
    assert "<script>window.pwned" not in body and "&lt;script&gt;window.pwned" in body
    assert "<img src=x" not in body and "javascript:" not in body.replace("[click](javascript", "")
    assert 'href="data:' not in body
    raw = web.get("/raw/episodes/evil.md")
    assert raw.headers["content-type"].startswith("text/plain")
    assert raw.headers["content-security-policy"].startswith("sandbox")


def test_markdown_renderer_keeps_content_inside_the_root() -> None:
    out = str(
        markdown_html("[a](../../etc/passwd) [b](/x.md#t) ![i](http://e.example/x.png)", "n/p.md")
    )
    assert 'href="#"' in out and 'href="/file/x.md#t"' in out
    assert "<img" not in out and 'rel="noopener noreferrer nofollow"' in out


def test_missing_files_and_bad_versions_are_4xx_pages(web: Web) -> None:
    assert web.get("/file/nope.md").status_code == 404
    assert web.get("/file/../etc/passwd").status_code in (400, 404)
    assert web.get("/file/concepts/auth.md?rev=deadbeef").status_code == 404
    assert web.get("/diff/concepts/auth.md?from=-x&to=HEAD").status_code == 400
    assert web.get("/diff/concepts/auth.md").status_code == 400
    assert web.get("/browse/nope").status_code == 404
    assert "text/html" in web.get("/nope/at/all").headers["content-type"]


def test_unknown_api_paths_stay_json(web: Web) -> None:
    for method, url in (("GET", "/api/kiwi/nope"), ("POST", "/api/kiwi/nope"), ("GET", "/api/x")):
        resp = web.request(method, url)
        assert resp.status_code in (404, 405) and resp.json() == {"error": "Not Found"}, url
    assert web.get("/ui/nope").json() == {"error": "Not Found"}


def test_browse_and_search(web: Web) -> None:
    tree = web.get("/browse/episodes")
    assert (
        'href="/browse/episodes/2026"' in tree.text and 'href="/file/episodes/evil.md"' in tree.text
    )
    found = web.get("/search", params={"q": "Run"})
    assert 'href="/file/episodes/2026/run-1.md"' in found.text
    odd = web.get("/search", params={"q": '"unbalanced'})  # read as its word, not an error
    assert odd.status_code == 200 and 'id="search-error"' not in odd.text
    assert web.get("/search", params={"q": "x", "mode": "psychic"}).status_code == 400


def test_docs_are_served_from_the_package(web: Web) -> None:
    docs = web.get("/docs")
    assert docs.status_code == 200 and "cdn" not in docs.text.lower()
    for asset in re.findall(r'(?:src|href)="(/static/[^"]+)"', docs.text):
        assert web.get(asset).status_code == 200, asset
    assert web.get("/redoc").status_code == 404
    assert web.get("/openapi.json").json()["info"]["title"] == "kiwifs"


# -- sign-in ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def locked_app(seeded_kb: Knowledge) -> Any:
    return create_app(seeded_kb, api_key=KEY)


@pytest.fixture
def locked(locked_app: Any) -> Web:
    return Web(locked_app)


PAGES = [
    "/",
    "/queue",
    "/file/concepts/auth.md",
    "/raw/concepts/auth.md",
    "/browse",
    "/search?q=run",
    "/diff/concepts/auth.md?from=HEAD~1&to=HEAD",
    "/browse/episodes",
]


@pytest.mark.parametrize("url", PAGES)
def test_every_page_redirects_to_login_without_a_session(locked: Web, url: str) -> None:
    resp = locked.get(url)
    assert resp.status_code == 303
    assert resp.headers["location"].startswith("/login?next=")
    assert "episodes" not in resp.text


def test_fragments_and_events_need_a_session(locked: Web) -> None:
    assert locked.get("/ui/overview.json").status_code == 401
    assert locked.get("/ui/events").status_code == 401
    assert locked.get("/api/kiwi/tree").status_code == 401
    locked.cookies.set(COOKIE, "99999999999.forged")
    assert locked.get("/ui/overview.json").status_code == 401


def test_login_sets_an_httponly_strict_session_cookie(locked: Web) -> None:
    form = locked.get("/login?next=/queue")
    assert form.status_code == 200 and 'type="password"' in form.text
    wrong = locked.post("/login", data={"key": "nope", "next": "/queue"})
    assert (
        wrong.status_code == 401
        and 'id="login-error"' in wrong.text
        and COOKIE not in locked.cookies
    )
    right = locked.post("/login", data={"key": KEY, "next": "/queue"})
    assert right.status_code == 303 and right.headers["location"] == "/queue"
    cookie = right.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert KEY not in cookie
    for url in PAGES:
        assert locked.get(url).status_code == 200, url
    assert locked.get("/ui/overview.json").status_code == 200
    out = locked.post("/logout")
    assert out.status_code == 303 and "Max-Age=0" in out.headers["set-cookie"]
    assert locked.get("/").status_code == 303


def test_login_refuses_other_sites_and_foreign_redirects(locked: Web) -> None:
    evil = locked.post("/login", data={"key": KEY}, headers={"Origin": "http://evil.example"})
    assert evil.status_code == 403 and COOKIE not in locked.cookies
    ok = locked.post(
        "/login",
        data={"key": KEY, "next": "//evil.example/x"},
        headers={"Origin": "http://testserver"},
    )
    assert ok.headers["location"] == "/"
    assert [safe_next(t) for t in ("/a?b=1", "http://x/", "/\\x", "", None)] == [
        "/a?b=1",
        "/",
        "/",
        "/",
        "/",
    ]


def test_sessions_expire_end_and_are_bounded() -> None:
    clock = Clock(1000.0)
    key = "the-web-key-never-in-a-token"  # long: a random token cannot hold it by chance
    sessions = Sessions(key, clock=clock, lifetime=60, most=2)
    token = sessions.start()
    assert key not in token and sessions.valid(token)
    clock.now = 1059.0
    assert sessions.valid(token)
    clock.now = 1060.0
    assert not sessions.valid(token)
    first, second, third = sessions.start(), sessions.start(), sessions.start()
    assert not sessions.valid(first) and sessions.valid(second) and sessions.valid(third)
    sessions.end(second)
    assert not sessions.valid(second) and sessions.valid(third)
    assert not Sessions("k2").valid(third)  # another server (or a new key): signed out
    assert not sessions.valid(None) and not sessions.valid("") and not sessions.valid("\udcff")
    assert Sessions(None).valid(None)


def test_logout_ends_the_session_on_the_server(locked: Web) -> None:
    """A session cookie once kept working after sign-out (stateless, 12 h): a copy taken before
    signing out must stop working too."""
    assert locked.post("/login", data={"key": KEY, "next": "/"}).status_code == 303
    copied = {"Cookie": f"{COOKIE}={locked.cookies[COOKIE]}"}
    assert locked.get("/queue").status_code == 200
    assert locked.post("/logout").status_code == 303
    other = Web(locked.app)  # another browser holding the copied cookie
    assert other.get("/queue", headers=copied).status_code == 303
    assert other.get("/ui/overview.json", headers=copied).status_code == 401
    assert other.get("/openapi.json", headers=copied).status_code == 401


def test_failed_sign_ins_are_rate_limited(seeded_kb: Knowledge) -> None:
    """Guessing the key through /login was once as fast as the server answered."""
    web = Web(create_app(seeded_kb, api_key=KEY))  # an app of its own: its limiter starts empty
    for _ in range(LOGIN_ATTEMPTS):
        assert web.post("/login", data={"key": "guess"}).status_code == 401
    refused = web.post("/login", data={"key": KEY})  # even the right key, until the wait is over
    assert refused.status_code == 429 and COOKIE not in web.cookies
    assert 1 <= int(refused.headers["retry-after"]) <= LOGIN_WINDOW
    assert "too many failed sign-ins" in text_of(refused, "login-error")


def test_the_login_limit_counts_failures_per_address_in_a_window() -> None:
    clock = Clock(1000.0)
    limiter = LoginLimiter(attempts=2, window=60, clock=clock, most=2)
    limiter.failed("a")
    clock.now += 10
    limiter.failed("a")
    with pytest.raises(TooManyRequests) as limited:
        limiter.check("a")
    assert limited.value.retry_after == 50
    limiter.check("b")  # another address is not affected
    clock.now += 50  # the first failure leaves the window
    limiter.check("a")
    limiter.failed("a")
    with pytest.raises(TooManyRequests):
        limiter.check("a")
    limiter.succeeded("a")
    limiter.check("a")
    for address in ("a", "b", "c"):  # at most two addresses remembered: "a" is forgotten
        limiter.failed(address)
        limiter.failed(address)
    limiter.check("a")


def test_open_server_needs_no_login(web: Web) -> None:
    assert web.get("/login").status_code == 303
    assert web.get("/").status_code == 200


@pytest.mark.parametrize(
    "cookie",
    [b"\xb2.0", b"\xb2\xb2.abc", "١٢٣.0".encode(), b"12345678901234567890.0", b"..", b"\xff"],
    ids=["superscript-digit", "superscripts", "arabic-digits", "huge", "dots", "latin-1"],
)
def test_an_unparsable_session_cookie_is_not_signed_in(locked: Web, cookie: bytes) -> None:
    """A cookie whose expiry is not ASCII digits once crashed ``int()``: an unauthenticated 500
    with a logged traceback per request. Any unparsable cookie means "not signed in"."""
    header = {"Cookie": b"kiwifs_session=" + cookie}
    assert locked.get("/", headers=header).status_code == 303
    assert locked.get("/ui/overview.json", headers=header).status_code == 401
    assert locked.get("/openapi.json", headers=header).status_code == 401


def search_box(resp: httpx.Response) -> str:
    """The value of the header's search box."""
    match = re.search(r'<form class="search"[^>]*>\s*<input[^>]*value="([^"]*)"', resp.text)
    assert match, "no header search box"
    return html.unescape(match.group(1))


def test_the_header_search_box_holds_only_a_search_query(web: Web) -> None:
    """The queue page's own ``q`` (its page of results) once filled the box with a repr."""
    for url in ("/queue", "/", "/browse", "/warnings", "/file/concepts/auth.md"):
        assert search_box(web.get(url)) == "", url
    assert search_box(web.get("/search", params={"q": 'run "x" <b>'})) == 'run "x" <b>'


def test_search_highlights_are_marks_and_the_rest_is_escaped(web: Web) -> None:
    found = web.get("/search", params={"q": "onerror"})
    snippet = re.search(r'<div class="snippet">(.*?)</div>', found.text, re.S)
    assert snippet, found.text
    # the frontmatter line of EVIL: its title escaped, the searched word highlighted
    assert snippet.group(1) == "title: &#34;&lt;img src=x <mark>onerror</mark>=alert(1)&gt;&#34;"
    assert "<img src=x" not in found.text
