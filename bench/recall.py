#!/usr/bin/env python3
"""Recall on agents' own questions: LoCoMo conversations as knowledge roots, asked in plain text.

    python bench/recall.py --data PATH [--level turn|session|both]
                           [--modes keyword,semantic,hybrid,brief,bm25] [--via library|rest]
                           [--conversations N] [--budget 2000] [--model DIR] [--no-vectors]
                           [--work DIR] [--json OUT]

Agents do not write FTS5 queries; they ask "When did Caroline go to the LGBTQ support group?".
This bench measures what kiwifs finds for such questions, with whatever query rule, embedder and
fusion the code has at the moment it runs, beside a textbook BM25 over the same texts, so a
change to search shows up as a number rather than as an impression.

The data (``--data``) is a LoCoMo file (Maharana et al., ACL 2024; snap-research/LoCoMo,
CC BY-NC 4.0): a list of conversations, each with ``sample_id``, ``conversation`` (sessions
``session_<n>`` of turns, dated by ``session_<n>_date_time``) and ``qa``. It is read, never
copied: the roots live in a temporary folder (or ``--work DIR``) and are thrown away.

Roots. One knowledge root per conversation and level, written file by file (no git: the config
says ``[versioning] strategy = "none"``; a commit per file would only slow the build), then
opened with ``Knowledge.open`` and indexed with ``reindex`` (and ``reindex_vectors`` when vectors
are on):

* turn level: one episode per turn, ``episodes/<sample>/session-NN/D<s>-<t>.md``, frontmatter
  ``memory_kind: episodic``, ``episode_id`` (``<sample>-D<s>-<t>``), ``dia_id``, ``session``,
  ``date`` (the session's date and time as written), ``speaker``; body ``Speaker: text``, plus
  `` [image: caption]`` when the turn shared an image;
* session level: one episode per session, ``episodes/<sample>/session-NN.md``, its turns one
  paragraph each in the same form; a session found counts for every evidence turn it holds.

Questions. Categories 1-4 (5 is adversarial: its answers are not in the conversation), sent
exactly as written. Evidence ids are normalised: ``"D8:6; D9:17"`` is split, ``D:11:26`` is
``D11:26``, ``D30:05`` is ``D30:5``, and ids of no turn are dropped. Every question is sent (so
"no question fails" covers all of them); a question left with no evidence is not scored.

Modes (each question, each mode, one call):

* ``keyword``: ``Knowledge.search(q, limit=10)`` / ``GET /api/kiwi/search?q=&limit=10``;
* ``semantic``: ``Knowledge.semantic_search(q, limit=10)`` / ``GET /api/kiwi/search/semantic``;
* ``hybrid``: ``Knowledge.hybrid_search(q, limit=10)`` / ``GET /api/kiwi/search/hybrid``;
* ``brief``: ``Knowledge.brief(q, budget_tokens=2000)`` / ``GET /api/kiwi/brief`` (hybrid when
  vectors are on, keyword otherwise, as kiwifs decides);
* ``bm25``: ``rank_bm25.BM25Okapi`` over the same bodies, words lower-cased
  (``[a-z0-9]+`` after folding case), the question tokenised the same way, the 10 best documents
  with a positive score, ties in file order. No stemming, no stop words: the textbook baseline.

Semantic and hybrid need vectors: ``[search.vector] enabled = true`` with ``provider = "local"``
(and ``model = --model DIR`` when given; without it, whatever model kiwifs bundles, if any). A
probe root is opened first; when the embedder cannot be set up the two modes are skipped with
the reason, and the roots are built without vectors. ``--no-vectors`` skips them on purpose.

Metrics, per question, averaged over the scored questions (a failed call scores 0):

* R@k: share of the question's evidence turns among the turns of the first k results;
* MRR: 1 / rank of the first result holding an evidence turn (0 when none in the 10);
* pack recall (brief only): share of evidence turns whose page is among the brief's pages;
  brief's R@5, R@10 and MRR rank its included pages in order;
* failed: calls that raised (library) or did not answer 200 (REST), out of every question sent;
  empty: answers with no result at all; p50 ms: the median call time (HTTP included over REST).

The output names the kiwifs version, the commit of the checkout it runs from (``+dirty`` when the
tree has changes) and the data file's sha256, so a figure can be traced to what made it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import kiwifs

MODES = ("keyword", "semantic", "hybrid", "brief", "bm25")
VECTOR_MODES = frozenset({"semantic", "hybrid"})
LEVELS = ("turn", "session")
CATEGORIES = frozenset({1, 2, 3, 4})
LIMIT = 10
CUTS = (5, 10)
SERVER_START_S = 120.0
EMBED_WAIT_S = 1800.0

_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
_WORD = re.compile(r"[a-z0-9]+")


# ---------------------------------------------------------------------------------------------
# the data


@dataclass(frozen=True)
class Turn:
    dia_id: str  # normalised: D<session>:<turn>
    session: int
    date: str
    speaker: str
    text: str
    caption: str | None = None

    def line(self) -> str:
        """What an agent would have remembered of the turn: who said what, and the image."""
        shown = f"{self.speaker}: {self.text}"
        return f"{shown} [image: {self.caption}]" if self.caption else shown


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]  # normalised, existing turns only


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]
    dropped_evidence: int  # evidence ids that named no turn


def normalise_id(raw: str) -> str | None:
    """``D:11:26`` → ``D11:26``, ``D30:05`` → ``D30:5``; ``None`` for what is not an id."""
    found = _EVIDENCE.fullmatch(raw.strip())
    if found is None:
        return None
    return f"D{int(found.group(1))}:{int(found.group(2))}"


def normalise_evidence(raw: Iterable[object], known: frozenset[str]) -> tuple[tuple[str, ...], int]:
    """The evidence ids that name a turn (split, normalised, deduplicated, in order) and the
    number of entries dropped because they named none."""
    kept: list[str] = []
    dropped = 0
    for item in raw:
        for part in re.split(r"[;,]", str(item)):
            if not part.strip():
                continue
            dia = normalise_id(part)
            if dia is None or dia not in known:
                dropped += 1
            elif dia not in kept:
                kept.append(dia)
    return tuple(kept), dropped


def _session_numbers(conv: dict[str, Any]) -> list[int]:
    found = (re.fullmatch(r"session_(\d+)", k) for k in conv)
    return sorted(int(m.group(1)) for m in found if m and isinstance(conv[m.group(0)], list))


def parse_turns(conv: dict[str, Any]) -> tuple[Turn, ...]:
    turns: list[Turn] = []
    for n in _session_numbers(conv):
        date = str(conv.get(f"session_{n}_date_time", ""))
        for raw in conv[f"session_{n}"]:
            dia = normalise_id(str(raw.get("dia_id", "")))
            if dia is None:
                continue
            caption = raw.get("blip_caption")
            turns.append(Turn(dia, n, date, str(raw["speaker"]), str(raw["text"]), caption or None))
    return tuple(turns)


def parse_conversation(sample: dict[str, Any]) -> Conversation:
    turns = parse_turns(sample["conversation"])
    known = frozenset(t.dia_id for t in turns)
    questions: list[Question] = []
    dropped = 0
    for qa in sample.get("qa", []):
        category = int(qa.get("category", 0))
        if category not in CATEGORIES:
            continue
        evidence, lost = normalise_evidence(qa.get("evidence") or [], known)
        dropped += lost
        questions.append(Question(str(qa["question"]), category, evidence))
    return Conversation(str(sample["sample_id"]), turns, tuple(questions), dropped)


def load_data(path: Path, limit: int | None) -> list[Conversation]:
    samples = json.loads(path.read_text(encoding="utf-8"))
    if limit is not None:
        samples = samples[:limit]
    return [parse_conversation(s) for s in samples]


# ---------------------------------------------------------------------------------------------
# the roots


@dataclass(frozen=True)
class Document:
    path: str
    frontmatter: dict[str, Any]
    body: str
    turns: frozenset[str]

    def markdown(self) -> str:
        # JSON scalars are YAML scalars: quoting every string keeps dates and names as text.
        head = "".join(f"{k}: {json.dumps(v)}\n" for k, v in self.frontmatter.items())
        return f"---\n{head}---\n\n{self.body}\n"


def _dia_slug(dia: str) -> str:
    return dia.replace(":", "-")


def turn_documents(conv: Conversation) -> list[Document]:
    docs = []
    for t in conv.turns:
        slug = _dia_slug(t.dia_id)
        meta = {
            "memory_kind": "episodic",
            "episode_id": f"{conv.sample_id}-{slug}",
            "dia_id": t.dia_id,
            "session": t.session,
            "date": t.date,
            "speaker": t.speaker,
        }
        path = f"episodes/{conv.sample_id}/session-{t.session:02d}/{slug}.md"
        docs.append(Document(path, meta, t.line(), frozenset({t.dia_id})))
    return docs


def session_documents(conv: Conversation) -> list[Document]:
    by_session: dict[int, list[Turn]] = {}
    for t in conv.turns:
        by_session.setdefault(t.session, []).append(t)
    docs = []
    for n, turns in by_session.items():
        meta = {
            "memory_kind": "episodic",
            "episode_id": f"{conv.sample_id}-session-{n:02d}",
            "session": n,
            "date": turns[0].date,
            "speakers": sorted({t.speaker for t in turns}),
        }
        body = "\n\n".join(t.line() for t in turns)
        path = f"episodes/{conv.sample_id}/session-{n:02d}.md"
        docs.append(Document(path, meta, body, frozenset(t.dia_id for t in turns)))
    return docs


def documents(conv: Conversation, level: str) -> list[Document]:
    return turn_documents(conv) if level == "turn" else session_documents(conv)


def config_text(vectors: bool, model: str | None) -> str:
    """No git (the bench measures recall, not commits); vectors local when asked."""
    lines = ['[versioning]\nstrategy = "none"\n']
    if vectors:
        lines.append(
            '[search.vector]\nenabled = true\n[search.vector.embedder]\nprovider = "local"\n'
        )
        if model:
            lines.append(f"model = {json.dumps(model)}\n")
    return "\n".join(lines)


def write_root(root: Path, docs: Sequence[Document], vectors: bool, model: str | None) -> None:
    """Lay the files down directly: far faster than a write (and a commit) per file."""
    if root.exists():
        shutil.rmtree(root)
    (root / ".kiwi").mkdir(parents=True)
    (root / ".kiwi" / "config.toml").write_text(config_text(vectors, model), encoding="utf-8")
    for doc in docs:
        target = root / doc.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(doc.markdown(), encoding="utf-8")


def index_root(root: Path, vectors: bool) -> None:
    from kiwifs.knowledge import Knowledge

    with Knowledge.open(root) as kb:
        kb.reindex()
        if vectors:
            kb.reindex_vectors()


def probe_vectors(work: Path, model: str | None) -> str | None:
    """``None`` when a root with local vectors can answer a semantic query, else why not."""
    from kiwifs.knowledge import Knowledge

    root = work / "vector-probe"
    doc = Document(
        "episodes/probe.md", {"memory_kind": "episodic"}, "A kiwi is a bird.", frozenset()
    )
    try:
        write_root(root, [doc], True, model)
        with Knowledge.open(root) as kb:
            kb.prepare_vectors()
            kb.reindex()
            kb.semantic_search("flightless bird", limit=1)
    except Exception as exc:  # noqa: BLE001 - any failure means: no vectors for this run
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return None


# ---------------------------------------------------------------------------------------------
# asking


class Backend(Protocol):
    def ask(self, mode: str, question: str) -> list[str]:
        """The result paths in rank order (brief: the pages inside the pack)."""
        ...


class LibraryBackend:
    """The core library, as an embedding application calls it."""

    def __init__(self, root: Path, budget: int) -> None:
        from kiwifs.knowledge import Knowledge

        self.kb = Knowledge.open(root)
        self.budget = budget

    def ask(self, mode: str, question: str) -> list[str]:
        if mode == "keyword":
            return [h.path for h in self.kb.search(question, limit=LIMIT).results]
        if mode == "semantic":
            return [h.path for h in self.kb.semantic_search(question, limit=LIMIT).results]
        if mode == "hybrid":
            return [h.path for h in self.kb.hybrid_search(question, limit=LIMIT).results]
        if mode == "brief":
            return [p.path for p in self.kb.brief(question, budget_tokens=self.budget).pages]
        raise ValueError(f"unknown mode {mode}")

    def close(self) -> None:
        self.kb.close()


class RestBackend:
    """A real ``kiwifs serve`` over HTTP, as an agent's client calls it."""

    ROUTES = {
        "keyword": ("/api/kiwi/search", "limit"),
        "semantic": ("/api/kiwi/search/semantic", "topK"),
        "hybrid": ("/api/kiwi/search/hybrid", "limit"),
    }

    def __init__(self, base: str, budget: int) -> None:
        import httpx

        self.client = httpx.Client(base_url=base, timeout=60)
        self.budget = budget

    def ask(self, mode: str, question: str) -> list[str]:
        if mode == "brief":
            params: dict[str, str | int] = {"q": question, "budget_tokens": self.budget}
            return [p["path"] for p in self._get("/api/kiwi/brief", params)["pages"]]
        route, size = self.ROUTES[mode]
        return [r["path"] for r in self._get(route, {"q": question, size: LIMIT})["results"]]

    def _get(self, route: str, params: dict[str, str | int]) -> dict[str, Any]:
        answer = self.client.get(route, params=params)
        if answer.status_code != 200:
            raise RuntimeError(f"HTTP {answer.status_code}: {answer.text[:200]}")
        body: dict[str, Any] = answer.json()
        return body

    def close(self) -> None:
        self.client.close()


_ANNOUNCED = re.compile(r" on (http://(?:\[[^\]]+\]|[^\s/:]+):\d+)")


@contextmanager
def serving(root: Path, vectors: bool) -> Iterator[str]:
    """``kiwifs serve --port 0`` on the root until the block ends: its base URL, once
    ``/readyz`` says the index is current and (with vectors) nothing waits to be embedded."""
    import httpx

    exe = shutil.which("kiwifs") or str(Path(sys.executable).with_name("kiwifs"))
    log = root.parent / f"{root.name}.serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [exe, "serve", "--root", str(root), "--port", "0"], stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + SERVER_START_S
        base = None
        while base is None:
            found = _ANNOUNCED.search(log.read_text(errors="replace"))
            base = found.group(1) if found else None
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kiwifs serve did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        _wait(lambda: httpx.get(base + "/readyz", timeout=5).status_code == 200, deadline)
        if vectors:
            _wait(
                lambda: _embedded(httpx.get(base + "/health", timeout=5).json()),
                deadline + EMBED_WAIT_S,
            )
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _embedded(health: dict[str, Any]) -> bool:
    vectors = health.get("vectors", {})
    return not vectors.get("enabled") or int(vectors.get("pending", 1)) == 0


def _wait(ready: Callable[[], bool], deadline: float) -> None:
    import httpx

    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("kiwifs serve never became ready")


def tokens(text: str) -> list[str]:
    """The baseline's tokeniser: lower-case runs of letters and digits, nothing else."""
    return _WORD.findall(text.lower())


class Bm25Baseline:
    """``rank_bm25.BM25Okapi`` with its default parameters over the documents' bodies."""

    def __init__(self, docs: Sequence[Document]) -> None:
        from rank_bm25 import BM25Okapi  # type: ignore[import-untyped]

        self.paths = [d.path for d in docs]
        self.model = BM25Okapi([tokens(d.body) for d in docs])

    def ask(self, question: str) -> list[str]:
        scores = self.model.get_scores(tokens(question))
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        return [self.paths[i] for i in order[:LIMIT] if scores[i] > 0]


# ---------------------------------------------------------------------------------------------
# scoring


def covered(ranked: Sequence[frozenset[str]], k: int) -> frozenset[str]:
    out: frozenset[str] = frozenset()
    for turns in ranked[:k]:
        out |= turns
    return out


def recall_at(ranked: Sequence[frozenset[str]], evidence: Sequence[str], k: int) -> float:
    """Share of the evidence turns held by the first ``k`` results."""
    return len(covered(ranked, k) & set(evidence)) / len(evidence)


def reciprocal_rank(ranked: Sequence[frozenset[str]], evidence: Sequence[str]) -> float:
    wanted = set(evidence)
    for rank, turns in enumerate(ranked, 1):
        if turns & wanted:
            return 1.0 / rank
    return 0.0


@dataclass
class Tally:
    """One mode at one level: per-question scores, failures and call times."""

    sent: int = 0
    failed: int = 0
    empty: int = 0
    scores: dict[str, list[float]] = field(default_factory=dict)
    by_category: dict[int, list[float]] = field(default_factory=dict)
    ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, name: str, value: float) -> None:
        self.scores.setdefault(name, []).append(value)

    def record(
        self,
        question: Question,
        ranked: Sequence[frozenset[str]] | None,
        ms: float,
        pack: bool,
    ) -> None:
        """Score one answer (``None``: the call failed, which scores 0 everywhere)."""
        self.sent += 1
        self.ms.append(ms)
        if ranked is not None and not ranked:
            self.empty += 1
        if not question.evidence:
            return
        got = ranked or []
        r5 = recall_at(got, question.evidence, 5)
        self.add("R@5", r5)
        self.add("R@10", recall_at(got, question.evidence, 10))
        self.add("MRR", reciprocal_rank(got, question.evidence))
        if pack:
            self.add("pack", recall_at(got, question.evidence, len(got)) if got else 0.0)
        self.by_category.setdefault(question.category, []).append(r5)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: round(statistics.fmean(v), 4) for k, v in self.scores.items()}
        out.update(
            questions=self.sent,
            scored=len(self.scores.get("R@5", [])),
            failed=self.failed,
            empty=self.empty,
            p50_ms=round(statistics.median(self.ms), 2) if self.ms else None,
            r5_by_category={
                str(c): round(statistics.fmean(v), 4) for c, v in sorted(self.by_category.items())
            },
            errors=self.errors[:5],
        )
        return out


def ask_all(
    conv: Conversation,
    docs: Sequence[Document],
    modes: Sequence[str],
    backend: Backend | None,
    tallies: dict[str, Tally],
) -> None:
    turns_of = {d.path: d.turns for d in docs}
    baseline = Bm25Baseline(docs) if "bm25" in modes else None
    for q in conv.questions:
        for mode in modes:
            tally = tallies.setdefault(mode, Tally())
            start = time.perf_counter()
            try:
                if mode == "bm25":
                    assert baseline is not None
                    paths = baseline.ask(q.text)
                else:
                    assert backend is not None
                    paths = backend.ask(mode, q.text)
            except Exception as exc:  # noqa: BLE001 - a failure is a figure here, not a crash
                tally.failed += 1
                tally.errors.append(f"{q.text!r}: {type(exc).__name__}: {exc}"[:300])
                tally.record(q, None, (time.perf_counter() - start) * 1000, mode == "brief")
                continue
            ms = (time.perf_counter() - start) * 1000
            tally.record(q, [turns_of.get(p, frozenset()) for p in paths], ms, mode == "brief")


@contextmanager
def backend_for(root: Path, via: str, budget: int, vectors: bool) -> Iterator[Backend]:
    if via == "library":
        lib = LibraryBackend(root, budget)
        try:
            yield lib
        finally:
            lib.close()
        return
    with serving(root, vectors) as base:
        rest = RestBackend(base, budget)
        try:
            yield rest
        finally:
            rest.close()


def run_level(
    convs: Sequence[Conversation],
    level: str,
    modes: Sequence[str],
    args: argparse.Namespace,
    work: Path,
    vectors: bool,
) -> dict[str, Tally]:
    tallies: dict[str, Tally] = {}
    kiwi_modes = [m for m in modes if m != "bm25"]
    for conv in convs:
        docs = documents(conv, level)
        root = work / f"{level}-{conv.sample_id}"
        started = time.perf_counter()
        write_root(root, docs, vectors, args.model)
        index_root(root, vectors)
        built = time.perf_counter() - started
        print(
            f"  {level} {conv.sample_id}: {len(docs)} pages, {len(conv.questions)} questions, "
            f"built in {built:.1f} s",
            file=sys.stderr,
        )
        if kiwi_modes:
            with backend_for(root, args.via, args.budget, vectors) as backend:
                ask_all(conv, docs, modes, backend, tallies)
        else:
            ask_all(conv, docs, modes, None, tallies)
        shutil.rmtree(root, ignore_errors=True)
    return tallies


# ---------------------------------------------------------------------------------------------
# reporting


def provenance(data: Path) -> dict[str, str]:
    """What a figure depends on: the code (version, commit) and the data (sha256)."""
    checkout = Path(kiwifs.__file__).resolve().parents[2]
    commit = "unknown"
    try:
        commit = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        commit += "+dirty" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        pass
    return {
        "kiwifs": kiwifs.__version__,
        "commit": commit,
        "data": str(data),
        "data_sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def table(level: str, rows: dict[str, dict[str, Any]]) -> str:
    head = "| mode | R@5 | R@10 | MRR | pack recall | failed | empty | p50 ms |"
    lines = [f"{level} level", head, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for mode, s in rows.items():
        cells = [s.get("R@5"), s.get("R@10"), s.get("MRR"), s.get("pack")]
        shown = " | ".join(_cell(c) for c in cells)
        sent = f"{s['failed']}/{s['questions']}"
        ms = f"{s['p50_ms']:.1f}" if s["p50_ms"] is not None else "—"
        lines.append(f"| {mode} | {shown} | {sent} | {s['empty']} | {ms} |")
    return "\n".join(lines)


def by_category(rows: dict[str, dict[str, Any]]) -> str:
    """R@5 per LoCoMo category, one line a mode: where a change helps is not always visible in
    the mean (temporal questions lean on dates, multi-hop ones on several turns)."""
    lines = ["R@5 by question category:"]
    for mode, s in rows.items():
        cells = ", ".join(f"{c}: {v:.3f}" for c, v in s["r5_by_category"].items())
        lines.append(f"  {mode:<8} {cells}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--data", type=Path, required=True, help="a LoCoMo JSON file")
    p.add_argument("--level", choices=(*LEVELS, "both"), default="both")
    p.add_argument(
        "--modes", default=",".join(MODES), help="comma-separated, of " + ",".join(MODES)
    )
    p.add_argument("--via", choices=("library", "rest"), default="library")
    p.add_argument("--conversations", type=int, default=None, help="only the first N")
    p.add_argument("--budget", type=int, default=2000, help="the brief's budget in tokens")
    p.add_argument("--model", default=None, help="a local embedding model folder (optional)")
    p.add_argument("--no-vectors", action="store_true", help="skip semantic and hybrid")
    p.add_argument("--work", type=Path, default=None, help="build the roots here (kept empty)")
    p.add_argument("--json", type=Path, default=None, help="write the figures here as JSON")
    args = p.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(args.modes) - set(MODES))
    if unknown:
        p.error(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")
    return args


def choose_vectors(args: argparse.Namespace, work: Path) -> tuple[bool, str | None]:
    """Whether the roots get vectors, and the note when semantic and hybrid are skipped."""
    if not VECTOR_MODES & set(args.modes):
        return False, None
    if args.no_vectors:
        return False, "semantic and hybrid skipped: --no-vectors"
    why = probe_vectors(work, args.model)
    if why is not None:
        return False, f"semantic and hybrid skipped: vectors unavailable ({why})"
    return True, None


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    convs = load_data(args.data, args.conversations)
    vectors, note = choose_vectors(args, work)
    modes = [m for m in args.modes if vectors or m not in VECTOR_MODES]
    report: dict[str, Any] = {
        **provenance(args.data),
        "via": args.via,
        "budget_tokens": args.budget,
        "vectors": vectors,
        "model": args.model,
        "note": note,
        "conversations": [c.sample_id for c in convs],
        "questions": sum(len(c.questions) for c in convs),
        "unscored": sum(1 for c in convs for q in c.questions if not q.evidence),
        "dropped_evidence": sum(c.dropped_evidence for c in convs),
        "turns": sum(len(c.turns) for c in convs),
        "levels": {},
    }
    levels = LEVELS if args.level == "both" else (args.level,)
    for level in levels:
        started = time.perf_counter()
        tallies = run_level(convs, level, modes, args, work, vectors)
        report["levels"][level] = {m: tallies[m].summary() for m in modes if m in tallies}
        print(f"  {level} level done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return report


def render(report: dict[str, Any]) -> str:
    on_off = "on" if report["vectors"] else "off"
    lines = [
        f"kiwifs {report['kiwifs']} ({report['commit']}), via {report['via']}, {report['date']}",
        f"data {report['data']} sha256 {report['data_sha256']}",
        f"{len(report['conversations'])} conversations, {report['turns']} turns, "
        f"{report['questions']} questions (categories 1-4; {report['unscored']} without evidence "
        f"not scored; {report['dropped_evidence']} evidence ids dropped), "
        f"brief budget {report['budget_tokens']} tokens, vectors {on_off}",
    ]
    if report["note"]:
        lines.append(report["note"])
    for level, rows in report["levels"].items():
        lines += ["", table(level, rows)]
        lines.append(by_category(rows))
        for mode, s in rows.items():
            lines += [f"  {mode} failed: {e}" for e in s["errors"][:3]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
        report = run(args, args.work)
    else:
        with tempfile.TemporaryDirectory(prefix="kiwifs-recall-") as tmp:
            report = run(args, Path(tmp))
    print(render(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
