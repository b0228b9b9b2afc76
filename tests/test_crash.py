"""Crash safety: ``kill -9`` at any moment loses no acknowledged write and leaves none half done.

Real processes are killed with SIGKILL: small scripts over :class:`Knowledge` for the cases that
need a precise moment (right after acknowledged writes, in the middle of a bulk), and a real
``kiwifs serve`` under concurrent writers for the crash-injection test. Recovery is what the next
open (``Knowledge.open``, ``kiwifs serve``) does; after it, ``git status`` is clean, every
acknowledged write is on disk and in HEAD, and no bulk write is there in part.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

import realserver
from gitrepo import git
from kiwifs.errors import StorageError
from kiwifs.files.atomic import TEMP_PREFIX
from kiwifs.frontmatter.reader import read_frontmatter
from kiwifs.git.indexfile import STALE_MARKER, WRITING_MARKER
from kiwifs.git.reflock import MARKER as REF_MARKER
from kiwifs.knowledge import Knowledge

API = "/api/kiwi"


def status(root: Path) -> str:
    """``git status --porcelain`` of the whole root (kiwifs's state is in its .gitignore)."""
    return git(root, "status", "--porcelain", "--untracked-files=all")


def head_files(root: Path) -> set[str]:
    return set(git(root, "ls-tree", "-r", "--name-only", "HEAD").splitlines())


def run_and_get_killed(script: str, *args: str) -> str:
    """Run ``script`` in a fresh interpreter that ends by SIGKILL-ing itself; its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    return done.stdout


# -- the git index file after kill -9 ------------------------------------------------------------

WRITE_THREE_THEN_DIE = """
import os, signal, sys
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving
kb = Knowledge.open(sys.argv[1])
if sys.argv[2] == "async":
    Serving(kb).enable_async_commit(window=30.0)
for i in range(3):
    kb.write(f"notes/n{i}.md", f"# note {i}\\n", actor="alice")
os.kill(os.getpid(), signal.SIGKILL)  # right after the acknowledgements, no clean shutdown
"""


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_git_status_is_clean_after_kill_9_and_restart(knowledge_root: Path, mode: str) -> None:
    run_and_get_killed(WRITE_THREE_THEN_DIE, str(knowledge_root), mode)
    assert (
        status(knowledge_root) != ""
    )  # the git index file lags behind HEAD (or the commits) until...

    kb = Knowledge.open(knowledge_root)  # ...the restart repairs it, before anything else runs
    try:
        assert status(knowledge_root) == ""
        assert {"notes/n0.md", "notes/n1.md", "notes/n2.md"} <= head_files(knowledge_root)
        assert not (knowledge_root / STALE_MARKER).exists()
    finally:
        kb.close()
    # a user's plain `git commit` has nothing to commit, and deletes nothing
    subprocess.run(["git", "-C", str(knowledge_root), "commit", "-m", "user"], capture_output=True)
    assert {"notes/n0.md", "notes/n1.md", "notes/n2.md"} <= head_files(knowledge_root)
    assert git(knowledge_root, "show", "HEAD:notes/n2.md") == "# note 2\n"


def test_recovery_keeps_what_the_user_staged(knowledge_root: Path) -> None:
    (knowledge_root / "index.md").write_text("# staged by the user\n")
    git(knowledge_root, "add", "index.md")
    run_and_get_killed(WRITE_THREE_THEN_DIE, str(knowledge_root), "sync")
    with Knowledge.open(knowledge_root):
        assert (
            status(knowledge_root) == "M  index.md\n"
        )  # kiwifs's commits show clean, the user's staging stays


def test_an_index_lock_left_by_a_killed_index_write_is_removed(knowledge_root: Path) -> None:
    """A crash while kiwifs writes ``.git/index`` leaves git's ``index.lock`` behind, which
    would make every later ``git commit`` fail: recovery removes it (only when kiwifs's own
    marker shows the lock is kiwifs's)."""
    run_and_get_killed(WRITE_THREE_THEN_DIE, str(knowledge_root), "sync")
    (knowledge_root / ".git/index.lock").write_bytes(b"half an index")
    (knowledge_root / WRITING_MARKER).touch()
    with Knowledge.open(knowledge_root):
        assert not (knowledge_root / ".git/index.lock").exists()
        assert not (knowledge_root / WRITING_MARKER).exists()
        assert status(knowledge_root) == ""


def test_a_user_index_lock_is_not_touched(knowledge_root: Path) -> None:
    run_and_get_killed(WRITE_THREE_THEN_DIE, str(knowledge_root), "sync")
    (knowledge_root / ".git/index.lock").write_bytes(b"a git command at work")
    with Knowledge.open(knowledge_root):
        assert (knowledge_root / ".git/index.lock").exists()  # git's own lock: the repair waits
        assert (knowledge_root / STALE_MARKER).exists()
    (knowledge_root / ".git/index.lock").unlink()
    with Knowledge.open(knowledge_root):
        assert status(knowledge_root) == ""


def test_a_ref_lock_left_by_a_killed_commit_is_removed(knowledge_root: Path) -> None:
    """``kill -9`` while a commit moves HEAD leaves ``refs/heads/main.lock``; with kiwifs's
    marker beside it the next commit removes it instead of failing forever."""
    run_and_get_killed(WRITE_THREE_THEN_DIE, str(knowledge_root), "sync")
    branch = (knowledge_root / ".git/HEAD").read_text().split("ref: ")[1].strip()
    (knowledge_root / f".git/{branch}.lock").write_text("0" * 40 + "\n")
    (knowledge_root / REF_MARKER).touch()
    with Knowledge.open(knowledge_root) as kb:
        kb.write("notes/after.md", "# after\n", actor="alice")
        assert not (knowledge_root / f".git/{branch}.lock").exists()
        assert not (knowledge_root / REF_MARKER).exists()
    assert "notes/after.md" in head_files(knowledge_root)


def test_a_user_ref_lock_is_not_touched(knowledge_root: Path) -> None:
    branch = (knowledge_root / ".git/HEAD").read_text().split("ref: ")[1].strip()
    (knowledge_root / f".git/{branch}.lock").write_text("a git command at work\n")
    with Knowledge.open(knowledge_root) as kb:
        with pytest.raises(StorageError, match="git commit failed"):
            kb.write("notes/blocked.md", "# blocked\n", actor="alice")
        assert (knowledge_root / f".git/{branch}.lock").exists()
        (knowledge_root / f".git/{branch}.lock").unlink()
        kb.write("notes/later.md", "# later\n", actor="alice")
    assert "notes/blocked.md" in head_files(
        knowledge_root
    )  # the failed commit's write, committed later


# -- bulk writes across a crash ------------------------------------------------------------------

BULK_SIZE = 400
OLD = 200  # the bulk first rewrites OLD existing files, then creates BULK_SIZE - OLD new ones

BULK_THEN_WAIT = """
import sys
from kiwifs.knowledge import Knowledge
root, gen, new_dir = sys.argv[1], sys.argv[2], sys.argv[3]
kb = Knowledge.open(root)
files = [(f"bulk/old/f{i:03d}.md", f"gen {gen} old {i}\\n") for i in range(OLD_COUNT)]
files += [(f"bulk/{new_dir}/f{i:03d}.md", f"gen {gen} new {i}\\n") for i in range(NEW_COUNT)]
kb.bulk_write(files, actor="bulker", message=f"bulk gen {gen}")
print("acknowledged", flush=True)
sys.stdin.read()  # wait for the kill
""".replace("OLD_COUNT", str(OLD)).replace("NEW_COUNT", str(BULK_SIZE - OLD))


def kill_bulk_midway(root: Path, gen: int, new_dir: str) -> int:
    """Start a bulk write and SIGKILL it once its first new file is on disk (the old ones are
    then rewritten, the new ones not all written); returns how many new files were there."""
    folder = root / "bulk" / new_dir
    with subprocess.Popen(
        [sys.executable, "-c", BULK_THEN_WAIT, str(root), str(gen), new_dir],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    ) as proc:
        try:
            while proc.poll() is None:
                if folder.is_dir() and markdown_in(folder):
                    break
                time.sleep(0.001)
        finally:
            proc.kill()
    return markdown_in(folder)


def markdown_in(folder: Path) -> int:
    return sum(n.endswith(".md") for n in os.listdir(folder)) if folder.is_dir() else 0


def bulk_state(root: Path, new_dir: str) -> tuple[set[str], int]:
    """The generations found in the old files, and how many new files exist."""
    gens = {(root / f"bulk/old/f{i:03d}.md").read_text().split()[1] for i in range(OLD)}
    return gens, markdown_in(root / "bulk" / new_dir)


def commits_touching_part_of(root: Path, paths: set[str], pathspec: str) -> list[str]:
    """Commits that changed files under ``pathspec`` but not every one of ``paths``."""
    out = git(root, "log", "--full-diff", "--format=%x00%H", "--name-only", "--", pathspec)
    partial = []
    for record in out.split("\0")[1:]:
        sha, *names = [line for line in record.splitlines() if line]
        touched = set(names) & paths
        if touched != paths:
            partial.append(f"{sha[:10]}: {len(touched)} of {len(paths)}")
    return partial


def midway_kill(root: Path, gen: int) -> tuple[str, set[str], str]:
    """Kill bulk write ``gen`` midway (retrying with fresh paths until a kill lands midway);
    returns its new folder, and the generations its old files held and HEAD before it began (a
    missed kill's bulk is finished and committed by the recovery before the next try)."""
    for attempt in range(8):
        new_dir = f"new{gen}-{attempt}"
        before, _ = bulk_state(root, new_dir)
        head = git(root, "rev-parse", "HEAD")
        written = kill_bulk_midway(root, gen, new_dir)
        if 0 < written < BULK_SIZE - OLD:
            return new_dir, before, head
        with Knowledge.open(root):  # the kill missed: recover, and try again
            pass
    pytest.fail("no kill landed in the middle of the bulk write in 8 attempts")


def test_a_bulk_killed_midway_is_recovered_whole(knowledge_root: Path) -> None:
    with Knowledge.open(knowledge_root) as kb:
        kb.bulk_write([(f"bulk/old/f{i:03d}.md", f"gen 1 old {i}\n") for i in range(OLD)])
    new_dir, _, _ = midway_kill(knowledge_root, 2)
    gens, new = bulk_state(knowledge_root, new_dir)
    assert gens == {"2"} and 0 < new < BULK_SIZE - OLD  # on disk in part, before recovery

    with Knowledge.open(knowledge_root):
        gens, new = bulk_state(knowledge_root, new_dir)
        # the journal held the whole bulk: rolled forward, one commit by its author
        assert (gens, new) == ({"2"}, BULK_SIZE - OLD)
        assert status(knowledge_root) == ""
        assert git(knowledge_root, "log", "-1", "--format=%an %s") == "bulker bulk gen 2\n"
        bulk_paths = {f"bulk/old/f{i:03d}.md" for i in range(OLD)}
        bulk_paths |= {f"bulk/{new_dir}/f{i:03d}.md" for i in range(BULK_SIZE - OLD)}
        assert commits_touching_part_of(knowledge_root, bulk_paths, f"bulk/{new_dir}") == []
        assert not list(knowledge_root.rglob(f"{TEMP_PREFIX}*"))


def test_a_bulk_that_cannot_be_finished_is_rolled_back(knowledge_root: Path) -> None:
    with Knowledge.open(knowledge_root) as kb:
        kb.bulk_write([(f"bulk/old/f{i:03d}.md", f"gen 1 old {i}\n") for i in range(OLD)])
    new_dir, before, head = midway_kill(knowledge_root, 2)
    # before the restart, a folder appears where the bulk's last file should go
    (knowledge_root / f"bulk/{new_dir}/f{BULK_SIZE - OLD - 1:03d}.md").mkdir(parents=True)

    with Knowledge.open(knowledge_root):
        gens, new = bulk_state(knowledge_root, new_dir)
        assert gens == before  # the old contents are back ({"1"} unless a kill missed first)
        assert new == 1  # only the folder in the way: no new file remains
        assert git(knowledge_root, "rev-parse", "HEAD") == head
        assert status(knowledge_root) == ""


def test_a_live_process_finishes_a_bulk_another_process_left_before_writing(
    knowledge_root: Path,
) -> None:
    """The next write, in any process, settles an interrupted bulk first: it can then never be
    replayed over that write (or any later one)."""
    with Knowledge.open(knowledge_root) as kb:
        kb.bulk_write([(f"bulk/old/f{i:03d}.md", f"gen 1 old {i}\n") for i in range(OLD)])
        new_dir, _, _ = midway_kill(
            knowledge_root, 2
        )  # another process dies mid-bulk; kb stays open
        kb.write("bulk/old/f000.md", "written after the crash\n", actor="later")
        gens, new = bulk_state(knowledge_root, new_dir)
        assert (gens, new) == ({"2", "after"}, BULK_SIZE - OLD)
        assert git(knowledge_root, "log", "-2", "--format=%an %s") == (
            "later later: bulk/old/f000.md\nbulker bulk gen 2\n"
        )
    with Knowledge.open(knowledge_root):  # nothing left to replay
        assert (knowledge_root / "bulk/old/f000.md").read_text() == "written after the crash\n"
        assert status(knowledge_root) == ""


def test_orphaned_temp_files_are_removed(knowledge_root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (knowledge_root / "linked").symlink_to(outside)
    (knowledge_root / "notes").mkdir()
    near_journaled = knowledge_root / f"notes/{TEMP_PREFIX}4-5-6"
    elsewhere = [
        knowledge_root / f"{TEMP_PREFIX}1-2-3",
        knowledge_root / f".kiwi/state/{TEMP_PREFIX}bulk-7-0",
    ]
    kept = [knowledge_root / f".git/{TEMP_PREFIX}8-9-0", outside / f"{TEMP_PREFIX}1-1-1"]
    for path in [near_journaled, *elsewhere, *kept]:
        path.write_text("half written")
    # a crash while writing notes/a.md (and a path that was refused: it leads outside)
    (knowledge_root / ".kiwi/state/uncommitted.log").write_text("notes/a.md\nlinked/x.md\n")

    with Knowledge.open(knowledge_root):  # any open looks in the folders the journal names
        assert not near_journaled.exists()
        assert elsewhere[0].exists() and not elsewhere[1].exists()  # state folder too
        assert all(p.exists() for p in kept)
    with Knowledge.open(
        knowledge_root, sweep=True
    ):  # `kiwifs serve` and `kiwifs mcp` walk the root
        assert not any(p.exists() for p in elsewhere)
        assert all(p.exists() for p in kept)  # not in .git, not through a symlink
    assert status(knowledge_root) == "?? linked\n"  # the symlink itself: not kiwifs's to remove


# -- crash injection: a real server, concurrent writers, kill -9 at random points ----------------

KILLS = 6
BULK_FILES = 40


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    base: str


def start_server(root: Path, mode: str) -> Server:
    flag = "--async-commit" if mode == "async" else "--sync-commit"
    log = root.parent / "serve.log"  # appended to by every restart
    base, proc = realserver.start(root, log, (flag,), probe="/health")
    return Server(proc, base)


class Stop(Exception):
    """The server went away (killed): the writer stops."""


@dataclass
class Writer:
    """A writer thread's model: what it was acknowledged, and what it had in flight.

    After a crash each path must hold its acknowledged state, or the state of the one
    operation in flight when the server died; the model then adopts what is there.
    """

    name: str
    acked: dict[str, str | None] = field(default_factory=dict)
    pending: dict[str, str | None] = field(default_factory=dict)
    merged: set[str] = field(default_factory=set)  # episode ids merged into PAGE
    merging: str | None = None
    acknowledged: int = 0
    failures: list[str] = field(default_factory=list)

    def call(self, client: httpx.Client, method: str, url: str, **kw: Any) -> httpx.Response:
        try:
            resp = client.request(method, url, **kw)
        except httpx.TransportError as exc:
            raise Stop from exc
        if resp.status_code != 200:
            self.failures.append(f"{method} {url} {kw}: {resp.status_code} {resp.text}")
            raise Stop
        return resp

    def intend(self, changes: dict[str, str | None]) -> None:
        self.pending = changes

    def done(self) -> None:
        self.acked.update(self.pending)
        self.pending = {}
        if self.merging is not None:
            self.merged.add(self.merging)
            self.merging = None
        self.acknowledged += 1

    def check(self, root: Path, head: set[str]) -> int:
        """Compare the model with the disk and HEAD; returns the number of paths checked."""
        for rel in set(self.acked) | set(self.pending):
            path = root / rel
            actual = path.read_text() if path.is_file() else None
            allowed = [self.acked.get(rel)]
            if rel in self.pending:
                allowed.append(self.pending[rel])
            assert actual in allowed, f"{self.name} {rel}: {actual!r} not in {allowed!r}"
            assert (rel in head) == (actual is not None), f"{rel} on disk but not in HEAD"
            self.acked[rel] = actual
        self.pending = {}
        return len(self.acked)


def file_writer(w: Writer, client: httpx.Client, rng: random.Random, stop: threading.Event) -> None:
    """PUT, DELETE and rename on a few paths of its own; every content holds a unique token."""
    paths = [f"{w.name}/p{j}.md" for j in range(8)]
    seq = 0
    while not stop.is_set():
        seq += 1
        present = [p for p in paths if w.acked.get(p) is not None]
        absent = [p for p in paths if w.acked.get(p) is None]
        roll = rng.random()
        if present and roll < 0.2:
            path = rng.choice(present)
            w.intend({path: None})
            w.call(client, "DELETE", f"{API}/file", params={"path": path})
        elif present and absent and roll < 0.4:
            src, dst = rng.choice(present), rng.choice(absent)
            w.intend({src: None, dst: w.acked[src]})
            w.call(client, "POST", f"{API}/rename", json={"from": src, "to": dst})
        else:
            path = rng.choice(paths)
            content = f"# {path}\n\ntoken tok{w.name}x{seq}\n"
            w.intend({path: content})
            w.call(client, "PUT", f"{API}/file", params={"path": path}, content=content)
        w.done()


def bulk_writer(w: Writer, client: httpx.Client, gen: int, stop: threading.Event) -> None:
    """Rewrites the same BULK_FILES files, all of them in each bulk write."""
    while not stop.is_set():
        gen += 1
        files = [
            {"path": f"bulk/f{i:03d}.md", "content": f"gen {gen} file {i}\n"}
            for i in range(BULK_FILES)
        ]
        w.intend({f["path"]: f["content"] for f in files})
        w.call(client, "POST", f"{API}/bulk", json={"files": files, "message": f"gen {gen}"})
        w.done()


PAGE = "concepts/crash.md"


def merge_writer(w: Writer, client: httpx.Client, start: int, stop: threading.Event) -> None:
    """Writes an episode, then records its merge into one page (the page is checked apart)."""
    n = start
    while not stop.is_set():
        n += 1
        path = f"episodes/crash/ep-{n}.md"
        content = f"---\nmemory_kind: episodic\nepisode_id: ep-{n}\n---\nepisode {n}\n"
        w.intend({path: content})
        w.call(client, "PUT", f"{API}/file", params={"path": path}, content=content)
        w.done()
        w.merging = f"ep-{n}"
        entries = [{"id": w.merging}]
        w.call(client, "POST", f"{API}/memory/merge", json={"path": PAGE, "entries": entries})
        w.done()


def check_merges(w: Writer, root: Path) -> int:
    """The page's merged-from holds every acknowledged merge (and maybe the one in flight)."""
    path = root / PAGE
    ids: set[str] = set()
    if path.is_file():
        entries = read_frontmatter(path.read_bytes()).data.get("merged-from") or []
        ids = {str(e["id"]) for e in entries}
    in_flight = {w.merging} if w.merging else set()
    assert w.merged <= ids <= w.merged | in_flight, (sorted(w.merged), sorted(ids), in_flight)
    w.merged, w.merging = ids, None
    return len(ids)


def bulk_generations(root: Path) -> set[str | None]:
    """The generations of the crash test's bulk files on disk (``None``: absent)."""
    return {
        (root / f"bulk/f{i:03d}.md").read_text().split()[1]
        if (root / f"bulk/f{i:03d}.md").is_file()
        else None
        for i in range(BULK_FILES)
    }


def check_bulk(w: Writer, root: Path, log: list[str]) -> None:
    gens = bulk_generations(root)
    assert len(gens) == 1, f"bulk write half there: generations {sorted(map(str, gens))}"
    log.append(f"bulk gen {gens.pop()}")


def check_root(root: Path, srv: Server, writers: list[Writer], rng: random.Random) -> int:
    """Everything the crash test promises, on a freshly restarted server; paths checked."""
    assert status(root) == "", status(root)
    assert not [p for p in root.rglob(f"{TEMP_PREFIX}*") if ".git" not in p.relative_to(root).parts]
    head = head_files(root)
    checked = 0
    for w in writers:
        checked += w.check(root, head)
        if w.name == "merger":
            checked += check_merges(w, root)
    with httpx.Client(base_url=srv.base, timeout=30.0) as c:
        # the index the server keeps equals a scan of the files
        indexed = c.get(f"{API}/memory/report").json()
        scanned = Knowledge(root).memory_report(use_index=False).to_json()
        assert indexed == scanned
        # and search finds acknowledged content
        contents = [v for w in writers for v in w.acked.values() if v and "token " in v]
        for content in rng.sample(contents, min(5, len(contents))):
            token = content.rsplit("token ", 1)[1].strip()
            hits = c.get(f"{API}/search", params={"q": token}).json()["results"]
            assert [h["path"] for h in hits], f"search finds no {token}"
    return checked


def test_kill_9_at_random_points_loses_no_acknowledged_write(tmp_path: Path) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    root = tmp_path / "kb"
    Knowledge.init(root)
    (root / f"{TEMP_PREFIX}0-0-0").write_text("left by an earlier crash")
    writers = [Writer("w0"), Writer("w1"), Writer("bulker"), Writer("merger")]
    stats = {"kills": 0, "acknowledged": 0, "checked": 0, "in_flight": 0, "bulk_half_on_disk": 0}
    log: list[str] = []
    modes = ["sync", "async"]
    bulk_gen, episode = 0, 0
    for kill in range(KILLS + 1):
        mode = modes[kill % 2]
        t0 = time.monotonic()
        srv = start_server(root, mode)
        t1 = time.monotonic()
        try:
            stats["checked"] += check_root(root, srv, writers, rng)
            log.append(f"start {t1 - t0:.1f}s check {time.monotonic() - t1:.1f}s")
            check_bulk(writers[2], root, log)
            if kill == KILLS:
                break
            stop = threading.Event()
            clients = [httpx.Client(base_url=srv.base, timeout=30.0) for _ in writers]
            bodies = [
                functools.partial(file_writer, writers[0], clients[0], rng_for(rng), stop),
                functools.partial(file_writer, writers[1], clients[1], rng_for(rng), stop),
                functools.partial(bulk_writer, writers[2], clients[2], bulk_gen, stop),
                functools.partial(merge_writer, writers[3], clients[3], episode, stop),
            ]
            threads = [threading.Thread(target=until_stopped, args=(b,)) for b in bodies]
            for t in threads:
                t.start()
            # a random moment in the writers' stream of operations (each takes a few ms: even
            # the shortest wait sees dozens of them, and kills some in flight)
            time.sleep(rng.uniform(0.1, 0.5))
            srv.proc.send_signal(signal.SIGKILL)
            srv.proc.wait()
            stop.set()
            stats["kills"] += 1
            for t in threads:
                t.join(timeout=60)
            # how the kill landed (before the restart repairs it): for the printed summary
            stats["in_flight"] += sum(bool(w.pending or w.merging) for w in writers)
            stats["bulk_half_on_disk"] += len(bulk_generations(root)) > 1
            for c in clients:
                c.close()
            bulk_gen += 1000
            episode += 1000
            log.append(f"kill {kill + 1} ({mode})")
        finally:
            if srv.proc.poll() is None:
                srv.proc.terminate()
                srv.proc.wait(timeout=60)
    assert all(not w.failures for w in writers), [f for w in writers for f in w.failures]
    assert status(root) == ""
    with Knowledge.open(root) as kb:
        assert kb.memory_report().to_json() == kb.memory_report(use_index=False).to_json()
    bulk_paths = {f"bulk/f{i:03d}.md" for i in range(BULK_FILES)}
    assert commits_touching_part_of(root, bulk_paths, "bulk") == []
    stats["acknowledged"] = sum(w.acknowledged for w in writers)
    per_writer = {w.name: w.acknowledged for w in writers}
    print(f"crash test seed {seed}: {stats} {per_writer}; {', '.join(log)}")
    assert stats["kills"] == KILLS and stats["acknowledged"] > 0


def rng_for(rng: random.Random) -> random.Random:
    return random.Random(rng.random())


def until_stopped(body: Callable[[], None]) -> None:
    """Run a writer until the server it writes to is killed."""
    try:
        body()
    except Stop:
        pass
