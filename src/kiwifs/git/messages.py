"""What a commit message says: the caller's text as its subject line, the trailer naming where
the write came from, and the one message of a batch of operations committed together.

A message is text a caller may choose (a bulk write's ``message``), so it is made one line
before git sees it: it cannot add a paragraph of its own, hence cannot forge a trailer, and no
history listing carries megabytes of it. What a commit changed is always read from its tree,
never from its message (:func:`kiwifs.git.log.changes`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiwifs.base.text import without_surrogates

if TYPE_CHECKING:
    from kiwifs.frontmatter.provenance import Provenance
    from kiwifs.git.pendingcommit import PendingCommit

MAX_SUBJECT_CHARS = 1000


def commit_subject(message: str) -> str:
    """``message`` as the one line a commit message starts with.

    Line breaks and other control characters become spaces, runs of spaces one space, lone
    surrogates are dropped, and the line is cut at :data:`MAX_SUBJECT_CHARS`. A caller's
    message (a bulk write's ``message``) therefore cannot add a paragraph of its own, i.e.
    cannot forge a ``Provenance:`` trailer, nor make every history listing carry megabytes.
    """
    printable = "".join(
        " " if ord(c) < 0x20 or ord(c) == 0x7F else c for c in without_surrogates(message)
    )
    line = " ".join(printable.split())
    if len(line) > MAX_SUBJECT_CHARS:
        line = line[: MAX_SUBJECT_CHARS - 1] + "\u2026"
    return line


def commit_trailer(prov: Provenance | None) -> str | None:
    """The git trailer recording where a write came from."""
    return f"Provenance: {prov}" if prov else None


def batch_message(batch: list[PendingCommit]) -> tuple[str, str | None]:
    """The commit message and trailer of a batch (one operation keeps its own message).

    Several operations: ``<actor>: N files``, then a line per operation, its own message
    without the ``<actor>: `` every line would repeat (``notes/a.md``, ``delete: notes/b.md``,
    ``rename a.md → b.md``, a merge's message…), followed by the paths it wrote that the line
    does not name (a bulk's), indented: the message still says what each one did.
    """
    trailers = list(dict.fromkeys(c.trailer for c in batch if c.trailer))
    trailer = "\n".join(trailers) or None
    if len(batch) == 1:
        return batch[0].message, trailer
    actor = batch[0].actor
    paths = list(dict.fromkeys(p for c in batch for p in c.paths))
    lines: list[str] = []
    for c in batch:
        line = (c.message.splitlines() or [""])[0].removeprefix(f"{actor}: ")
        lines.append(line)
        lines.extend(f"  {p}" for p in c.paths if p not in line)
    return f"{actor}: {len(paths)} files\n\n" + "\n".join(lines), trailer
