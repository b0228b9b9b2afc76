"""Lease values: durations as KiwiFS writes them, the 1 minute to 24 hour range, holders, times."""

from __future__ import annotations

from typing import Any

import pytest

from kiwifs.errors import UsageError
from kiwifs.memory.leases import (
    Claim,
    check_holder,
    format_seconds,
    lease_seconds,
    parse_duration,
    rfc3339,
)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("90s", 90.0),
        ("10m", 600.0),
        ("2h", 7200.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("1m30s", 90.0),
        ("500ms", 0.5),
        (" 10m ", 600.0),
        ("600", 600.0),
        ("60.5", 60.5),
        (600, 600.0),
        (90.5, 90.5),
    ],
)
def test_durations(value: Any, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["", "ten minutes", "10 m", "10x", "m", "-5m", "1h-5m"])
def test_bad_durations(value: str) -> None:
    with pytest.raises(UsageError, match="lease must be"):
        parse_duration(value)


@pytest.mark.parametrize("value", [True, None, [1], {"m": 1}, float("inf"), -60])
def test_values_that_are_no_duration(value: Any) -> None:
    with pytest.raises(UsageError):
        parse_duration(value)


def test_lease_range_is_one_minute_to_a_day_and_refused_outside() -> None:
    assert lease_seconds("1m", 600) == 60
    assert lease_seconds("24h", 600) == 86400
    assert lease_seconds(None, 600) == 600
    assert lease_seconds("  ", 1800) == 1800
    for bad in ("59s", "24h1s", "0", 30, "25h"):
        with pytest.raises(UsageError, match="between 1m and 24h"):
            lease_seconds(bad, 600)
    with pytest.raises(UsageError, match="lease_duration must be between"):
        lease_seconds("48h", 600, "lease_duration")


def test_format_seconds() -> None:
    assert [format_seconds(s) for s in (30, 60, 90, 3600, 5400, 86401)] == [
        "30s",
        "1m",
        "1m30s",
        "1h",
        "1h30m",
        "24h1s",
    ]


def test_holders() -> None:
    assert check_holder("  w1 ") == "w1"
    for bad in ("", "   ", None, 7, "a\nb", "x" * 257):
        with pytest.raises(UsageError):
            check_holder(bad)
    with pytest.raises(UsageError, match="holder is required"):
        check_holder("", "holder")


def test_times_are_rfc3339_utc_seconds_rounded_down() -> None:
    assert rfc3339(0) == "1970-01-01T00:00:00Z"
    assert rfc3339(1796061419.99) == "2026-11-30T17:56:59Z"
    claim = Claim("a.md", "w", "memory", "", 1796061419.5, 1796062019.5)
    assert claim.to_json() == {
        "path": "a.md",
        "holder": "w",
        "claimed_at": "2026-11-30T17:56:59Z",
        "lease_expires": "2026-11-30T18:06:59Z",
    }
    assert claim.live(1796062019.4) and not claim.live(1796062019.5)


def test_every_interface_offers_the_cores_default_lease_and_batch() -> None:
    """The CLI, MCP and the reference worker offer the core's defaults: change one, all follow."""
    import inspect

    from kiwifs.cli.queue import memory_claim, memory_worker
    from kiwifs.mcp.tools import Tools
    from kiwifs.memory.queue import DEFAULT_LEASE, DEFAULT_LEASE_TEXT, DEFAULT_LIMIT
    from kiwifs.worker.loop import Worker

    assert parse_duration(DEFAULT_LEASE_TEXT) == DEFAULT_LEASE
    for command in (memory_claim, memory_worker):
        defaults = {p.name: p.default for p in command.params}
        assert defaults["lease"] == DEFAULT_LEASE_TEXT
    assert {p.name: p.default for p in memory_worker.params}["batch"] == DEFAULT_LIMIT
    claim = inspect.signature(Tools.kiwi_memory_claim).parameters
    assert claim["lease"].default == DEFAULT_LEASE_TEXT
    assert Worker.lease == DEFAULT_LEASE_TEXT and Worker.batch == DEFAULT_LIMIT
