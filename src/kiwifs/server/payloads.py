"""The shapes of the structured requests REST and MCP accept, as pydantic models.

MCP builds its tools' input schemas from these models (a bulk write's files, a merge's entries);
REST validates its JSON bodies with the same models, so a field means and checks the same on
both. Items refuse unknown keys (``{"path": …, "contents": …}`` would otherwise write an empty
file); a REST body ignores unknown top-level keys, as KiwiFS does. :func:`usage_error` turns a
validation failure into one readable :class:`~kiwifs.errors.UsageError` that names each field
(``files[0].path is required``), which REST answers with a 400.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from kiwifs.errors import UsageError
from kiwifs.memory.queue import DEFAULT_LIMIT as DEFAULT_CLAIM_LIMIT
from kiwifs.memory.rules import MergeEntry

M = TypeVar("M", bound=BaseModel)
_ITEM = ConfigDict(extra="forbid", coerce_numbers_to_str=True)  # an id may be written as 42
_BODY = ConfigDict(extra="ignore")


class FileItem(BaseModel):
    """One file of a bulk write."""

    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="File path relative to the knowledge root.")
    content: str = Field(default="", description="Full markdown content of the file.")


class MergeItem(BaseModel):
    """One consolidated source to record in a page's ``merged-from``."""

    model_config = _ITEM
    type: str = Field(default="episode", description="Entry type: episode, run, session, ….")
    id: str = Field(default="", description="The episode_id that was consolidated.")
    path: str = Field(default="", description="Or the path of the consolidated episode file.")
    note: str = Field(default="", description="Optional note about what was taken from it.")
    date: str = Field(default="", description="When it was consolidated (default: now, UTC).")

    def to_entry(self) -> MergeEntry:
        fields = self.model_dump()
        return MergeEntry(**fields)


class BulkRequest(BaseModel):
    """``POST /api/kiwi/bulk``."""

    model_config = _BODY
    files: list[FileItem] = Field(min_length=1)
    actor: str | None = None
    message: str | None = None


class SpaceRequest(BaseModel):
    """``POST /api/spaces``: a new space (its root defaults to ``.spaces/NAME``)."""

    model_config = _BODY
    name: str = Field(min_length=1, description="The space's name (lower-case, digits, - and _).")
    root: str | None = Field(default=None, description="Its root, inside .spaces/ of the server.")
    replica_of: str | None = Field(
        default=None,
        description="Ours: a server's URL (http://host:port) whose space of the same name this "
        "one clones and follows, as a replica.",
    )
    replica_key: str | None = Field(
        default=None, description="Ours: the key sent to that server (default: this request's)."
    )


class AckRequest(BaseModel):
    """``POST /api/replication/ack``: a replica holds ``commit`` (a 40-hex git id)."""

    model_config = _BODY
    replica: str = Field(min_length=1, max_length=200, description="The replica's name.")
    commit: str = Field(pattern=r"^[0-9a-f]{40}$", description="The newest commit it holds.")


class PromoteRequest(BaseModel):
    """``POST /api/replication/promote``: ``url``, this node's URL as the others reach it, so
    that its former primary is told to follow it once back (optional)."""

    model_config = _BODY
    url: str | None = Field(default=None, description="This node's URL (http://host:port).")


class DemoteRequest(BaseModel):
    """``POST /api/replication/demote``: follow ``primary`` from now on."""

    model_config = _BODY
    primary: str = Field(min_length=1, description="The new primary's URL (http://host:port).")


class FrontmatterPatchRequest(BaseModel):
    """``PATCH /api/kiwi/file/frontmatter``, KiwiFS's body: ``fields`` is a JSON merge patch of
    the frontmatter (``null`` removes a key, an object is merged)."""

    model_config = _BODY
    fields: dict[str, Any] = Field(
        min_length=1,
        description="Keys to set; null removes a key, an object is merged into the mapping.",
    )


class RenameRequest(BaseModel):
    """``POST /api/kiwi/rename``."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    from_: str = Field(alias="from", min_length=1)
    to: str = Field(min_length=1)


class MergeRequest(BaseModel):
    """``POST /api/kiwi/memory/merge``."""

    model_config = _BODY
    path: str = Field(min_length=1)
    entries: list[MergeItem] = Field(min_length=1)
    worker: str | None = None
    force: StrictBool = False  # "yes" is not a yes: a double merge must be meant

    def merge_entries(self) -> list[MergeEntry]:
        return [e.to_entry() for e in self.entries]


class RememberRequest(BaseModel):
    """``POST /api/kiwi/memory/remember``."""

    model_config = _BODY
    content: str
    episode_id: str | None = None
    scope: str | None = None
    tags: list[str] | None = None
    title: str | None = None
    actor: str | None = None
    provenance: str | None = None


class ForgetRequest(BaseModel):
    """``POST /api/kiwi/memory/forget``."""

    model_config = _BODY
    path: str = Field(min_length=1)
    reason: str | None = None
    superseded_by: str | None = None


class RestoreRequest(BaseModel):
    """``POST /api/kiwi/memory/restore``."""

    model_config = _BODY
    path: str = Field(min_length=1)


class MemoryClaimRequest(BaseModel):
    """``POST /api/kiwi/memory/claim``; ``lease`` is a duration (``10m``) or seconds."""

    model_config = _BODY
    worker: str
    limit: StrictInt = DEFAULT_CLAIM_LIMIT
    lease: Any = None
    episodes_prefix: str | None = None
    with_content: StrictBool = False


class MemoryReleaseRequest(BaseModel):
    """``POST /api/kiwi/memory/release`` (no ``paths``: every claim of the worker)."""

    model_config = _BODY
    worker: str
    paths: list[str] | None = None


class ClaimRequest(BaseModel):
    """``POST /api/kiwi/claim`` (KiwiFS's generic claim); ``holder`` defaults to ``X-Actor``."""

    model_config = _BODY
    path: str = Field(min_length=1)
    lease_duration: Any = None
    holder: str | None = None


def parse(model: type[M], value: Any) -> M:
    """``value`` validated as ``model``; a failure is a :class:`UsageError` naming the fields."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise usage_error(exc) from None


def usage_error(exc: ValidationError) -> UsageError:
    return UsageError("; ".join(_message(err) for err in exc.errors()) or "invalid request")


_TYPE_WORDS = {
    "string_type": "a string",
    "list_type": "a list",
    "model_type": "an object",
    "dict_type": "an object",
    "model_attributes_type": "an object",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
}


def _message(err: Any) -> str:
    name = field_name(err.get("loc", ()))
    kind = err.get("type", "")
    if kind == "missing":
        return f"{name} is required"
    if kind in ("too_short", "string_too_short"):
        return f"{name} must not be empty"
    if kind in _TYPE_WORDS:
        return f"{name} must be {_TYPE_WORDS[kind]}"
    if kind == "extra_forbidden":
        return f"{name} is not a known field"
    if kind == "string_unicode":  # a lone surrogate (``"\ud800"``) the model had to measure
        return f"{name} is not valid Unicode text"
    return f"{name}: {err.get('msg', 'invalid value')}"


def field_name(loc: Sequence[Any]) -> str:
    """``("files", 0, "path")`` → ``files[0].path``, as the caller wrote it in JSON."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "request"
