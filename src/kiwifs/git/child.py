"""Git commits made in a child process, so a server's threads go on while one is made.

libgit2 (through pygit2) keeps Python's interpreter lock while it builds a commit's trees and
writes its objects: 2–4 ms of CPU per commit during which no other thread of the process runs,
not the event loop parsing the next request, not a writer. ``kiwifs serve`` therefore hands its
commits to a child process (``python -m kiwifs.git.child ROOT PID``) that makes them with its own
:class:`~kiwifs.git.repo.Git` on the same repository: the server's thread waits for the
answer on a pipe, the interpreter lock released, and the commit runs on the other core.

Nothing else changes. The child takes the same locks a commit in the server would (the git
lock file shared by every kiwifs process, the ref-lock marker of :mod:`kiwifs.git.reflock`), so
commits stay serialised and a commit killed midway is cleaned up the same way. The server
keeps its crash journal and its write lock: the child only turns bytes it is given into a
commit. Should the child die, a new one is started and the commit asked of it again (one
that the dead child had made is then found made: its tree is HEAD's); should that one die too,
the commit fails with a :class:`StorageError` (the committer retries it, the journal keeps its
paths).

The child lives as long as its server: it ignores SIGINT and SIGTERM (a Ctrl-C in a terminal
reaches the whole process group, and the server still has commits to make while it stops),
exits when the server closes the pipe, and makes no commit once the server is gone (it checks,
holding the git lock, that its parent is still the server): a server killed while its writers
waited for their commit has acknowledged none of them, and its next start commits them from
the crash journal, exactly as without a child.

Frames on the pipes: a 4-byte big-endian length, then a pickle (both ends are this module,
started by the server itself; nothing else reads or writes these pipes).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from kiwifs.errors import StorageError
from kiwifs.git.owncommits import MadeCommit

log = logging.getLogger(__name__)
CLOSE_TIMEOUT = 10.0
_LENGTH = struct.Struct(">I")
BUILDER = "--tree-builder"  # the child's argument for a Git made with kept_trees=False


def _send(stream: IO[bytes], value: object) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    """The next frame's value; EOFError when the other end is gone."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError("pipe closed")
    (size,) = _LENGTH.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("pipe closed")
    return pickle.loads(data)  # noqa: S301 - our own child's frames, on our own pipe


class CommitProcess:
    """The server's end: :meth:`commit` sends one commit to the child and waits for its id."""

    def __init__(self, root: Path, kept_trees: bool = True) -> None:
        self.root = Path(root)
        self.kept_trees = kept_trees  # the child's Git writes trees as the server's would
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()  # one commit on the pipe at a time

    def start(self) -> None:
        """Start the child now (it imports pygit2 while the server goes on)."""
        with self._lock:
            self._child()

    def commit(
        self,
        paths: list[str],
        actor: str,
        message: str,
        trailer: str | None,
        contents: Mapping[str, bytes | None] | None,
    ) -> MadeCommit | None:
        """What :meth:`kiwifs.git.repo.Git.commit_objects` returns, made in the child."""
        request = (paths, actor, message, trailer, None if contents is None else dict(contents))
        with self._lock:
            try:
                ok, value = self._ask(request)
            except (OSError, EOFError, pickle.UnpicklingError):
                # the child died (killed, out of memory): once more with a new one. Should
                # the dead one have moved HEAD already, the tree is HEAD's and nothing is made
                ok, value = self._ask(request, again=True)
        if not ok:
            raise StorageError(str(value))
        if value is not None and not isinstance(value, MadeCommit):
            raise StorageError(f"git commit failed: the commit process answered {value!r}")
        return value

    def _ask(self, request: object, again: bool = False) -> tuple[bool, object]:
        """Send ``request`` to the child (started if need be) and return its answer."""
        proc = self._child()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            _send(proc.stdin, request)
            ok, value = _receive(proc.stdout)
            return bool(ok), value
        except (OSError, EOFError, pickle.UnpicklingError) as exc:
            self._stop(kill=True)
            if not again:
                raise
            stopped = f"git commit failed: the commit process stopped ({exc})"
            raise StorageError(stopped) from exc

    def close(self) -> None:
        """Close the pipe; the child exits once its commit in flight (if any) is made."""
        with self._lock:
            self._stop(kill=False)

    def _child(self) -> subprocess.Popen[bytes]:
        proc = self._proc
        if proc is not None and proc.poll() is not None:
            self._stop(kill=False)  # died meanwhile: its pipes closed, a new one started
            proc = None
        if proc is None:
            argv = [sys.executable, "-m", "kiwifs.git.child", os.fspath(self.root)]
            argv += [str(os.getpid())] + ([] if self.kept_trees else [BUILDER])
            proc = self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        return proc

    def _stop(self, kill: bool) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        if kill:
            proc.kill()
        try:
            proc.wait(CLOSE_TIMEOUT)
        except subprocess.TimeoutExpired:
            log.warning("the git commit process did not stop; killing it")
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def serve(
    root: Path, server: int, requests: IO[bytes], answers: IO[bytes], kept_trees: bool = True
) -> None:
    """The child's loop: one commit per frame, answered ``(True, made)`` (a
    :class:`~kiwifs.git.owncommits.MadeCommit`, or ``None`` for nothing to commit) or ``(False,
    error)``.

    A commit is made only while the server (pid ``server``) lives: one killed while its
    commit waited for the git lock has acknowledged none of its writes, and the next start
    commits them from the journal, as it would have without a child.
    """
    from kiwifs.git.repo import Git

    git = Git(root, kept_trees)

    def server_alive() -> bool:
        return os.getppid() == server  # a dead server's child is handed to another parent

    while True:
        try:
            paths, actor, message, trailer, contents = _receive(requests)
        except EOFError:
            return
        if not server_alive():
            return
        try:
            made = git.commit_objects(paths, actor, message, trailer, contents, server_alive)
            answer: tuple[bool, MadeCommit | str | None] = (True, made)
        except StorageError as exc:
            answer = (False, exc.message)
        except Exception as exc:  # the server must get an answer whatever happened
            log.exception("commit failed in the commit process")
            answer = (False, f"git commit failed: {exc}")
        try:
            _send(answers, answer)
        except OSError:  # the server is gone
            return


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    kept_trees = BUILDER not in sys.argv[3:]
    serve(Path(sys.argv[1]), int(sys.argv[2]), sys.stdin.buffer, sys.stdout.buffer, kept_trees)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
