"""Consolidation steps: what a step is given and returns, and the two that ship with kiwifs.

A step turns a batch of claimed episodes (:class:`Episode`, each with its text) into a plan: a
list of :class:`PagePlan`, which page consolidates which episodes and what to write into it. The
worker (:mod:`kiwifs.worker.loop`) claims the batch, runs the step and applies its plan; the step
never talks to the server.

:class:`TagRule` is deterministic: one line per episode appended to ``concepts/<tag>.md``.
:class:`CommandStep` runs a user's command, which reads the batch as JSON on stdin and prints the
plan (:func:`parse_plan`); that is where an LLM plugs in. The protocol is in docs/memory.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kiwifs.errors import ConsolidationFailed
from kiwifs.frontmatter.reader import read_frontmatter, split

SUMMARY_CHARS = 160
COMMAND_POLL = 0.2


@dataclass(frozen=True)
class Episode:
    """One claimed episode with its text."""

    path: str
    episode_id: str
    etag: str
    content: str

    @property
    def frontmatter(self) -> dict[Any, Any]:
        return read_frontmatter(self.content.encode("utf-8")).data

    @property
    def body(self) -> str:
        return split(self.content.encode("utf-8"))[1].decode("utf-8", errors="replace")

    def summary(self) -> str:
        """The first line of the body that says something, cut to a one-line summary."""
        for line in self.body.splitlines():
            text = line.strip().lstrip("#").strip()
            if text:
                return text[:SUMMARY_CHARS]
        return "(empty)"

    def to_json(self) -> dict[str, str]:
        return {
            "path": self.path,
            "episode_id": self.episode_id,
            "etag": self.etag,
            "content": self.content,
        }


@dataclass(frozen=True)
class PagePlan:
    """One page of a plan: the episodes it consolidates and what to write into it.

    ``content`` replaces the page's body (its frontmatter is kept: a rewrite never drops the
    ``merged-from`` of earlier batches), ``append`` is added at its end; a missing page is
    created with ``memory_kind: semantic``. With neither, the page is only merged.
    """

    path: str
    episodes: tuple[str, ...]
    append: str | None = None
    content: str | None = None


class Step(Protocol):
    """A consolidation step: a batch in, a plan out (it may watch ``stop`` to give up early)."""

    def __call__(self, episodes: Sequence[Episode], stop: threading.Event) -> list[PagePlan]: ...


def slug(text: str) -> str:
    """A tag as a file name: lower case, runs of other characters as ``-``."""
    cleaned = re.sub(r"[^a-z0-9_-]+", "-", text.strip().lower()).strip("-")
    return cleaned[:100] or "untagged"


def topic_of(episode: Episode) -> str:
    """The first tag, else the scope, else ``untagged``."""
    fm = episode.frontmatter
    tags = fm.get("tags")
    if isinstance(tags, str):
        tags = [tags]
    if isinstance(tags, list):
        for tag in tags:
            if isinstance(tag, (str, int, float)) and not isinstance(tag, bool) and str(tag):
                return slug(str(tag))
    scope = fm.get("scope")
    if isinstance(scope, str) and scope.strip():
        return slug(scope)
    return "untagged"


@dataclass(frozen=True)
class TagRule:
    """Group the batch by topic (first tag, else scope) and append one line per episode to
    ``<folder>/<topic>.md``: ``- <episode id or path>: <first line of its body>``."""

    folder: str = "concepts"

    def __call__(self, episodes: Sequence[Episode], stop: threading.Event) -> list[PagePlan]:
        groups: dict[str, list[Episode]] = {}
        for episode in episodes:
            groups.setdefault(topic_of(episode), []).append(episode)
        plans = []
        for topic, members in groups.items():
            lines = "".join(f"- {e.episode_id or e.path}: {e.summary()}\n" for e in members)
            path = f"{self.folder}/{topic}.md"
            plans.append(PagePlan(path, tuple(e.path for e in members), append=lines))
        return plans


@dataclass
class CommandStep:
    """Run a user's command (``/bin/sh -c``) per batch: the batch as JSON on stdin, the plan on
    stdout (docs/memory.md). A non-zero exit or an unreadable plan fails the batch."""

    command: str
    timeout: float | None = None
    env: dict[str, str] | None = None

    def __call__(self, episodes: Sequence[Episode], stop: threading.Event) -> list[PagePlan]:
        payload = json.dumps({"episodes": [e.to_json() for e in episodes]}, ensure_ascii=False)
        proc = subprocess.Popen(
            ["/bin/sh", "-c", self.command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            text=True,
            start_new_session=True,  # its own process group: stopping it stops its children
        )
        answer = _communicate(proc, payload, stop, self.timeout)
        if answer is None:
            return []  # asked to stop: nothing is written, the batch is released
        out, err = answer
        if proc.returncode != 0:
            tail = err.strip().splitlines()[-1:] or ["no error output"]
            raise ConsolidationFailed(f"command exited with {proc.returncode}: {tail[0]}")
        return parse_plan(out, episodes)


def _communicate(
    proc: subprocess.Popen[str], payload: str, stop: threading.Event, timeout: float | None
) -> tuple[str, str] | None:
    """Feed the command and wait for its output; ``None`` when asked to stop meanwhile (the
    command is killed). A command over its timeout is killed and fails the batch."""
    waited = 0.0
    pending: str | None = payload
    while True:
        try:
            out, err = proc.communicate(pending, timeout=COMMAND_POLL)
            return out, err
        except subprocess.TimeoutExpired:
            pending = None
            waited += COMMAND_POLL
            if stop.is_set() or (timeout is not None and waited >= timeout):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                if stop.is_set():
                    return None
                raise ConsolidationFailed(f"command timed out after {timeout:g} s") from None


def parse_plan(text: str, episodes: Sequence[Episode]) -> list[PagePlan]:
    """A command's output as a plan.

    JSON ``{"pages": [{"path", "episodes"?, "append"?, "content"?}]}`` (episodes by path or
    id; a page without ``episodes`` takes every episode no other page names), or plain text: the
    first line is a page path, the rest is appended to it, and it consolidates the whole batch.
    Every episode of the batch must land in exactly one page.
    """
    stripped = text.strip()
    if not stripped:
        raise ConsolidationFailed("the command printed no plan")
    if stripped.startswith("{"):
        plans = _json_plan(stripped, episodes)
    else:
        page, _, rest = text.lstrip().partition("\n")
        plans = [PagePlan(page.strip(), tuple(e.path for e in episodes), append=rest or None)]
    _check_cover(plans, episodes)
    return plans


def _json_plan(text: str, episodes: Sequence[Episode]) -> list[PagePlan]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConsolidationFailed(f"the plan is not valid JSON: {exc}") from None
    pages = value.get("pages") if isinstance(value, dict) else None
    if not isinstance(pages, list) or not pages:
        raise ConsolidationFailed('the plan needs a non-empty "pages" list')
    lookup = {e.path: e.path for e in episodes}
    lookup.update({e.episode_id: e.path for e in episodes if e.episode_id})
    named: set[str] = set()
    drafts: list[tuple[dict[str, Any], list[str] | None]] = []
    for page in pages:
        if not isinstance(page, dict) or not isinstance(page.get("path"), str):
            raise ConsolidationFailed('every page of the plan needs a "path"')
        refs = page.get("episodes")
        paths = None if refs is None else [_resolve(r, lookup) for r in _strings(refs)]
        named.update(paths or [])
        drafts.append((page, paths))
    rest = tuple(e.path for e in episodes if e.path not in named)
    return [
        PagePlan(
            page["path"].strip(),
            tuple(paths) if paths is not None else rest,
            _text(page, "append"),
            _text(page, "content"),
        )
        for page, paths in drafts
    ]


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConsolidationFailed('"episodes" must be a list of episode paths or ids')
    return list(value)


def _resolve(ref: str, lookup: dict[str, str]) -> str:
    if ref not in lookup:
        raise ConsolidationFailed(f"the plan names {ref!r}, which is not in the batch")
    return lookup[ref]


def _text(page: dict[str, Any], key: str) -> str | None:
    value = page.get(key)
    if value is not None and not isinstance(value, str):
        raise ConsolidationFailed(f'"{key}" must be a string')
    return value


def _check_cover(plans: Sequence[PagePlan], episodes: Sequence[Episode]) -> None:
    counts = {e.path: 0 for e in episodes}
    for plan in plans:
        if not plan.path:
            raise ConsolidationFailed("a page of the plan has an empty path")
        for path in plan.episodes:
            counts[path] += 1
    missing = [p for p, n in counts.items() if n == 0]
    twice = [p for p, n in counts.items() if n > 1]
    if missing:
        raise ConsolidationFailed(f"the plan leaves {len(missing)} episode(s) out: {missing[0]}")
    if twice:
        raise ConsolidationFailed(f"the plan puts {twice[0]} in more than one page")
