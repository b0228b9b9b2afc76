"""The first import of a root's files into git, made in a child process while a server answers.

A first ``serve`` on a root that is no repository yet commits every file already there. At a
million files that is minutes of hashing, tree building and writing the git index file: made
before the server listened, ``/readyz`` waited for all of it; made in a thread of the server,
it held the interpreter lock and the first searches took seconds. So a server makes the
repository (``git init``: instant), listens, and hands the import to a child process
(``python -m kiwifs.git.adoption ROOT ACTOR``) that commits with its own
:class:`~kiwifs.git.repo.Git`.

Meanwhile the server's commits wait for the import (:meth:`Git.commit` waits on it): a write
answered during the import is on disk and in the crash journal at once, and committed after
the import commit, in order. With asynchronous commits (``--async-commit``) no write waits;
with synchronous ones (the default) a write waits for its commit, at most the committer's
bound, then fails with a :class:`StorageError` that names the import (the write stays on disk
and journaled, and is committed after the import).

A marker (``.kiwi/state/git-import``) is written before the repository is made and removed by
the child once the import is committed, so an import cut short (the server killed, the child
failed) is taken up again at the next start: its commit holds every file that differs from
HEAD, whatever was committed before it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

from kiwifs.base.forking import yield_the_cpu
from kiwifs.errors import StorageError
from kiwifs.git.repo import Git

log = logging.getLogger(__name__)
MARKER = Path(".kiwi") / "state" / "git-import"  # an import begun and not yet committed


def import_message(actor: str, count: int) -> str:
    """The import commit's message (the same whether made here or in the child)."""
    return f"{actor}: import {count} existing files"


def pending(root: Path) -> bool:
    """Whether ``root`` needs its files imported: no repository, or an import cut short."""
    return not Git(root).is_repo() or (root / MARKER).exists()


def adopt_now(git: Git, actor: str) -> str | None:
    """The import made here and now (a one-shot command, ``kiwifs mcp``): the commit's id,
    or ``None`` when there was nothing to commit."""
    _mark(git.root)
    made = git.adopt(actor, lambda n: import_message(actor, n))
    (git.root / MARKER).unlink(missing_ok=True)
    return made


class Adoption:
    """The import of ``git``'s root running in a child process; ``git``'s commits wait for it.

    :meth:`start` makes the repository, then starts the child and a thread that waits for it
    and tells ``git`` how it ended (:meth:`Git.end_import`)."""

    def __init__(self, git: Git, actor: str) -> None:
        self.git = git
        self.actor = actor

    def start(self) -> None:
        _mark(self.git.root)
        self.git.init()
        self.git.begin_import()
        argv = [sys.executable, "-m", "kiwifs.git.adoption", os.fspath(self.git.root), self.actor]
        argv.append(str(self.git.packer.at))  # its commit packs as this repository's would
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as exc:
            self.git.end_import(f"cannot start the import process: {exc}")
            return
        threading.Thread(
            target=self._wait, args=(proc,), name="kiwifs-git-import", daemon=True
        ).start()

    def _wait(self, proc: subprocess.Popen[bytes]) -> None:
        _, err = proc.communicate()
        if proc.returncode == 0:
            # the child wrote the git index file too: no reconcile of it here, where one over
            # every imported path would hold the interpreter lock from the server's requests
            self.git.end_import(None)
            return
        text = err.decode("utf-8", "replace").strip().splitlines()
        reason = text[-1] if text else f"exit status {proc.returncode}"
        log.error("git import of the existing files failed: %s", reason)
        self.git.end_import(reason)


def _mark(root: Path) -> None:
    marker = root / MARKER
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


def main(argv: list[str] | None = None) -> int:
    """The child: import the root's files, write the git index file, remove the marker.
    Its arguments: the root, the actor, and the server's ``Tuning.pack_loose_objects`` (the
    import's loose objects are packed as the server's own commits' would be).

    It runs at a lower priority, so the server's requests get the CPU first: on a machine of
    two cores the import of a million files takes one core for ten minutes."""
    root, actor, pack_at = argv if argv is not None else sys.argv[1:4]
    if argv is None:  # the child process, not a test calling it in its own
        yield_the_cpu()
    git = Git(Path(root), pack_at=int(pack_at))
    try:
        git.adopt(actor, lambda n: import_message(actor, n))
    except StorageError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        git.close()  # the git index file, written here rather than in the server
    (Path(root) / MARKER).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
