"""The REST route of the change events: ``GET /api/kiwi/events``, a server-sent event stream of
every file change (each event named by its operation), until the client or the server goes.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from kiwifs.knowledge import Knowledge
from kiwifs.rest.http import event_stream, grant_of
from kiwifs.rest.openapi import success
from kiwifs.server.access import event_allowed
from kiwifs.writes.events import is_file_change


def event_routes(api: APIRouter, kb: Knowledge) -> None:
    @api.get("/events", responses=success("text/event-stream"))
    async def events(request: Request) -> StreamingResponse:
        grant = grant_of(request)
        return event_stream(
            request,
            kb.events,
            lambda event: event.op,
            lambda event: is_file_change(event) and event_allowed(grant, event),
        )
