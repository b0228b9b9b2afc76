"""REST fuzzed from its own OpenAPI document (schemathesis, in process); MCP tools likewise.

For each route schemathesis draws requests from the document: valid ones and, as often, ones
that break it (wrong types, missing fields, odd headers and bodies). They go to the real app on
a real root that holds awkward files (frontmatter that is not UTF-8, a name that is not UTF-8, a
file where a folder could be). Every answer must be something the document describes — its
status, content type, body schema and headers — and never a 5xx.

The MCP tools get the same treatment from their signatures (which are their input schemas):
awkward text (lone surrogates, control characters, paths of the root), huge and negative numbers;
every answer must be a result or a tool error with a message, never ``internal error``.

CI runs a few cases per route and tool; before a release, run many (see docs/security.md):

    KIWIFS_FUZZ_EXAMPLES=500 pytest -p no:randomly tests/test_fuzz.py
"""

from __future__ import annotations

import os
import typing
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis

# Imported at collection rather than lazily by the first schema load: pytest rewrites
# schemathesis's modules as they are imported, and CPython 3.11.7 can fail that late in a long
# run ("SystemError: AST constructor recursion depth mismatch", an interpreter bug fixed in 3.11.8).
import schemathesis.specs.openapi.schemas  # noqa: F401
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.types import TextContent
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from kiwifs.knowledge import Knowledge
from kiwifs.mcp.server import adapt
from kiwifs.mcp.tools import SPECS, Tools
from kiwifs.rest.app import create_app
from kiwifs.server.payloads import FileItem, MergeItem
from kiwifs.server.spaces import SpaceRegistry
from vectorkit import build_model, local_config

EXAMPLES = int(os.environ.get("KIWIFS_FUZZ_EXAMPLES", "8"))
# Their 503 is their answer (not ready yet, commits failing), not a fault.
PROBES = {"/readyz", "/health"}


def no_server_error(ctx: Any, response: Any, case: Any) -> bool | None:
    """schemathesis's check that nothing answers 5xx, less the probes' documented 503."""
    if case.operation.path in PROBES and response.status_code == 503:
        return None
    return not_a_server_error(ctx, response, case)


CHECKS = [
    no_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
# The event stream never ends by itself; test_rest.py reads it for real.
# events: a stream without end; demote: it makes the server a replica of whatever URL it is
# handed, which would turn every later fuzzed write into a 409 (tests/rest/test_replication.py)
NOT_FUZZED = {"GET /api/kiwi/events", "POST /api/replication/demote"}
ROUTES = [
    "GET /api/replication",
    "POST /api/replication/ack",
    "POST /api/replication/promote",
    "GET /health",
    "GET /healthz",
    "GET /readyz",
    "GET /api/kiwi/file",
    "PUT /api/kiwi/file",
    "DELETE /api/kiwi/file",
    "POST /api/kiwi/file/append",
    "PATCH /api/kiwi/file/frontmatter",
    "POST /api/kiwi/bulk",
    "POST /api/kiwi/rename",
    "POST /api/kiwi/rename-dir",
    "GET /api/kiwi/tree",
    "GET /api/kiwi/peek",
    "GET /api/kiwi/backlinks",
    "GET /api/kiwi/links/broken",
    "GET /api/kiwi/links/orphans",
    "GET /api/kiwi/graph",
    "GET /api/kiwi/graph/walk",
    "GET /api/kiwi/graph/path",
    "GET /api/kiwi/health-check",
    "GET /api/kiwi/section",
    "GET /api/kiwi/context",
    "GET /api/kiwi/versions",
    "GET /api/kiwi/blame",
    "GET /api/kiwi/version",
    "GET /api/kiwi/diff",
    "GET /api/kiwi/changes",
    "GET /api/kiwi/search",
    "GET /api/kiwi/meta",
    "GET /api/kiwi/brief",
    "GET /api/kiwi/search/semantic",
    "POST /api/kiwi/search/semantic",
    "GET /api/kiwi/search/hybrid",
    "GET /api/kiwi/memory/report",
    "POST /api/kiwi/memory/merge",
    "POST /api/kiwi/memory/remember",
    "POST /api/kiwi/memory/forget",
    "POST /api/kiwi/memory/restore",
    "POST /api/kiwi/memory/claim",
    "POST /api/kiwi/memory/release",
    "GET /api/kiwi/memory/check",
    "GET /api/kiwi/memory/lineage",
    "POST /api/kiwi/claim",
    "DELETE /api/kiwi/claim",
    "GET /api/kiwi/claims",
    "GET /api/spaces",
    "POST /api/spaces",
    "GET /api/spaces/{name}",
    "DELETE /api/spaces/{name}",
]
# Values that exist in the root, so that drawn requests also reach files, folders and commits
# (a random path almost never names one).
KNOWN = {
    "path": ["index.md", "notes/a.md", "notes", "bad-utf8.md", "index.md/x.md", "episodes/"],
    "from": ["notes/a.md", "notes", "HEAD~1", "HEAD"],
    "to": ["notes/b.md", "moved", "HEAD"],
    "version": ["HEAD", "HEAD~1", "HEAD\x00"],
}


@pytest.fixture(scope="module")
def fuzz_kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Knowledge]:
    """The root every case works on, shared by the module: the fuzzer's writes accumulate."""
    folder = tmp_path_factory.mktemp("fuzz")
    root = folder / "kb"
    Knowledge.init(root)
    (root / ".kiwi" / "config.toml").write_text(local_config(build_model(folder / "model")))
    knowledge = Knowledge.open(root)  # semantic and hybrid search on, with a real local model
    knowledge.write("notes/a.md", "---\ntitle: A\n---\n# A\n", actor="seed")
    knowledge.write("bad-utf8.md", b"---\ntitle: \xff\n---\nnot UTF-8\n", actor="seed")
    os.close(os.open(os.fsencode(root / "notes") + b"/\xff-name.md", os.O_CREAT | os.O_WRONLY))
    yield knowledge
    knowledge.close()


@pytest.fixture(scope="module")
def api_schema(fuzz_kb: Knowledge) -> Any:
    app = create_app(fuzz_kb, spaces=SpaceRegistry(fuzz_kb, dashboard=False))
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def test_every_route_is_fuzzed(api_schema: Any) -> None:
    labels = {result.ok().label for result in api_schema.get_all_operations()}
    assert labels - NOT_FUZZED == set(ROUTES)


def with_known_values(case: Any, known: dict[str, str]) -> Any:
    """``case`` with some of its path/revision fields replaced by values the root holds."""
    for name, value in known.items():
        if isinstance(case.query, dict) and name in case.query:
            case.query[name] = value
        if isinstance(case.body, dict) and name in case.body:
            case.body[name] = value
    return case


@pytest.mark.parametrize("route", ROUTES)
def test_route_answers_as_documented(api_schema: Any, route: str) -> None:
    method, path = route.split(" ", 1)
    operation = api_schema[path][method]
    drawn = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    )
    known = st.fixed_dictionaries(
        {}, optional={name: st.sampled_from(values) for name, values in KNOWN.items()}
    )

    @given(case=drawn, replace=known)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def answers(case: Any, replace: dict[str, str]) -> None:
        with_known_values(case, replace).call_and_validate(checks=CHECKS)

    answers()


# -- MCP tools ----------------------------------------------------------------------------------

TEXT = st.one_of(
    st.text(st.characters(codec=None), max_size=24),  # any code point, surrogates included
    st.sampled_from(["index.md", "notes/a.md", "bad-utf8.md", "index.md/x.md", "HEAD", "x" * 300]),
    st.sampled_from(["\ud800", "notes/\udcff.md", "a\x00b", "<\"'>"]),  # the usual suspects
)
NUMBER = st.one_of(st.integers(-3, 600), st.integers(-(2**70), 2**70))


def argument(hint: Any) -> st.SearchStrategy[Any]:
    """Values the MCP SDK would let through for a tool parameter of type ``hint``."""
    base = typing.get_args(hint)[0] if hasattr(hint, "__metadata__") else hint
    name, optional = str(base), type(None) in typing.get_args(base)
    if "FileItem" in name:
        drawn: st.SearchStrategy[Any] = st.lists(st.builds(FileItem, path=TEXT, content=TEXT))
    elif "MergeItem" in name:
        item = st.builds(MergeItem, type=TEXT, id=TEXT, path=TEXT, note=TEXT, date=TEXT)
        drawn = st.lists(item, max_size=3)
    elif "Literal" in name:
        drawn = st.sampled_from(typing.get_args(base))
    elif "list[str]" in name:
        drawn = st.lists(TEXT, max_size=3)
    elif base is bool:
        drawn = st.booleans()
    elif "float" in name:
        drawn = st.floats(allow_nan=False, allow_infinity=False) | NUMBER
    elif "int" in name:
        drawn = NUMBER
    else:
        drawn = TEXT
    return st.one_of(st.none(), drawn) if optional else drawn


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_tool_never_fails_inside(fuzz_kb: Knowledge, spec: Any) -> None:
    tools = Tools(fuzz_kb)
    method = tools.method(spec.name)
    hints = typing.get_type_hints(method, include_extras=True)
    drawn = st.fixed_dictionaries({k: argument(v) for k, v in hints.items() if k != "return"})

    @given(arguments=drawn)
    @settings(max_examples=EXAMPLES, deadline=None, database=None)
    def answers(arguments: dict[str, Any]) -> None:
        result = adapt(spec, method)(**arguments)
        if not isinstance(result, str):
            (block,) = result.content
            assert isinstance(block, TextContent) and "internal error" not in block.text

    answers()
