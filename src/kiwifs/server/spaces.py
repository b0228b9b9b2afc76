"""Spaces: one server, many knowledge roots, and the rules of which are open.

A space is a whole knowledge root (files, git, index, claims, watcher, events) served by one
``kiwifs serve``. The ``--root`` root is the space ``default``; the others come from its config's
``[[spaces]]`` and from clients at run time (:mod:`kiwifs.server.spacestore` keeps them).
:class:`SpaceRegistry` holds every rule about them, so the interfaces only translate:

* names (:func:`kiwifs.config.space_name_problem`, plus the names the REST routes take for
  themselves, handed in by the REST layer with :meth:`SpaceRegistry.reserve`);
* roots: a run-time space lives in ``<default root>/.spaces/``, laid out as ``kiwifs init``
  does; a deleted one is renamed aside, never removed;
* cost: a space opens on its first request (a :class:`Knowledge` and its :class:`Serving`),
  at most ``Tuning.max_open_spaces`` at once besides the default one, the least recently used
  closed first and any closed after ``Tuning.space_idle`` seconds without a request; never
  while a request holds it. A server with a thousand spaces starts as fast as with one.

Thread-safe: requests acquire and release spaces from worker threads; opening and closing run
outside the registry's lock, and a request for a space being opened or closed waits for it.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kiwifs.config import DEFAULT_SPACE, load_config, space_name_problem
from kiwifs.errors import ConfigError, Conflict, UnknownSpace, UsageError
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving
from kiwifs.server.replica import Role, load_role, prepare_replica
from kiwifs.server.spacestore import (
    SpaceEntry,
    SpaceInfo,
    load_state,
    runtime_root,
    save_state,
    set_aside,
    space_info,
)
from kiwifs.tuning import Tuning

CLOSE_WAIT = 30.0  # seconds a space being deleted or shut down waits for its requests


class OpenSpace:
    """An open space: its root's :class:`Knowledge` and background work, the requests in
    flight, and what the interfaces attached to it (``cache``: the REST app built for it, which
    goes away with it; ``on_close``: how they let go of it before it closes)."""

    def __init__(self, name: str, kb: Knowledge, serving: Serving, lock_fd: int | None) -> None:
        self.name = name
        self.kb = kb
        self.serving = serving
        self.cache: dict[str, Any] = {}
        self.in_flight = 0
        self.last_used = 0.0
        self.closing = False
        self._lock_fd = lock_fd
        self._closers: list[Callable[[], None]] = []

    def on_close(self, closer: Callable[[], None]) -> None:
        self._closers.append(closer)

    def close(self) -> None:
        """Let the interfaces go first (their apps still hold the root), then stop the
        background work and close the root, then release its server lock."""
        try:
            for closer in reversed(self._closers):
                closer()
        finally:
            self.cache.clear()
            self.serving.stop()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None


class SpaceRegistry:
    """The spaces of a server whose default root is ``default`` (already open, never closed
    here). ``clock``: monotonic seconds (tests pass their own); ``dashboard``: start each
    space's dashboard loops (the web interface is served)."""

    def __init__(
        self,
        default: Knowledge,
        tuning: Tuning | None = None,
        clock: Callable[[], float] = time.monotonic,
        dashboard: bool = True,
    ) -> None:
        self.root = default.root
        self.tuning = tuning or default.tuning
        self.clock = clock
        self.dashboard = dashboard
        self.reserved: frozenset[str] = frozenset()
        self._state = load_state(self.root)
        self._spaces = self._state.effective(self.root, default.config)
        self._default = OpenSpace(DEFAULT_SPACE, default, Serving(default), None)
        self._open: OrderedDict[str, OpenSpace] = OrderedDict()  # least recently used first
        self._busy: set[str] = set()  # being opened, made or deleted
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None

    # -- names --------------------------------------------------------------------------------

    def reserve(self, names: Iterable[str]) -> None:
        """Refuse ``names`` as space names from now on (the first path segments of the REST
        routes, which ``/api/kiwi/NAME/…`` would shadow); a space already named so is a
        :class:`ConfigError`, which stops the server at start."""
        with self._cond:
            self.reserved = self.reserved | frozenset(names)
            clash = sorted(self.reserved & self._spaces.keys())
        if clash:
            raise ConfigError(
                f"space {clash[0]!r} is named like a route of the REST API; rename it"
            )

    def check_name(self, name: str) -> None:
        """:class:`UsageError` unless ``name`` may name a new space."""
        problem = space_name_problem(name)
        if problem is not None:
            raise UsageError(problem)
        if name == DEFAULT_SPACE or name in self.reserved:
            raise UsageError(f"invalid space name {name!r}: the name is reserved")

    def names(self) -> list[str]:
        with self._cond:
            return [DEFAULT_SPACE, *sorted(self._spaces)]

    def entry(self, name: str) -> SpaceEntry:
        """The space named ``name``; :class:`UnknownSpace` when there is none."""
        with self._cond:
            if name == DEFAULT_SPACE:
                return SpaceEntry(DEFAULT_SPACE, self.root)
            found = self._spaces.get(name)
        if found is None:
            raise UnknownSpace(name)
        return found

    # -- management ---------------------------------------------------------------------------

    def info(self, name: str) -> SpaceInfo:
        return space_info(self.entry(name))

    def listing(self) -> list[SpaceInfo]:
        return [space_info(self.entry(n)) for n in self.names() if self.exists(n)]

    def exists(self, name: str) -> bool:
        with self._cond:
            return name == DEFAULT_SPACE or name in self._spaces

    def create(
        self, name: str, root: str | None = None, replica_of: Role | None = None
    ) -> SpaceInfo:
        """Make a space at run time: its root laid out as ``kiwifs init`` does (in
        ``.spaces/NAME`` unless ``root`` names another folder there), or, with ``replica_of``,
        cloned from that primary's space and following it; recorded, so it is still there
        after a restart. :class:`Conflict` when the name is taken."""
        self.check_name(name)
        target = runtime_root(self.root, name, root)
        with self._cond:
            if name in self._spaces or name in self._busy:
                raise Conflict(f"space {name!r} already exists")
            if any(e.root.resolve() == target for e in self._spaces.values()):
                raise UsageError(f"another space already has the root {target}")
            self._busy.add(name)
        try:
            if replica_of is not None:
                prepare_replica(target, replica_of)
            else:
                Knowledge.init(target)
            entry = SpaceEntry(name, target)
            with self._cond:
                self._state.created = [e for e in self._state.created if e.name != name]
                self._state.created.append(entry)
                save_state(self.root, self._state)
                self._spaces[name] = entry
        finally:
            with self._cond:
                self._busy.discard(name)
                self._cond.notify_all()
        return space_info(entry)

    def delete(self, name: str) -> None:
        """Remove a space (soft: its root is kept, renamed ``<root>.deleted-<stamp>``). The
        space closes first, after its requests end; the deletion is recorded, so a configured
        space stays deleted after a restart too. The default space cannot be deleted."""
        if name == DEFAULT_SPACE:
            raise UsageError("the default space cannot be deleted")
        with self._cond:
            while name in self._busy:  # being opened, or deleted by another request
                self._cond.wait()
            entry = self._spaces.get(name)
            if entry is None:
                raise UnknownSpace(name)
            del self._spaces[name]  # from now on requests for it are unknown
            self._busy.add(name)
            space = self._open.get(name)
            if space is not None:
                space.closing = True
        try:
            if space is not None:
                self._close(space, wait=True)
            set_aside(entry.root)
            with self._cond:
                self._state.created = [e for e in self._state.created if e.name != name]
                self._state.deleted.add(name)
                save_state(self.root, self._state)
        finally:
            with self._cond:
                self._busy.discard(name)
                self._cond.notify_all()

    # -- requests: acquire and release --------------------------------------------------------

    def acquire(self, name: str) -> OpenSpace:
        """The space ``name``, open, held for one request until :meth:`release`.
        :class:`UnknownSpace` when there is none; opens it when it is closed."""
        if name == DEFAULT_SPACE:
            return self._default
        with self._cond:
            while True:
                entry = self._spaces.get(name)
                if entry is None:
                    raise UnknownSpace(name)
                space = self._open.get(name)
                if space is not None and not space.closing:
                    self._hold(space)
                    return space
                if space is None and name not in self._busy:
                    self._busy.add(name)
                    break
                self._cond.wait()
        try:
            space = self._open_space(entry)
        finally:
            with self._cond:
                self._busy.discard(name)
                self._cond.notify_all()
        with self._cond:
            self._open[name] = space
            self._hold(space)
        self._close_all(self._take_victims())
        return space

    def release(self, space: OpenSpace) -> None:
        """A request is done with ``space``; spaces over the bound or idle close now."""
        if space is self._default:
            return
        with self._cond:
            space.in_flight -= 1
            space.last_used = self.clock()
            self._cond.notify_all()
        self._close_all(self._take_victims())

    def sweep(self) -> None:
        """Close the spaces idle for ``Tuning.space_idle`` seconds (and any over the bound)."""
        self._close_all(self._take_victims())

    def open_names(self) -> list[str]:
        """The spaces open now, least recently used first (the default one is always open)."""
        with self._cond:
            return [n for n, s in self._open.items() if not s.closing]

    def _hold(self, space: OpenSpace) -> None:
        space.in_flight += 1
        space.last_used = self.clock()
        self._open.move_to_end(space.name)

    def _open_space(self, entry: SpaceEntry) -> OpenSpace:
        """Open a space as ``serve`` opens its root: crash repairs, the server lock, git and
        the embedder ready, background work started. A configured root that is not there yet
        is laid out first."""
        if not entry.root.exists():
            Knowledge.init(entry.root)
        kb = Knowledge.open(entry.root, sweep=True, tuning=self.tuning.for_space())
        serving = Serving(kb)
        lock_fd: int | None = None
        try:
            lock_fd = serving.lock_root()
            role = load_role(entry.root)
            if role.replica:  # a space that follows another server's
                serving.follow(role)
            serving.prepare()
            versioning = kb.config.versioning
            if versioning.async_commit:
                serving.enable_async_commit(
                    versioning.batch_window_ms / 1000, versioning.batch_max_size
                )
            serving.start_commit_process()
            serving.start(dashboard=self.dashboard and not self.tuning.light_spaces)
        except BaseException:
            kb.close()
            if lock_fd is not None:
                os.close(lock_fd)
            raise
        return OpenSpace(entry.name, kb, serving, lock_fd)

    # -- closing ------------------------------------------------------------------------------

    def _take_victims(self) -> list[OpenSpace]:
        """Under the lock, mark closing the spaces to close: idle ones, then the least recently
        used ones while more than ``Tuning.max_open_spaces`` are open. A space a request holds
        is never taken; the bound is met again when its requests end."""
        now = self.clock()
        victims: list[OpenSpace] = []
        with self._cond:
            live = [s for s in self._open.values() if not s.closing]
            extra = len(live) - max(self.tuning.max_open_spaces, 0)
            for space in live:  # least recently used first
                idle = now - space.last_used >= self.tuning.space_idle
                if space.in_flight == 0 and (idle or extra > 0):
                    space.closing = True
                    victims.append(space)
                    extra -= 1
        return victims

    def _close_all(self, spaces: list[OpenSpace]) -> None:
        for space in spaces:
            self._close(space, wait=False)

    def _close(self, space: OpenSpace, wait: bool) -> None:
        """Close ``space`` (already marked closing, so no request takes it); with ``wait``,
        first end its event streams and wait for its requests, at most :data:`CLOSE_WAIT`."""
        if wait:
            space.kb.events.close()
            deadline = time.monotonic() + CLOSE_WAIT
            with self._cond:
                while space.in_flight > 0 and time.monotonic() < deadline:
                    self._cond.wait(0.1)
        try:
            space.close()
        finally:
            with self._cond:
                if self._open.get(space.name) is space:
                    del self._open[space.name]
                self._cond.notify_all()

    def end_streams(self) -> None:
        """End the event streams of every open space (the server is stopping)."""
        with self._cond:
            spaces = list(self._open.values())
        for space in spaces:
            space.kb.events.close()

    def start_sweeping(self, every: float | None = None) -> None:
        """Close idle spaces from a background thread, checking every ``every`` seconds
        (default: a tenth of ``Tuning.space_idle``, between 1 and 30 s)."""
        period = every or min(max(self.tuning.space_idle / 10, 1.0), 30.0)

        def loop() -> None:
            while not self._stop.wait(period):
                self.sweep()

        self._sweeper = threading.Thread(target=loop, name="kiwifs-spaces", daemon=True)
        self._sweeper.start()

    def close(self) -> None:
        """Stop sweeping and close every open space (the default one is its server's)."""
        self._stop.set()
        if self._sweeper is not None:
            self._sweeper.join()
        with self._cond:
            spaces = [s for s in self._open.values() if not s.closing]
            for space in spaces:
                space.closing = True
        for space in spaces:
            self._close(space, wait=True)


def space_root(default: Path, name: str) -> Path:
    """The root of the space ``name`` of the server whose default root is ``default``, without
    opening anything (``kiwifs mcp --space``); :class:`UnknownSpace` when there is none."""
    if name == DEFAULT_SPACE:
        return default
    found = load_state(default).effective(default, load_config(default)).get(name)
    if found is None:
        raise UnknownSpace(name)
    return found.root
