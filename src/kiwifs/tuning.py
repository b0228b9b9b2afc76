"""Every knob of kiwifs in one frozen value: :class:`Tuning`.

The fast paths kiwifs takes (and the plain paths they were measured against), the waits of group
commit and of the index's writeback, the watcher's back-off, and the few settings a user may
change. A :class:`~kiwifs.knowledge.Knowledge` reads its tuning once, when it is made
(:meth:`Tuning.from_env` unless one is handed in), and passes it down to what it builds; nothing
below reads the environment or a module-level switch for a knob.

Only the user knobs come from the environment (:data:`ENVIRONMENT`): ``KIWIFS_WORKERS``,
``KIWIFS_FSYNC``, ``KIWIFS_HEADER_TIMEOUT`` and ``KIWIFS_MONITOR``. A benchmark compares a fast
path with the plain one by building the tuning it wants (``Tuning(term_columns=False)``) and
handing it in; a test does the same to hold the two paths' answers equal.

This module imports nothing of kiwifs: any layer may take a :class:`Tuning`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ENVIRONMENT", "Tuning"]

# the environment variables a user may set, and the field each sets
ENVIRONMENT = {
    "KIWIFS_WORKERS": "workers",
    "KIWIFS_FSYNC": "strict_fsync",
    "KIWIFS_HEADER_TIMEOUT": "header_timeout",
    "KIWIFS_MONITOR": "monitor_files",
}


@dataclass(frozen=True)
class Tuning:
    """How kiwifs runs: what each field trades, its default, and why that default.

    Every fast path defaults to on; turning one off takes the plain path it was measured
    against, which a test holds to the same answer. Times are in seconds.
    """

    # -- user knobs (from the environment) ----------------------------------------------------

    workers: int | None = None
    """Worker processes at most (``KIWIFS_WORKERS``); ``None``: one per usable CPU. The large
    stat walk, a rebuild's parsers, the full scan and the background check fork or spawn
    workers; ``1`` keeps everything in one process, to leave the other CPUs alone."""

    strict_fsync: bool = False
    """``KIWIFS_FSYNC=strict``: the crash journal, the file and its folder fsynced under the
    write lock, each write on its own. Default off: the journal serves a process crash, which
    the page cache survives, and the file's and folder's fsyncs run after the lock, beside
    each other and shared by the writers of one folder (a write from one client with
    ``--async-commit`` 1.6x as fast)."""

    header_timeout: float = 10.0
    """Seconds a client may take to send its request headers before the server closes the
    connection (``KIWIFS_HEADER_TIMEOUT``, a number over 0): uvicorn has no such limit, and a
    client that never finishes holds a connection for ever."""

    monitor_files: int = 100_000
    """Roots of this many files or more get a change monitor (Linux; :mod:`index.monitor`): the
    first command that walks the whole root starts it, and later one-shot commands ask it which
    folders changed instead of stating every file (a report at 1M files: 4.8 s -> about 1 s).
    ``KIWIFS_MONITOR=off`` (or ``0``) never starts one, for a root whose changes the kernel does
    not report (a network filesystem written from other machines); a number sets the size."""

    # -- commits -------------------------------------------------------------------------------

    group_commit: bool = True
    """Concurrent synchronous writes share commits: a write waits, outside the write lock, for
    a commit holding it. Off: each operation commits alone under the lock (1.3x fewer writes/s
    from 4 clients)."""

    group_wait: float = 0.005
    """How long the committer waits, before a commit, for writers queued on the write lock to
    submit (``0``: not at all). Longer holds a lone writer's neighbours less often in separate
    commits, and costs latency."""

    group_return: float = 0.004
    """How long the committer waits for the writers its last commit released to announce their
    next write (``0``: not at all): a client's answer and its next request."""

    commit_process: bool = True
    """``kiwifs serve`` makes its commits in a child process, so the server's threads go on
    while libgit2 holds the interpreter lock (+27 % writes/s from 4 clients). Off: in the
    server's own process."""

    kept_trees: bool = True
    """A commit writes its trees from their entries kept in memory (a binary search and an
    insert per change). Off: libgit2's tree builder, which reads and sorts each changed tree
    again (a commit into a folder of 4,300 files 1.7x as slow)."""

    pack_loose_objects: int = 6700
    """Once about this many loose git objects pile up (or 64 MiB of them), a background
    ``git repack`` packs them and writes the commit graph (:mod:`kiwifs.git.packing`): libgit2
    never packs, and 4,000 writes to a 100k-file root left 480 MB of loose objects (packed: the
    repository 0.22x, a file's versions 14x as fast, the writes' rate unchanged). 6,700 is
    git's own ``gc.auto``; 0 never packs (the plain path)."""

    # -- the index while a server writes ---------------------------------------------------------

    index_writeback: bool = True
    """While a server watches the root, a write's rows are updated by a thread of their own in
    batches instead of inside the write, under the write lock."""

    writeback_window: float = 0.05
    """How long a writeback round waits for more writes after the first: as long as the
    watcher's debounce, so the event a write raises finds its path still queued."""

    stat_only: bool = True
    """A reconcile stores only the new stat of a file whose bytes its row already holds. Off:
    the file parsed and its whole row stored again (11x slower on racy rows)."""

    texts_last: bool = True
    """A transaction's text changes go to FTS5 as its last statements, so FTS5 writes one
    segment per transaction. Off: each file's words as its row is stored."""

    fts_merge: bool = True
    """FTS5 merges 64 segments a level instead of its defaults (4, then all at once past 16),
    so a big root's text index is not rewritten whole after a few rounds of writes."""

    cover_while_loading: bool = True
    """A rebuild works out which episodes each page covers while it loads the rows. Off: in
    one pass over every row after the load."""

    fts_optimize: bool = True
    """A rebuild's load leaves its text index as one segment (FTS5's ``optimize``): each word
    a query looks up is then found in one b-tree, not in each of the load's segments (13 at
    a million files: a count 0.12 → 0.05 ms, a server's first searches ~20 % faster, for 14 s
    more of that rebuild). Off: the segments the load wrote."""

    # -- the watcher ----------------------------------------------------------------------------

    watch_folders: bool = True
    """The watcher watches each visible folder, not the root recursively, so the server's own
    writes under ``.git`` and ``.kiwi`` raise no events (0.8 ms of CPU a write)."""

    walk_new_folders: bool = True
    """A folder that came is walked alone. Off: the whole root reconciled for it."""

    reconcile_max: float = 60.0
    """The longest wait between periodic reconciles while the events miss nothing: the wait
    doubles from 5 s up to this (``5`` keeps a fixed period). Walking a 100k-file root every
    5 s kept an idle server at ~7 % of a core."""

    reconcile_share: float = 0.05
    """The share of the time the periodic reconciles may take at most: the wait after one is at
    least its duration over this (``0``: no such floor). Walking a million files takes ~5 s of a
    core, which every 5 s (the first waits) slowed the searches answered meanwhile 1.5-2x;
    at 5 % the next walk of such a root comes ~100 s later."""

    check_settle: float = 60.0
    """Seconds a server waits after it is ready before the first background ``memory check`` of
    a root of 100,000 files or more, and before its first replay of the git history into the
    dashboard's timeline (``0``: none). At a million files the check takes a core for ~20 s and
    1 GB in its worker process, which slowed the first searches 1.5-2x, and a first replay of a
    million files' commit ~2 min of the server's own interpreter; until they have run, the
    dashboard shows the check as not yet run and the timeline as being replayed, and ``memory
    check`` computes it when asked."""

    read_ahead: float = 0.5
    """A server starting to watch a root reads its index file (64 MB or more) through once, in
    a child process, when the file is at most this share of the memory available (``0``:
    never): its first searches then find the index's pages in the page cache instead of waiting
    on the disk for each hit's row and text (at a million files, with the cache emptied first,
    the first 30 searches' p50 was 23 ms against ~15 ms warm)."""

    # -- the timeline ---------------------------------------------------------------------------

    timeline_known: bool = True
    """The timeline takes the changes of a commit this process made from what the commit noted
    as it built its trees, instead of reading them back from git."""

    timeline_by_folder: bool = True
    """The timeline reads a commit's changes folder by folder, entering only the folders whose
    tree changed. Off: one libgit2 diff of the whole trees (67 ms a commit on a 100k-file
    root)."""

    # -- reads and recall -----------------------------------------------------------------------

    read_many: bool = True
    """Reading many files (a brief's pages) resolves the root once and checks each file on the
    descriptor it was opened as. Off: each file read as a single read is, resolving its path's
    symlinks three times (most of a brief's reading time)."""

    kept_reports: bool = True
    """The whole memory report, once printed by a one-shot command, is kept in the index (JSON
    and text, compressed) until a file row changes, and printed again as it is: 1.4–2 s of
    SQLite at a million episodes become a read (:mod:`index.memory.printed`). Off: made each
    time."""

    report_in_sql: bool = True
    """The memory report's episode lists are joined by SQLite, one value each. Off: one Python
    string per episode."""

    search_top_k: bool = True
    """Keyword search cuts the matches to a window by BM25 alone before joining the rows. Off:
    the full query joins every match."""

    term_columns: bool = True
    """A server ranks natural-language queries (and AND-ed phrases and prefixes) from its
    in-memory word counts instead of having FTS5 score every match."""

    term_pruning: bool = True
    """On a large index (200,000 documents or more) a natural-language query is scored only for
    the documents whose counts could bring them onto the page, bounded exactly; the answer is
    the same to the bit. Off: every document holding a term is scored."""

    feedback: bool = True
    """Natural-language questions are asked again with the distinctive words of their best hits
    (pseudo-relevance feedback), which ranks better on agents' questions. Off: one query."""

    search_cache: int = 256
    """A server keeps the answers of this many recent keyword searches until the index changes
    (any commit drops them all): a question asked again is answered without ranking. 0: none
    kept, every search ranks."""

    stored_columns: bool = True
    """A rebuild of a large root (20,000 files or more) counts its most common words as it
    indexes them and keeps their term columns in the index, which a server reads before it
    reports ready: its first searches of those words do not make them (over a second a word
    at a million files). Off: columns are made by the first search of each word."""

    cached_candidates: bool = True
    """A server keeps the pages each recall filter lets the vector side rank, caught up from
    the change log. Off: they are queried again for every search."""

    # -- spaces ---------------------------------------------------------------------------------

    max_open_spaces: int = 16
    """How many spaces besides the default one a server holds open at once (each an open
    index, a watcher, a commit process). The least recently used one that no request holds is
    closed to open another; spaces held by requests may exceed it until their requests end."""

    space_idle: float = 600.0
    """Seconds a space may go without a request before it is closed (reopened on the next)."""

    light_spaces: bool = True
    """The spaces besides the default one run light, so that many of them fit one process:
    commits in the server's own process and each alone (no commit process, no committer
    thread), each write indexed inside it (no writeback thread), and no dashboard loops (the
    web overview computes its history and check on request, as a one-shot command does). What
    remains per open space is its index, its watcher (two threads) and its git handle: 4–7 MB.
    Off: every space runs as the default one does (~12 threads, two child processes and ~89 MB
    each; see docs/benchmarks.md, Spaces)."""

    def for_space(self) -> Tuning:
        """The tuning a space other than the default one opens with (:attr:`light_spaces`)."""
        if not self.light_spaces:
            return self
        return self.but(commit_process=False, group_commit=False, index_writeback=False)

    # -- replication ----------------------------------------------------------------------------

    ack_wait: float = 10.0
    """With ``[replication] acks = 1``: how long a primary's write waits for a replica to hold
    its commit before it is answered 503 (written, not acknowledged)."""

    apply_wait: float = 10.0
    """How long a write forwarded by a replica waits for its commit to be applied there."""

    min_commit_wait: float = 5.0
    """How long a read with ``X-Kiwi-Min-Commit`` waits for that commit before a 503."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Tuning:
        """The defaults with the user knobs of :data:`ENVIRONMENT` applied; a value that does
        not parse leaves its default."""
        env = os.environ if environ is None else environ
        changes: dict[str, object] = {}
        workers = env.get("KIWIFS_WORKERS", "").strip()
        if workers.isdigit():
            changes["workers"] = max(1, int(workers))
        if env.get("KIWIFS_FSYNC", "").strip() == "strict":
            changes["strict_fsync"] = True
        timeout = _positive(env.get("KIWIFS_HEADER_TIMEOUT", ""))
        if timeout is not None:
            changes["header_timeout"] = timeout
        monitor = env.get("KIWIFS_MONITOR", "").strip().lower()
        if monitor in ("off", "0", "no", "false"):
            changes["monitor_files"] = 0
        elif monitor.isdigit():
            changes["monitor_files"] = int(monitor)
        return cls(**changes)  # type: ignore[arg-type]

    def but(self, **changes: object) -> Tuning:
        """This tuning with ``changes`` (field names): what a benchmark's other side runs."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _positive(text: str) -> float | None:
    """``text`` as a number over 0, else ``None``."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value > 0 else None
