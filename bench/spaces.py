"""Spaces: what many knowledge roots cost one ``kiwifs serve``.

    python bench/spaces.py [--spaces 1,10,100,1000] [--touch 150] [--rounds 3] [--idle 20]
                           [--heavy]

A server serves any number of spaces but opens a space (its index, watcher and REST app) only
on its first request, runs it light (``Tuning.light_spaces``: no commit process, no committer,
writeback or dashboard threads), holds at most ``Tuning.max_open_spaces`` (16) open besides the
default one, and closes the least recently used one to open another, or any idle for
``Tuning.space_idle`` seconds. So neither start-up nor memory should grow with the number of
spaces configured, nor with the number used, only with the bound. This measures that, for each
N of ``--spaces``:

* ``startup_s``: from process start to the first 200 of ``GET /health``, the median of
  ``--rounds`` starts, the Ns interleaved (A, B, C, then C, B, A); target: 1,000 spaces about as
  fast as one;
* the server's process tree sampled from ``/proc/<pid>/{status,smaps_rollup,fd}`` (the server
  and its children: the default root's commit process and check worker, and with ``--heavy``,
  which hands the server ``Tuning(light_spaces=False)``, each open space's too): RSS and PSS in
  MB, threads, open file descriptors and child processes, once at ``baseline`` (a read and a
  search in the default space, no other space opened), once after touching K =
  min(``--touch``, N) spaces (``after_touch``), and with ``--idle SECONDS`` once more after the
  idle close (the server is handed ``Tuning(space_idle=SECONDS)``); target after 150 touched:
  RSS ≤ 800 MB, ≤ 64 threads, ≤ 400 open files;
* the open spaces the server reports: ``/health`` says nothing of spaces and no route lists the
  open ones, so ``open_spaces`` is inferred from the server's descriptors on
  ``.kiwi/server.lock`` (each open space holds its root's, as the default root does);
  ``per_open_space`` divides what touching
  added by it, the server's descriptors by kind (pipes, inotify, ``index.db``, …).

Touching a space is a read, a search and a write, checked as it goes: its own note read back
(the right root), the ``probe.md`` the previous space wrote not found here, the write read back,
its own word found by search and the previous space's word not. Even spaces are named with the
``X-Kiwi-Space`` header, odd ones with ``/api/kiwi/NAME/…``. Every request must be 2xx (but the
404s checked for); any failure exits 1.

The roots are cached under ``bench/.corpora/spaces/``: a default root per N (``kiwifs init``,
its ``.kiwi/config.toml`` listing N ``[[spaces]]``) and ``roots/sNNNN``, plain folders of three
small markdown files, which a space's first open imports into git as it does any root. The
touched ones are laid out again before each run, so every run opens fresh roots.

Give it the CPUs on a shared machine (see ``bench/fast_paths.py``)::

    setsid --wait sh -c 'echo -15 > /proc/self/autogroup; exec nice -n -15 \\
        python bench/spaces.py'
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from startup import free_port, status  # noqa: E402
from write_throughput import Changes, kiwifs_command  # noqa: E402

CACHE = HERE / ".corpora" / "spaces"
ROOTS = CACHE / "roots"
NOTES = 3  # markdown files per space
MAX_OPEN = 16  # Tuning.max_open_spaces, the bound the figures are read against
TARGETS = {"rss_mb": 800.0, "threads": 64, "fds": 400}  # after 150 spaces touched
STARTUP_SLACK = 1.25  # "about as fast": the most N spaces may start slower than one, as a ratio


class Failure(Exception):
    """A request or a check failed: the bench exits 1."""


# -- the roots ---------------------------------------------------------------------------------


def space_name(i: int) -> str:
    return f"s{i:04d}"


def space_word(i: int) -> str:
    """A word only the notes of space ``i`` hold."""
    return f"kiwispace{i:04d}"


def lay_out_space(i: int) -> None:
    """The root of space ``i`` as it was before any server opened it: three notes."""
    root = ROOTS / space_name(i)
    if root.exists():
        shutil.rmtree(root)
    (root / "notes").mkdir(parents=True)
    for n in range(1, NOTES + 1):
        (root / "notes" / f"n{n}.md").write_text(
            f"---\ntitle: Note {n} of {space_name(i)}\n---\n# Note {n}\n\n"
            f"This note belongs to {space_word(i)}: alpha bravo charlie, number {n}.\n"
        )


def default_root(spaces: int) -> Path:
    """The default root of the server with ``spaces`` spaces (``kiwifs init``, then its config
    listing them), made once; the spaces' roots up to ``spaces`` laid out if missing."""
    for i in range(spaces):
        if not (ROOTS / space_name(i)).exists():
            lay_out_space(i)
    root = CACHE / f"default-{spaces}"
    config = root / ".kiwi" / "config.toml"
    marker = f"# bench/spaces.py: {spaces} spaces\n"
    if config.exists() and marker in config.read_text():
        return root
    if root.exists():
        shutil.rmtree(root)
    subprocess.run(
        [*kiwifs_command(), "init", "--root", str(root), "--template", "blank"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    entries = "".join(
        f'\n[[spaces]]\nname = "{space_name(i)}"\nroot = "../roots/{space_name(i)}"\n'
        for i in range(spaces)
    )
    with config.open("a") as fh:
        fh.write("\n" + marker + entries)
    return root


# -- the server and its process tree -----------------------------------------------------------


@dataclass
class Sample:
    """The server's process tree at one moment (RSS and PSS summed over it, in MB), with the
    server's own figures and its descriptors by kind."""

    rss_mb: float
    pss_mb: float
    threads: int
    fds: int
    children: int
    commit_processes: int
    server_rss_mb: float
    server_threads: int
    server_fds: int
    fd_kinds: dict[str, int]

    @property
    def open_spaces(self) -> int:
        """Open spaces besides the default one: each holds its root's server lock, as the
        default root does."""
        return max(self.fd_kinds.get("server.lock", 0) - 1, 0)


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from ``/proc/PID/task/*/children``."""
    found = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                for child in fh.read().split():
                    found.extend(tree(int(child)))
    except OSError:
        pass
    return found


def process_figures(pid: int) -> tuple[float, float, int, int]:
    """(RSS MB, PSS MB, threads, open fds) of one process; zeros when it is gone."""
    rss = pss = 0.0
    threads = fds = 0
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / 1024
                elif line.startswith("Threads:"):
                    threads = int(line.split()[1])
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) / 1024
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        pass
    return rss, pss, threads, fds


def is_commit_process(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"kiwifs.git.child" in fh.read()
    except OSError:
        return False


def fd_kind(target: str) -> str:
    """What a descriptor is, from its ``/proc/PID/fd`` link: a pipe, an inotify or epoll
    handle, a socket, or the file's name (``index.db``, ``server.lock``, …)."""
    if target.startswith("anon_inode:"):
        return target[len("anon_inode:") :].strip("[]")
    if target.startswith(("pipe:", "socket:")):
        return target.split(":", 1)[0]
    return Path(target).name if target.startswith("/") else "other"


def fd_kinds(pid: int) -> dict[str, int]:
    kinds: dict[str, int] = {}
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            kind = fd_kind(os.readlink(f"/proc/{pid}/fd/{fd}"))
            kinds[kind] = kinds.get(kind, 0) + 1
    except OSError:
        pass
    return dict(sorted(kinds.items(), key=lambda kv: -kv[1]))


def sample(pid: int) -> Sample:
    pids = tree(pid)
    each = [process_figures(p) for p in pids]
    return Sample(
        rss_mb=round(sum(f[0] for f in each), 1),
        pss_mb=round(sum(f[1] for f in each), 1),
        threads=sum(f[2] for f in each),
        fds=sum(f[3] for f in each),
        children=len(pids) - 1,
        commit_processes=sum(is_commit_process(p) for p in pids[1:]),
        server_rss_mb=round(each[0][0], 1),
        server_threads=each[0][2],
        server_fds=each[0][3],
        fd_kinds=fd_kinds(pid),
    )


class Server:
    """``kiwifs serve`` on ``root`` and a free port, with ``tuning`` handed to it."""

    def __init__(self, root: Path, tuning: Changes) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [*kiwifs_command(tuning), "serve", "--root", str(root), "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def until_health(self) -> float:
        """Seconds from process start to the first 200 of ``GET /health``."""
        while status(self.base + "/health") != 200:
            if self.proc.poll() is not None:
                raise Failure(f"kiwifs serve exited with {self.proc.returncode}")
            time.sleep(0.005)
        return time.perf_counter() - self.started

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def call(
        self,
        method: str,
        path: str,
        space: str | None = None,
        by_path: bool = False,
        body: bytes | None = None,
        expect: int | None = None,
    ) -> bytes:
        """One request; ``space`` named by the header, or by the path with ``by_path``. Any
        status outside 2xx is a :class:`Failure` unless it is ``expect``."""
        headers: dict[str, str] = {}
        if space is not None and by_path:
            path = path.replace("/api/kiwi/", f"/api/kiwi/{space}/", 1)
        elif space is not None:
            headers["X-Kiwi-Space"] = space
        if body is not None:
            headers["Content-Type"] = "text/markdown"
        request = urllib.request.Request(self.base + path, body, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=120) as r:
                code, data = int(r.status), bytes(r.read())
        except urllib.error.HTTPError as exc:
            code, data = exc.code, bytes(exc.read())
        if code == expect or (expect is None and 200 <= code < 300):
            return data
        raise Failure(f"{method} {path} in {space or 'default'}: {code} {data[:200]!r}")


def file_path(name: str) -> str:
    return "/api/kiwi/file?" + urllib.parse.urlencode({"path": name})


def search_paths(server: Server, word: str, space: str, by_path: bool) -> list[str]:
    path = "/api/kiwi/search?" + urllib.parse.urlencode({"q": word})
    found = json.loads(server.call("GET", path, space, by_path))["results"]
    return [str(hit["path"]) for hit in found]


# -- touching spaces ---------------------------------------------------------------------------


def touch(server: Server, i: int, run: str) -> float:
    """A read, a search and a write in space ``i``, checked; seconds of its first request
    (which opens the space)."""
    name, by_path = space_name(i), i % 2 == 1
    t0 = time.perf_counter()
    note = server.call("GET", file_path("notes/n1.md"), name, by_path).decode()
    opened = time.perf_counter() - t0
    if space_word(i) not in note:
        raise Failure(f"{name}: notes/n1.md is not its own note: {note[:80]!r}")
    server.call("GET", file_path("probe.md"), name, by_path, expect=404)  # the last one's
    token = f"probe{run}{name}"
    server.call("PUT", file_path("probe.md"), name, by_path, body=f"# {token}\n".encode())
    if token not in server.call("GET", file_path("probe.md"), name, by_path).decode():
        raise Failure(f"{name}: probe.md does not read back")
    deadline = time.monotonic() + 15
    while not (hits := search_paths(server, space_word(i), name, by_path)):
        if time.monotonic() > deadline:
            raise Failure(f"{name}: search finds none of its own notes")
        time.sleep(0.1)
    if not all(h.startswith("notes/") for h in hits):
        raise Failure(f"{name}: search found {hits}")
    if i > 0 and search_paths(server, space_word(i - 1), name, by_path):
        raise Failure(f"{name}: search finds {space_name(i - 1)}'s notes")
    return opened


def measure(
    spaces: int, touched: int, idle: float | None, run: str, heavy: bool = False
) -> dict[str, object]:
    """Start a server with ``spaces`` spaces, touch ``touched`` of them, sample it."""
    root = default_root(spaces)
    for i in range(touched):
        lay_out_space(i)
    tuning: Changes = {"space_idle": idle} if idle else {}
    if heavy:
        tuning["light_spaces"] = False
    server = Server(root, tuning)
    out: dict[str, object] = {"spaces": spaces, "touched": touched}
    try:
        out["startup_s"] = round(server.until_health(), 3)
        server.call("GET", file_path("index.md"))
        search_paths(server, "alpha", "default", False)
        time.sleep(1)
        base = sample(server.proc.pid)
        t0 = time.perf_counter()
        opens = [touch(server, i, run) for i in range(touched)]
        out["touch_s"] = round(time.perf_counter() - t0, 2)
        out["first_request_ms_median"] = round(statistics.median(opens) * 1000, 1)
        time.sleep(1)
        after = sample(server.proc.pid)
        server.call("GET", "/api/kiwi/search?q=x", "no-such-space", expect=404)
        listed = json.loads(server.call("GET", "/api/spaces"))["spaces"]
        if len(listed) != spaces + 1:
            raise Failure(f"/api/spaces lists {len(listed)} spaces, not {spaces + 1}")
        out["baseline"] = {**asdict(base), "open_spaces": base.open_spaces}
        out["after_touch"] = {**asdict(after), "open_spaces": after.open_spaces}
        opened = after.open_spaces - base.open_spaces
        if opened > 0:
            out["per_open_space"] = {
                "rss_mb": round((after.rss_mb - base.rss_mb) / opened, 1),
                "pss_mb": round((after.pss_mb - base.pss_mb) / opened, 1),
                "threads": round((after.threads - base.threads) / opened, 2),
                "fds": round((after.fds - base.fds) / opened, 2),
                "server_threads": round((after.server_threads - base.server_threads) / opened, 2),
                "server_fds": round((after.server_fds - base.server_fds) / opened, 2),
                "server_fds_by_kind": {
                    kind: round((count - base.fd_kinds.get(kind, 0)) / opened, 2)
                    for kind, count in after.fd_kinds.items()
                    if count != base.fd_kinds.get(kind, 0)
                },
            }
        if idle:
            time.sleep(idle + max(idle / 10, 1.0) + 2)  # space_idle, then a sweep
            closed = sample(server.proc.pid)
            out["after_idle"] = {**asdict(closed), "open_spaces": closed.open_spaces}
    finally:
        server.stop()
    return out


def startup_rounds(ns: list[int], rounds: int) -> dict[int, list[float]]:
    """``--rounds`` starts of each N, interleaved, after one warm-up start each."""
    times: dict[int, list[float]] = {n: [] for n in ns}
    for r in range(-1, rounds):
        for n in ns if r % 2 == 0 else list(reversed(ns)):
            server = Server(default_root(n), {})
            try:
                seconds = server.until_health()
            finally:
                server.stop()
            if r >= 0:
                times[n].append(seconds)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spaces", default="1,10,100,1000", help="the Ns, comma-separated")
    ap.add_argument("--touch", type=int, default=150, help="spaces touched (N if fewer)")
    ap.add_argument("--rounds", type=int, default=3, help="timed starts per N")
    ap.add_argument(
        "--idle",
        type=float,
        help="hand the server Tuning(space_idle=SECONDS) and sample again after it",
    )
    ap.add_argument(
        "--heavy",
        action="store_true",
        help="hand the server Tuning(light_spaces=False): each space runs as the default one",
    )
    args = ap.parse_args()
    ns = [int(n) for n in args.spaces.split(",")]
    load_before = os.getloadavg()
    run = str(time.time_ns())
    failed = ""
    results: list[dict[str, object]] = []
    try:
        for n in ns:
            default_root(n)
        starts = startup_rounds(ns, args.rounds)
        for n in ns:
            result = measure(n, min(args.touch, n), args.idle, run, args.heavy)
            result["startup_s"] = round(statistics.median(starts[n]), 3)
            result["startup_runs_s"] = [round(s, 3) for s in starts[n]]
            results.append(result)
    except Failure as exc:
        failed = str(exc)
    doc: dict[str, object] = {
        "targets": {
            "after_150_touched": TARGETS,
            "startup": f"N spaces at most {STARTUP_SLACK}x the start-up of the fewest",
        },
        "max_open_spaces": MAX_OPEN,
        "idle_s": args.idle,
        "light_spaces": not args.heavy,
        "open_spaces_note": "inferred: /health reports no spaces; server.lock descriptors - 1",
        "load_average": [load_before, os.getloadavg()],
        "results": results,
    }
    if results:
        doc["verdict"] = verdict(results, args.touch)
    if failed:
        doc["failure"] = failed
    print(json.dumps(doc, indent=2))
    table(results)
    if failed:
        print(f"FAILED: {failed}", file=sys.stderr)
        raise SystemExit(1)


def verdict(results: list[dict[str, object]], touch: int) -> dict[str, object]:
    """Each target: met or not, against the runs that touched ``touch`` spaces."""
    out: dict[str, object] = {}
    full = [r for r in results if r["touched"] == touch]
    for r in full:
        after = r["after_touch"]
        assert isinstance(after, dict)
        out[f"N={r['spaces']}"] = {k: after[k] <= limit for k, limit in TARGETS.items()}
    first = float(str(results[0]["startup_s"]))
    out["startup"] = {
        f"N={r['spaces']}": round(float(str(r["startup_s"])) / first, 2) <= STARTUP_SLACK
        for r in results[1:]
    }
    return out


def table(results: list[dict[str, object]]) -> None:
    """The figures and the targets, on stderr."""
    head = f"{'N':>5} {'K':>4} {'start s':>8} {'RSS MB':>7} {'PSS MB':>7} {'threads':>7}"
    head += f" {'fds':>5} {'open':>5} {'touch s':>8}"
    print(head, file=sys.stderr)
    for r in results:
        a = r["after_touch"]
        assert isinstance(a, dict)
        print(
            f"{r['spaces']:>5} {r['touched']:>4} {r['startup_s']:>8} {a['rss_mb']:>7}"
            f" {a['pss_mb']:>7} {a['threads']:>7} {a['fds']:>5} {a['open_spaces']:>5}"
            f" {r['touch_s']:>8}",
            file=sys.stderr,
        )
    t = TARGETS
    print(
        f"target (150 touched): RSS ≤ {t['rss_mb']:.0f} MB, threads ≤ {t['threads']},"
        f" fds ≤ {t['fds']}; start-up with many spaces ≈ with one (≤ {STARTUP_SLACK}x)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
