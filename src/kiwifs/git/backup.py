"""``[backup]``'s git side: push one root's branch to a remote, never losing a commit on either
side.

One call, :func:`push_branch`, pushes ``refs/heads/<branch>`` of the root to the same branch of
the remote, and nothing else: no tags, no ``refs/kiwifs/*``, no other branch. What git ignores
in the root (``.kiwi/state/``, the server lock, keys) is in no commit, so it never leaves.
Never forced: a remote branch that is not an ancestor of the root's is left as it is.

With ``fetch_first`` (``rebase_before_push``) the remote's branch is looked at first
(``ls-remote``): when it has commits the root lacks, they are fetched to
:data:`DIVERGED_REF` in the root (kept, so nothing of the remote is lost even if someone
overwrites it later) and the push is not made; the outcome says ``diverged``. The root's own
history is never rebased: it is the history the server serves (versions, ETags, the changes
feed's sequence, a replica's fast-forwards), and rewriting it under a running server would
change what clients already read. Reconciling the two is left to a person (merge the side ref
into the branch with a normal write, or move the remote aside).

git runs as a command, not through libgit2: a push or fetch takes seconds to minutes on a slow
network, and the command holds no lock of this process (pygit2 keeps the interpreter lock while
it packs objects). It starts no program the repository or a user's configuration names: no
hooks of this root, no credential helper or askpass (a remote that asks for a password fails
at once instead of waiting for a terminal), no fsmonitor, pager, signing or automatic gc; only
the ``file``, ``http(s)`` and ``ssh`` transports (never ``ext::``, which runs a command); ssh in
batch mode unless the environment names its own ssh command. Credentials in a remote URL never
show in an outcome or an error (:func:`redact`).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kiwifs.errors import StorageError
from kiwifs.git import remote as gitremote
from kiwifs.git.repo import load_pygit2

if TYPE_CHECKING:
    import pygit2

DIVERGED_REF = "refs/kiwifs/backup-diverged"  # the remote's commits the root lacks, kept
TIMEOUT = 120.0  # seconds a whole push (ls-remote, fetch, push) may take in the background

TRANSPORTS = ("file", "http", "https", "ssh")
_PUSH_OPTIONS = ("-c", "push.gpgSign=false", "-c", "push.recurseSubmodules=no")
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@")


@dataclass(frozen=True)
class PushOutcome:
    """What one push did. ``state``: ``pushed`` (the remote now holds ``local``),
    ``up-to-date`` (it held it already), ``empty`` (the branch has no commit yet: nothing to
    push) or ``diverged`` (the remote's branch, ``remote``, has commits the root lacks: kept at
    :data:`DIVERGED_REF`, nothing pushed)."""

    state: str
    branch: str
    local: str | None = None
    remote: str | None = None


def redact(remote: str) -> str:
    """``remote`` as it may be shown: the user and password of a URL replaced by ``***``."""
    return _USERINFO.sub(r"\1***@", remote)


def current_branch(root: Path) -> str:
    """The branch the root is on (its HEAD's); :class:`StorageError` when HEAD is detached."""
    repo = load_pygit2().Repository(str(root))
    target = repo.references["HEAD"].target
    if not isinstance(target, str) or not target.startswith("refs/heads/"):
        raise StorageError("backup: HEAD is detached; name the branch in [backup] branch")
    return target.removeprefix("refs/heads/")


def push_branch(
    root: Path,
    remote: str,
    branch: str = "",
    fetch_first: bool = True,
    timeout: float = TIMEOUT,
) -> PushOutcome:
    """Push the root's ``branch`` (empty: the current one) to ``remote`` (a URL, or a path,
    relative to the root), see the module's docstring. :class:`StorageError` when git fails
    (unreachable remote, refused credentials, a rejected push), its message redacted; the whole
    call takes at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    name = branch.strip() or current_branch(root)
    git2 = load_pygit2()
    repo = git2.Repository(str(root))
    ref = repo.references.get(f"refs/heads/{name}")
    if ref is None:
        return PushOutcome("empty", name)
    local = str(ref.target)
    if fetch_first:
        listed = _git(root, remote, deadline, "ls-remote", "--quiet", remote, f"refs/heads/{name}")
        theirs = listed.split()[0] if listed.strip() else None
        if theirs == local:
            return PushOutcome("up-to-date", name, local, theirs)
        if theirs is not None and not _has_ancestor(repo, local, theirs):
            spec = f"+refs/heads/{name}:{DIVERGED_REF}"
            _git(root, remote, deadline, "fetch", "--quiet", "--no-tags", remote, spec)
            return PushOutcome("diverged", name, local, theirs)
    spec = f"{local}:refs/heads/{name}"  # the commit looked at, even if a write moved the branch
    _git(root, remote, deadline, "push", "--quiet", "--no-verify", "--no-follow-tags", remote, spec)
    return PushOutcome("pushed", name, local, local)


def _has_ancestor(repo: pygit2.Repository, local: str, theirs: str) -> bool:
    """Whether ``theirs`` is ``local`` or one of its ancestors (so a push only adds commits).
    A commit the root does not even hold cannot be one."""
    git2 = load_pygit2()
    try:
        their_id = git2.Oid(hex=theirs)
    except ValueError:
        return False
    if their_id not in repo:
        return False
    return bool(repo.descendant_of(git2.Oid(hex=local), their_id))


def _git(root: Path, remote: str, deadline: float, *args: str) -> str:
    """Run ``git args`` in ``root`` (:func:`kiwifs.git.remote.run`: no program started, only
    :data:`TRANSPORTS`); its output, or :class:`StorageError` with the remote's credentials
    hidden."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise StorageError(f"backup: git {args[0]} not started: the push ran out of time")
    try:
        return gitremote.run((*_PUSH_OPTIONS, *args), TRANSPORTS, left, cwd=root)
    except gitremote.GitFailed as exc:
        raise StorageError(f"backup: git {args[0]} failed: {_shown(str(exc), remote)}") from exc


def _shown(text: str, remote: str) -> str:
    """git's error text with the remote's credentials hidden."""
    if remote != redact(remote):
        text = text.replace(remote, redact(remote))
        match = _USERINFO.match(remote)
        if match is not None:
            secret = remote[len(match.group(1)) : match.end() - 1]
            text = text.replace(secret, "***") if secret else text
    return text
