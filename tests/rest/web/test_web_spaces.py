"""The web pages of a server with spaces and scoped keys: one space at a time, a picker offering
the spaces the signed-in key reaches, and nothing of a space the key does not reach."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from asgiclient import AppClient, serve_in_process
from kiwifs.knowledge import Knowledge
from kiwifs.rest.spaces import create_spaces_app
from kiwifs.rest.web.session import COOKIE
from kiwifs.server.auth import SPACE_COOKIE
from kiwifs.server.spaces import SpaceRegistry
from kiwifs.tuning import Tuning

KEYS = """\
[auth]
type = "perspace"

[[auth.api_keys]]
key = "k-admin"

[[auth.api_keys]]
key = "k-alpha"
space = "alpha"
scope = "read"

[[auth.api_keys]]
key = "k-team"
space = "default"
prefix = "team"
"""
ADMIN = {"Authorization": "Bearer k-admin"}


@pytest.fixture
def web(root: Path) -> Iterator[AppClient]:
    (root / ".kiwi" / "config.toml").write_text(KEYS)
    with Knowledge.open(root, tuning=Tuning(commit_process=False)) as kb:
        registry = SpaceRegistry(kb, dashboard=False)
        with serve_in_process(create_spaces_app(kb, registry)) as client:
            for name in ("alpha", "beta"):
                made = client.post("/api/spaces", json={"name": name}, headers=ADMIN)
                assert made.status_code == 201, made.text
            note = client.put(
                "/api/kiwi/alpha/file?path=alpha-note.md", content=b"# Alpha note\n", headers=ADMIN
            )
            assert note.status_code == 200, note.text
            yield client


def sign_in(web: AppClient, key: str, then: str = "/") -> int:
    web.cookies.clear()
    return web.post("/login", data={"key": key, "next": then}).status_code


def options(page: str) -> list[str]:
    """The spaces the page's picker offers."""
    return [
        part.split('"', 1)[0] for part in page.split('<option value="')[1:] if "</option>" in part
    ]


def test_the_picker_offers_every_space_to_an_admin_and_shows_one_at_a_time(
    web: AppClient,
) -> None:
    assert sign_in(web, "k-admin") == 303
    home = web.get("/")
    assert home.status_code == 200 and options(home.text) == ["default", "alpha", "beta"]
    assert "alpha-note.md" not in web.get("/browse").text  # the default space's files
    picked = web.post("/space", data={"space": "alpha"})
    assert picked.status_code == 303 and SPACE_COOKIE in picked.headers["set-cookie"]
    assert "alpha-note.md" in web.get("/browse").text
    assert web.get("/file/alpha-note.md").status_code == 200
    assert 'value="alpha" selected' in web.get("/").text
    assert web.post("/space", data={"space": "nope"}).status_code == 404
    gone = web.request("DELETE", "/api/spaces/alpha", headers=ADMIN)
    assert gone.status_code == 200
    back = web.get("/browse")  # picked once, deleted since: the default space, named
    assert back.status_code == 200 and "alpha-note.md" not in back.text
    assert 'value="default" selected' in back.text


def test_a_key_for_one_space_sees_that_space_only(web: AppClient) -> None:
    signed = web.post("/login", data={"key": "k-alpha", "next": "/browse"})
    assert signed.status_code == 303 and signed.headers["location"] == "/browse"
    assert f"{SPACE_COOKIE}=alpha" in signed.headers["set-cookie"]  # taken to its space
    page = web.get("/browse")
    assert page.status_code == 200 and "alpha-note.md" in page.text
    assert options(page.text) == [] and "Space <strong>alpha</strong>" in page.text
    assert "beta" not in page.text
    assert web.post("/space", data={"space": "beta"}).status_code == 403
    web.cookies.set(SPACE_COOKIE, "default")  # a cookie set by hand reaches nothing more
    again = web.get("/browse")
    assert again.status_code == 200 and "alpha-note.md" in again.text
    web.cookies.delete(SPACE_COOKIE)  # and without one, the key's own space
    assert "alpha-note.md" in web.get("/browse").text


def test_a_key_with_a_prefix_cannot_sign_in(web: AppClient) -> None:
    assert sign_in(web, "k-team") == 401
    assert COOKIE not in web.cookies
    assert web.get("/").status_code == 303  # to the login page
