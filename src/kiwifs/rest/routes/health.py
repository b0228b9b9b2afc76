"""The health probes on the app itself (``/health``, ``/healthz``, ``/readyz``), outside the
key: they say whether the server is up, never what it holds. Their answers come from
:mod:`kiwifs.rest.probes`, shared with the start-up app.
"""

from __future__ import annotations

from fastapi import FastAPI

from kiwifs.rest.http import KiwiJSONResponse, run
from kiwifs.rest.openapi import HEALTH_RESPONSES, PROBE_RESPONSES, errors
from kiwifs.rest.probes import Probes


def health_routes(app: FastAPI, probes: Probes) -> None:
    @app.get("/health", tags=["health"], responses=HEALTH_RESPONSES)
    async def health() -> KiwiJSONResponse:
        status, body = await run(probes.health)
        return KiwiJSONResponse(body, status_code=status)

    @app.get("/healthz", tags=["health"], responses=errors(403))
    async def healthz() -> dict[str, str]:
        """Alive: the process answers (KiwiFS's liveness probe)."""
        return probes.alive()

    @app.get("/readyz", tags=["health"], responses=PROBE_RESPONSES)
    async def readyz() -> KiwiJSONResponse:
        """Ready: the root is there and the index has caught up with it (503 until then)."""
        status, body = await run(probes.ready)
        return KiwiJSONResponse(body, status_code=status)
