"""What the MCP tool modules share: the argument types (a type's ``Field`` description is
what the model reads in the tool's input schema, so one wording per argument), the actor an MCP
write is recorded under when the caller names none, and the ``format`` answer switch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Protocol

from pydantic import Field

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
