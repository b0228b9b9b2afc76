"""The reference consolidation worker: claim → read → consolidate → merge → repeat.

It talks to a kiwifs server through a :class:`QueueClient` (the REST client,
:class:`kiwifs.worker.client.KiwiClient`, in ``kiwifs memory worker``), so the loop itself never
sees HTTP. Each round it claims a batch of unmerged episodes with their content, hands them to a
consolidation *step* that returns a plan (which page consolidates which episodes, and the text to
write), writes each page and records the merge naming itself as the worker, which ends its
claims on those episodes in the same step. While a step runs, a background thread renews the
lease (claiming again with ``limit=0``), so a slow step (an LLM) never loses its batch. When
told to stop (SIGTERM), it finishes the call in flight, writes nothing more and releases what it
holds.

Two steps ship with it (:mod:`kiwifs.worker.steps`): ``TagRule`` (deterministic: one line per
episode appended to ``concepts/<tag>.md``) and ``CommandStep`` (a user's command reads the batch
as JSON on stdin and prints the plan; where an LLM plugs in). The protocol is in docs/memory.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kiwifs.errors import Conflict, ConsolidationFailed, KiwiError, NotFound, UsageError
from kiwifs.frontmatter.reader import split
from kiwifs.memory.leases import lease_seconds
from kiwifs.memory.queue import DEFAULT_LEASE, DEFAULT_LEASE_TEXT, DEFAULT_LIMIT, MAX_LIMIT
from kiwifs.worker.steps import Episode, PagePlan, Step

REWRITE_ATTEMPTS = 5
NEW_PAGE = "---\nmemory_kind: semantic\n---\n"


class QueueClient(Protocol):
    """What the worker needs from a kiwifs server (see :class:`kiwifs.worker.client.KiwiClient`)."""

    def claim_episodes(
        self, worker: str, limit: int, lease: str | float, prefix: str | None, with_content: bool
    ) -> dict[str, Any]: ...

    def release_episodes(self, worker: str, paths: list[str] | None = None) -> list[str]: ...

    def merge(
        self, page: str, entries: list[dict[str, str]], worker: str | None = None
    ) -> dict[str, Any]: ...

    def report(self, prefix: str | None = None, limit: int | None = None) -> dict[str, Any]: ...

    def read(self, path: str) -> tuple[str, str] | None: ...

    def create(self, path: str, content: str) -> bool: ...

    def write(self, path: str, content: str, if_match: str | None = None) -> None: ...

    def append(self, path: str, text: str, separator: str = "") -> None: ...


@dataclass
class WorkerStats:
    batches: int = 0
    episodes: int = 0
    pages: int = 0
    conflicts: int = 0


@dataclass
class Worker:
    """One consolidation worker. :meth:`run` loops until ``stop`` is set (or, with
    ``until_empty``, until the report has nothing unmerged left)."""

    client: QueueClient
    name: str
    step: Step
    batch: int = DEFAULT_LIMIT
    lease: str | float = DEFAULT_LEASE_TEXT
    prefix: str | None = None
    until_empty: bool = False
    poll: float = 2.0
    log: Callable[[str], None] = lambda line: None
    stop: threading.Event = field(default_factory=threading.Event)
    stats: WorkerStats = field(default_factory=WorkerStats)

    def __post_init__(self) -> None:
        self.lease_seconds = lease_seconds(self.lease, DEFAULT_LEASE)
        if not 1 <= self.batch <= MAX_LIMIT:
            raise UsageError(f"batch must be between 1 and {MAX_LIMIT}, got {self.batch}")

    def run(self) -> WorkerStats:
        """The loop; always releases what the worker holds when it ends."""
        try:
            while not self.stop.is_set():
                episodes = self._claim(self.batch)
                if not episodes:
                    if self.until_empty and self._drained():
                        break
                    self.stop.wait(self.poll)
                    continue
                with _Renewer(self):
                    plans = self.step(episodes, self.stop)
                    self._apply(plans)
                if not self.stop.is_set():
                    self.stats.batches += 1
                    self.stats.episodes += len(episodes)
        finally:
            self._release()
        return self.stats

    def _claim(self, limit: int) -> list[Episode]:
        batch = self.client.claim_episodes(self.name, limit, self.lease, self.prefix, True)
        return [
            Episode(c["path"], c.get("episode_id", ""), c.get("etag", ""), c.get("content", ""))
            for c in batch["claimed"]
        ]

    def renew(self) -> None:
        """Extend the lease on everything the worker holds (a claim that takes nothing new)."""
        self.client.claim_episodes(self.name, 0, self.lease, self.prefix, False)

    def _drained(self) -> bool:
        return int(self.client.report(self.prefix, limit=0)["unmerged_count"]) == 0

    def _apply(self, plans: Sequence[PagePlan]) -> None:
        for plan in plans:
            if self.stop.is_set():
                return  # the rest is released, never half-written
            self._write(plan)
            if not plan.episodes:
                continue
            entries = [{"type": "episode", "path": p} for p in plan.episodes]
            try:
                self.client.merge(plan.path, entries, self.name)
            except Conflict as exc:  # a lease lost: someone else has those episodes now
                self.stats.conflicts += 1
                self.log(f"{self.name}: not merged into {plan.path}: {exc.message}")
                continue
            self.stats.pages += 1
            self.log(f"{self.name}: merged {len(plan.episodes)} episode(s) into {plan.path}")

    def _write(self, plan: PagePlan) -> None:
        if plan.content is not None:
            self._replace_body(plan.path, plan.content)
        if plan.append:
            text = plan.append if plan.append.endswith("\n") else plan.append + "\n"
            header = f"{NEW_PAGE}# {_title(plan.path)}\n\n"
            if not self.client.create(plan.path, header + text):
                self.client.append(plan.path, text)

    def _replace_body(self, path: str, body: str) -> None:
        """Write ``body`` under the page's current frontmatter, retrying if the page changed
        meanwhile (another worker merged into it)."""
        for _ in range(REWRITE_ATTEMPTS):
            found = self.client.read(path)
            if found is None:
                if self.client.create(path, NEW_PAGE + body):
                    return
                continue
            text, etag = found
            try:
                self.client.write(path, _frontmatter_block(text) + body, if_match=etag)
                return
            except Conflict:
                continue
        raise ConsolidationFailed(f"{path} kept changing; gave up rewriting it")

    def _release(self) -> None:
        try:
            released = self.client.release_episodes(self.name)
        except NotFound:
            return  # held nothing
        except KiwiError as exc:
            self.log(f"{self.name}: could not release its claims: {exc.message}")
            return
        self.log(f"{self.name}: released {len(released)} claim(s)")


class _Renewer:
    """Renews the worker's lease every third of it while a batch is being worked on."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="kiwifs-lease", daemon=True)

    def _loop(self) -> None:
        while not self.done.wait(self.worker.lease_seconds / 3):
            try:
                self.worker.renew()
            except KiwiError as exc:
                self.worker.log(f"{self.worker.name}: lease renewal failed: {exc.message}")

    def __enter__(self) -> _Renewer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()


def _frontmatter_block(text: str) -> str:
    """The page's text up to its body (its frontmatter block, delimiters included)."""
    data = text.encode("utf-8")
    return data[: len(data) - len(split(data)[1])].decode("utf-8")


def _title(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".md").replace("-", " ")
