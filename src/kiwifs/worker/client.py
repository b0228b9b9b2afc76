"""A small client of a running ``kiwifs serve``: the REST calls a consolidation worker makes.

Errors come back as the core's own error tree, by status (400 :class:`UsageError`, 404
:class:`NotFound`, 409 :class:`Conflict`, …) with the server's message, so a worker handles a
conflict the same way whether it runs in-process or over HTTP. A server that cannot be reached
is a :class:`StorageError`. One ``httpx.Client`` (keep-alive, thread-safe) serves every call.
"""

from __future__ import annotations

from typing import Any

import httpx

from kiwifs.errors import (
    Busy,
    Conflict,
    KiwiError,
    Locked,
    NotFound,
    PayloadTooLarge,
    StorageError,
    Unauthorized,
    UsageError,
)

API = "/api/kiwi"
ERRORS: dict[int, type[KiwiError]] = {
    400: UsageError,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    423: Locked,
    503: Busy,
}


class KiwiClient:
    """REST calls on one server; ``actor`` is sent as ``X-Actor`` (the git author)."""

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        actor: str | None = None,
        timeout: float = 120.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        if actor:
            headers["X-Actor"] = actor
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> KiwiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            resp = self.http.request(method, API + path, **kwargs)
        except httpx.HTTPError as exc:
            raise StorageError(f"cannot reach kiwifs at {self.url}: {exc}") from exc
        if resp.status_code >= 400:
            try:
                message = str(resp.json().get("error", resp.text))
            except ValueError:
                message = resp.text or resp.reason_phrase
            raise ERRORS.get(resp.status_code, StorageError)(message)
        return resp

    # -- the queue --------------------------------------------------------------------------

    def claim_episodes(
        self,
        worker: str,
        limit: int,
        lease: str | float,
        prefix: str | None = None,
        with_content: bool = True,
    ) -> dict[str, Any]:
        body = {"worker": worker, "limit": limit, "lease": lease, "with_content": with_content}
        if prefix:
            body["episodes_prefix"] = prefix
        data: dict[str, Any] = self._call("POST", "/memory/claim", json=body).json()
        return data

    def release_episodes(self, worker: str, paths: list[str] | None = None) -> list[str]:
        body: dict[str, Any] = {"worker": worker}
        if paths:
            body["paths"] = paths
        released: list[str] = self._call("POST", "/memory/release", json=body).json()["released"]
        return released

    def merge(
        self, page: str, entries: list[dict[str, str]], worker: str | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"path": page, "entries": entries}
        if worker is not None:
            body["worker"] = worker
        data: dict[str, Any] = self._call("POST", "/memory/merge", json=body).json()
        return data

    def report(self, prefix: str | None = None, limit: int | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if prefix:
            params["episodes_prefix"] = prefix
        if limit is not None:
            params["limit"] = limit
        data: dict[str, Any] = self._call("GET", "/memory/report", params=params).json()
        return data

    # -- files ------------------------------------------------------------------------------

    def read(self, path: str) -> tuple[str, str] | None:
        """A file's text and ETag, or ``None`` when there is no such file."""
        try:
            resp = self._call("GET", "/file", params={"path": path})
        except NotFound:
            return None
        return resp.text, resp.headers.get("etag", "").strip('"')

    def create(self, path: str, content: str) -> bool:
        """Write ``path`` only if it does not exist yet; False when it does."""
        try:
            self._call(
                "PUT",
                "/file",
                params={"path": path},
                content=content.encode("utf-8"),
                headers={"If-None-Match": "*"},
            )
        except Conflict:
            return False
        return True

    def write(self, path: str, content: str, if_match: str | None = None) -> None:
        """Write ``path``; with ``if_match``, only over that version (else :class:`Conflict`)."""
        headers = {"If-Match": f'"{if_match}"'} if if_match else {}
        self._call(
            "PUT", "/file", params={"path": path}, content=content.encode("utf-8"), headers=headers
        )

    def append(self, path: str, text: str, separator: str = "") -> None:
        self._call(
            "POST",
            "/file/append",
            params={"path": path, "separator": separator},
            content=text.encode("utf-8"),
        )
