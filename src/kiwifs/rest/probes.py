"""The health probes' answers: ``/health``, ``/healthz`` and ``/readyz``.

One definition for the two places that answer them: the FastAPI routes, and the start-up app
(:mod:`kiwifs.rest.starting`) that answers them while the routes are still being built. They
say whether the server is up, never what the root holds, so they need no key.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from kiwifs import __version__
from kiwifs.base.limits import MAX_READ_BYTES
from kiwifs.errors import KiwiError
from kiwifs.knowledge import Knowledge
from kiwifs.server.backup import status_of

Answer = tuple[int, dict[str, Any]]


class Probes:
    """The probes of one server; ``started`` is when it began (``/healthz`` shows the uptime).

    ``health`` and ``ready`` touch the disk (the index when vectors are on, the root), so
    callers run them off the event loop.
    """

    def __init__(self, kb: Knowledge) -> None:
        self.kb = kb
        self.started = time.monotonic()

    def health(self) -> Answer:
        """Up, with the background commits' state, the vectors' counts and the ``[backup]``
        pushes' (when configured); 503 while commits keep failing."""
        commits = self.kb.commit_status()
        try:
            vectors = self.kb.vector_status().to_json()
        except KiwiError as exc:
            vectors = {"enabled": True, "error": exc.message}
        body: dict[str, Any] = {
            "status": "degraded" if commits.failing else "ok",
            "commits": commits.to_json(),
            "vectors": vectors,
        }
        backup = status_of(self.kb.root)
        if backup is not None:  # a failing backup is shown, never a 503: writes go on
            body["backup"] = backup
        skipped = self.kb.too_large_count()
        if skipped:  # a count, never the paths: the probe needs no key
            body["warnings"] = [
                f"{skipped} file(s) over the {MAX_READ_BYTES >> 20} MiB size limit not indexed"
                " (the memory report names them)"
            ]
        return 503 if commits.failing else 200, body

    def alive(self) -> dict[str, str]:
        """Alive: the process answers (KiwiFS's liveness probe)."""
        uptime = dt.timedelta(seconds=int(time.monotonic() - self.started))
        return {"status": "ok", "uptime": str(uptime), "version": __version__}

    def ready(self) -> Answer:
        """Ready: the root is there and the index has caught up with it (503 until then)."""
        if self.kb.ready():
            return 200, {"status": "ready"}
        return 503, {"status": "not-ready"}
