#!/usr/bin/env python3
"""The pages and routes a person or an agent asks of a served root, timed: the dashboard and the
queue right after writes, and each of the others twice.

    python bench/served_pages.py ROOT [--base REV] [--rounds R] [--writes 3] [--skip-slow]

``ROOT`` is a root whose index is current (for instance a ``bench/corpus.py`` root of a million
episodes, reindexed). Each round starts ``kiwifs serve`` on it (the checkout, then the ``src`` of
``--base`` right after: an A/B in one command) and measures, in ms from the client:

* ``after_write``: ``GET /`` (the dashboard) and ``GET /queue``, each after a ``PUT`` of a new
  episode half a second earlier, ``--writes`` times (the figures a person sees while agents
  write); with the server's own time of the dashboard from its ``Server-Timing`` header;
* ``pages``: each of :data:`PAGES` asked twice (first and second time).

``--skip-slow`` leaves out :data:`SLOW` (whole-root listings and git's walks of the history,
seconds to minutes at a million files). The episodes it writes stay in the root, under
``episodes/bench-pages/``. Prints one JSON object. Needs nothing outside the repository.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
from first_serve import ab_arguments, interleaved, serve, wait_ready  # bench/first_serve.py

API = "/api/kiwi"
PAGES: list[tuple[str, dict[str, str | int]]] = [
    ("/", {}),
    ("/queue", {}),
    ("/warnings", {}),
    ("/browse", {}),
    ("/search", {"q": "deploy rollback"}),
    (f"{API}/search", {"q": "what went wrong with the deploy"}),
    (f"{API}/brief", {"q": "what went wrong with the deploy"}),
    (f"{API}/memory/report", {"limit": 20}),
    (f"{API}/backlinks", {"path": "index.md"}),
    (f"{API}/peek", {"path": "index.md"}),
    (f"{API}/claims", {}),
    (f"{API}/changes", {}),
    ("/ui/overview.json", {}),
]
SLOW: list[tuple[str, dict[str, str | int]]] = [
    ("/file/index.md", {}),
    (f"{API}/versions", {"path": "index.md"}),
    (f"{API}/memory/check", {}),
    ("/links/broken", {}),
    (f"{API}/links/broken", {}),
    (f"{API}/links/orphans", {}),
    ("/ui/links.json", {}),
    (f"{API}/tree", {}),
]


def timed(client: httpx.Client, path: str, params: dict[str, str | int]) -> dict[str, object]:
    start = time.perf_counter()
    r = client.get(path, params=params)
    out: dict[str, object] = {
        "status": r.status_code,
        "ms": round((time.perf_counter() - start) * 1000, 1),
        "bytes": len(r.content),
    }
    server = re.search(r"dur=([\d.]+)", r.headers.get("server-timing", ""))
    if server:
        out["server_ms"] = float(server.group(1))
    return out


def one_start(root: Path, src: Path | None, writes: int, slow: bool) -> dict[str, object]:
    proc, base = serve(root, src)
    out: dict[str, object] = {}
    try:
        with httpx.Client(base_url=base, timeout=1800) as client:
            wait_ready(client)
            after: list[dict[str, object]] = []
            for _ in range(writes):
                stamp = time.time_ns()
                text = f"---\nmemory_kind: episodic\nepisode_id: pages-{stamp}\n---\nasked\n"
                client.put(
                    f"{API}/file",
                    params={"path": f"episodes/bench-pages/ep-{stamp}.md"},
                    content=text.encode(),
                ).raise_for_status()
                time.sleep(0.5)  # the write indexed and committed, as a person's next look
                after.append({"/": timed(client, "/", {}), "/queue": timed(client, "/queue", {})})
            out["after_write"] = after
            pages = []
            for path, params in PAGES + (SLOW if slow else []):
                first, second = timed(client, path, params), timed(client, path, params)
                pages.append({"path": path, "params": params, "first": first, "second": second})
            out["pages"] = pages
    finally:
        proc.terminate()
        proc.wait(120)
    return out


def main() -> None:
    ap = ab_arguments(__doc__)
    ap.add_argument("--writes", type=int, default=3, help="writes before the dashboard is read")
    ap.add_argument("--skip-slow", action="store_true", help="leave out the slow listings")
    args = ap.parse_args()
    runs = interleaved(
        args.base,
        args.rounds,
        lambda src: one_start(args.root.resolve(), src, args.writes, not args.skip_slow),
    )
    print(json.dumps({"root": str(args.root), "base": args.base, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
