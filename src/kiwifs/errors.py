"""The one error tree of kiwifs.

Every failure the core reports is a :class:`KiwiError` with a stable ``code``. Each interface maps
the tree in exactly one place: REST to an HTTP status and ``{"error": message}``, the CLI to an exit
code, MCP to a tool error. Nothing outside this module decides what a failure *is*::

    KiwiError                    code             CLI exit   HTTP
    ├── UsageError               usage            2          400
    │   ├── InvalidPath          invalid_path     2          400
    │   ├── InvalidProvenance    invalid_provenance 2        400
    │   └── InvalidQuery         invalid_query    2          400
    ├── InvalidFrontmatter       invalid_frontmatter 1       400
    ├── RootNotFound             root_not_found   2          404
    ├── NotFound                 not_found        1          404
    │   └── UnknownSpace         not_found        2          404
    ├── Conflict                 conflict         1          409
    ├── PayloadTooLarge          too_large        1          413
    ├── Unauthorized             unauthorized     1          401
    ├── Forbidden                forbidden        1          403
    ├── TooManyRequests          rate_limited     1          429
    ├── Locked                   locked           1          423
    ├── Busy                     busy             1          503
    ├── Unavailable              unavailable      1          503
    ├── ConfigError              config           2          500
    ├── CannotListen             cannot_listen    2          -
    ├── StorageError             storage          1          503
    └── ConsolidationFailed      consolidation    1          (worker only)

A 503 says "the service cannot do this right now" and keeps its message (a busy index, failing
git commits: what to fix or when to retry); a 500 is a fault of ours and hides its message.
"""

from __future__ import annotations


class KiwiError(Exception):
    """Base of every error kiwifs raises on purpose; ``message`` is safe to show a user."""

    code = "error"
    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(KiwiError):
    """The caller asked for something malformed (bad flag value, negative limit…)."""

    code = "usage"
    exit_code = 2


class InvalidPath(UsageError):
    """A path that is empty, escapes the root, or names a hidden or control-character segment."""

    code = "invalid_path"


class InvalidProvenance(UsageError):
    """A non-empty ``X-Provenance`` value that is not ``type:id``."""

    code = "invalid_provenance"


class InvalidQuery(UsageError):
    """A search or meta query that cannot be run (FTS syntax, bad filter field)."""

    code = "invalid_query"


class InvalidFrontmatter(KiwiError):
    """Frontmatter that must be rewritten but cannot be parsed; the file is left as it was."""

    code = "invalid_frontmatter"


class RootNotFound(KiwiError):
    """The knowledge root does not exist; kiwifs never creates one silently."""

    code = "root_not_found"
    exit_code = 2


class NotFound(KiwiError):
    """The file, version or directory asked for does not exist."""

    code = "not_found"


class UnknownSpace(NotFound):
    """A space name the server does not serve: never answered from the default space instead,
    so a typo in a name cannot write into the wrong knowledge root. Exit 2: the caller's
    mistake, as a missing root is."""

    exit_code = 2

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown space: {name}")


class Conflict(KiwiError):
    """An ``If-Match`` precondition failed: the file changed since the caller read it.

    ``etag`` is the file's current ETag when known, so an interface can hand it back (REST in
    the ``ETag`` header, MCP in the tool error) and the caller can re-read and retry.
    """

    code = "conflict"

    def __init__(self, message: str, etag: str | None = None) -> None:
        super().__init__(message)
        self.etag = etag


class PayloadTooLarge(KiwiError):
    """A body over the configured size limit."""

    code = "too_large"


class Unauthorized(KiwiError):
    """Missing or wrong credentials."""

    code = "unauthorized"


class Forbidden(KiwiError):
    """A request only a web page of another site would send (cross-origin, DNS rebinding)."""

    code = "forbidden"


class TooManyRequests(KiwiError):
    """Too many failed attempts from one client (sign-ins); ``retry_after`` says, in whole
    seconds, when the next one will be heard."""

    code = "rate_limited"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Locked(KiwiError):
    """Another process holds the root (a second ``kiwifs serve`` on the same root)."""

    code = "locked"


class Busy(KiwiError):
    """Another process holds the index database longer than kiwifs waits for it; retry later."""

    code = "busy"


class Unavailable(KiwiError):
    """A feature that is switched off or a service that cannot be reached right now: semantic
    search without ``[search.vector] enabled``, an embedding endpoint that is down."""

    code = "unavailable"


class ConfigError(KiwiError):
    """``.kiwi/config.toml`` exists but cannot be read or parsed."""

    code = "config"
    exit_code = 2


class CannotListen(KiwiError):
    """A server cannot bind its address (the port is in use, or not ours to take)."""

    code = "cannot_listen"
    exit_code = 2


class StorageError(KiwiError):
    """The filesystem or git failed underneath an operation (disk full, a broken repository)."""

    code = "storage"


class ConsolidationFailed(KiwiError):
    """A consolidation worker's step could not consolidate a batch (its command failed or
    printed a plan that does not cover the batch)."""

    code = "consolidation"


def os_error_text(exc: OSError) -> str:
    """An OS error as warnings and messages show it: the system's reason, without the path."""
    return exc.strerror or str(exc)
