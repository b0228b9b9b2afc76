"""A time limit on a request's headers, which uvicorn does not have.

uvicorn closes an idle keep-alive connection, but once a client has sent the first byte of a
request nothing limits how long the rest of the headers may take: a client sending a partial
request line and then nothing held its connection (and a file descriptor) for ever, and 1,500 of
them stayed open. Here each connection must finish a request's headers within
``header_timeout`` seconds of being opened, or of its previous response ending; otherwise it is
closed without an answer. A request whose headers are complete is not limited: a long upload or
an event stream runs as long as it needs to.

The limit is ``Tuning.header_timeout`` (10 s; ``KIWIFS_HEADER_TIMEOUT`` sets it, and the tests
set a short one), given to :func:`protocol_with`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol

HEADER_TIMEOUT = 10.0  # seconds


def protocol_with(header_timeout: float) -> type[HeaderTimeoutProtocol]:
    """The protocol class with ``header_timeout`` seconds as its limit: uvicorn makes one
    instance per connection from the class it is given, so the limit is a class attribute."""
    return type(HeaderTimeoutProtocol.__name__, (HeaderTimeoutProtocol,), {"limit": header_timeout})


class HeaderTimeoutProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
    """uvicorn's HTTP protocol (httptools, else h11) with a deadline on each request's headers.

    Both of uvicorn's protocols make a new ``cycle`` once a request's headers are parsed, so the
    deadline is armed with the cycle in place at that moment and disarmed as soon as another one
    appears.
    """

    limit = HEADER_TIMEOUT  # seconds (see protocol_with)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._armed_cycle: object = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm(None)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._disarm_once_headers_are_in()

    def on_response_complete(self) -> None:
        finished = self.cycle  # a pipelined request may start a new cycle inside the call
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm(finished)  # the next request's headers, on this kept-alive connection
            self._disarm_once_headers_are_in()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self, cycle: object) -> None:
        """Start the deadline for the headers of the request after ``cycle`` (``None``: the
        connection's first)."""
        self._disarm()
        self._armed_cycle = cycle
        self._header_deadline = self.loop.call_later(self.limit, self._too_slow)

    def _disarm_once_headers_are_in(self) -> None:
        if self._header_deadline is not None and self.cycle is not self._armed_cycle:
            self._disarm()

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _too_slow(self) -> None:
        self._header_deadline = None
        if self.cycle is self._armed_cycle and not self.transport.is_closing():
            self.transport.close()
