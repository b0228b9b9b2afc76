"""The web interface's mount at ``/``: it answers only the paths no other route has.

A mount at ``/`` matches every path, so Starlette's router handed it ``TRACE /api/kiwi/file``
and ``DELETE /health`` too, and the web interface answered 404: a path the server has, asked with
a method its route does not allow, must be **405** with ``Allow`` (the router's own answer when
no route takes the request whole). This mount steps aside for a path another route serves.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.types import ASGIApp, Scope


class FallbackMount(Mount):
    """A :class:`Mount` that matches no path another of ``routes`` (the app's) matches."""

    def __init__(self, path: str, app: ASGIApp, name: str, routes: Sequence[BaseRoute]) -> None:
        super().__init__(path, app=app, name=name)
        self._routes = routes

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if any(
            route is not self and route.matches(scope)[0] is not Match.NONE
            for route in self._routes
        ):
            return Match.NONE, {}
        return super().matches(scope)


_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(routes: Sequence[BaseRoute], path: str) -> str:
    """The ``Allow`` header of a 405 for ``path``: the methods of *every* route serving it.

    Starlette names only those of the first such route: ``TRACE /api/kiwi/file`` was answered
    ``Allow: GET`` though PUT and DELETE are routes of the same path.
    """
    methods: set[str] = set()
    for route in routes:
        if isinstance(route, Route) and route.methods and route.path_regex.match(path):
            methods |= route.methods
    return ", ".join(sorted(methods, key=lambda m: (_ORDER + (m,)).index(m)))
