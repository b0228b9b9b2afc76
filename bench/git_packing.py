#!/usr/bin/env python3
"""A served root's git objects under a burst of writes: packed in the background, and never.

    python bench/git_packing.py ROOT [--writes 4000] [--clients 4] [--rounds 1]

``ROOT`` is a versioned root (served once, so its files are in git; a ``bench/corpus.py`` root
of 100k episodes after a first ``kiwifs serve``). Each round copies it twice and serves each copy
with ``kiwifs serve``: ``never`` (``Tuning(pack_loose_objects=0)``, the objects as libgit2 leaves
them) and ``packed`` (the default). On each, ``--clients`` clients put ``--writes`` new episodes
into the root's largest folders (where a commit's trees are largest), then the bench waits for
the packing to catch up and measures:

* ``writes_per_s``: the writes' rate;
* ``loose``, ``loose_mb``, ``packs``, ``pack_mb``, ``git_mb``: the repository's objects
  (``git count-objects -v``) and the disk its folder takes (``du``);
* ``versions_ms``: ``GET /api/kiwi/versions`` of an episode in the largest folder and of the
  root's first file, the median of 3 (``git log -- PATH``, which packing and the commit graph
  speed up);
* ``settle_s``: seconds from the last write to the end of the last packing (``packed``: the
  bench waits until none has run for :data:`QUIET` seconds).

Prints one JSON object, with the ratios of ``packed`` to ``never``. The copies are removed.
Needs nothing outside the repository.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
from first_serve import wait_ready  # bench/first_serve.py
from write_throughput import free_port, kiwifs_command  # bench/write_throughput.py

from kiwifs.git.packing import locked

QUIET = 60.0  # seconds with no packing after which the packed side counts as settled
SIDES = {"never": {"pack_loose_objects": 0}, "packed": {}}


def largest_folders(root: Path, count: int = 12) -> list[str]:
    """The ``count`` folders of ``root`` holding the most markdown files (git's ls-files)."""
    files = subprocess.run(
        ["git", "-C", str(root), "ls-files", "*.md"], capture_output=True, text=True, check=True
    ).stdout.split()
    folders = Counter(f.rsplit("/", 1)[0] for f in files if "/" in f)
    return [name for name, _ in folders.most_common(count)]


def serve(root: Path, tuning: dict[str, object]) -> tuple[subprocess.Popen[bytes], str]:
    """``kiwifs serve`` on ``root`` with ``tuning``'s fields changed, and its address."""
    port = free_port()
    cmd = [*kiwifs_command(tuning), "serve", "--root", str(root), "--port", str(port)]
    return subprocess.Popen(cmd, stderr=subprocess.DEVNULL), f"http://127.0.0.1:{port}"


def put_episodes(base: str, folders: list[str], writes: int, clients: int) -> float:
    """Writes per second of ``writes`` new episodes from ``clients`` clients."""

    def writer(k: int) -> None:
        rng = random.Random(k)
        with httpx.Client(base_url=base, timeout=120) as client:
            for n in range(writes // clients):
                stamp = time.time_ns()
                body = (
                    f"---\nmemory_kind: episodic\nepisode_id: pack-{k}-{stamp}\n---\n"
                    f"episode {n}: the deploy rolled back after a canary alert\n"
                )
                path = f"{rng.choice(folders)}/pack-{k}-{stamp}.md"
                r = client.put("/api/kiwi/file", params={"path": path}, content=body)
                r.raise_for_status()

    started = time.monotonic()
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return writes // clients * clients / (time.monotonic() - started)


def objects(root: Path) -> dict[str, float]:
    out = subprocess.run(
        ["git", "-C", str(root), "count-objects", "-v"], capture_output=True, text=True, check=True
    ).stdout
    counted = {k: int(v) for k, v in (line.split(": ") for line in out.splitlines())}
    du = subprocess.run(["du", "-sk", str(root / ".git")], capture_output=True, text=True)
    return {
        "loose": counted["count"],
        "loose_mb": round(counted["size"] / 1024, 1),
        "packs": counted["packs"],
        "pack_mb": round(counted["size-pack"] / 1024, 1),
        "git_mb": round(int(du.stdout.split()[0]) / 1024, 1),
    }


def versions_ms(base: str, path: str) -> float:
    times = []
    with httpx.Client(base_url=base, timeout=600) as client:
        for _ in range(3):
            started = time.perf_counter()
            client.get("/api/kiwi/versions", params={"path": path}).raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 1)


def one_side(root: Path, work: Path, name: str, args: argparse.Namespace) -> dict[str, object]:
    copy = work / name
    subprocess.run(["cp", "-a", str(root), str(copy)], check=True)
    folders = largest_folders(copy)
    proc, base = serve(copy, SIDES[name])
    try:
        with httpx.Client(base_url=base, timeout=60) as client:
            wait_ready(client)
        rate = put_episodes(base, folders, args.writes, args.clients)
        written = time.monotonic()
        last_packing = written
        if SIDES[name].get("pack_loose_objects") != 0:  # until no packing for QUIET seconds
            while time.monotonic() - last_packing < QUIET:
                if locked(copy / ".git"):
                    last_packing = time.monotonic()
                time.sleep(0.2)
        settle = last_packing - written
        episode = sorted(p.name for p in (copy / folders[0]).iterdir())[0]
        first = sorted(p.name for p in copy.glob("*.md"))[0]
        return {
            "writes_per_s": round(rate, 1),
            **objects(copy),
            "versions_ms": {
                "episode": versions_ms(base, f"{folders[0]}/{episode}"),
                "top": versions_ms(base, first),
            },
            "settle_s": round(settle, 1),
        }
    finally:
        proc.terminate()
        proc.wait()
        while locked(copy / ".git"):
            time.sleep(0.2)
        shutil.rmtree(copy, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--writes", type=int, default=4000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--work", type=Path, default=None, help="where the copies go")
    args = parser.parse_args()
    if not (args.root / ".git").is_dir():
        raise SystemExit(f"{args.root} is not versioned: serve it once first")
    results: dict[str, list[dict[str, object]]] = {name: [] for name in SIDES}
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        for _ in range(args.rounds):
            for name in SIDES:
                results[name].append(one_side(args.root.resolve(), Path(work), name, args))
    last = {name: runs[-1] for name, runs in results.items()}
    ratios = {
        key: round(float(last["packed"][key]) / max(float(last["never"][key]), 1e-9), 3)  # type: ignore[arg-type]
        for key in ("writes_per_s", "git_mb", "loose_mb")
    }
    print(json.dumps({"runs": results, "packed_to_never": ratios}, indent=1))


if __name__ == "__main__":
    main()
