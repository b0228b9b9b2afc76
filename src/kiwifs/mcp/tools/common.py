"""What the MCP tool modules share: the argument types (a type's ``Field`` description is
what the model reads in the tool's input schema, so one wording per argument), the actor an MCP
write is recorded under when the caller names none, and the ``format`` answer switch.

Numbers have one rule here, KiwiFS's (its MCP server reads every number with ``intArg``): a
null, a missing value or text that is not a number means the default, a fraction is truncated,
and a value out of range is clamped (:class:`kiwifs.base.limits.Tolerated`). Clients written for
KiwiFS send ``limit: null`` or ``budget_tokens: 0`` and expect an answer, so no number is ever a
validation error on MCP; each numeric argument is declared with :func:`number` (or one of the
readers below) and the tool method receives a value already in range.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Annotated, Any, Protocol

from pydantic import BeforeValidator, Field, WithJsonSchema

from kiwifs.base.limits import MCP_OFFSET, Tolerated
from kiwifs.errors import UsageError
from kiwifs.memory.leases import MAX_LEASE, MIN_LEASE, parse_duration

MCP_ACTOR = "mcp-agent"

Path_ = Annotated[
    str, Field(description="File path relative to the knowledge root, e.g. 'concepts/x.md'.")
]
Actor = Annotated[
    str, Field(description="Who is writing; recorded as the git author and in provenance.")
]
Provenance_ = Annotated[
    str | None,
    Field(description="Where this content came from, as 'type:id' (e.g. 'run:run-249')."),
]
Scope = Annotated[
    str | None, Field(description="Only pages whose frontmatter scope is exactly this.")
]
PathPrefix = Annotated[
    str | None, Field(description="Only search under this folder, e.g. 'concepts/'.")
]
IncludeSuperseded = Annotated[
    bool, Field(description="Also return forgotten pages (memory_status: superseded).")
]
Worker_ = Annotated[
    str, Field(description="Your worker name; claims, renewals and merges use the same one.")
]
IfMatch = Annotated[
    str | None,
    Field(description="ETag from your last kiwi_read; the call fails if the file changed since."),
]
ModifiedAfter = Annotated[
    str | None, Field(description="Only files modified after this time (RFC 3339).")
]


class Answer(Protocol):
    def to_json(self) -> Any: ...


def in_format(value: Answer, format: str, text: Callable[[], str]) -> str:  # noqa: A002
    """A tool's answer as the client asked: ``json`` (the value's JSON, indented) or the text."""
    if format == "json":
        return json.dumps(value.to_json(), indent=2, ensure_ascii=False)
    return text()


# ---------------------------------------------------------------------------------------------
# numbers


def read_number(value: object) -> float | None:
    """A JSON value as a number, or None when it is none: null, booleans, non-finite values and
    text that does not parse as a number (KiwiFS's ``intArg`` takes only JSON numbers; text
    holding a number is accepted too, since some clients quote every argument)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return float(value) if abs(value) < 2**63 else math.copysign(2.0**63, value)
    if isinstance(value, float):
        number = value
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def read_int(value: object) -> int | None:
    """A JSON value as an integer (a fraction truncated toward zero), or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    number = read_number(value)
    return None if number is None else int(number)


def number(rule: Tolerated) -> BeforeValidator:
    """The validator of an integer argument: read by :func:`read_int`, then defaulted and
    clamped by ``rule``; never an error."""
    return BeforeValidator(lambda value: rule(read_int(value)))


def fraction(low: float, high: float) -> BeforeValidator:
    """The validator of an optional float argument: unreadable means absent (None), a value
    outside ``low``..``high`` is clamped to it; never an error."""

    def read(value: object) -> float | None:
        found = read_number(value)
        return None if found is None else min(max(found, low), high)

    return BeforeValidator(read)


def report_limit(value: object) -> int | None:
    """The memory report's page size: unreadable or negative means all (None); 0 keeps its
    meaning, the counts only (docs/memory.md)."""
    found = read_int(value)
    return None if found is None or found < 0 else found


def read_lease(value: object) -> str | int | None:
    """A lease as seconds within 1 minute to 24 hours: a number (or numeric text) is truncated
    and clamped, a duration such as ``'10m'`` is parsed and clamped, anything else (null, zero
    or less, text that is neither) means the default lease (None)."""
    seconds: float | None
    if isinstance(value, str) and read_number(value) is None:
        try:
            seconds = parse_duration(value)
        except UsageError:
            seconds = None
    else:
        seconds = read_number(value)
    if seconds is None or seconds <= 0:
        return None
    return int(min(max(seconds, MIN_LEASE), MAX_LEASE))


NUMBER = WithJsonSchema({"type": "number"})  # as KiwiFS declares its numbers: 2.7 is allowed
Offset = Annotated[
    int,
    number(MCP_OFFSET),
    NUMBER,
    Field(description="Results to skip, for the next page (default 0)."),
]


def section_index(value: object) -> int | None:
    """kiwi_section's ``index`` as KiwiFS reads it: a number (a fraction truncated), where a
    negative one, like null or text that is not a number, means none was given (KiwiFS's
    clients send ``-1`` with a ``heading``)."""
    found = read_int(value)
    return None if found is None or found < 0 else found
