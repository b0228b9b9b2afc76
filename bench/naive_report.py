#!/usr/bin/env python3
"""The memory report computed the plain way: the baseline kiwifs is timed and checked against.

    python bench/naive_report.py ROOT [--loader csafe|safe] [--prefix episodes/]

One process, one file at a time, no index, no fast path: walk the root depth-first in byte
order, read each knowledge file whole, cut its frontmatter block, parse it with PyYAML's safe
loader (timestamps kept as strings), and apply docs/memory.md's rules as they are written. It
prints the report in the shape of ``kiwifs memory report --json``. Being obviously right matters
more than being fast here: the benchmarks measure kiwifs against it, and the tests check it
against the corpus generator's ground truth (``bench/corpus.py``) so that each vouches for the
other.

Out of scope, because generated roots never have them: symlinks (followed, unchecked),
unreadable files, files over the size limits, alias bombs. Its warnings name the same files as
kiwifs's, but the reason in an invalid-frontmatter warning is PyYAML's own message.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ID_TYPES = ("episode", "run", "session", "trace", "event", "ingest")
MISSING_ID = (
    "missing episode_id in {} \u2014 set memory_kind: episodic and episode_id, "
    "or match merged-from by path"
)


def loader_class(name: str) -> type:
    """The safe loader (C or pure Python) without the timestamp resolver: a date stays text."""
    base = yaml.CSafeLoader if name == "csafe" and hasattr(yaml, "CSafeLoader") else yaml.SafeLoader
    resolvers = {
        first: [(tag, rx) for tag, rx in pairs if tag != "tag:yaml.org,2002:timestamp"]
        for first, pairs in base.yaml_implicit_resolvers.items()
    }
    return type("NoTimestamps", (base,), {"yaml_implicit_resolvers": resolvers})


def walk(root: Path, rel: str = "") -> Iterator[str]:
    """Knowledge files (``.md``, nothing hidden), depth-first, names in byte order."""
    folder = root / rel if rel else root
    for name in sorted(os.listdir(folder), key=os.fsencode):
        if name.startswith("."):
            continue
        path = rel + name
        if (folder / name).is_dir():
            yield from walk(root, path + "/")
        elif name.endswith(".md"):
            yield path


def is_delimiter(line: bytes, marks: tuple[bytes, ...]) -> bool:
    return line.rstrip(b" \r") in marks


def frontmatter(data: bytes, loader: type) -> tuple[dict[Any, Any], str | None]:
    """The parsed block (``{}`` when none) and the problem that made it empty, if any."""
    lines = data.split(b"\n")
    if not is_delimiter(lines[0], (b"---",)):
        return {}, None
    for n, line in enumerate(lines[1:], start=1):
        if is_delimiter(line, (b"---", b"...")):
            text = b"\n".join(lines[1:n]) + b"\n"
            break
    else:
        return {}, "frontmatter block not terminated"
    try:
        value = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        return {}, "invalid YAML: " + " ".join(str(exc).split())
    if value is None:
        return {}, None
    if not isinstance(value, dict):
        return {}, f"frontmatter is not a mapping (a {type(value).__name__})"
    return value, None


def as_id(value: Any) -> str:
    """A string as written, a number as ``str()``, anything else no id."""
    if isinstance(value, bool):
        return ""
    if isinstance(value, (str, int, float)):
        return str(value)
    return ""


def text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def normalise(path: str) -> str | None:
    parts = [p for p in path.strip().replace("\\", "/").split("/") if p not in ("", ".")]
    return None if ".." in parts else "/".join(parts)


class Report:
    """The report being folded, file by file in walk order."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.refs = 0
        self.cited_ids: set[str] = set()  # "type:id"
        self.cited_paths: set[str] = set()
        self.episodes: list[tuple[str, str, str, bool]] = []  # path, id, kind, superseded
        self.warnings: list[tuple[str, str]] = []  # (path, text), in walk order

    def add(self, path: str, fm: dict[Any, Any], problem: str | None) -> None:
        if problem:
            self.warnings.append((path, f"invalid frontmatter in {path}: {problem}"))
        self.harvest(path, fm.get("merged-from"))
        kind = text(fm.get("memory_kind"))
        lowered = kind.strip().lower()
        if lowered in ("semantic", "consolidation"):
            return
        if lowered == "episodic" or path.startswith(self.prefix):
            ident = as_id(fm.get("episode_id"))
            if not ident.strip() and as_id(fm.get("id")).strip():
                ident = as_id(fm.get("id")).strip()
            status = fm.get("memory_status")
            superseded = isinstance(status, str) and status.strip(" ").lower() == "superseded"
            self.episodes.append((path, ident, kind, superseded))

    def harvest(self, path: str, merged: Any) -> None:
        """Count and record what one file's ``merged-from`` cites."""
        if isinstance(merged, dict):
            merged = [merged]
        elif merged is not None and not isinstance(merged, list):
            self.warnings.append((path, f"memory: merged-from has unsupported shape in {path}"))
            return
        for entry in merged or []:
            if entry is None:
                self.refs += 1
            elif isinstance(entry, dict):
                self.refs += 1
                self.cite(path, entry)

    def cite(self, path: str, entry: dict[Any, Any]) -> None:
        kind = text(entry.get("type")).strip().lower()
        if not kind:
            return
        ident = as_id(entry.get("id")).strip()
        if ident:
            self.cited_ids.add(kind + ":" + ident)
        cited = text(entry.get("path"))
        if cited.strip():
            norm = normalise(cited)
            if norm is None:
                self.warnings.append((path, f"merged-from path escapes the root in {path}"))
            else:
                self.cited_paths.add(norm)

    def to_json(self) -> dict[str, Any]:
        files: list[dict[str, str]] = []
        unmerged: list[dict[str, str]] = []
        late: dict[str, list[str]] = {}
        first: dict[str, str] = {}
        for path, ident, kind, superseded in self.episodes:
            item = {"path": path} | ({"episode_id": ident} if ident else {})
            item |= {"memory_kind": kind} if kind else {}
            files.append(item)
            key = ident.strip()
            merged = (key and any(f"{t}:{key}" in self.cited_ids for t in ID_TYPES)) or (
                path in self.cited_paths
            )
            if not superseded and not merged:
                unmerged.append(item)
                if ident == "":
                    late.setdefault(path, []).append(MISSING_ID.format(path))
            if key and first.setdefault(key, path) != path:
                late.setdefault(path, []).append(
                    f"duplicate episode_id {key!r} in {path} (also in {first[key]})"
                )
        return {
            "episodic_count": len(files),
            "merged_from_refs": self.refs,
            "episodic_files": files,
            "unmerged": unmerged,
            "warnings": self.all_warnings(late),
            "unmerged_count": len(unmerged),
            "episodes_prefix": self.prefix,
            "superseded_count": sum(1 for e in self.episodes if e[3]),
            "claimed_count": 0,
        }

    def all_warnings(self, late: dict[str, list[str]]) -> list[str]:
        """Each file's own warnings, then its missing-id and duplicate ones; files in walk
        order."""
        by_file: dict[str, list[str]] = {}
        for path, warning in self.warnings:
            by_file.setdefault(path, []).append(warning)
        for path, warnings in late.items():
            by_file.setdefault(path, []).extend(warnings)
        order = sorted(by_file, key=lambda p: [s.encode() for s in p.split("/")])
        return [warning for path in order for warning in by_file[path]]


def prefix_of(root: Path, given: str | None) -> str:
    """The flag, else ``[memory] episodes_path_prefix`` in ``.kiwi/config.toml``, else
    ``episodes/``; normalised with a trailing ``/``."""
    config = root / ".kiwi" / "config.toml"
    if given is None and config.is_file():
        given = (
            tomllib.loads(config.read_text("utf-8")).get("memory", {}).get("episodes_path_prefix")
        )
    norm = normalise(given or "") or "episodes"
    return norm + "/"


def report(root: str | Path, loader: str = "csafe", prefix: str | None = None) -> dict[str, Any]:
    """The memory report of ``root``, computed naively."""
    base, parser = Path(root), loader_class(loader)
    folded = Report(prefix_of(base, prefix))
    for path in walk(base):
        fm, problem = frontmatter((base / path).read_bytes(), parser)
        folded.add(path, fm, problem)
    return folded.to_json()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--loader", choices=("csafe", "safe"), default="csafe")
    ap.add_argument("--prefix", help="the episodes prefix (default: the root's config)")
    args = ap.parse_args(argv)
    json.dump(report(args.root, args.loader, args.prefix), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
