"""Each fast path against the plain way of doing the same, both measured in this one run.

    python bench/fast_paths.py [--episodes 100000] [--repeat 9] [--only walk,scan,...,rounds]

Sections (``--only`` picks some):

* ``walk`` -- ``kiwifs memory report --json``, index up to date. A: as shipped (above 20,000
  files the stat walk runs in forked workers while the answer is computed, see
  ``Index.reconcile_then``); B: ``KIWIFS_WORKERS=1`` (the user's knob ``Tuning.workers``: the
  walk inline, then the answer).
* ``scan`` -- ``kiwifs memory report --json --no-index``. A: as shipped (files read by one
  forked worker per CPU); B: ``KIWIFS_WORKERS=1`` (read in the one process).
* ``json`` -- the answer of the index-backed report and its printing, in this process (no
  walk). A: the stored entry text of each episode (``files.entry``), joined; B: an object per
  episode; both printed by ``printed_json.dumps`` (orjson), B also by ``json.dumps(indent=2)``.
* ``entries`` -- the two lists of that document as printed JSON, in this process. A: each list
  joined by SQLite into one value (``report.entry_lists``, ``Tuning.report_in_sql``); B
  (``in_sql=False``): the stored entry text taken as it is from the rows, one Python string per
  row, joined in Python; C: path and text made per row, as a report with claims to mark still
  does.
* ``racy`` -- a reconcile of 3,000 rows stored within the racy window (no signature; every
  write through a server leaves such a row), their files now old enough to trust, in a root of
  its own. A: as shipped, each file read and hashed, and only its stat stored when the bytes
  are its row's (``Tuning.stat_only``); B: each file parsed and its whole row stored again
  (``Tuning(stat_only=False)``).

* ``rounds`` -- :data:`ROUNDS` rounds of :data:`ROUND_FILES` new files each stored by
  ``Index.refresh`` (what the writeback of a server does under load) into a copy of the 100k
  index as ``kiwifs reindex`` leaves it. A: as shipped, a round's words written last, as one
  FTS5 segment (``Tuning.texts_last``), and FTS5 merging 64 segments a level
  (``schema.FTS_MERGING``, ``Tuning.fts_merge``); B: each file's words written as its row is
  stored (``texts_last=False``); C: FTS5's default merge settings (``fts_merge=False``);
  D: both, as before 2026-12-02 19:30 UTC.

Variants run interleaved (A, B, B, A, ...) after one unmeasured warm-up each, because the machine
is shared and its load drifts, and each measured run waits (up to ``--idle-wait`` seconds) until
the CPUs were at least 90 % idle for half a second: worker processes can only win on CPUs
nobody else is using. The figures are medians of wall time and of CPU time (user + system,
children included); ``idle_starts`` counts the runs that found the machine idle. Every
variant's output is checked to be the same bytes. The corpus and its index are the ones
``bench/index.py`` makes (``bench/.corpora/``).

On a machine that stays busy, give the benchmark the CPUs instead (Linux schedules sessions
fairly against each other, so ``nice`` alone does not do it; the output records both)::

    setsid --wait sh -c 'echo -15 > /proc/self/autogroup; exec nice -n -15 \\
        python bench/fast_paths.py'

"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from index import corpus
from kiwifs.base.printed_json import dumps
from kiwifs.index import record
from kiwifs.index import report as indexed
from kiwifs.index.core import Index
from kiwifs.tuning import Tuning

KIWIFS = str(Path(sys.executable).with_name("kiwifs"))
PREFIX = "episodes/"


class Hashing:
    """A text or binary stream that keeps only the MD5 of what is written to it."""

    def __init__(self) -> None:
        self.md5 = hashlib.md5()

    def write(self, data: str | bytes) -> int:
        self.md5.update(data.encode() if isinstance(data, str) else data)
        return len(data)

    def flush(self) -> None:
        pass


Run = Callable[[], tuple[float, float, str]]  # -> wall seconds, CPU seconds, output digest


def idle_fraction(seconds: float = 0.5) -> float:
    """How idle the CPUs were over the next ``seconds`` (from ``/proc/stat``)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as fh:
            fields = [int(v) for v in fh.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, total

    idle0, total0 = sample()
    time.sleep(seconds)
    idle1, total1 = sample()
    return (idle1 - idle0) / max(total1 - total0, 1)


def wait_for_idle(limit: float) -> bool:
    """Wait until the machine is idle, at most ``limit`` seconds; True when it was."""
    deadline = time.monotonic() + limit
    while idle_fraction() < IDLE:
        if time.monotonic() > deadline:
            return False
    return True


IDLE = 0.9


def interleaved(variants: dict[str, Run], repeat: int, idle_wait: float) -> dict[str, Any]:
    """Median wall and CPU time of each variant, run in alternating order."""
    names = list(variants)
    digests = {name: variants[name]()[2] for name in names}  # warm-up
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    idle_starts = 0
    for i in range(repeat):
        for name in names if i % 2 == 0 else names[::-1]:
            idle_starts += wait_for_idle(idle_wait)
            w, c, digest = variants[name]()
            wall[name].append(w)
            cpu[name].append(c)
            digests[name] = digest if digests[name] == digest else "CHANGED"
    return {
        "same_output": len(set(digests.values())) == 1,
        "idle_starts": f"{idle_starts} of {repeat * len(names)}",
        "variants": {
            n: {
                "wall_median_s": round(statistics.median(wall[n]), 3),
                "cpu_median_s": round(statistics.median(cpu[n]), 3),
                "wall_runs_s": [round(w, 3) for w in wall[n]],
            }
            for n in names
        },
    }


def command(argv: list[str], env: dict[str, str]) -> Run:
    def run() -> tuple[float, float, str]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        out = subprocess.run(
            argv, stdout=subprocess.PIPE, env={**os.environ, **env}, check=True
        ).stdout
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        return seconds, cpu, hashlib.md5(out).hexdigest()

    return run


def cli_ab(root: Path, extra: list[str], repeat: int, idle_wait: float) -> dict[str, Any]:
    argv = [KIWIFS, "memory", "report", "--json", *extra, "--root", str(root)]
    return interleaved(
        {
            "A: worker processes": command(argv, {}),
            "B: KIWIFS_WORKERS=1": command(argv, {"KIWIFS_WORKERS": "1"}),
        },
        repeat,
        idle_wait,
    )


def in_process(write: Callable[[Hashing], None]) -> Run:
    def run() -> tuple[float, float, str]:
        sink = Hashing()
        start, cpu = time.perf_counter(), time.process_time()
        write(sink)
        return time.perf_counter() - start, time.process_time() - cpu, sink.md5.hexdigest()

    return run


def json_ab(root: Path, repeat: int, idle_wait: float) -> dict[str, Any]:
    index = Index(root)

    def stored() -> dict[str, Any]:
        with index.reader() as conn:
            return indexed.report_document(conn, PREFIX)[0]

    def objects() -> dict[str, Any]:
        with index.reader() as conn:
            return indexed.report(conn, PREFIX)[0].to_json()

    def printed(value: dict[str, Any], out: Hashing) -> None:
        out.write(dumps(value))
        out.write(b"\n")

    variants = {
        "A: stored entries": in_process(lambda out: printed(stored(), out)),
        "B: objects": in_process(lambda out: printed(objects(), out)),
        "objects + json.dumps(indent=2)": in_process(
            lambda out: out.write(json.dumps(objects(), indent=2, ensure_ascii=False) + "\n")
        ),
    }
    try:
        return interleaved(variants, repeat, idle_wait)
    finally:
        index.close()


def entries_ab(root: Path, repeat: int, idle_wait: float) -> dict[str, Any]:
    """The two lists of the report document as printed JSON, from their stored entry text (no
    claims)."""
    index = Index(root)
    lo, hi = indexed.prefix_range(PREFIX)

    def lists(in_sql: bool) -> Callable[[Hashing], None]:
        def run(out: Hashing) -> None:
            with index.reader() as conn:
                files, unmerged = indexed.entry_lists(conn, lo, hi, None, 0, in_sql)
            out.write(files.text + unmerged.text)

        return run

    def per_row(out: Hashing) -> None:
        with index.reader() as conn:
            columns = f"path, {indexed.ENTRY_SQL}"
            rows = indexed._lists(conn, lo, hi, None, 0, columns, indexed._path_and_entry)
        files = indexed._joined([e for _, e in rows[0]])
        out.write(files.text + indexed._joined([e for _, e in rows[1]]).text)

    variants = {
        "A: joined by SQLite": in_process(lists(True)),
        "B: text as it is, joined in Python": in_process(lists(False)),
        "C: path and text per row": in_process(per_row),
    }
    try:
        return interleaved(variants, repeat, idle_wait)
    finally:
        index.close()


RACY_FILES = 3000
RACY_NS = record.RACY_NS


def racy_ab(repeat: int, idle_wait: float) -> dict[str, Any]:
    words = " ".join(f"word{i}" for i in range(300))

    def variant(stat_only: bool) -> Run:
        def run() -> tuple[float, float, str]:
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp, "root")
                (root / "episodes/new").mkdir(parents=True)
                for i in range(RACY_FILES):
                    (root / f"episodes/new/e{i}.md").write_text(
                        f"---\nmemory_kind: episodic\nepisode_id: e{i}\n---\n{words} {i}\n"
                    )
                tuning = Tuning(stat_only=stat_only)
                index = Index(root, Path(tmp, "index.db"), tuning=tuning)
                try:
                    record.RACY_NS = 1 << 62  # every row stored without a signature
                    index.reconcile()
                    record.RACY_NS = 0
                    start, cpu = time.perf_counter(), time.process_time()
                    assert index.reconcile().updated == RACY_FILES
                    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
                    with index.reader() as conn:
                        rows = conn.execute(
                            "SELECT key, sig IS NULL, etag, frontmatter FROM files ORDER BY key"
                        ).fetchall()
                        rows.append(conn.execute(RACY_WORDS).fetchone())
                finally:
                    index.close()
                    record.RACY_NS = RACY_NS
            return wall, cpu, hashlib.md5(repr(rows).encode()).hexdigest()

        return run

    return interleaved(
        {"A: stat only": variant(True), "B: whole rows": variant(False)}, repeat, idle_wait
    )


RACY_WORDS = "SELECT count(*) FROM fts WHERE fts MATCH 'word7 AND word299'"


ROUNDS = 300
ROUND_FILES = 20  # about a writeback round's paths with 4 clients writing (50 ms)


def rounds_ab(root: Path, repeat: int, idle_wait: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp, "root")
        subprocess.run(["cp", "-al", str(root), str(copy)], check=True)
        source = copy / ".kiwi/state/index.db"

        def variant(texts_last: bool, merging: bool) -> Run:
            def run() -> tuple[float, float, str]:
                target = Path(tmp, "index.db")
                for suffix in ("-wal", "-shm"):
                    Path(f"{target}{suffix}").unlink(missing_ok=True)
                subprocess.run(["cp", str(source), str(target)], check=True)
                new = copy / "episodes/new"
                subprocess.run(["rm", "-rf", str(new)], check=True)
                new.mkdir()
                tuning = Tuning(texts_last=texts_last, fts_merge=merging)
                index = Index(copy, target, tuning=tuning)
                try:
                    wall = cpu = 0.0
                    for n in range(ROUNDS):
                        names = [f"episodes/new/r{n}-{i}.md" for i in range(ROUND_FILES)]
                        for i, name in enumerate(names):
                            (copy / name).write_text(
                                f"---\nmemory_kind: episodic\nepisode_id: r{n}-{i}\n---\n"
                                f"round{n} file{i} the agent called the tool and retried\n"
                            )
                        start, started = time.perf_counter(), time.process_time()
                        index.refresh(names)
                        wall += time.perf_counter() - start
                        cpu += time.process_time() - started
                    with index.reader() as conn:
                        found = conn.execute(ROUND_WORDS).fetchall()
                finally:
                    index.close()
                return wall, cpu, hashlib.md5(repr(found).encode()).hexdigest()

            return run

        return interleaved(
            {
                "A: words last, 64 a level": variant(True, True),
                "B: texts_last=False": variant(False, True),
                "C: fts_merge=False": variant(True, False),
                "D: both (before)": variant(False, False),
            },
            repeat,
            idle_wait,
        )


ROUND_WORDS = (
    "SELECT f.path FROM fts JOIN files f ON f.id = fts.rowid"
    " WHERE fts MATCH 'round7 OR (file3 AND retried)' ORDER BY f.path"
)


def _autogroup() -> str:
    try:
        with open("/proc/self/autogroup") as fh:
            return fh.read().strip()
    except OSError:
        return "none"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=9, help="measured runs of each variant")
    ap.add_argument(
        "--only", default="walk,scan,json,entries,racy,rounds", help="sections, comma-separated"
    )
    ap.add_argument("--idle-wait", type=float, default=60, help="seconds to wait for idle CPUs")
    args = ap.parse_args()
    root = corpus(args.episodes, args.seed)
    if not (root / ".kiwi/state/index.db").exists():
        subprocess.run([KIWIFS, "reindex", "--root", str(root)], check=True)
    subprocess.run([KIWIFS, "memory", "report", "--root", str(root)], capture_output=True)
    out: dict[str, Any] = {"corpus": str(root), "load_before": os.getloadavg()}
    out["priority"] = {"nice": os.nice(0), "autogroup": _autogroup()}
    for section in args.only.split(","):
        if section == "walk":
            out["walk"] = cli_ab(root, [], args.repeat, args.idle_wait)
        elif section == "scan":
            out["scan"] = cli_ab(root, ["--no-index"], args.repeat, args.idle_wait)
        elif section == "json":
            out["json"] = json_ab(root, args.repeat, args.idle_wait)
        elif section == "entries":
            out["entries"] = entries_ab(root, args.repeat, args.idle_wait)
        elif section == "racy":
            out["racy"] = racy_ab(args.repeat, args.idle_wait)
        elif section == "rounds":
            out["rounds"] = rounds_ab(root, args.repeat, args.idle_wait)
        else:
            sys.exit(f"unknown section {section!r}")
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
