"""A replica: a root that follows a primary's over git and serves reads from its own index.

``kiwifs serve --replica-of URL`` (or ``[replication] primary``) makes the default root a
replica of the primary at ``URL`` (a kiwifs server's base URL). A replica on a missing or empty
folder clones the primary first (:func:`prepare_replica`). While it serves, a :class:`Follower`
keeps it current: it fetches the primary's branch over git's smart HTTP, fast-forwards this
root onto it (:func:`kiwifs.git.follow.fast_forward`: the changed files written, the branch
moved), indexes exactly the paths that changed (never a full rebuild) and publishes them on the
events stream as a local write would. It fetches when the primary's event stream says something
changed, and every :data:`POLL` seconds whatever it says (the stream may be down).

The role is kept in ``.kiwi/state/replication.json`` (never in git: ``.kiwi/config.toml`` is
part of the history a replica takes from its primary), so a restarted replica follows again
without the flag. Writes are not made here: the REST layer forwards them to the primary and
waits, with :meth:`Follower.wait_for`, until their commit is applied, so a caller reads its own
write on this replica at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiwifs.errors import Conflict, StorageError, UsageError
from kiwifs.files.atomic import write_in
from kiwifs.git import follow
from kiwifs.writes.events import Event

if TYPE_CHECKING:
    from kiwifs.knowledge import Knowledge

log = logging.getLogger("kiwifs.replica")

STATE_FILE = ".kiwi/state/replication.json"
ACK_PATH = "/api/replication/ack"
DEMOTE_PATH = "/api/replication/demote"
STEP_DOWN_EVERY = 2.0  # seconds between a promoted node's calls to its former primary
POLL = 1.0  # seconds between fetches when the primary's event stream says nothing
STREAM_RETRY = 2.0  # seconds before the event stream is opened again after it ended
_SHA = re.compile(r"[0-9a-f]{40}")
EVENTS_EACH = 32  # a catch-up of more changes is published as one bulk event
REPLICATION_ACTOR = "replication"  # the actor of the events a replica publishes
MAX_REPLICAS = 64  # replicas a primary remembers the acknowledgements of


@dataclass(frozen=True)
class Role:
    """What a node is for one root: the primary (``primary`` is None) or a replica of it."""

    primary: str | None = None
    key: str | None = None
    branch: str = "main"
    space: str | None = None  # the primary's space followed (None: its default root)

    @property
    def replica(self) -> bool:
        return self.primary is not None

    @property
    def api(self) -> str:
        """The primary's ``/api/kiwi`` for the space followed."""
        assert self.primary is not None
        return f"{self.primary}/api/kiwi/{self.space}" if self.space else f"{self.primary}/api/kiwi"

    def to_json(self) -> dict[str, Any]:
        return {
            "primary": self.primary,
            "key": self.key,
            "branch": self.branch,
            "space": self.space,
        }


def load_role(root: Path) -> Role:
    """The role recorded for ``root`` (a primary when none is)."""
    try:
        data = json.loads((root / STATE_FILE).read_text())
    except (OSError, ValueError):
        return Role()
    if not isinstance(data, dict) or not isinstance(data.get("primary"), str):
        return Role()
    key, branch, space = data.get("key"), data.get("branch"), data.get("space")
    return Role(
        data["primary"],
        key if isinstance(key, str) else None,
        branch if isinstance(branch, str) else "main",
        space if isinstance(space, str) and space else None,
    )


def save_role(root: Path, role: Role) -> None:
    """Record ``root``'s role (readable by its owner only: it may hold the primary's key)."""
    path = root / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_in(folder, path.name, json.dumps(role.to_json()).encode(), mode=0o600)
    finally:
        os.close(folder)


def check_primary_url(url: str) -> str:
    """``url`` as a primary's base URL: ``http(s)://host[:port]``, no trailing slash."""
    text = url.strip().rstrip("/")
    if not text.startswith(("http://", "https://")) or "@" in text.split("/")[2]:
        raise UsageError(f"--replica-of takes a server's URL (http://host:port), not {url!r}")
    return text


def prepare_replica(root: Path, role: Role) -> None:
    """Before a replica opens ``root``: clone the primary into it when it is missing or empty,
    and record the role, so that a restart follows again."""
    assert role.primary is not None
    if not root.exists() or not any(root.iterdir()):
        follow.clone(follow.git_url(role.primary, role.space), root, role.key)
    elif not (root / ".git").is_dir():
        raise UsageError(f"{root} is not empty and not a repository: a replica needs an empty root")
    branch = follow.branch_ref(root).removeprefix("refs/heads/")
    save_role(root, Role(role.primary, role.key, branch, role.space))


class Follower:
    """Keeps one replica root current (see the module's docstring); ``start``, ``stop``."""

    def __init__(self, kb: Knowledge, role: Role, poll: float = POLL) -> None:
        assert role.primary is not None
        self.kb = kb
        self.role = role
        self.url = follow.git_url(role.primary, role.space)
        self.poll = poll
        self.applied: str | None = kb.git.head() if kb.git is not None else None
        self.primary_head: str | None = None
        self.behind_since: float | None = None  # when the primary was first seen ahead
        self.error: str | None = None
        self.name = f"{socket.gethostname()}:{kb.root}"  # how the primary tells replicas apart
        self._nudge = threading.Event()
        self._stop = threading.Event()
        self._applied = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._stream: Any = None  # the event stream's response while connected (stop shuts it)
        self._client: Any = None  # the follower thread's client for its reports

    # -- running ---------------------------------------------------------------------------

    def start(self) -> None:
        for target, name in ((self._run, "kiwifs-follower"), (self._listen, "kiwifs-nudges")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop following: the event stream is closed under its reader (which would otherwise
        wait for the primary's next line), the fetch loop ends after its round."""
        self._stop.set()
        self._nudge.set()
        stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):  # the socket shut under its reader: it ends
                network = stream.extensions["network_stream"]
                network.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def nudge(self) -> None:
        """Fetch now (the primary said something changed, or a forwarded write returned)."""
        self._nudge.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._nudge.wait(self.poll)
            self._nudge.clear()
            if self._stop.is_set():
                return
            self.catch_up()

    def catch_up(self) -> bool:
        """Fetch and apply what the primary committed since; True when something was applied."""
        try:
            fetched = follow.fetch(self.kb.root, self.url, self.role.key, self.role.branch)
        except StorageError as exc:
            self._failed(f"fetch from {self.role.primary} failed: {exc.message}")
            return False
        if fetched is None or fetched == self.applied:
            self._current(fetched)
            return False
        if self.behind_since is None:
            self.behind_since = time.monotonic()
        self.primary_head = fetched
        try:
            before = self.kb.git.head() if self.kb.git is not None else None
            changes = follow.fast_forward(self.kb.root, fetched, keep_diverged=True)
        except Conflict as exc:
            self._failed(f"cannot follow the primary: {exc.message}")
            return False
        except (OSError, StorageError, KeyError, ValueError) as exc:
            self._failed(f"applying {fetched} failed: {exc}")
            return False
        if before is not None and before in follow.diverged(self.kb.root):
            log.error(
                "replica of %s: this root had commits the primary lacks; they are kept on %s/%s",
                self.role.primary,
                follow.DIVERGED_REFS,
                before,
            )
        self._applied_now(fetched, changes)
        return True

    def _applied_now(self, commit: str, changes: list[follow.Change]) -> None:
        if self.kb.git is not None:
            self.kb.git.head_moved()
        paths = [c.path for c in changes]
        if paths:
            self.kb.indexing.on_written(paths)
        if len(changes) > EVENTS_EACH:  # one event, as a bulk write makes: no buffer overflows
            self.kb.events.publish(Event("bulk", paths=tuple(paths), actor=REPLICATION_ACTOR))
        else:
            for change in changes:
                self.kb.events.publish(Event(change.op, path=change.path, actor=REPLICATION_ACTOR))
        with self._applied:
            self.applied = commit
            self.behind_since = None
            self.error = None
            self._applied.notify_all()
        self._report(commit)  # held here: the primary may acknowledge (after the readers here)

    def _current(self, fetched: str | None) -> None:
        with self._applied:
            self.primary_head = fetched
            self.behind_since = None
            self.error = None

    def _failed(self, message: str) -> None:
        if message != self.error:
            log.error("replica of %s: %s", self.role.primary, message)
        self.error = message

    def _report(self, commit: str) -> None:
        """Tell the primary this replica holds ``commit`` (what ``acks = 1`` waits for)."""
        import httpx

        headers = {"Authorization": f"Bearer {self.role.key}"} if self.role.key else {}
        if self.role.space:
            return  # acknowledgements are a primary's default root's (acks = 1 is its setting)
        body = {"replica": self.name, "commit": commit}
        if self._client is None:  # kept alive: a new connection per report cost ~25 ms
            self._client = httpx.Client(timeout=5.0)
        try:
            self._client.post(f"{self.role.primary}{ACK_PATH}", json=body, headers=headers)
        except httpx.HTTPError as exc:
            log.warning("replica of %s: acknowledgement not sent: %s", self.role.primary, exc)

    # -- the primary's event stream: a prompt nudge ---------------------------------------

    def _listen(self) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {self.role.key}"} if self.role.key else {}
        url = f"{self.role.api}/events"
        while not self._stop.is_set():
            try:
                with (
                    httpx.Client(timeout=httpx.Timeout(10.0, read=30.0)) as client,
                    client.stream("GET", url, headers=headers) as resp,
                ):
                    if resp.status_code != 200:
                        raise OSError(f"event stream: HTTP {resp.status_code}")
                    self._stream = resp
                    if self._stop.is_set():
                        return
                    self.nudge()  # (re)connected: whatever happened meanwhile is fetched
                    for line in resp.iter_lines():
                        if self._stop.is_set():
                            return
                        if line.startswith("data:"):
                            self.nudge()
            except Exception:  # noqa: BLE001 - down, refused, closed by stop(): try again later
                pass
            finally:
                self._stream = None
            self._stop.wait(STREAM_RETRY)

    # -- read-your-writes -------------------------------------------------------------------

    def has(self, commit: str) -> bool:
        """Whether ``commit`` is applied here (it, or a commit after it)."""
        return holds(self.kb, self.applied, commit)

    def wait_for(self, commit: str, timeout: float) -> bool:
        """Wait until ``commit`` is applied here, fetching at once; False after ``timeout``."""
        deadline = time.monotonic() + timeout
        if self.has(commit):
            return True
        self.nudge()  # once: the primary's event stream and the poll bring what follows
        with self._applied:
            while not self.has(commit):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._applied.wait(remaining)
        return True

    def status(self) -> dict[str, Any]:
        """What ``GET /api/replication`` shows of a replica."""
        behind = self.behind_since
        lag = 0.0 if behind is None else round(time.monotonic() - behind, 3)
        out: dict[str, Any] = {
            "role": "replica",
            "primary": self.role.primary,
            "applied_commit": self.applied,
            "primary_commit": self.primary_head or self.applied,
            "lag_seconds": lag,
            "state": "error" if self.error else "following",
        }
        kept = follow.diverged(self.kb.root)
        if kept:  # a former primary's own commits: kept, named, never followed
            out["diverged_commits"] = kept
        if self.error:
            out["error"] = self.error
        return out


class AckBoard:
    """A primary's view of its replicas: the newest commit each one holds, as it reported it
    (``POST /api/replication/ack``), and the wait of ``[replication] acks = 1``: a write is
    acknowledged only once some replica holds its commit."""

    def __init__(self, kb: Knowledge) -> None:
        self.kb = kb
        self._held: dict[str, tuple[str, float]] = {}  # replica → (commit, when, monotonic)
        self._cond = threading.Condition()

    def ack(self, replica: str, commit: str) -> None:
        with self._cond:
            self._held[replica[:200]] = (commit, time.monotonic())
            while len(self._held) > MAX_REPLICAS:  # the longest silent ones are forgotten
                del self._held[min(self._held, key=lambda r: self._held[r][1])]
            self._cond.notify_all()

    def held(self, commit: str) -> bool:
        """Whether some replica reported ``commit`` or a commit after it."""
        return any(holds(self.kb, held, commit) for held, _ in list(self._held.values()))

    def wait(self, commit: str, timeout: float) -> bool:
        """Wait until some replica holds ``commit``; False after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self.held(commit):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def replicas(self) -> list[dict[str, Any]]:
        """The replicas heard from, for ``GET /api/replication`` on a primary."""
        now = time.monotonic()
        with self._cond:
            return [
                {"replica": name, "commit": commit, "seconds_ago": round(now - when, 3)}
                for name, (commit, when) in sorted(self._held.items())
            ]


# -- what every interface asks: this root's follower, the commit a write made, a commit reached

_followers: weakref.WeakKeyDictionary[Knowledge, Follower] = weakref.WeakKeyDictionary()


def follower_of(kb: Knowledge) -> Follower | None:
    """The follower of ``kb`` while it is a replica (``None``: the primary)."""
    return _followers.get(kb)


def set_follower(kb: Knowledge, follower: Follower | None) -> None:
    if follower is None:
        _followers.pop(kb, None)
    else:
        _followers[kb] = follower


def committed_head(kb: Knowledge) -> str | None:
    """HEAD once a write returned: a commit holding the write, unless commits are still pending
    (``--async-commit``: the write's commit is made later, and none is named)."""
    git = kb.git
    if git is None or kb.commit_status().pending:
        return None
    return git.head()


def reached(kb: Knowledge, commit: str, timeout: float) -> bool:
    """Whether ``commit`` (40 hex digits) is applied on this node: a replica waits for it up to
    ``timeout`` seconds; a primary has it (HEAD or an ancestor of HEAD) or never will."""
    if not _SHA.fullmatch(commit):
        return False
    follower = follower_of(kb)
    if follower is not None:
        return follower.wait_for(commit, timeout)
    return holds(kb, kb.git.head() if kb.git is not None else None, commit)


def holds(kb: Knowledge, have: str | None, commit: str) -> bool:
    """Whether a node at commit ``have`` holds ``commit``: it is ``have`` or an ancestor of it
    in ``kb``'s repository (an id the repository lacks, or cannot parse, is not held)."""
    if have is None:
        return False
    if have == commit:
        return True
    git = kb.git
    if git is None:
        return False
    try:
        return bool(git.repo.descendant_of(have, commit))
    except Exception:  # noqa: BLE001 - an id pygit2 cannot parse or find: not held
        return False


class StepDown:
    """A promoted node's fence against its former primary coming back: until the former
    primary answers, it is told every :data:`STEP_DOWN_EVERY` seconds to follow this node
    (``POST {former}/api/replication/demote``). The moment it is back and reachable it stops
    taking writes and follows; the writes it took meanwhile, which this node lacks, are kept on
    its ``refs/kiwifs/diverged/<sha>`` (see :func:`kiwifs.git.follow.fast_forward`), named in its
    ``/api/replication``, never lost and never merged unseen."""

    def __init__(self, former: str, here: str, key: str | None) -> None:
        self.former = former
        self.here = here
        self.key = key
        self.done = False
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kiwifs-step-down", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        body = {"primary": self.here}
        while not self._stop.is_set():
            try:
                resp = httpx.post(
                    f"{self.former}{DEMOTE_PATH}", json=body, headers=headers, timeout=5.0
                )
                if resp.status_code == 200:
                    self.done = True
                    log.info("former primary %s now follows %s", self.former, self.here)
                    return
                self.error = f"HTTP {resp.status_code}: {resp.text[:200]}"
            except httpx.HTTPError as exc:
                self.error = str(exc) or type(exc).__name__  # down: asked again later
            self._stop.wait(STEP_DOWN_EVERY)

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"former_primary": self.former, "stepped_down": self.done}
        if self.error and not self.done:
            out["error"] = self.error
        return out
