"""The brief: a context pack for an agent's prompt, filled best match first within a token budget.

:class:`kiwifs.services.briefing.Briefing` (behind ``Knowledge.brief``) ranks the pages that match a
query (superseded pages left out unless asked for), reads them, and :func:`pack` decides, purely,
what goes in:

* pages are taken in rank order, each whole, with its path, ETag, score and token cost;
* a page that would take the pack over ``budget_tokens`` is left out (reason ``budget``) and the
  next ones are still tried, so one long page does not starve the shorter ones after it — a page
  larger than the whole budget is therefore always left out, never cut;
* once ``max_pages`` pages are in, every later page is left out (reason ``max_pages``);
* the pack states its total; the manifest lists every page looked at and left out, with its cost,
  so the agent can read one by path if it needs it.

Token cost is ``ceil(characters / 4)`` of the page's text, a tokenizer-free estimate close to
what common tokenizers give for English prose.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from kiwifs.errors import UsageError

CHARS_PER_TOKEN = 4
MAX_PAGES = 100
EXTRA_CANDIDATES = 50  # matches looked at beyond max_pages, so the manifest shows what was near

Reason = Literal["budget", "max_pages"]


def token_cost(text: str) -> int:
    """``ceil(characters / 4)``: the estimate a brief budgets with."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def check_brief_args(budget_tokens: int, max_pages: int) -> tuple[int, int]:
    """A budget of at least one token; ``max_pages`` from 1, capped at :data:`MAX_PAGES`."""
    if budget_tokens < 1:
        raise UsageError(f"budget_tokens must be 1 or more, got {budget_tokens}")
    if max_pages < 1:
        raise UsageError(f"max_pages must be 1 or more, got {max_pages}")
    return budget_tokens, min(max_pages, MAX_PAGES)


@dataclass(frozen=True)
class Candidate:
    """A matching page as read for the brief: its text is the file's whole content."""

    path: str
    etag: str
    score: float
    text: str


@dataclass(frozen=True)
class BriefPage:
    path: str
    etag: str
    score: float
    tokens: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "etag": self.etag,
            "score": self.score,
            "tokens": self.tokens,
            "text": self.text,
        }


@dataclass(frozen=True)
class LeftOut:
    path: str
    etag: str
    score: float
    tokens: int
    reason: Reason

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "etag": self.etag,
            "score": self.score,
            "tokens": self.tokens,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Brief:
    """The pack: ``pages`` in rank order, ``left_out`` (the manifest), and the totals."""

    query: str
    budget_tokens: int
    max_pages: int
    total_tokens: int
    pages: tuple[BriefPage, ...]
    left_out: tuple[LeftOut, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "budget_tokens": self.budget_tokens,
            "max_pages": self.max_pages,
            "total_tokens": self.total_tokens,
            "pages": [p.to_json() for p in self.pages],
            "left_out": [p.to_json() for p in self.left_out],
        }


def pack(query: str, candidates: Iterable[Candidate], budget_tokens: int, max_pages: int) -> Brief:
    """Fill the pack from ``candidates`` (best first) under both limits; see the module rules."""
    pages: list[BriefPage] = []
    left_out: list[LeftOut] = []
    total = 0
    for c in candidates:
        tokens = token_cost(c.text)
        reason: Reason | None = None
        if len(pages) >= max_pages:
            reason = "max_pages"
        elif total + tokens > budget_tokens:
            reason = "budget"
        if reason is not None:
            left_out.append(LeftOut(c.path, c.etag, c.score, tokens, reason))
            continue
        pages.append(BriefPage(c.path, c.etag, c.score, tokens, c.text))
        total += tokens
    return Brief(query, budget_tokens, max_pages, total, tuple(pages), tuple(left_out))
