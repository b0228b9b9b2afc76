"""The uvicorn server ``kiwifs serve`` runs: one that can stop while event streams are open.

On SIGTERM or SIGINT uvicorn stops accepting connections and waits for the open ones to finish.
An event stream (``/api/kiwi/events``, the dashboard's ``/ui/events``) never finishes by itself,
so a single open dashboard or ``curl -N`` would keep the server up forever. This server closes
the event bus when the signal arrives, which ends every stream at its next poll (within half a
second); other requests still get the grace period ``serve`` configures before they are
cancelled.
"""

from __future__ import annotations

from collections.abc import Callable
from types import FrameType

import uvicorn

from kiwifs.writes.events import EventBus

SHUTDOWN_GRACE = 10  # seconds other requests get to finish after the signal


class StoppingServer(uvicorn.Server):
    """A uvicorn server that ends the event streams of ``bus`` when told to exit, and calls
    ``on_exit`` (the other spaces' streams end too)."""

    def __init__(
        self, config: uvicorn.Config, bus: EventBus, on_exit: Callable[[], None] = lambda: None
    ) -> None:
        super().__init__(config)
        self.bus = bus
        self.on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.bus.close()
        self.on_exit()
        super().handle_exit(sig, frame)
