"""A write waiting for its commit: the value the pipeline hands to the committer.

Its own module because both sides of the hand-over read it: the committer queues and commits
it (:mod:`kiwifs.git.committer`), the message of a batch is written from it
(:mod:`kiwifs.git.messages`), and the committer imports that message rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class PendingCommit:
    """One pipeline operation waiting for its commit.

    ``contents`` holds the bytes the operation wrote (``None`` for a deletion): the commit is
    made of them, not of the files as they are when the batch is committed, which a later
    operation may already be rewriting (a commit would then hold part of a bulk write).
    """

    paths: tuple[str, ...]
    actor: str
    message: str
    trailer: str | None = None
    contents: Mapping[str, bytes | None] | None = None
