"""The rules of git over HTTP (:mod:`kiwifs.git.smarthttp`): what reaches ``git http-backend``
(the read side only, two fixed ``PATH_INFO`` values), the environment it runs with, and how its
CGI header block reads. The served answers themselves: tests/rest/test_gitserve.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiwifs.errors import Forbidden, NotFound, StorageError
from kiwifs.git import smarthttp
from kiwifs.git.smarthttp import CgiRequest, cgi_request


def test_only_the_read_side_reaches_git() -> None:
    refs = cgi_request("GET", "info/refs", "service=git-upload-pack&x=1")
    assert (refs.method, refs.path_info, refs.query) == (
        "GET",
        "/info/refs",
        "service=git-upload-pack",
    )
    pack = cgi_request("POST", "git-upload-pack", "anything")
    assert (pack.path_info, pack.query) == ("/git-upload-pack", "")
    for method, path, query in [
        ("GET", "info/refs", "service=git-receive-pack"),
        ("POST", "git-receive-pack", ""),
        ("GET", "git-receive-pack", ""),
    ]:
        with pytest.raises(Forbidden, match="pushing is refused"):
            cgi_request(method, path, query)
    for query in ("", "service=", "service=git-upload-pack&service=git-upload-pack"):
        with pytest.raises(Forbidden, match="smart HTTP"):  # the dumb protocol
            cgi_request("GET", "info/refs", query)
    # anything else names no repository of ours: a nested one (.spaces/NAME) included
    for method, path in [
        ("GET", "HEAD"),
        ("GET", "objects/info/packs"),
        ("GET", ".spaces/alpha/info/refs"),
        ("POST", ".spaces/alpha/git-upload-pack"),
        ("GET", "git-upload-pack"),
        ("POST", "info/refs"),
    ]:
        with pytest.raises(NotFound):
            cgi_request(method, path, "service=git-upload-pack")


def test_the_environment_is_made_not_inherited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_DIR", "/elsewhere")
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'http.receivepack'='true'")
    request = smarthttp.with_headers(
        cgi_request("POST", "git-upload-pack", ""),
        "application/x-git-upload-pack-request",
        "12",
        "GZIP",
        "127.0.0.1",
    )
    env = smarthttp.environment(tmp_path / ".git", request)
    assert "GIT_DIR" not in env and "GIT_CONFIG_PARAMETERS" not in env
    assert env["GIT_PROJECT_ROOT"] == str(tmp_path / ".git")
    assert (env["PATH_INFO"], env["REQUEST_METHOD"]) == ("/git-upload-pack", "POST")
    assert (env["CONTENT_LENGTH"], env["HTTP_CONTENT_ENCODING"]) == ("12", "gzip")
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_TERMINAL_PROMPT"] == "0"
    config = {
        (env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"])
        for i in range(int(env["GIT_CONFIG_COUNT"]))
    }
    assert {("safe.directory", "*"), ("http.receivepack", "false")} <= config
    assert "GIT_PROTOCOL" not in env  # version 0 only (see the module's docstring)
    odd = smarthttp.with_headers(CgiRequest("POST", "/git-upload-pack", ""), None, "-1", "br", None)
    env = smarthttp.environment(tmp_path, odd)
    assert "CONTENT_LENGTH" not in env and "HTTP_CONTENT_ENCODING" not in env


def test_a_root_without_git_is_not_served(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="not versioned"):
        smarthttp.repository(tmp_path)
    (tmp_path / ".git").mkdir()
    assert smarthttp.repository(tmp_path) == tmp_path / ".git"


def test_the_cgi_head() -> None:
    out = b"Status: 403 Forbidden\r\nContent-Type: text/plain\r\n\r\nService not enabled"
    end = smarthttp.head_end(out)
    assert end is not None
    assert smarthttp.parse_head(out[: end[0]]) == (403, [("Content-Type", "text/plain")])
    assert out[end[1] :] == b"Service not enabled"
    assert smarthttp.head_end(b"Content-Type: x\r\n") is None  # not ended yet
    assert smarthttp.head_end(b"Expires: 0\n\nbody") == (10, 12)
    assert smarthttp.parse_head(b"Expires: 0") == (200, [("Expires", "0")])
    for bad in (b"no colon", b"Status: teapot", b"Bad Name: x"):
        with pytest.raises(StorageError):
            smarthttp.parse_head(bad)
