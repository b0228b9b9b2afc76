"""History read from git: a file's versions, one version, a diff, the changes feed, and when
files were first added; the ``git log`` output parsed, and the revisions and ``since`` values
checked before git sees them.

:class:`~kiwifs.services.history.History` imports this module at its first read: a memory report
never reads history, so neither this module nor ``subprocess`` is part of its start-up.
Versions, diffs and the log run the ``git`` command, which is what users compare them with; one
version is read with libgit2.

No read runs a program that the repository or a user's git configuration names. Every ``git``
command is started with :data:`_NO_PROGRAMS` and diff options :data:`_NO_DIFF_PROGRAMS`: no
external diff (``diff.external``, ``diff.<driver>.command``, ``GIT_EXTERNAL_DIFF``), no textconv,
no hooks, no fsmonitor, no signature check (``gpg.program``), no pager, and no transport (a partial
clone's lazy fetch could otherwise run ``core.sshCommand``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kiwifs.base.text import check_text
from kiwifs.errors import NotFound, UsageError
from kiwifs.git.repo import load_pygit2

if TYPE_CHECKING:
    from kiwifs.git.repo import Git

_GIT_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_EXTERNAL_DIFF", "GIT_PAGER")
_GIT_ENV_SET = {"GIT_NO_LAZY_FETCH": "1", "GIT_TERMINAL_PROMPT": "0"}
_NO_PROGRAMS = (
    "--no-pager",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "log.showSignature=false",
    "-c",
    "protocol.allow=never",
)
_NO_DIFF_PROGRAMS = ("--no-ext-diff", "--no-textconv")


@dataclass(frozen=True)
class Version:
    """One commit that changed a file: its id, author date (ISO 8601), author and subject."""

    hash: str
    date: str
    author: str
    message: str


@dataclass(frozen=True)
class Change:
    """One entry of the changes feed: a commit (``seq``) and the path and action it made."""

    seq: str
    path: str
    action: str
    actor: str
    timestamp: str


class _GitFailed(Exception):
    """``git`` exited non-zero; the text is its error output (each read decides what it means)."""


def run_git(root: Path, *args: str) -> str:
    """The output of ``git args`` in ``root``, run so that it starts no program (see above)."""
    import subprocess  # only history reads run git: ~4 ms of import a report does not pay

    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROP} | _GIT_ENV_SET
    proc = subprocess.run(
        ["git", *_NO_PROGRAMS, "-C", str(root), "-c", "core.quotepath=false", *args],
        capture_output=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise _GitFailed(proc.stderr.decode("utf-8", "replace").strip())
    return proc.stdout.decode("utf-8", "replace")


def versions(git: Git, rel: str) -> list[Version]:
    """The commits that changed ``rel``, newest first (none on a root without a commit)."""
    if not git.is_repo() or git.head() is None:
        return []
    out = run_git(
        git.root, "log", *_NO_DIFF_PROGRAMS, "--format=%H%x1f%aI%x1f%an%x1f%s%x1e", "--", rel
    )
    versions = []
    for record in out.split("\x1e"):
        record = record.strip("\n")
        if not record:
            continue
        h, date, author, subject = record.split("\x1f", 3)
        versions.append(Version(h, date, author, subject))
    return versions


def show(git: Git, rel: str, rev: str) -> bytes:
    """``rel``'s bytes at ``rev``; NotFound for an unknown revision or a path it lacks."""
    _check_rev(rev)
    if not git.is_repo():
        raise NotFound("version not found")
    git2 = load_pygit2()
    try:
        commit = git.repo.revparse_single(rev).peel(git2.Commit)
        entry = commit.tree[rel]
    except (KeyError, ValueError, git2.GitError, git2.InvalidSpecError) as exc:
        raise NotFound("version not found") from exc
    blob = git.repo[entry.id]
    if not isinstance(blob, git2.Blob):
        raise NotFound("version not found")
    data: bytes = blob.data
    return data


def diff(git: Git, rel: str, rev_from: str, rev_to: str) -> str:
    """The unified diff of ``rel`` between two revisions; NotFound when git knows neither."""
    for rev in (rev_from, rev_to):
        _check_rev(rev)
    try:
        return run_git(
            git.root, "diff", *_NO_DIFF_PROGRAMS, "--no-color", rev_from, rev_to, "--", rel
        )
    except _GitFailed as exc:
        raise NotFound(f"unknown version: {exc}") from exc


BLAME_LINES = 10_000  # lines blamed at most: a bigger file's answer says it was cut


@dataclass(frozen=True)
class BlameLine:
    """One line of a file and the commit that last changed it: its 1-based number, the
    commit's author and author date (RFC 3339, UTC), the commit id and the line's text."""

    line: int
    author: str
    date: str
    hash: str
    text: str


def blame(git: Git, rel: str, max_lines: int = BLAME_LINES) -> tuple[list[BlameLine], int]:
    """Who last changed each line of ``rel`` as committed at HEAD, and how many lines it has.

    HEAD, not the working tree: blaming the tree would run the file's clean filter (a program
    named by ``.gitattributes``), and every write that returned is committed by the time a
    history read runs. Only the first ``max_lines`` lines are blamed (``git blame -L``), so a
    huge file costs a bounded answer. A path HEAD lacks, or a root without a commit, has no
    lines.
    """
    head = git.head() if git.is_repo() else None
    if head is None:
        return [], 0
    try:
        data = show(git, rel, head)
    except NotFound:
        return [], 0
    total = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    if total == 0:
        return [], 0
    try:
        out = run_git(
            git.root,
            "blame",
            "--porcelain",
            "--no-textconv",
            "-L",
            f"1,{min(total, max_lines)}",
            head,
            "--",
            rel,
        )
    except _GitFailed:
        return [], total
    return _blame_lines(out), total


def _blame_lines(out: str) -> list[BlameLine]:
    """``git blame --porcelain`` parsed: a header (commit, original and final line numbers),
    the commit's details the first time it appears, then the line's text after a tab."""
    from datetime import UTC, datetime

    details: dict[str, list[str]] = {}  # commit: [author, date]
    lines: list[BlameLine] = []
    commit: str | None = None
    number = 0
    for raw in out.split("\n"):
        if raw.startswith("\t"):
            if commit is not None:
                author, date = details[commit]
                lines.append(BlameLine(number, author, date, commit, raw[1:]))
            commit = None
            continue
        word, _, rest = raw.partition(" ")
        if commit is None:
            parts = rest.split()
            if len(parts) >= 2 and parts[1].isdigit() and _is_commit_id(word):
                commit, number = word, int(parts[1])
                details.setdefault(commit, ["", ""])
            continue
        if word == "author":
            details[commit][0] = rest
        elif word == "author-time" and rest.isdigit():
            when = datetime.fromtimestamp(int(rest), UTC)
            details[commit][1] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return lines


def _is_commit_id(word: str) -> bool:
    return len(word) in (40, 64) and all(c in "0123456789abcdef" for c in word)


def first_added(git: Git, paths: Sequence[str]) -> dict[str, float]:
    """When each of ``paths`` was first added to history (commit time, POSIX seconds);
    paths git never saw are left out. One ``git log`` over the paths' top folders."""
    wanted = set(paths)
    if not wanted or not git.is_repo() or git.head() is None:
        return {}
    spec = sorted(wanted) if len(wanted) <= 64 else sorted({_top(p) for p in wanted})
    try:
        out = run_git(
            git.root,
            "log",
            "--diff-filter=A",
            "--no-renames",
            "--format=%x1e%ct",
            "--name-only",
            "--",
            *spec,
        )
    except _GitFailed:
        return {}
    found: dict[str, float] = {}
    for record in out.split("\x1e"):  # newest first: the last time seen is the first add
        lines = record.strip("\n").split("\n")
        if not lines or not lines[0].strip().isdigit():
            continue
        when = float(lines[0])
        for line in lines[1:]:
            if line in wanted:
                found[line] = when
    return found


def changes(
    git: Git, since: str | None, limit: int, path_prefix: str | None = None
) -> list[Change]:
    """The latest commits (after ``since``), newest first, each with what it changed.

    The action and path come from the commit's own tree changes, never from its message: a
    message is text a caller may choose, and ``delete: index.md`` in it deletes nothing.
    ``path_prefix``: only the commits every changed path of which starts with it (see
    :func:`_changes_under`).
    """
    check_sequence(since)
    if not git.is_repo() or git.head() is None:
        return []
    if path_prefix:
        return _changes_under(git, since, limit, path_prefix)
    out = _log(git, since, [f"--max-count={limit}"])
    return [
        Change(h, *_action_of(files), author, date)
        for (h, author, date), files in _log_records(out)
    ]


_PAGE = 200  # commits read at a time while filtering the feed by a prefix


def _changes_under(git: Git, since: str | None, limit: int, prefix: str) -> list[Change]:
    """The feed of a scoped key: the latest ``limit`` commits that changed something, and
    only paths starting with ``prefix``, both sides of a rename included (a commit that also
    touched a path outside would name it, or hide that it did: it is left out whole).

    Filtered before the cut: git is asked only for the commits touching the prefix's folder
    (every path of each listed, ``--full-diff``), read a page at a time until ``limit`` of
    them pass or the history ends.
    """
    folder = prefix.rpartition("/")[0]
    spec = ("--", f":(literal){folder}") if folder else ()
    found: list[Change] = []
    skip = 0
    while len(found) < limit:
        page = ["--full-history", "--full-diff", f"--max-count={_PAGE}", f"--skip={skip}"]
        records = _log_records(_log(git, since, page, spec))
        for (h, author, date), files in records:
            named = [path for _, paths in files for path in paths]
            if named and all(path.startswith(prefix) for path in named):
                found.append(Change(h, *_action_of(files), author, date))
        if len(records) < _PAGE:
            break
        skip += _PAGE
    return found[:limit]


def _log(git: Git, since: str | None, options: Sequence[str], spec: Sequence[str] = ()) -> str:
    """``git log`` of the changes feed (after ``since``) with ``options``, limited by ``spec``
    (``--`` and its pathspec, or nothing)."""
    args = ["log", *_NO_DIFF_PROGRAMS, *options, "-z", "--name-status"]
    args += ["--find-renames=100%", "--format=%x1e%H%x1f%an%x1f%aI"]
    if since:
        args.append(f"{since}..HEAD")
    try:
        return run_git(git.root, *args, *spec)
    except _GitFailed as exc:
        raise UsageError("unknown sequence") from exc


def check_sequence(since: str | None) -> None:
    """A ``since`` of the changes feed: a commit id or its abbreviation (4–40 lowercase hex
    digits), so that nothing else (an option, a range, a ref name) ever reaches ``git log``."""
    if since and not (4 <= len(since) <= 40 and all(c in "0123456789abcdef" for c in since)):
        raise UsageError("unknown sequence")


def _check_rev(rev: str) -> None:
    """A revision git may be asked about: not empty, no option (``-x``), no control character
    (git would cut ``HEAD\\0…`` at the NUL and answer for ``HEAD``), valid Unicode."""
    if not rev or rev.startswith("-") or any(ord(c) < 0x20 or ord(c) == 0x7F for c in rev):
        raise UsageError(f"invalid version: {rev!r}")
    check_text(rev, "version")


def _top(path: str) -> str:
    """A path's top-level folder (the path itself for a file at the root)."""
    return path.split("/", 1)[0]


FileChange = tuple[str, tuple[str, ...]]  # git's status letter and the paths it names


def _log_records(out: str) -> list[tuple[tuple[str, str, str], list[FileChange]]]:
    """Parse ``git log -z --name-status`` with ``%x1e%H%x1f%an%x1f%aI`` headers.

    Tokens are NUL-separated; after a header come entries of a status (``A``, ``M``, ``D``,
    ``R100``…) and its one path, or two for a rename or copy. Paths are taken by count, so a
    path holding any character at all cannot be read as a header or a status.
    """
    records: list[tuple[tuple[str, str, str], list[FileChange]]] = []
    tokens = out.split("\0")
    i = 0
    while i < len(tokens):
        token = tokens[i].lstrip("\n")
        i += 1
        if token.startswith("\x1e"):
            h, author, date = token[1:].split("\x1f", 2)
            records.append(((h, author, date), []))
        elif token and records:
            count = 2 if token[0] in "RC" else 1
            records[-1][1].append((token[0], tuple(tokens[i : i + count])))
            i += count
    return records


def _action_of(files: list[FileChange]) -> tuple[str, str]:
    """The ``(path, action)`` of a commit from what it changed.

    One file: ``write`` (added or modified), ``delete``, or ``rename`` (an exact rename; the
    path is the new name). Several files (a bulk write, a batch of asynchronous commits) or none
    (a merge): an empty path, with ``delete`` when every change deleted a file, else ``write``.
    """
    if len(files) == 1:
        status, paths = files[0]
        if status == "D":
            return paths[-1], "delete"
        if status == "R":
            return paths[-1], "rename"
        return paths[-1], "write"
    if files and all(status == "D" for status, _ in files):
        return "", "delete"
    return "", "write"
