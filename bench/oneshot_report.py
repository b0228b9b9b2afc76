"""The one-shot ``kiwifs memory report`` on a large root: the change monitor and the kept report
against the full stat walk and a report made each time.

    python bench/oneshot_report.py ROOT [--rounds 3]

``ROOT`` is a root already indexed (``kiwifs reindex --root ROOT``; ``bench/corpus.py`` makes
one of any size). Each round runs, interleaved (A, B, then B, A in the next round), the command
as a user runs it, in its own process, its output written to a file:

* ``plain``: ``Tuning(monitor_files=0, kept_reports=False)`` handed to the command (every file
  stat'ed, the report made from the rows);
* ``shipped``: the defaults (the root's change monitor asked, the kept report read).

for ``--json`` and the text form, and checks that both sides print the same bytes. Then, with
the defaults, one episode is edited in place (a line appended, then taken back): the first
report after it (a folder walked, the report made again and kept) and the next one (kept).
It prints each median, and shipped / plain.

The monitor is started by the first shipped run if none runs; it is stopped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMAND = """
import sys
from kiwifs.cli import cli
from kiwifs.tuning import Tuning
tuning = Tuning.from_env()
if sys.argv[1] == "plain":
    tuning = tuning.but(monitor_files=0, kept_reports=False)
cli.main(sys.argv[2:], prog_name="kiwifs", obj=tuning)
"""


def run(side: str, root: Path, form: list[str], out: Path) -> float:
    """Seconds one report takes, printed into ``out``."""
    args = [sys.executable, "-c", COMMAND, side, "memory", "report", "--root", str(root), *form]
    began = time.perf_counter()
    with out.open("wb") as sink:
        subprocess.run(args, stdout=sink, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - began


def edited(root: Path) -> Path:
    """An episode of the root (the first visible one, by path), to edit in place: not a
    hidden file (no knowledge file) nor a page citing thousands of episodes (whose edit
    recomputes every episode's coverage)."""
    for path in sorted((root / "episodes").rglob("*.md")):
        parts = path.relative_to(root).parts
        if not any(p.startswith((".", "_")) for p in parts) and "memory_kind: episodic" in (
            path.read_text(errors="replace")
        ):
            return path
    raise SystemExit(f"no episode under {root / 'episodes'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    root: Path = options.root.resolve()
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        run("shipped", root, ["--json"], tmp / "warm")  # the monitor started, the report kept
        for number in range(options.rounds):
            sides = ["plain", "shipped"] if number % 2 == 0 else ["shipped", "plain"]
            for name, form in (("json", ["--json"]), ("text", [])):
                printed = {}
                for side in sides:
                    out = tmp / f"{side}-{name}"
                    times.setdefault(f"{name} {side}", []).append(run(side, root, form, out))
                    printed[side] = out.read_bytes()
                if printed["plain"] != printed["shipped"]:
                    raise SystemExit(f"the {name} reports differ")
        episode = edited(root)
        before = episode.read_bytes()
        for round_number in range(options.rounds):
            # written in place, as an agent's `echo >>` does: no folder's time moves
            episode.write_bytes(before + b"\nedited\n" if round_number % 2 == 0 else before)
            times.setdefault("json after an edit", []).append(
                run("shipped", root, ["--json"], tmp / "edit")
            )
            times.setdefault("json, the next one", []).append(
                run("shipped", root, ["--json"], tmp / "next")
            )
        episode.write_bytes(before)
    subprocess.run([sys.executable, "-c", _STOP, str(root)], check=False)
    print(f"{'measure':<26} {'median s':>9}  runs")
    for name, values in times.items():
        runs = " ".join(f"{v:.2f}" for v in values)
        print(f"{name:<26} {statistics.median(values):>9.3f}  {runs}")
    for form in ("json", "text"):
        plain = statistics.median(times[f"{form} plain"])
        shipped = statistics.median(times[f"{form} shipped"])
        print(f"{form}: shipped / plain = {shipped / plain:.2f}")


_STOP = "import sys; from kiwifs.index import monitor; monitor.stop(sys.argv[1])"

if __name__ == "__main__":
    main()
