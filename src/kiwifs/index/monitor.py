"""The change monitor: a small process that watches a large root and tells one-shot commands
which folders changed since they last looked, so that they need not stat every file.

A one-shot command (``kiwifs memory report``, ``kiwifs search``) must see edits made behind
kiwifs's back, and without help it stats every file of the root to find them: a million ``lstat``
calls, seconds of CPU on a root of a million episodes. Only something that watched the root all
along can vouch that a folder did not change; git's ``fsmonitor`` daemon and Watchman answer the
same question for git. So on a root of :attr:`Tuning.monitor_files` files or more (Linux only),
the first command that walks the whole root starts this monitor, and every later command asks it
first.

**What it keeps.** The monitor watches every folder the walk enters (inotify, one watch each: not
the hidden ones, so git's and the index's own writes are never heard) and keeps, per folder, the
number of the last event in it: *flat* for a file that changed in it (the folder's own entries
must be signed again), *tree* for a folder that came, went or moved (the whole sub-tree must be
walked again). Nothing is read, parsed or indexed here: the command that asks does that, by the
walk's own rules, over just those folders (:class:`index.walk.FolderJobs`).

**How a command asks** (:func:`sync`): it sends the ``epoch`` and ``position`` its index was last
brought up to; the monitor creates a *cookie* file in its own hidden folder and answers once the
cookie's event comes back, so every event before the question has been read (events of one
inotify queue arrive in order), with its position now and the folders changed since. A command
stores the position only after its index holds what the folders hold.

**When it cannot vouch** it says ``full`` and the command walks everything, as without a monitor:
another epoch (the monitor restarted), a position it never gave, a lost event (the kernel's queue
overflowed: a new epoch starts), more than :data:`MAX_FOLDERS` folders changed, a folder that
could not be watched (the user's inotify watch limit), or a symbolic link to a knowledge file
anywhere (its target may change without an event where the link is). A
change the kernel does not report — a network filesystem written from another machine, a file
edited through a hard link from outside the root — is not seen: ``KIWIFS_MONITOR=off`` (or
``Tuning.monitor_files = 0``) keeps every command on the full walk.

**Its life.** Started detached (a session of its own, no terminal, standard streams on
``/dev/null``), at a lower priority. It answers only processes of its own user (or root), on an
abstract socket named after the root's real path (no file to leave behind). It exits when the
root goes, when its socket name is taken by another monitor, on ``SIGTERM``, and after
:data:`IDLE_SECONDS` without a question.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import secrets
import selectors
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
from dataclasses import dataclass

from kiwifs.base import walk

# inotify's constants (linux/inotify.h)
IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO = 0x2, 0x4, 0x8, 0x40, 0x80
IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF = 0x100, 0x200, 0x400, 0x800
IN_UNMOUNT, IN_Q_OVERFLOW, IN_IGNORED = 0x2000, 0x4000, 0x8000
IN_ONLYDIR, IN_DONT_FOLLOW, IN_EXCL_UNLINK = 0x01000000, 0x02000000, 0x04000000
IN_ISDIR = 0x40000000
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
FOLDER_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
)
COOKIE_MASK = IN_CREATE | IN_ONLYDIR | IN_DONT_FOLLOW
EVENT = struct.Struct("iIII")  # wd, mask, cookie, name length

COOKIES = ".kiwi/state/sync"  # the monitor's own folder, where cookies are created
IDLE_SECONDS = 3600.0  # without a question for this long, the monitor exits
MAX_FOLDERS = 10_000  # more folders changed than this: a full walk is the cheaper answer
ANSWER_SECONDS = 5.0  # a command waits this long for an answer, then walks everything
START_SECONDS = 30.0  # a command waits this long for a monitor it started to be ready
NICENESS = 10

FLAT, TREE = "flat", "tree"


@dataclass(frozen=True)
class Changes:
    """A monitor's answer: its ``epoch`` and ``position`` now, and either ``full`` (walk
    everything) or the folders changed since the position asked about, as relative paths
    (``""``: the root): ``flat``, whose own entries changed, and ``trees``, to walk whole."""

    epoch: str
    position: int
    full: bool
    flat: tuple[str, ...] = ()
    trees: tuple[str, ...] = ()


def address(root: str | os.PathLike[str]) -> bytes:
    """The abstract socket name of ``root``'s monitor (Linux: no file in the root)."""
    real = os.path.realpath(os.fspath(root)).encode("utf-8", "surrogateescape")
    return b"\0kiwifs-monitor-" + hashlib.sha256(real).hexdigest()[:32].encode()


def supported() -> bool:
    return sys.platform.startswith("linux")


# -- the asking side ---------------------------------------------------------------------------


def sync(root: str | os.PathLike[str], epoch: str | None, position: int | None) -> Changes | None:
    """Ask ``root``'s monitor what changed since ``position`` of ``epoch``; ``None`` when no
    monitor answers (none runs, or it failed: the caller walks everything)."""
    if not supported():
        return None
    request = json.dumps({"epoch": epoch, "since": position}).encode() + b"\n"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(ANSWER_SECONDS)
            conn.connect(address(root))
            conn.sendall(request)
            answer = _read_line(conn)
    except OSError:
        return None
    return _changes(answer)


def _read_line(conn: socket.socket) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            return b"".join(chunks)


def _changes(answer: bytes) -> Changes | None:
    try:
        value = json.loads(answer)
        return Changes(
            str(value["epoch"]),
            int(value["position"]),
            bool(value["full"]),
            tuple(str(f) for f in value.get("flat", ())),
            tuple(str(t) for t in value.get("trees", ())),
        )
    except (ValueError, KeyError, TypeError):
        return None


def start(root: str | os.PathLike[str]) -> bool:
    """Start ``root``'s monitor unless one runs; True once one is ready to answer.

    The new process sets its watches up, takes the socket name, then leaves a detached copy of
    itself running and exits: its ``ready`` line tells the watches are in place."""
    if not supported():
        return False
    command = [sys.executable, "-m", "kiwifs.index.monitor", os.path.abspath(os.fspath(root))]
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
        )
    except OSError:
        return False
    try:
        assert proc.stdout is not None
        line = _first_line(proc)
    finally:
        if proc.stdout is not None:
            proc.stdout.close()
        try:
            proc.wait(START_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return line in (b"ready", b"running")


def _first_line(proc: subprocess.Popen[bytes]) -> bytes:
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not selector.select(START_SECONDS):
            return b""
    finally:
        selector.close()
    return proc.stdout.readline().strip()


def stop(root: str | os.PathLike[str]) -> bool:
    """Ask ``root``'s monitor to exit; True when one answered."""
    if not supported():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(ANSWER_SECONDS)
            conn.connect(address(root))
            conn.sendall(b'{"stop": true}\n')
            return _read_line(conn).strip() == b'{"stopped": true}'
    except OSError:
        return False


# -- the monitor -------------------------------------------------------------------------------


class _Inotify:
    """The three inotify calls, through libc (no library offers an inotify that reports a lost
    event: watchfiles, which the server's watcher uses, does not)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._rm = libc.inotify_rm_watch
        self._rm.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd: int = fd

    def add(self, path: bytes, mask: int) -> int:
        wd = int(self._add(self.fd, path, mask))
        if wd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
        return wd

    def remove(self, wd: int) -> None:
        self._rm(self.fd, wd)

    def events(self) -> list[tuple[int, int, bytes]]:
        """The events waiting: ``(wd, mask, name)`` each."""
        found: list[tuple[int, int, bytes]] = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return found
            at = 0
            while at < len(data):
                wd, mask, _, size = EVENT.unpack_from(data, at)
                name = data[at + EVENT.size : at + EVENT.size + size].rstrip(b"\0")
                found.append((wd, mask, name))
                at += EVENT.size + size


class Monitor:
    """The watches of one root and the journal of the folders that changed (see the module)."""

    def __init__(self, root: str) -> None:
        self.root = os.fsencode(os.path.realpath(root))
        self.inotify = _Inotify()
        self.folders: dict[int, bytes] = {}  # wd -> folder, relative (b"": the root)
        self.watched: dict[bytes, int] = {}  # folder -> wd
        self.journal: dict[tuple[str, bytes], int] = {}  # (FLAT or TREE, folder) -> position
        self.position = 0
        self.epoch = secrets.token_hex(8)
        self.links = False  # a symlinked knowledge file seen: no answer but ``full``
        self.blind = False  # a folder that could not be watched: no answer but ``full``
        self.gone = False  # the root went: exit
        self.cookie_wd = -1
        self.cookies = 0
        self.pending: dict[bytes, tuple[socket.socket, dict[str, object]]] = {}

    # -- the watches ----------------------------------------------------------------------------

    def watch_all(self) -> None:
        """Watch the cookie folder and every folder the walk enters, each before it is listed
        (a sub-folder made meanwhile is then either listed or heard of)."""
        cookies = os.path.join(self.root, os.fsencode(COOKIES))
        os.makedirs(cookies, exist_ok=True)
        self.cookie_wd = self.inotify.add(cookies, COOKIE_MASK)
        for name in os.listdir(cookies):  # cookies a killed monitor left
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(cookies, name))
        self._watch_tree(b"")

    def _watch_tree(self, top: bytes) -> None:
        todo = [top]
        while todo:
            rel = todo.pop()
            path = self._abs(rel)
            try:
                wd = self.inotify.add(path, FOLDER_MASK)
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    self.blind = True  # a folder not watched (the watch limit?): vouch for none
                continue  # gone again, or not a folder now: its parent's event said so
            self.folders[wd] = rel
            self.watched[rel] = wd
            try:
                listing = walk.list_folder(path)
            except OSError:
                continue
            if listing.links:
                self.links = True
            todo.extend(rel + b"/" + name if rel else name for name in listing.folders)

    def _unwatch_tree(self, top: bytes) -> None:
        inside = top + b"/"
        for rel in [r for r in self.watched if r == top or r.startswith(inside)]:
            wd = self.watched.pop(rel)
            self.folders.pop(wd, None)
            self.inotify.remove(wd)

    def _abs(self, rel: bytes) -> bytes:
        return self.root + b"/" + rel if rel else self.root

    # -- the events -----------------------------------------------------------------------------

    def read_events(self) -> None:
        for wd, mask, name in self.inotify.events():
            if mask & IN_Q_OVERFLOW:
                self._lost()
            elif wd == self.cookie_wd:
                if mask & IN_IGNORED:
                    self.gone = True  # its folder went: no question could be answered
                elif name:
                    self._cookie(name)
            else:
                self._event(wd, mask, name)

    def _event(self, wd: int, mask: int, name: bytes) -> None:
        folder = self.folders.get(wd)
        if folder is None:
            return  # a watch already dropped
        if mask & IN_IGNORED:
            self.folders.pop(wd, None)
            if self.watched.get(folder) == wd:
                del self.watched[folder]
            if folder == b"":
                self.gone = True
            return
        if mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT):
            if folder == b"":
                self.gone = True
            return  # the parent's event tells the journal
        if not name:
            return
        if mask & IN_ISDIR:
            if name.startswith(b"."):
                return
            rel = folder + b"/" + name if folder else name
            self._note(TREE, rel)
            if mask & (IN_MOVED_FROM | IN_DELETE):
                self._unwatch_tree(rel)
            elif mask & (IN_CREATE | IN_MOVED_TO):
                self._watch_tree(rel)
            return
        if not walk.is_knowledge_name(os.fsdecode(name)):
            return
        if mask & (IN_CREATE | IN_MOVED_TO):
            with contextlib.suppress(OSError):
                if stat.S_ISLNK(os.lstat(self._abs(folder) + b"/" + name).st_mode):
                    self.links = True
        self._note(FLAT, folder)

    def _note(self, kind: str, folder: bytes) -> None:
        self.position += 1
        self.journal[(kind, folder)] = self.position
        if len(self.journal) > MAX_FOLDERS:
            self._lost()

    def _lost(self) -> None:
        """Events were lost (or are too many to keep): a new epoch, whose askers walk all."""
        self.epoch = secrets.token_hex(8)
        self.journal.clear()

    # -- the questions --------------------------------------------------------------------------

    def ask(self, conn: socket.socket, request: dict[str, object]) -> None:
        """Answer once every event before now is read: create a cookie and wait for it."""
        self.cookies += 1
        name = f"{os.getpid()}-{self.cookies}".encode()
        path = os.path.join(self.root, os.fsencode(COOKIES), name)
        try:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        except OSError:
            self._answer(conn, {"epoch": self.epoch, "position": self.position, "full": True})
            return
        self.pending[name] = (conn, request)

    def _cookie(self, name: bytes) -> None:
        waiting = self.pending.pop(name, None)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.root, os.fsencode(COOKIES), name))
        if waiting is not None:
            conn, request = waiting
            self._answer(conn, self.changes(request))

    def changes(self, request: dict[str, object]) -> dict[str, object]:
        since = request.get("since")
        answer: dict[str, object] = {"epoch": self.epoch, "position": self.position}
        if (
            self.links
            or self.blind
            or request.get("epoch") != self.epoch
            or not isinstance(since, int)
            or not 0 <= since <= self.position
        ):
            return {**answer, "full": True}
        found = [(kind, rel) for (kind, rel), at in self.journal.items() if at > since]
        return {
            **answer,
            "full": False,
            "flat": sorted(os.fsdecode(r) for k, r in found if k == FLAT),
            "trees": sorted(os.fsdecode(r) for k, r in found if k == TREE),
        }

    def _answer(self, conn: socket.socket, value: dict[str, object]) -> None:
        with contextlib.suppress(OSError):
            conn.setblocking(True)
            conn.settimeout(ANSWER_SECONDS)
            conn.sendall(json.dumps(value).encode() + b"\n")
        conn.close()


def _own_user(conn: socket.socket) -> bool:
    """Whether the peer runs as this process's user, or as root."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    return uid in (os.getuid(), 0)


def _request(conn: socket.socket) -> dict[str, object] | None:
    conn.settimeout(ANSWER_SECONDS)
    try:
        line = _read_line(conn)
        value = json.loads(line)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def serve(monitor: Monitor, listener: socket.socket, idle: float = IDLE_SECONDS) -> None:
    """Answer questions and read events until the root goes, a stop, or ``idle`` seconds of
    no question."""
    selector = selectors.DefaultSelector()
    selector.register(monitor.inotify.fd, selectors.EVENT_READ, "events")
    selector.register(listener, selectors.EVENT_READ, "listener")
    last = time.monotonic()
    stopping = False
    while not stopping and not monitor.gone and time.monotonic() - last < idle:
        for key, _ in selector.select(timeout=min(idle, 60.0)):
            if key.data == "events":
                try:
                    monitor.read_events()
                except Exception:  # noqa: BLE001 - whatever it was, the journal cannot vouch
                    monitor._lost()
                continue
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            try:
                request = _request(conn) if _own_user(conn) else None
            except OSError:
                request = None
            if request is None:
                conn.close()
            elif request.get("stop"):
                monitor._answer(conn, {"stopped": True})
                stopping = True
            else:
                last = time.monotonic()
                monitor.ask(conn, request)
    for conn, _ in monitor.pending.values():
        conn.close()


def main(argv: list[str]) -> int:
    """``python -m kiwifs.index.monitor ROOT``: print ``ready`` once watching (``running`` when
    another monitor already has the root) and leave a detached copy running."""
    root = argv[0]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(address(root))
    except OSError:
        print("running", flush=True)
        return 0
    try:
        monitor = Monitor(root)
        monitor.watch_all()
    except OSError as exc:
        print(f"failed: {exc}", flush=True)
        return 1
    listener.listen(16)
    if os.fork() != 0:
        print("ready", flush=True)
        os._exit(0)
    os.setsid()
    os.chdir("/")  # hold no folder of the caller's busy
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(monitor, listener)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
