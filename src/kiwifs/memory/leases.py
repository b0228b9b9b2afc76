"""Leases as values: how long a claim lasts, who holds it, how its times are written (pure).

A lease duration is written as KiwiFS writes it, a Go duration (``90s``, ``10m``, ``1h30m``,
``1.5h``), or as a number of seconds (``600``, ``"600"``). Every lease, generic or memory, lasts
from one minute to 24 hours; anything outside is refused rather than clamped, so a caller never
holds a lease shorter or longer than the one it asked for. Times are absolute UTC instants: a
lease that outlives a restart is still judged against the clock, not against an uptime.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from typing import Any

from kiwifs.base.text import check_text
from kiwifs.errors import UsageError

MIN_LEASE = 60.0
MAX_LEASE = 24 * 3600.0
MAX_HOLDER_BYTES = 256
MEMORY, FILE = "memory", "file"  # the two kinds of claim

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,
    "\u03bcs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_NUMBER = re.compile(r"\d+(?:\.\d*)?|\.\d+")


def parse_duration(value: Any, name: str = "lease") -> float:
    """Seconds from a Go duration (``10m``, ``1h30m``) or a number of seconds.

    Raises :class:`UsageError` naming ``name`` for anything else (booleans, negative or
    unit-less garbage, ``inf``).
    """
    if isinstance(value, bool) or value is None:
        raise UsageError(f"{name} must be a duration like '10m' or a number of seconds")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_text(value.strip(), name)
    else:
        raise UsageError(f"{name} must be a duration like '10m' or a number of seconds")
    if not math.isfinite(seconds) or seconds < 0:
        raise UsageError(f"{name} must be a positive duration, got {value!r}")
    return seconds


def _parse_text(text: str, name: str) -> float:
    if _NUMBER.fullmatch(text):
        return float(text)
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise UsageError(
            f"{name} must be a duration like '90s', '10m' or '2h' (or seconds), got {text!r}"
        )
    return total


def lease_seconds(value: Any, default: float, name: str = "lease") -> float:
    """A lease in seconds (``default`` when not given), refused outside 1 minute to 24 hours."""
    if value is None or (isinstance(value, str) and not value.strip()):
        seconds = default
    else:
        seconds = parse_duration(value, name)
    if not MIN_LEASE <= seconds <= MAX_LEASE:
        raise UsageError(
            f"{name} must be between 1m and 24h, got {value!r} ({format_seconds(seconds)})"
        )
    return seconds


def format_seconds(seconds: float) -> str:
    """A duration for messages: ``45s``, ``10m``, ``1h30m``."""
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return (
        (f"{hours}h" if hours else "")
        + (f"{minutes}m" if minutes else "")
        + (f"{secs}s" if secs else "")
    )


def check_holder(value: Any, name: str = "worker") -> str:
    """A claim holder's name: a non-empty string (trimmed), valid Unicode, no control
    characters, ≤ 256 bytes."""
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{name} is required")
    holder = check_text(value.strip(), name)
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in holder):
        raise UsageError(f"{name} must not contain control characters")
    if len(holder.encode("utf-8", errors="surrogatepass")) > MAX_HOLDER_BYTES:
        raise UsageError(f"{name} must be at most {MAX_HOLDER_BYTES} bytes")
    return holder


def rfc3339(timestamp: float) -> str:
    """An instant as RFC 3339 UTC to the second (``2026-11-30T17:04:05Z``), rounded down."""
    moment = dt.datetime.fromtimestamp(math.floor(timestamp), dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Claim:
    """One row of the store. ``episode_id`` is the claimed episode's id when it had one."""

    path: str
    holder: str
    kind: str
    episode_id: str
    claimed_at: float
    expires: float

    def live(self, now: float) -> bool:
        return self.expires > now

    @property
    def lease_expires(self) -> str:
        return rfc3339(self.expires)

    def to_json(self) -> dict[str, str]:
        """The wire shape of ``GET /api/kiwi/claims`` (KiwiFS's field names)."""
        return {
            "path": self.path,
            "holder": self.holder,
            "claimed_at": rfc3339(self.claimed_at),
            "lease_expires": self.lease_expires,
        }
