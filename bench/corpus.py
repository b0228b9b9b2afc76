#!/usr/bin/env python3
"""Generate a realistic knowledge root and the memory report's ground truth, by construction.

    python bench/corpus.py ROOT --episodes N [--seed S] [--semantic M] [--merged-fraction F]
                           [--links K] [--truth TRUTH.json] [--force]

The tests and the benchmarks need roots of any size whose correct memory report is known without
asking kiwifs: a report checked against itself proves nothing. So every file is written from a
model of what it means under docs/memory.md (is it scanned, is it episodic, its id, whether it
is forgotten, what each ``merged-from`` item counts and cites, which warnings it earns), and the
truth is folded from that model alone, never by parsing the files back.

What a root holds (``N`` episodes, ``M`` semantic pages, default ``N // 20``):

* ``episodes/YYYY/MM/run-XXXX.md``: the episodes, in many frontmatter shapes (see
  :data:`EPISODE_SHAPES`): ``episode_id`` plain, quoted, padded, numeric (decimal, hex, with
  underscores, a float), date-like, the ``id`` fallback, none at all, blank, non-string; no
  ``memory_kind`` or ``working`` (episodic by the prefix); forgotten (``memory_status:
  superseded`` in any case); invalid YAML, a list for frontmatter, an unterminated block, no
  block, an empty one, a UTF-8 BOM (no block then), CRLF, a block closed by ``...``, padded
  delimiters; ids reused by a later episode; episodes whose own ``merged-from`` cites another
  episode or themselves;
* ``concepts/``, ``entities/<kind>/``: semantic pages whose ``merged-from`` lists cite episodes
  by id (every id type, in any case) and by path in every form (``./``, ``/``, ``//``, ``\\``,
  ``.`` segments, padded), plus items that look like citations and cite nothing (a type that
  does not cite by id, no type, a ``..`` path, ``path:`` ids, a wrong-case path, ``null``, scalar
  and list items), and pages whose ``merged-from`` is one mapping, a scalar, ``null``, ``[]`` or
  ``{}``, or misspelled, or whose YAML is broken;
* ``episodes/YYYY/MM/_digest.md`` (``consolidation``) and ``episodes/notes/`` (``semantic``):
  not episodes although under the prefix; ``inbox/``: episodes by ``memory_kind`` outside it;
  ``episodes_archive/``, ``archive/episodes/``: not under it;
* files never scanned: hidden folders and files (``.kiwi/``, ``episodes/.drafts/``, dot-files),
  names not ending in ``.md`` (``NOTES.MD``, ``.log.json``, ``.md.bak``);
* ``guides/``, ``index.md``: ordinary pages;
* with ``--links K`` (default 0: none, and the root is byte for byte what it was without the
  option): a "Related" line at the end of each well-formed markdown file, with 2 to ``2 K - 2``
  (mean ``K``) wiki links to other files, by path or by bare name, one in ten to a page that does
  not exist. Drawn from a second random stream, so every other byte of the root is unchanged.

The truth (``--truth``, and :func:`generate`'s return value) has the episodic, unmerged and
superseded paths in walk order, each episode's id and ``memory_kind`` as the report shows them,
the counts, and the warnings by kind (paths and counts). Deterministic for a seed (nothing
depends on hash order). Standard library only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ID_TYPES = ("episode", "run", "session", "trace", "event", "ingest")
WARNING_KINDS = ("invalid_frontmatter", "shape", "escape", "missing_id", "duplicate_id")
PREFIX = "episodes/"
START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)

WORDS = (
    "agent run tool call retry cache index query latency build test deploy config schema "
    "migration token budget prompt context window memory page note summary episode session "
    "trace event pipeline worker queue timeout error commit branch review patch lint parser "
    "frontmatter markdown heading link graph search vector embedding chunk store snapshot "
    "replica shard lease lock request response header client server endpoint route metric "
    "alert dashboard incident rollback canary flag release"
).split()
VERBS = "observed checked fixed reverted measured noted retried merged traced verified".split()
TOPICS = (
    "search-index vector-store auth-tokens deploy-pipeline flaky-tests git-backup rate-limits "
    "markdown-parser consolidation embedder dashboards release-process cache-policy"
).split()
TAGS = "ci deploy search indexing memory latency config incident docs api auth git perf".split()
ACTORS = ["agent:planner", "agent:coder", "agent:reviewer", "ci-bot", "human:alice"]
ENTITY_KINDS = ["people", "tools", "services", "repos"]


# ---------------------------------------------------------------------------------------------
# the model: what each file means to the report


@dataclass(frozen=True)
class Cite:
    """What one ``merged-from`` item does under the rules: it counts in ``merged_from_refs``,
    matches episodes whose trimmed id is ``cites_id`` (set only when its type cites by id) and
    the file at the normalised ``cites_path``, and ``escapes`` (a ``..`` path: one warning)."""

    cites_id: str = ""
    cites_path: str = ""
    escapes: bool = False


@dataclass(frozen=True)
class Item:
    """One ``merged-from`` item: its YAML lines and its meaning (``None``: dropped, not counted)."""

    lines: tuple[str, ...]
    cite: Cite | None


@dataclass
class Facts:
    """What one scanned file means to the report, as the generator wrote it.

    ``raw_id`` and ``kind`` are what the report shows (``episode_id`` kept as written, or the
    trimmed ``id``; ``memory_kind`` when a string); ``invalid`` files read as empty frontmatter;
    ``cites`` are the counted items of its ``merged-from``.
    """

    episodic: bool = False
    raw_id: str = ""
    kind: str = ""
    superseded: bool = False
    invalid: bool = False
    shape_warning: bool = False
    cites: list[Cite] = field(default_factory=list)


@dataclass(frozen=True)
class Episode:
    """An episode as later steps need it: where it is, its matching id, its month folder."""

    path: str
    ident: str
    month: str


# ---------------------------------------------------------------------------------------------
# text


def walk_key(path: str) -> tuple[bytes, ...]:
    """The report's order: depth-first, names in byte order (``a/y.md`` before ``a.md``)."""
    return tuple(segment.encode() for segment in path.split("/"))


def scanned(path: str) -> bool:
    """A knowledge file: ends in ``.md`` (case-sensitive), no segment starts with ``.``."""
    return path.endswith(".md") and not any(s.startswith(".") for s in path.split("/"))


def iso(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


class Prose:
    """Markdown bodies from a pool of sentences made once per seed: drawing words one by one
    for every file was most of the generator's time."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.pool = [self._sentence() for _ in range(600)]

    def _sentence(self) -> str:
        words = [self.rng.choice(WORDS) for _ in range(self.rng.randint(5, 14))]
        words[self.rng.randrange(len(words))] = self.rng.choice(VERBS)
        text = " ".join(words)
        return text[0].upper() + text[1:] + "."

    def body(self, title: str, size: int, rule: bool = True) -> str:
        """About ``size`` bytes of markdown; ``rule``: may hold a ``---`` thematic break (never
        in a file whose frontmatter is left open, where it would close the block)."""
        rng, parts = self.rng, [f"# {title}", ""]
        length = len(title)
        while length < size:
            roll = rng.random()
            if roll < 0.3:
                chunk = "\n".join("- " + rng.choice(self.pool) for _ in range(rng.randint(2, 4)))
            elif roll < 0.38:
                chunk = f"```sh\n$ kiwifs memory report --root kb\nexit {rng.randint(0, 2)}\n```"
            elif roll < 0.42:
                row = f"| {rng.choice(WORDS)} | {rng.randint(1, 900)} |"
                chunk = "| step | ms |\n| --- | ---: |\n" + row
            elif roll < 0.45 and rule:
                chunk = "---"
            elif roll < 0.5:
                chunk = f"See [[{rng.choice(TOPICS)}]]."
            else:
                chunk = " ".join(rng.choice(self.pool) for _ in range(rng.randint(2, 4)))
            parts += [chunk, ""]
            length += len(chunk) + 2
        return "\n".join(parts)


def block(lines: Iterable[str], opener: str = "---", closer: str = "---") -> str:
    """A frontmatter block of ``lines``."""
    return "\n".join([opener, *lines, closer]) + "\n"


def mapping_item(*pairs: tuple[str, str]) -> tuple[str, ...]:
    """A block-list item of a mapping: ``  - k: v`` then ``    k: v``."""
    return tuple(("  - " if n == 0 else "    ") + f"{k}: {v}" for n, (k, v) in enumerate(pairs))


# ---------------------------------------------------------------------------------------------
# episodes


@dataclass
class Draft:
    """An episode being written: its frontmatter lines (``None``: no block) and facts."""

    lines: list[str] | None
    facts: Facts
    text_hook: Callable[[str], str] | None = None  # rewrites the finished text (CRLF, BOM)
    opener: str = "---"
    closer: str = "---"
    rule: bool = True
    common: bool = True  # add the dates, provenance and tags every real episode has


@dataclass
class Shape:
    """What a shape writer starts from: the episode's number, path, planned id, title line, the
    ``memory_kind`` line, and the plain draft (``std``) that most shapes adjust."""

    i: int
    path: str
    ident: str
    head: str
    kind: str
    std: Draft


# Each shape: (name, share of N, minimum from 60 episodes up). "std" takes the rest.
EPISODE_SHAPES: tuple[tuple[str, float, int], ...] = (
    ("implicit", 0.08, 1),  # no memory_kind: episodic by the prefix
    ("working", 0.02, 1),  # memory_kind: working
    ("quoted", 0.05, 1),  # episode_id: "x"
    ("padded", 0.01, 1),  # episode_id: " x " (shown as written, matched trimmed)
    ("id_fallback", 0.02, 1),  # id: x
    ("blank_fallback", 0.002, 1),  # episode_id: "" and id: " x " -> x
    ("no_id", 0.01, 2),
    ("blank_id", 0.001, 1),  # episode_id: "  ": not empty, so no missing-id warning
    ("nonstring_id", 0.002, 1),  # true / null / a list: no id
    ("numeric_id", 0.005, 1),  # 9000000042
    ("hex_id", 0.001, 1),  # 0x... -> its decimal
    ("underscore_id", 0.001, 1),  # 9_000_000_042 -> 9000000042
    ("float_id", 0.001, 1),  # 42.5 -> "42.5"
    ("date_id", 0.002, 1),  # 2024-03-05 stays the string
    ("superseded", 0.02, 2),
    ("superseded_no_id", 0.001, 1),  # forgotten: no missing-id warning
    ("live_status", 0.003, 1),  # memory_status: active
    ("invalid_yaml", 0.002, 3),
    ("not_mapping", 0.001, 1),  # the block is a list or a scalar
    ("unterminated", 0.001, 1),
    ("no_frontmatter", 0.003, 1),
    ("empty_frontmatter", 0.001, 1),  # "---\n---" or only a comment: no warning
    ("crlf", 0.005, 1),
    ("bom", 0.001, 1),  # a BOM before "---": no block at all
    ("dots_close", 0.002, 1),  # closed by "..."
    ("padded_delims", 0.002, 1),  # "---  " lines
    ("duplicate", 0.003, 2),  # reuses an earlier episode's id
    ("follow_up", 0.01, 1),  # its own merged-from cites an earlier episode
    ("self_cite", 0.0005, 1),  # its own merged-from cites itself
)


class Corpus:
    """One root being written: each file goes to disk as it is made (a 100k root held in
    memory took 360 MB); only the facts are kept."""

    def __init__(
        self, root: Path, seed: int, episodes: int, semantic: int, merged_fraction: float
    ) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.seed, self.n, self.m, self.fraction = seed, episodes, semantic, merged_fraction
        self.prose = Prose(self.rng)
        self.files: set[str] = set()
        self.folders: set[str] = set()
        self.bytes = 0
        self.facts: dict[str, Facts] = {}
        self.episodes: list[Episode] = []
        self.categories: Counter[str] = Counter()
        self.by_id: list[Episode] = []  # episodes with a plain id, for duplicates

    def add(self, path: str, text: str | bytes, facts: Facts | None = None) -> None:
        """Write one file; ``facts`` is given exactly for the files the scan reads."""
        assert path not in self.files, path
        assert scanned(path) == (facts is not None), path
        data = text.encode() if isinstance(text, str) else text
        folder = os.path.dirname(path)
        if folder not in self.folders:
            os.makedirs(self.root / folder, exist_ok=True)
            self.folders.add(folder)
        with open(self.root / path, "wb") as fh:
            fh.write(data)
        self.files.add(path)
        self.bytes += len(data)
        if facts is not None:
            self.facts[path] = facts

    # -- episodes -------------------------------------------------------------------------------

    def plan(self) -> list[str]:
        """Each episode's shape: the traps spread at random, at least their minimum from 60
        episodes up, so that even the tests' small roots hold every one."""
        shapes = ["std"] * self.n
        slots = list(range(self.n))
        self.rng.shuffle(slots)
        taken = 0
        for name, share, minimum in EPISODE_SHAPES:
            count = round(share * self.n)
            if self.n >= 60:
                count = max(count, minimum)
            count = min(count, self.n - taken)
            for slot in slots[taken : taken + count]:
                shapes[slot] = name
            taken += count
        return shapes

    def episode(self, i: int, shape: str) -> None:
        rng = self.rng
        when = START + dt.timedelta(days=i * 730 // max(self.n, 1), seconds=rng.randint(0, 86399))
        month = f"{PREFIX}{when:%Y}/{when:%m}/"
        path = f"{month}run-{i:04d}.md"
        run_id = f"run-{when:%Y%m%d}-{rng.getrandbits(32):08x}"
        ident = run_id if rng.random() < 0.4 else f"ep-{when:%Y%m%d}-{i:04d}"
        title = f"Run {when:%Y-%m-%d} #{i:04d}: {rng.choice(VERBS)} {rng.choice(TOPICS)}"
        common = self.common_lines(when, run_id)
        draft = self.shape(shape, i, path, ident, title)
        if draft.lines is not None and draft.common:
            draft.lines[1:1] = common  # after the first line, before the shape's own
        self.categories[shape] += 1
        text = self.render(draft, title)
        self.add(path, text, draft.facts)
        if draft.facts.episodic:
            episode = Episode(path, draft.facts.raw_id.strip(), month)
            self.episodes.append(episode)
            if shape == "std":
                self.by_id.append(episode)
        if rng.random() < 0.01:
            self.add(path[:-3] + ".log.json", json.dumps({"run": run_id, "ok": True}) + "\n")

    def common_lines(self, when: dt.datetime, run_id: str) -> list[str]:
        """What every real episode carries besides its identity: dates, provenance, tags."""
        rng = self.rng
        lines = [f"created: {iso(when)}", "derived-from:"]
        lines += mapping_item(("type", "run"), ("id", run_id), ("actor", rng.choice(ACTORS)))
        tags = rng.sample(TAGS, rng.randint(1, 3))
        if rng.random() < 0.5:
            lines.append(f"tags: [{', '.join(tags)}]")
        else:
            lines += ["tags:", *(f"  - {t}" for t in tags)]
        lines.append(f"status: {rng.choice(['completed', 'completed', 'failed', 'partial'])}")
        return lines

    def render(self, draft: Draft, title: str) -> str:
        body = self.prose.body(title, self.rng.randint(300, 2500), rule=draft.rule)
        text = body
        if draft.lines is not None:
            text = block(draft.lines, draft.opener, draft.closer) + "\n" + body
        return draft.text_hook(text) if draft.text_hook else text

    def shape(self, shape: str, i: int, path: str, ident: str, title: str) -> Draft:
        """The identity lines and facts of one shape (``std`` for anything unlisted)."""
        head = f'title: "{title}"'
        kind = "memory_kind: episodic"
        std = Draft([head, kind, f"episode_id: {ident}"], Facts(True, ident, "episodic"))
        maker: Callable[[Shape], Draft] | None = getattr(self, "shape_" + shape, None)
        return std if maker is None else maker(Shape(i, path, ident, head, kind, std))

    def shape_implicit(self, c: Shape) -> Draft:
        return Draft([c.head, f"episode_id: {c.ident}"], Facts(True, c.ident))

    def shape_working(self, c: Shape) -> Draft:
        return Draft(
            [c.head, "memory_kind: working", f"episode_id: {c.ident}"],
            Facts(True, c.ident, "working"),
        )

    def shape_quoted(self, c: Shape) -> Draft:
        quoted = f'"{c.ident}"' if self.rng.random() < 0.5 else f"'{c.ident}'"
        return Draft([c.head, c.kind, f"episode_id: {quoted}"], c.std.facts)

    def shape_padded(self, c: Shape) -> Draft:
        return Draft(
            [c.head, c.kind, f'episode_id: " {c.ident} "'], Facts(True, f" {c.ident} ", "episodic")
        )

    def shape_id_fallback(self, c: Shape) -> Draft:
        return Draft([c.head, c.kind, f"id: {c.ident}"], c.std.facts)

    def shape_blank_fallback(self, c: Shape) -> Draft:
        return Draft([c.head, c.kind, 'episode_id: ""', f'id: "  {c.ident} "'], c.std.facts)

    def shape_no_id(self, c: Shape) -> Draft:
        return Draft([c.head, c.kind], Facts(True, "", "episodic"))

    def shape_blank_id(self, c: Shape) -> Draft:
        return Draft([c.head, c.kind, 'episode_id: "  "'], Facts(True, "  ", "episodic"))

    def shape_nonstring_id(self, c: Shape) -> Draft:
        value = self.rng.choice(["true", "null", "[a, b]", "{k: v}", "no"])
        return Draft([c.head, c.kind, f"episode_id: {value}"], Facts(True, "", "episodic"))

    def shape_numeric_id(self, c: Shape) -> Draft:
        number = 9_000_000_000 + c.i
        return Draft(
            [c.head, c.kind, f"episode_id: {number}"], Facts(True, str(number), "episodic")
        )

    def shape_hex_id(self, c: Shape) -> Draft:
        number = 8_000_000_000 + c.i
        return Draft(
            [c.head, c.kind, f"episode_id: {number:#x}"], Facts(True, str(number), "episodic")
        )

    def shape_underscore_id(self, c: Shape) -> Draft:
        number = 7_000_000_000 + c.i
        return Draft(
            [c.head, c.kind, f"episode_id: {number:_}"], Facts(True, str(number), "episodic")
        )

    def shape_float_id(self, c: Shape) -> Draft:
        return Draft([c.head, c.kind, f"episode_id: {c.i}.5"], Facts(True, f"{c.i}.5", "episodic"))

    def shape_date_id(self, c: Shape) -> Draft:
        day = (START + dt.timedelta(days=3000 + c.i)).strftime("%Y-%m-%d")  # unique: one per i
        return Draft([c.head, c.kind, f"episode_id: {day}"], Facts(True, day, "episodic"))

    def shape_superseded(self, c: Shape) -> Draft:
        status = self.rng.choice(["superseded", "Superseded", '" SUPERSEDED "'])
        lines = [c.head, c.kind, f"episode_id: {c.ident}", f"memory_status: {status}"]
        lines += ["valid_until: 2026-01-01T00:00:00Z", "superseded_reason: the API changed"]
        return Draft(lines, Facts(True, c.ident, "episodic", superseded=True))

    def shape_superseded_no_id(self, c: Shape) -> Draft:
        return Draft(
            [c.head, c.kind, "memory_status: superseded"], Facts(True, "", "episodic", True)
        )

    def shape_live_status(self, c: Shape) -> Draft:
        status = self.rng.choice(["active", "'superseded later'", "[superseded]"])
        return Draft(
            [c.head, c.kind, f"episode_id: {c.ident}", f"memory_status: {status}"], c.std.facts
        )

    def shape_invalid_yaml(self, c: Shape) -> Draft:
        broken = [
            [c.head[:-1], c.kind, f"episode_id: {c.ident}"],  # an unterminated quote
            [c.head, c.kind, f"episode_id: {c.ident}", "notes:\n\t- indented with a tab"],
            [c.head, "summary: status: failed", c.kind, f"episode_id: {c.ident}"],
            [c.head, c.kind, f"episode_id: [{c.ident}"],  # an unclosed flow sequence
        ][c.i % 4]
        return Draft(broken, Facts(True, invalid=True))

    def shape_not_mapping(self, c: Shape) -> Draft:
        lines = ["- episodic", f"- {c.ident}"] if c.i % 2 else ["just a line of text"]
        return Draft(lines, Facts(True, invalid=True), common=False)

    def shape_unterminated(self, c: Shape) -> Draft:
        draft = Draft(
            [c.head, c.kind, f"episode_id: {c.ident}"], Facts(True, invalid=True), rule=False
        )
        draft.text_hook = lambda text: text.replace("\n---\n", "\n", 1)  # drop the closing line
        return draft

    def shape_no_frontmatter(self, c: Shape) -> Draft:
        return Draft(None, Facts(True))

    def shape_empty_frontmatter(self, c: Shape) -> Draft:
        draft = Draft([], Facts(True), common=False)
        marker = "# a comment, no keys\n" if c.i % 2 else ""
        draft.text_hook = lambda text: "---\n" + marker + "---\n" + text.split("\n---\n", 1)[1]
        return draft

    def shape_crlf(self, c: Shape) -> Draft:
        c.std.text_hook = lambda text: text.replace("\n", "\r\n")
        return c.std

    def shape_bom(self, c: Shape) -> Draft:
        c.std.text_hook = lambda text: "\ufeff" + text
        c.std.facts = Facts(True)  # "\ufeff---" is not "---": no block, so no id and no kind
        return c.std

    def shape_dots_close(self, c: Shape) -> Draft:
        c.std.closer = "..."
        return c.std

    def shape_padded_delims(self, c: Shape) -> Draft:
        c.std.opener, c.std.closer = "---  ", "--- "
        return c.std

    def shape_duplicate(self, c: Shape) -> Draft:
        if not self.by_id:
            return c.std
        reused = self.rng.choice(self.by_id).ident
        if c.i % 2:
            return Draft([c.head, c.kind, f"id: {reused}"], Facts(True, reused, "episodic"))
        return Draft(
            [c.head, c.kind, f'episode_id: " {reused}"'], Facts(True, f" {reused}", "episodic")
        )

    def shape_follow_up(self, c: Shape) -> Draft:
        if not self.episodes:
            return c.std
        earlier = self.rng.choice(self.episodes).path
        item = self.path_item(earlier, "episode")
        c.std.lines = [*(c.std.lines or []), "merged-from:", *item.lines]
        c.std.facts.cites.append(item.cite or Cite())
        return c.std

    def shape_self_cite(self, c: Shape) -> Draft:
        lines = [
            c.head,
            c.kind,
            "merged-from:",
            *mapping_item(("type", "note"), ("path", "./" + c.path)),
        ]
        return Draft(lines, Facts(True, "", "episodic", cites=[Cite(cites_path=c.path)]))

    # -- citations ------------------------------------------------------------------------------

    def id_item(self, ident: str, written: str | None = None) -> Item:
        """An item citing ``ident`` by id, its type any id type in any case."""
        rng = self.rng
        typ = rng.choice(ID_TYPES) if rng.random() < 0.3 else "episode"
        typ = rng.choice([typ, typ, typ.upper(), typ.title(), f'" {typ} "'])
        value = written or rng.choice([ident, ident, f'"{ident}"', f'" {ident} "'])
        return Item(self.extras(("type", typ), ("id", value)), Cite(cites_id=ident))

    def path_item(self, path: str, typ: str | None = None) -> Item:
        """An item citing ``path`` in one of the forms that normalise to it."""
        rng = self.rng
        top, rest = path.split("/", 1)
        written = rng.choice(
            [path] * 6
            + [
                "./" + path,
                "/" + path,
                f"{top}//{rest}",
                f"{top}/./{rest}",
                "'" + path.replace("/", "\\") + "'",
                f'"  {path} "',
            ]
        )
        typ = typ or rng.choice(["episode", "episode", "note", "source", "Run"])
        return Item(self.extras(("type", typ), ("path", written)), Cite(cites_path=path))

    def extras(self, *pairs: tuple[str, str]) -> tuple[str, ...]:
        """``pairs`` plus the date, actor and note a real entry often carries."""
        rng, more = self.rng, list(pairs)
        if rng.random() < 0.7:
            more.append(("date", iso(START + dt.timedelta(minutes=rng.randint(0, 900_000)))))
        if rng.random() < 0.4:
            more.append(("actor", rng.choice(ACTORS)))
        if rng.random() < 0.1:
            more.append(("note", f'"{rng.choice(self.prose.pool)[:40]}"'))
        return mapping_item(*more)

    def covering(self, episode: Episode) -> Item:
        """An item that merges ``episode``: by id or by path, or by id with an escaping path."""
        roll = self.rng.random()
        if not episode.ident or roll < 0.35:
            return self.path_item(episode.path)
        if roll < 0.97:
            if episode.ident.isdigit() and self.rng.random() < 0.5:
                return self.id_item(episode.ident, written=episode.ident)  # a YAML number
            return self.id_item(episode.ident)
        bad = episode.path.replace("/", "/../episodes/", 1)
        lines = self.extras(("type", "run"), ("id", episode.ident), ("path", bad))
        return Item(lines, Cite(cites_id=episode.ident, escapes=True))

    def decoy(self, episode: Episode) -> Item:
        """An item that looks like it merges ``episode`` and does not."""
        rng, path, ident = self.rng, episode.path, episode.ident or "ep-none"
        kind = rng.choice(["note_type", "no_type", "empty_type", "int_type", "escape", "outside",
                           "path_id", "wrong_case", "no_suffix", "bool_id", "null", "scalar",
                           "list"])  # fmt: skip
        if kind == "note_type":
            return Item(self.extras(("type", "note"), ("id", ident)), Cite())
        if kind == "no_type":
            return Item(self.extras(("id", ident), ("path", path + ".bak")), Cite())
        if kind == "empty_type":
            return Item(self.extras(("type", '""'), ("id", ident), ("path", path)), Cite())
        if kind == "int_type":
            return Item(self.extras(("type", "7"), ("path", path)), Cite())
        if kind == "escape":
            bad = path.replace("/", "/x/../", 1)
            return Item(self.extras(("type", "episode"), ("path", bad)), Cite(escapes=True))
        if kind == "outside":
            return Item(self.extras(("type", "note"), ("path", "../" + path)), Cite(escapes=True))
        if kind == "path_id":
            return Item(
                self.extras(("type", "episode"), ("id", f'"path:{path}"')), Cite(f"path:{path}")
            )
        if kind == "wrong_case":
            other = "Episodes/" + path.split("/", 1)[1]
            return Item(self.extras(("type", "episode"), ("path", other)), Cite(cites_path=other))
        if kind == "no_suffix":
            other = path[:-3]
            return Item(self.extras(("type", "note"), ("path", other)), Cite(cites_path=other))
        if kind == "bool_id":
            return Item(self.extras(("type", "episode"), ("id", "true")), Cite())
        if kind == "null":
            return Item(("  - null",) if rng.random() < 0.5 else ("  -",), Cite())
        if kind == "scalar":
            return Item((f"  - {path}",), None)
        return Item((f"  - [episode, {path}]",), None)

    # -- pages ----------------------------------------------------------------------------------

    def page(self, path: str, title: str, kind: str, items: list[Item]) -> None:
        """A page that is not an episode (``kind``: its ``memory_kind`` as written, semantic or
        consolidation), with ``items`` as its ``merged-from`` list."""
        rng = self.rng
        lines = [f'title: "{title}"', f"memory_kind: {kind}"]
        lines.append(f"tags: [{', '.join(rng.sample(TAGS, rng.randint(1, 3)))}]")
        if items:
            lines.append("merged-from:")
            for item in items:
                lines += item.lines
        body = self.prose.body(title, rng.randint(400, 3000))
        cites = [item.cite for item in items if item.cite]
        self.add(path, block(lines) + "\n" + body, Facts(kind=kind.strip('"'), cites=cites))

    def special(self, path: str, lines: list[str], facts: Facts) -> None:
        """A page written as given (the page-level traps), with its facts."""
        title = path.rsplit("/", 1)[1][:-3]
        self.add(path, block([f'title: "{title}"', *lines]) + "\n# " + title + "\n", facts)


# ---------------------------------------------------------------------------------------------
# the steps of a root


def build(corpus: Corpus) -> None:
    """Everything, in an order that never depends on hash order."""
    for i, shape in enumerate(corpus.plan()):
        corpus.episode(i, shape)
    extras(corpus)
    covered, uncovered = choose_coverage(corpus)
    items = [(e, corpus.covering(e)) for e in covered]
    items += [(e, corpus.covering(e)) for e in covered if corpus.rng.random() < 0.1]
    decoys = decoy_items(corpus, uncovered)
    page_traps(corpus, uncovered)
    pages(corpus, items, decoys)
    ordinary(corpus)


def extras(corpus: Corpus) -> None:
    """The files beside the episodes: inbox episodes, look-alikes, never-scanned files."""
    rng, prose = corpus.rng, corpus.prose
    for k in range(max(3, corpus.n // 500)):
        ident = f"inbox-{rng.getrandbits(40):010x}"
        kind = rng.choice(["episodic", "Episodic", '" EPISODIC "'])
        name = "ümlaut" if k == 0 else rng.choice(TOPICS)
        path = f"inbox/{name}-{k:03d}.md"
        lines = [f'title: "Capture {k}"', f"memory_kind: {kind}", f"episode_id: {ident}"]
        corpus.add(
            path,
            block(lines) + prose.body(f"Capture {k}", 400),
            Facts(True, ident, kind.strip('"')),
        )
        corpus.episodes.append(Episode(path, ident, ""))
    not_ours = "---\nmemory_kind: [episodic]\nepisode_id: inbox-list\n---\n# A list, not a kind\n"
    corpus.add("inbox/listed-kind.md", not_ours, Facts(False, "inbox-list"))
    readme = "---\ntitle: Episodes\n---\n\n# Episodes\n\nOne file per agent run, by month.\n"
    corpus.add(PREFIX + "README.md", readme, Facts(True))
    twin = corpus.by_id[0].ident if corpus.by_id else "ep-none"  # not an episode: no duplicate
    for k, kind in enumerate(["semantic", '" Semantic "', "CONSOLIDATION"]):
        lines = [f"memory_kind: {kind}", f"episode_id: {twin}"]
        corpus.add(
            f"{PREFIX}notes/summary-{k}.md",
            block(lines) + "# Summary\n",
            Facts(False, twin, kind.strip('"')),
        )
    corpus.add(
        "episodes_archive/old-0001.md",
        "---\nepisode_id: old-1\n---\n# Old\n",
        Facts(False, "old-1"),
    )
    corpus.add(
        "archive/episodes/old-0002.md",
        "---\nepisode_id: old-2\n---\n# Old\n",
        Facts(False, "old-2"),
    )
    never_scanned(corpus)


def never_scanned(corpus: Corpus) -> None:
    """Files the scan must not read: hidden folders and files, names not ending in ``.md``."""
    episode = "---\nmemory_kind: episodic\nepisode_id: {}\n---\n# hidden\n"
    corpus.add(".kiwi/config.toml", '[memory]\nepisodes_path_prefix = "./episodes"\n')
    corpus.add(".kiwi/templates/episode.md", episode.format("template"))
    corpus.add(".obsidian/workspace.md", episode.format("obsidian"))
    for k in range(3):
        corpus.add(f"{PREFIX}.drafts/run-draft-{k}.md", episode.format(f"draft-{k}"))
    corpus.add(PREFIX + ".pending.md", episode.format("pending"))
    corpus.add(PREFIX + "NOTES.MD", episode.format("notes-upper"))
    corpus.add(PREFIX + "run-old.md.bak", episode.format("bak"))
    corpus.add("concepts/.hidden-page.md", "---\nmerged-from:\n  - type: episode\n    id: x\n---\n")


def choose_coverage(corpus: Corpus) -> tuple[list[Episode], list[Episode]]:
    """The episodes the pages will merge (``merged_fraction`` of them) and the others."""
    population = sorted(corpus.episodes, key=lambda e: walk_key(e.path))
    chosen = set(
        corpus.rng.sample(range(len(population)), round(corpus.fraction * len(population)))
    )
    covered = [e for n, e in enumerate(population) if n in chosen]
    uncovered = [e for n, e in enumerate(population) if n not in chosen]
    return covered, uncovered


def decoy_items(corpus: Corpus, uncovered: list[Episode]) -> list[Item]:
    """Look-alike items aimed at episodes nothing merges (so a misread would show)."""
    if not uncovered:
        return []
    count = max(16, corpus.n // 100)
    return [corpus.decoy(corpus.rng.choice(uncovered)) for _ in range(count)]


def page_traps(corpus: Corpus, uncovered: list[Episode]) -> None:
    """Pages whose ``merged-from`` itself is the trap: one mapping (one entry, it merges),
    scalars (a shape warning), ``null`` and ``[]`` (nothing), ``{}`` (one entry, no type), a
    misspelled key, broken YAML, and citations in ``derived-from`` only."""
    if len(uncovered) < 4:
        return
    first, second, third, fourth = corpus.rng.sample(uncovered, 4)
    single = ["memory_kind: semantic", "merged-from:", "  type: episode", f"  path: {first.path}"]
    corpus.special(
        "concepts/_single-mapping.md",
        single,
        Facts(kind="semantic", cites=[Cite(cites_path=first.path)]),
    )
    for name, value in [("string", second.path), ("number", "42"), ("bool", "true")]:
        lines = ["memory_kind: semantic", f"merged-from: {value}"]
        corpus.special(
            f"concepts/_scalar-{name}.md", lines, Facts(kind="semantic", shape_warning=True)
        )
    for name, value in [("null", ""), ("empty-list", " []")]:
        corpus.special(
            f"concepts/_{name}.md",
            ["memory_kind: semantic", f"merged-from:{value}"],
            Facts(kind="semantic"),
        )
    corpus.special("concepts/_empty-mapping.md", ["merged-from: {}"], Facts(cites=[Cite()]))
    misspelled = [
        "memory_kind: semantic",
        "merged_from:",
        *mapping_item(("type", "episode"), ("path", third.path)),
    ]
    corpus.special("concepts/_misspelled.md", misspelled, Facts(kind="semantic"))
    broken = [
        "memory_kind: semantic",
        "merged-from:",
        *mapping_item(("type", "episode"), ("path", fourth.path)),
    ]
    corpus.special(
        "concepts/_broken.md",
        [*broken, "sources:\n\t- a tab breaks the block"],
        Facts(invalid=True),
    )
    derived = [
        "memory_kind: semantic",
        "derived-from:",
        *mapping_item(("type", "run"), ("id", third.ident or "x")),
    ]
    corpus.special("concepts/_derived-only.md", derived, Facts(kind="semantic"))


def pages(corpus: Corpus, items: list[tuple[Episode, Item]], decoys: list[Item]) -> None:
    """The semantic pages and the monthly digests, sharing out the covering items and decoys."""
    rng = corpus.rng
    rng.shuffle(items)
    digests: dict[str, list[Item]] = {}
    buckets: list[list[Item]] = [[] for _ in range(max(1, corpus.m))]
    for episode, item in items:
        if episode.month and rng.random() < 0.1:
            digests.setdefault(episode.month, []).append(item)
        else:
            buckets[rng.randrange(len(buckets))].append(item)
    for decoy in decoys:
        bucket = buckets[rng.randrange(len(buckets))]
        bucket.insert(rng.randint(0, len(bucket)), decoy)
    for k, bucket in enumerate(buckets):
        topic = rng.choice(TOPICS)
        path = f"concepts/{topic}-{k:04d}.md"
        if rng.random() < 0.4:
            path = f"entities/{rng.choice(ENTITY_KINDS)}/{topic}-{k:04d}.md"
        kind = "semantic" if rng.random() < 0.95 else '" Semantic "'
        corpus.page(path, topic.replace("-", " ").title(), kind, bucket)
    for month in sorted(digests):
        corpus.page(month + "_digest.md", "Digest " + month, "consolidation", digests[month])


def wiki_links(corpus: Corpus, mean: int) -> None:
    """Append a "Related" line of wiki links to each well-formed markdown file (see the module
    docstring). Files whose frontmatter is invalid are skipped: text appended to an unterminated
    block would change what it means to the report."""
    rng = random.Random(f"links-{corpus.seed}")
    sources = sorted(
        (p for p, f in corpus.facts.items() if not f.invalid and p.endswith(".md")), key=walk_key
    )
    targets = [p[:-3] for p in sources]
    for path in sources:
        names = []
        for _ in range(rng.randint(2, max(2, 2 * mean - 2))):
            roll = rng.random()
            if roll < 0.1:
                names.append(f"missing/page-{rng.randrange(10**6)}")
            elif roll < 0.3:
                names.append(rng.choice(targets).rpartition("/")[2])  # by name
            else:
                names.append(rng.choice(targets))
        data = ("\n\nRelated: " + " ".join(f"[[{n}]]" for n in names) + "\n").encode()
        with open(corpus.root / path, "ab") as fh:
            fh.write(data)
        corpus.bytes += len(data)


def ordinary(corpus: Corpus) -> None:
    """Pages no rule cares about, as a real root has many."""
    rng = corpus.rng
    corpus.add(
        "index.md", "---\ntitle: Knowledge\n---\n\n# Knowledge\n\nStart at [[concepts]].\n", Facts()
    )
    for k in range(max(2, corpus.n // 100)):
        title = f"Guide {k}: {rng.choice(TOPICS)}"
        head = f'---\ntitle: "{title}"\ntags: [docs]\n---\n\n' if rng.random() < 0.8 else ""
        corpus.add(
            f"guides/guide-{k:04d}.md",
            head + corpus.prose.body(title, rng.randint(400, 2000)),
            Facts(),
        )


# ---------------------------------------------------------------------------------------------
# the truth


def ground_truth(corpus: Corpus) -> dict[str, Any]:
    """The report docs/memory.md gives for the root, folded from the facts in walk order."""
    order = sorted(corpus.facts, key=walk_key)
    facts = [corpus.facts[p] for p in order]
    ids = {c.cites_id.strip() for f in facts for c in f.cites if c.cites_id.strip()}
    paths = {c.cites_path for f in facts for c in f.cites if c.cites_path}
    warnings: dict[str, list[str]] = {kind: [] for kind in WARNING_KINDS}
    episodic: list[str] = []
    unmerged: list[str] = []
    superseded: list[str] = []
    first_with: dict[str, str] = {}
    for path, f in zip(order, facts, strict=True):
        warnings["invalid_frontmatter"] += [path] * f.invalid
        warnings["shape"] += [path] * f.shape_warning
        warnings["escape"] += [path for c in f.cites if c.escapes]
        if not f.episodic:
            continue
        episodic.append(path)
        ident = f.raw_id.strip()
        if f.superseded:
            superseded.append(path)
        elif not ((ident and ident in ids) or path in paths):
            unmerged.append(path)
            if f.raw_id == "":
                warnings["missing_id"].append(path)
        if ident and first_with.setdefault(ident, path) != path:
            warnings["duplicate_id"].append(path)
    return {
        "seed": corpus.seed,
        "episodes": corpus.n,
        "files": len(corpus.files),
        "bytes": corpus.bytes,
        "scanned_files": len(order),
        "episodes_prefix": PREFIX,
        "episodic_count": len(episodic),
        "merged_from_refs": sum(len(f.cites) for f in facts),
        "unmerged_count": len(unmerged),
        "superseded_count": len(superseded),
        "warning_counts": {kind: len(found) for kind, found in warnings.items()},
        "episodic": episodic,
        "unmerged": unmerged,
        "superseded": superseded,
        "episode_ids": {p: corpus.facts[p].raw_id for p in episodic if corpus.facts[p].raw_id},
        "memory_kinds": {p: corpus.facts[p].kind for p in episodic if corpus.facts[p].kind},
        "warnings": warnings,
        "categories": dict(sorted(corpus.categories.items())),
    }


# ---------------------------------------------------------------------------------------------
# entry points


def generate(
    root: str | Path,
    episodes: int,
    seed: int = 1,
    semantic: int | None = None,
    merged_fraction: float = 0.7,
    force: bool = False,
    links: int = 0,
) -> dict[str, Any]:
    """Write a root of ``episodes`` episodes into ``root`` (new or empty, unless ``force``) and
    return its ground truth; ``links``: the mean wiki links added per page (0: none)."""
    if episodes < 1 or not 0.0 <= merged_fraction <= 1.0:
        raise ValueError("need episodes >= 1 and 0 <= merged_fraction <= 1")
    target = Path(root)
    if target.exists() and any(target.iterdir()):
        if not force:
            raise FileExistsError(f"{target} is not empty (force replaces it)")
        shutil.rmtree(target)
    pages = max(1, episodes // 20) if semantic is None else semantic
    corpus = Corpus(target, seed, episodes, pages, merged_fraction)
    build(corpus)
    if links > 0:
        wiki_links(corpus, links)
    return ground_truth(corpus)


def cached(base: Path, episodes: int, seed: int = 1, links: int = 0) -> Path:
    """The root ``base/ep<N>-seed<S>`` (``…-links<K>`` with links), generated when missing, with
    its truth beside it (``<name>.truth.json``): the benchmarks share these. Built under another
    name and renamed when complete, so an interrupted run never leaves a half root to be reused."""
    root = base / (f"ep{episodes}-seed{seed}" + (f"-links{links}" if links else ""))
    if root.is_dir():
        return root
    building = base / (root.name + ".building")
    truth = generate(building, episodes, seed, force=True, links=links)
    (base / (root.name + ".truth.json")).write_text(json.dumps(truth), encoding="utf-8")
    building.rename(root)
    return root


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--semantic", type=int, default=None, help="pages (default: episodes // 20)")
    ap.add_argument("--merged-fraction", type=float, default=0.7)
    ap.add_argument("--links", type=int, default=0, help="mean wiki links added per page")
    ap.add_argument("--truth", type=Path, help="write the full ground truth here (JSON)")
    ap.add_argument("--force", action="store_true", help="replace a non-empty ROOT")
    args = ap.parse_args(argv)
    try:
        truth = generate(
            args.root,
            args.episodes,
            args.seed,
            args.semantic,
            args.merged_fraction,
            args.force,
            args.links,
        )
    except (ValueError, FileExistsError) as exc:
        ap.error(str(exc))
    if args.truth:
        args.truth.write_text(
            json.dumps(truth, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    summary = {
        k: v for k, v in truth.items() if not isinstance(v, (list, dict)) or k == "warning_counts"
    }
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
