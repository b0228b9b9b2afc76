"""A space's repository served read-only over git's smart HTTP: the rules, without HTTP.

A replica is a git clone that follows its primary, so the transport is git's own: ``git
http-backend``, the CGI program shipped with git, run once per request
(:mod:`kiwifs.server.gitserve` runs it; ``rest/routes/gitserve.py`` is the HTTP side). This
module decides everything else, so that no adapter carries a copy of it:

* **what is served** (:func:`cgi_request`): the read side only, ``GET info/refs?service=
  git-upload-pack`` and ``POST git-upload-pack``. Pushing (``git-receive-pack``) is refused
  whatever the key, and the dumb protocol (``info/refs`` without ``service``, ``HEAD``,
  ``objects/…``) is not offered: a request reaches ``git http-backend`` only with one of two
  fixed ``PATH_INFO`` values, so no URL can name another repository (a space's root may lie
  inside the default root's folder, ``.spaces/NAME``, with a repository of its own).
* **which repository** (:func:`repository`): the root's own ``.git`` folder; a root that is not
  versioned has none (404).
* **how git runs** (:func:`environment`): a fresh environment, not the server's, with no system
  or global configuration, no terminal prompt, no hooks, ``safe.directory=*`` (the server may
  run as another user than the repository's owner), pushing and the dumb protocol off in git too
  (``http.receivepack``, ``http.getanyfile``), and only branches and tags advertised (kiwifs's
  own refs, ``refs/kiwifs/…``, are not part of what a clone gets). Git's protocol version 0
  only: the client's ``Git-Protocol`` header is not passed on, because with version 2
  ``upload-pack`` hands out any object whose id a client names, advertised or not.
* **what git answered** (:func:`parse_head`): the CGI header block (``Status:``,
  ``Content-Type:`` …) before the body.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

from kiwifs.errors import Forbidden, NotFound, StorageError

UPLOAD_PACK = "git-upload-pack"
RECEIVE_PACK = "git-receive-pack"
INFO_REFS = "info/refs"
COMMAND = ("git", "http-backend")
MAX_BODY = 64 * 1024 * 1024  # an upload-pack request: its wants and haves (64 MiB is very many)
MAX_HEAD = 64 * 1024  # git's CGI header block is a few hundred bytes
PUSH_REFUSED = "pushing is refused: this server's repositories are read-only over git"
DUMB_REFUSED = "only git's smart HTTP protocol is served (info/refs?service=git-upload-pack)"
_CONFIG = (
    ("safe.directory", "*"),
    ("core.hooksPath", os.devnull),
    ("http.receivepack", "false"),
    ("http.getanyfile", "false"),
    ("http.uploadpack", "true"),
    ("uploadpack.allowAnySHA1InWant", "false"),
    ("uploadpack.hideRefs", "refs/"),
    ("uploadpack.hideRefs", "!refs/heads/"),
    ("uploadpack.hideRefs", "!refs/tags/"),
)
_ENCODINGS = frozenset({"gzip", "x-gzip"})  # what git http-backend inflates itself
_HEADER_NAME = re.compile(r"[A-Za-z0-9-]{1,64}")


@dataclass(frozen=True)
class CgiRequest:
    """What of an HTTP request reaches ``git http-backend``: the fixed ``PATH_INFO`` and query
    :func:`cgi_request` chose, and the few headers git reads."""

    method: str
    path_info: str
    query: str
    content_type: str = ""
    content_length: int | None = None
    content_encoding: str = ""
    remote_addr: str = ""


def cgi_request(method: str, path: str, query: str) -> CgiRequest:
    """The request ``git http-backend`` is given for ``method`` on ``path`` (relative to the
    repository's URL: ``info/refs`` or ``git-upload-pack``) with the raw ``query``.

    :class:`Forbidden` for a push (``git-receive-pack``, either step) and for the dumb
    protocol; :class:`NotFound` for any other path. The query passed on is rebuilt, never the
    client's own."""
    if path == INFO_REFS and method in ("GET", "HEAD"):
        services = parse_qs(query, keep_blank_values=True).get("service", [])
        if services == [UPLOAD_PACK]:
            return CgiRequest("GET", "/" + INFO_REFS, f"service={UPLOAD_PACK}")
        if RECEIVE_PACK in services:
            raise Forbidden(PUSH_REFUSED)
        raise Forbidden(DUMB_REFUSED)
    if path == RECEIVE_PACK:
        raise Forbidden(PUSH_REFUSED)
    if path == UPLOAD_PACK and method == "POST":
        return CgiRequest("POST", "/" + UPLOAD_PACK, "")
    raise NotFound(f"not served over git: {path}")


def with_headers(
    request: CgiRequest,
    content_type: str | None,
    content_length: str | None,
    content_encoding: str | None,
    remote_addr: str | None,
) -> CgiRequest:
    """``request`` with the body's headers git reads: a ``Content-Length`` that is not a
    number is left out (git then reads the body to its end), an encoding git cannot inflate
    too (it would read the bytes as they are and answer its own protocol error)."""
    length = content_length.strip() if content_length else ""
    encoding = (content_encoding or "").strip().lower()
    return CgiRequest(
        request.method,
        request.path_info,
        request.query,
        (content_type or "").strip(),
        int(length) if length.isdigit() else None,
        encoding if encoding in _ENCODINGS else "",
        (remote_addr or "").strip(),
    )


def repository(root: Path) -> Path:
    """The git folder served for ``root``: its own ``.git`` folder; :class:`NotFound` when the
    root is not versioned (no such folder, as :class:`kiwifs.git.repo.Git` decides)."""
    git_dir = Path(os.path.abspath(root)) / ".git"  # git runs in it: a relative path would move
    if not git_dir.is_dir():
        raise NotFound("this space is not versioned: no git repository to serve")
    return git_dir


def environment(git_dir: Path, request: CgiRequest, path: str | None = None) -> dict[str, str]:
    """The whole environment ``git http-backend`` runs with for ``request`` on ``git_dir``.

    Built from nothing but ``PATH`` (``path``, else the server's), so no variable of the
    server's (``GIT_DIR``, ``GIT_CONFIG_*``, ``HOME``'s configuration …) changes what git
    does. The settings go in ``GIT_CONFIG_*`` (the command line's level, the only one besides
    the system's and the user's that git trusts with ``safe.directory``); git passes them on to
    ``upload-pack`` and ``pack-objects``."""
    env = {
        "PATH": path if path is not None else os.environ.get("PATH", os.defpath),
        "HOME": os.devnull,  # not a folder: no user file (configuration, attributes) is read
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_NO_LAZY_FETCH": "1",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_HTTP_EXPORT_ALL": "1",
        "GIT_HTTP_MAX_REQUEST_BUFFER": str(MAX_BODY),
        "GIT_PROJECT_ROOT": str(git_dir),
        "PATH_INFO": request.path_info,
        "REQUEST_METHOD": request.method,
        "QUERY_STRING": request.query,
        "GATEWAY_INTERFACE": "CGI/1.1",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "GIT_CONFIG_COUNT": str(len(_CONFIG)),
    }
    for i, (key, value) in enumerate(_CONFIG):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    if request.content_type:
        env["CONTENT_TYPE"] = request.content_type
    if request.content_length is not None:
        env["CONTENT_LENGTH"] = str(request.content_length)
    if request.content_encoding:
        env["HTTP_CONTENT_ENCODING"] = request.content_encoding
    if request.remote_addr:
        env["REMOTE_ADDR"] = request.remote_addr
    return env


def head_end(data: bytes) -> tuple[int, int] | None:
    """Where the CGI header block in ``data`` ends: ``(end of the headers, start of the
    body)``; ``None`` while the blank line has not come. Git ends its lines with ``\\r\\n``
    (a bare ``\\n`` is taken too)."""
    ends = []
    for sep in (b"\r\n\r\n", b"\n\n", b"\n\r\n"):
        at = data.find(sep)
        if at >= 0:
            ends.append((at, at + len(sep)))
    for sep in (b"\r\n", b"\n"):  # no header line at all
        if data.startswith(sep):
            ends.append((0, len(sep)))
    return min(ends) if ends else None


def parse_head(block: bytes) -> tuple[int, list[tuple[str, str]]]:
    """The status and headers of a CGI header block: ``Status: 403 Forbidden`` is the status
    (200 without one), every other well-formed ``Name: value`` line a header of the answer.
    :class:`StorageError` for a block git would never write."""
    status = 200
    headers: list[tuple[str, str]] = []
    for raw in block.decode("latin-1").splitlines():
        if not raw.strip():
            continue
        name, sep, value = raw.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not _HEADER_NAME.fullmatch(name):
            raise StorageError(f"git http-backend answered a malformed header: {raw[:80]!r}")
        if name.lower() == "status":
            code = value.split(" ", 1)[0]
            if not (code.isdigit() and 100 <= int(code) <= 599):
                raise StorageError(f"git http-backend answered a malformed status: {value[:80]!r}")
            status = int(code)
        else:
            headers.append((name, value))
    return status, headers
