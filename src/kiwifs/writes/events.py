"""Change events: what the pipeline broadcasts after every successful mutation.

Subscribers (the SSE route, the MCP server, tests) get a bounded queue each; a slow subscriber
loses its oldest events rather than slowing writers down.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any

SUBSCRIBER_BUFFER = 256
MAX_SUBSCRIBERS = 256

# Not a change of files: the background memory check stored a new result. The web dashboard
# listens for it to redraw its problems; the API's event stream, a list of file changes, leaves
# it out (:func:`is_file_change`).
CHECK_STORED = "check"


@dataclass(frozen=True)
class Event:
    """One change: ``op`` is ``write``, ``delete``, ``bulk``, ``rename`` or ``merge``."""

    op: str
    path: str = ""
    paths: tuple[str, ...] = ()
    actor: str = ""
    etag: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.op}
        if self.path:
            out["path"] = self.path
        if self.paths:
            out["paths"] = list(self.paths)
        if self.actor:
            out["actor"] = self.actor
        if self.etag:
            out["etag"] = self.etag
        if self.extra:
            out["extra"] = self.extra
        return out


def is_file_change(event: Event) -> bool:
    """True for the events of a mutation (``write``, ``delete``, ``bulk``, ``rename``,
    ``merge``), False for the server's own notices such as :data:`CHECK_STORED`."""
    return event.op != CHECK_STORED


class Subscription:
    """A subscriber's queue; iterate with :meth:`get`, release with :meth:`close`."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus
        self._queue: queue.Queue[Event] = queue.Queue(SUBSCRIBER_BUFFER)

    def put(self, event: Event) -> None:
        while True:
            try:
                self._queue.put_nowait(event)
                return
            except queue.Full:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    pass

    def get(self, timeout: float | None = None) -> Event | None:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        self._bus.unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EventBus:
    """Thread-safe fan-out of :class:`Event` to every subscriber."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: list[Subscription] = []
        self.closed = False

    def close(self) -> None:
        """The server is stopping: open streams end at their next poll, so that a client that
        keeps a stream open (a dashboard, ``curl -N``) cannot hold the shutdown up."""
        self.closed = True

    def subscribe(self) -> Subscription:
        with self._lock:
            if self.closed:
                raise OverflowError("the server is stopping")
            if len(self._subscribers) >= MAX_SUBSCRIBERS:
                raise OverflowError("too many event subscribers")
            sub = Subscription(self)
            self._subscribers.append(sub)
            return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subscribers:
                self._subscribers.remove(sub)

    @property
    def subscriber_count(self) -> int:
        with self._lock:
            return len(self._subscribers)

    def publish(self, event: Event) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for sub in subscribers:
            sub.put(event)
