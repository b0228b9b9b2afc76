"""Benchmark of semantic and hybrid search with the local embedder on a 10,000-page corpus.

    python bench/vectors.py [--pages 10000] [--seed 1] [--queries 200] [--scoped 50]

Measures, in one run:

(a) embedding throughput: ``Knowledge.reindex_vectors`` over every page (pages/s, chunks/s;
    the tokenizer may use every core);
(b) the index size on disk without and with vectors;
(c) semantic, hybrid and brief latency p50 / p99 inside a running server (the watcher keeps
    the index current, so answers skip the reconcile; HTTP excluded), hybrid and brief for
    queries of topic words and of common words, each with the term columns on and off
    (``Tuning.term_columns``, interleaved);
(d) exact recall of scoped queries: for ``--scoped`` queries each restricted to a scope,
    kiwifs's top 10 against a brute-force scan of that scope computed here from the files
    with model2vec directly; and, for contrast, the recall of filtering after a cut of the 200
    nearest pages overall (what KiwiFS does).

No model can be downloaded here, so the model is a model2vec model of realistic size built
locally with random weights: a 30,000-word vocabulary and 256 dimensions, like
potion-base-8M. Speed and size do not depend on the weights; recall is measured against the
same model, so it does not either. The corpus is synthetic (topic words plus common words,
150–700 words a page, 200 scopes from a handful of pages to about 250, 2 % superseded) and is
cached with the model under ``bench/.corpora/``.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from kiwifs.index.vectors import semantic as semantic_module
from kiwifs.index.vectors.chunking import chunk_text
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving

HERE = Path(__file__).resolve().parent
VOCAB = 30_000
DIM = 256
TOPICS = 200


def words(rng: random.Random) -> list[str]:
    syllables = "ka to mi ren sol vek lu dor ani pes qui zan bo fe gar hu jin los nu tre".split()
    out: set[str] = set()
    while len(out) < VOCAB - 2:
        out.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(out)


def build_model(folder: Path, vocab: list[str]) -> Path:
    if (folder / "model.safetensors").is_file():
        return folder
    from model2vec import StaticModel
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    tokens = ["[UNK]", "[PAD]", *vocab]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(tokens)}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    vectors = np.random.default_rng(0).standard_normal((len(tokens), DIM)).astype(np.float32)
    StaticModel(vectors=vectors, tokenizer=tokenizer, normalize=True).save_pretrained(str(folder))
    return folder


def build_corpus(root: Path, pages: int, vocab: list[str], rng: random.Random) -> list[str]:
    """Write the pages (unless cached); returns the scope names."""
    scopes = [f"scope-{i:03}" for i in range(TOPICS)]
    if (root / ".done").is_file():
        return scopes
    shutil.rmtree(root, ignore_errors=True)
    common = vocab[:300]
    topic_words = [vocab[300 + t * 140 : 300 + (t + 1) * 140] for t in range(TOPICS)]
    for n in range(pages):
        topic = rng.randrange(TOPICS)
        length = rng.randint(150, 700)
        body = " ".join(
            rng.choice(topic_words[topic]) if rng.random() < 0.4 else rng.choice(common)
            for _ in range(length)
        )
        scope = scopes[min(int(rng.expovariate(1 / 40)), TOPICS - 1)]
        status = "memory_status: superseded\n" if rng.random() < 0.02 else ""
        path = root / f"pages/{n // 500:02}/p{n:05}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\ntitle: page {n}\nscope: {scope}\n{status}---\n{body}\n")
    (root / ".done").write_text("")
    return scopes


def configure(root: Path, model: Path) -> None:
    (root / ".kiwi").mkdir(exist_ok=True)
    (root / ".kiwi/config.toml").unlink(missing_ok=True)  # a new file: never write a hard link
    (root / ".kiwi/config.toml").write_text(
        "[search.vector]\nenabled = true\n"
        f'[search.vector.embedder]\nprovider = "local"\nmodel = "{model}"\n'
    )


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def brute_force(root: Path, model: Path, queries: list[tuple[str, str]]) -> list[list[str]]:
    """Top 10 per (query, scope) by scanning the files of the scope (no index involved)."""
    from model2vec import StaticModel

    m2v = StaticModel.from_pretrained(model, normalize=True)
    by_scope: dict[str, list[tuple[str, np.ndarray]]] = {}
    for file in sorted(root.glob("pages/*/*.md")):
        text = file.read_text()
        head = text.split("---\n")[1]
        if "memory_status: superseded" in head:
            continue
        scope = head.split("scope: ", 1)[1].split("\n", 1)[0]
        if scope not in {s for _, s in queries}:
            continue
        vectors = m2v.encode([c.text for c in chunk_text(text, 400, 50)])
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        by_scope.setdefault(scope, []).append((file.relative_to(root).as_posix(), vectors))
    out = []
    for query, scope in queries:
        q = m2v.encode([query])[0]
        q /= max(float(np.linalg.norm(q)), 1e-12)
        scored = sorted(((-float((v @ q).max()), p) for p, v in by_scope[scope]))
        out.append([p for _, p in scored[:10]])
    return out


def existing(
    root: Path, queries: int, seed: int, reuse: bool = False, remembers: int = 48, only: str = ""
) -> None:
    """Hybrid and brief latency on another corpus (``bench/index.py``'s 100k episodes: make a
    hard-link copy first, its config is replaced, never written through), with a random model
    over the corpus's own words, vectors built, queries of one to three of its common words,
    the A/B modes interleaved: term columns on and off, candidates cached or not."""
    import re

    from index import COMMON  # bench/index.py

    # the model's vocabulary is the corpus's own words (a vocabulary of other words would map
    # every page to the unknown token: one vector, every score tied)
    counts: dict[str, int] = {}
    for path in random.Random(seed).sample(sorted(root.rglob("*.md")), 3000):
        for word in re.findall(r"[a-z0-9]+", path.read_text().lower()):
            counts[word] = counts.get(word, 0) + 1
    vocab = sorted(sorted(counts, key=lambda w: -counts[w])[: VOCAB - 2])
    model = build_model(HERE / ".corpora" / f"m2v-{root.name}", vocab)
    built = root / ".kiwi" / "bench-vectors.done"  # --reuse: vectors of an earlier run
    if not (reuse and built.is_file()):
        configure(root, model)
        with Knowledge.open(root) as kb:
            kb.reindex()
            kb.prepare_vectors()
            started = time.perf_counter()
            done = kb.reindex_vectors()
            print(f"vectors: {done.embedded} pages in {time.perf_counter() - started:.0f} s")
        built.write_text("")
    rng = random.Random(seed)
    texts = [" ".join(rng.sample(COMMON, rng.randint(1, 3))) for _ in range(queries)]
    with Knowledge.open(root) as kb:
        Serving(kb).start_watching()
        while not kb.ready():
            time.sleep(0.05)
        for text in texts:
            kb.brief(text, path_prefix="episodes/")
        if only == "remember":
            after_remember(kb, texts, remembers)
            Serving(kb).stop_watching()
            return
        calls = {
            "hybrid": lambda t: kb.hybrid_search(t, limit=10, path_prefix="episodes/"),
            "brief": lambda t: kb.brief(t, path_prefix="episodes/"),
        }
        ties = semantic_module.TIES_BY_RANK
        index = kb.indexing._open()
        # mode: (Tuning's term_columns, cached_candidates, read_many; semantic.TIES_BY_RANK)
        modes = {
            "final": (True, True, True, ties),
            "candidates not cached": (True, False, True, ties),
            "ties by reading paths": (True, True, True, 10**9),
            "brief reads one by one": (True, True, False, ties),
            "term columns off": (False, True, True, ties),
        }
        for name, call in calls.items():
            spent: dict[str, list[float]] = {mode: [] for mode in modes}
            for turn, text in enumerate(texts):
                order = list(modes)[turn % len(modes) :] + list(modes)[: turn % len(modes)]
                for mode in order:
                    columns, cached, at_once, by_rank = modes[mode]
                    index.tuning = kb.tuning.but(term_columns=columns, cached_candidates=cached)
                    kb.storage.reads_at_once = at_once
                    semantic_module.TIES_BY_RANK = by_rank
                    started = time.perf_counter()
                    call(text)
                    spent[mode].append((time.perf_counter() - started) * 1000)
            index.tuning, kb.storage.reads_at_once = kb.tuning, kb.tuning.read_many
            semantic_module.TIES_BY_RANK = ties
            print(
                f"{name}, common words: "
                + "; ".join(
                    f"{mode}: p50 {pct(spent[mode], 50):.1f} ms, p99 {pct(spent[mode], 99):.1f} ms"
                    for mode in modes
                )
            )
        after_writes(kb, root, texts)
        after_remember(kb, texts, remembers)
        Serving(kb).stop_watching()


def after_writes(kb: Knowledge, root: Path, texts: list[str]) -> None:
    """A brief right after an agent's write, as in an agent's loop: a new page written behind
    kiwifs's back, indexed by the watcher, then the brief (the page is not embedded yet: no
    worker runs here). The candidate cache catches up from the log."""
    folder = root / "bench-writes"
    folder.mkdir(exist_ok=True)
    index = kb.indexing._open()

    def log_end() -> int:
        with index.reader() as conn:
            return int(conn.execute("SELECT max(seq) FROM fts_log").fetchone()[0] or 0)

    spent: list[float] = []
    for turn, text in enumerate(texts):
        start = log_end()
        (folder / f"w{turn}.md").write_text(f"---\nscope: bench\n---\n{text}\n")
        while log_end() == start:
            time.sleep(0.005)
        started = time.perf_counter()
        kb.brief(text, path_prefix="episodes/")
        spent.append((time.perf_counter() - started) * 1000)
    print(
        f"brief after a write: candidates caught up p50 {pct(spent, 50):.1f} ms,"
        f" p99 {pct(spent, 99):.1f} ms"
    )
    shutil.rmtree(folder)


def after_remember(kb: Knowledge, texts: list[str], turns: int) -> None:
    """The first hybrid search or brief after an agent's ``remember``, as in an agent's loop:
    the episode is written, the server's worker embeds it, then the query is timed: the
    in-memory matrix caught up from ``vec_log``, the candidates re-matched only where a group
    died; hybrid and brief alternate every turn."""
    index = kb.indexing._open()

    def log_end() -> int:
        with index.reader() as conn:
            return int(conn.execute("SELECT max(seq) FROM vec_log").fetchone()[0] or 0)

    calls = {
        "hybrid": lambda t: kb.hybrid_search(t, limit=10, path_prefix="episodes/"),
        "brief": lambda t: kb.brief(t, path_prefix="episodes/"),
    }
    spent: dict[str, list[float]] = {c: [] for c in calls}
    for turn in range(turns):
        text = texts[turn % len(texts)]
        name = list(calls)[turn % 2]
        start = log_end()
        kb.remember(f"bench remember {turn}: {text}", scope="bench")
        deadline = time.monotonic() + 60
        while log_end() == start and time.monotonic() < deadline:
            time.sleep(0.005)  # the worker embeds the new episode and logs it
        started = time.perf_counter()
        calls[name](text)
        spent[name].append((time.perf_counter() - started) * 1000)
    for name in calls:
        print(
            f"first {name} after a remember ({len(spent[name])}):"
            f" p50 {statistics.median(spent[name]):.1f} ms, p99 {pct(spent[name], 99):.1f} ms"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--scoped", type=int, default=50)
    ap.add_argument("--existing", type=Path, help="only hybrid and brief, on this root")
    ap.add_argument("--reuse", action="store_true", help="--existing: keep its built vectors")
    ap.add_argument("--remembers", type=int, default=48, help="--existing: remember turns")
    ap.add_argument("--only", choices=["remember"], default="", help="--existing: one measure")
    args = ap.parse_args()
    if args.existing:
        existing(args.existing, args.queries, args.seed, args.reuse, args.remembers, args.only)
        return
    rng = random.Random(args.seed)
    vocab = words(rng)
    base = HERE / ".corpora"
    model = build_model(base / f"m2v-{VOCAB}x{DIM}", vocab)
    root = base / f"vec{args.pages}-seed{args.seed}"
    scopes = build_corpus(root, args.pages, vocab, rng)
    configure(root, model)
    shutil.rmtree(root / ".kiwi/state", ignore_errors=True)

    with Knowledge.open(root) as kb:
        start = time.perf_counter()
        files = kb.reindex()
        text_seconds = time.perf_counter() - start
        kb.indexing._open().checkpoint()
        text_size = kb.indexing._open().size_bytes()
        kb.prepare_vectors()
        start = time.perf_counter()
        done = kb.reindex_vectors()
        embed_seconds = time.perf_counter() - start
        kb.indexing._open().checkpoint()
        size = kb.indexing._open().size_bytes()
        status = kb.vector_status()
    print(f"corpus: {files} files, {status.embedded} pages embedded, {status.chunks} chunks")
    print(f"text index build: {text_seconds:.1f} s, {text_size / 1e6:.1f} MB")
    print(
        f"embedding: {embed_seconds:.1f} s = {done.embedded / embed_seconds:.0f} pages/s,"
        f" {status.chunks / embed_seconds:.0f} chunks/s (local model2vec {VOCAB}x{DIM})"
    )
    print(f"index with vectors: {size / 1e6:.1f} MB (+{(size - text_size) / 1e6:.1f} MB)")

    query_rng = random.Random(args.seed + 1)

    def query() -> str:
        return " ".join(query_rng.choice(vocab[300:]) for _ in range(query_rng.randint(2, 5)))

    def common_query() -> str:  # words most pages hold: FTS5 would score most of the corpus
        return " ".join(query_rng.choice(vocab[:300]) for _ in range(query_rng.randint(1, 3)))

    with Knowledge.open(root) as kb:
        Serving(kb).start_watching()
        while not kb.ready():
            time.sleep(0.05)
        kb.semantic_search(query())  # loads the model and the matrix once
        times = []
        for _ in range(args.queries):
            text = query()
            started = time.perf_counter()
            kb.semantic_search(text, limit=10)
            times.append((time.perf_counter() - started) * 1000)
        print(f"semantic: p50 {pct(times, 50):.1f} ms, p99 {pct(times, 99):.1f} ms")
        calls = {"hybrid": lambda t: kb.hybrid_search(t, limit=10), "brief": kb.brief}
        modes = {"new": True, "columns off": False}  # Tuning.term_columns
        index = kb.indexing._open()
        for kind, make in (("topic words", query), ("common words", common_query)):
            texts = [make() for _ in range(args.queries)]
            for text in texts:  # each word's term column is made once, on first use
                kb.brief(text)
            for name, call in calls.items():
                spent: dict[str, list[float]] = {mode: [] for mode in modes}
                for turn, text in enumerate(texts):  # interleaved, the order rotating
                    order = list(modes)[turn % 2 :] + list(modes)[: turn % 2]
                    for mode in order:
                        index.tuning = kb.tuning.but(term_columns=modes[mode])
                        started = time.perf_counter()
                        call(text)
                        spent[mode].append((time.perf_counter() - started) * 1000)
                index.tuning = kb.tuning
                figures = ", ".join(
                    f"{mode}: p50 {pct(ms, 50):.1f} ms p99 {pct(ms, 99):.1f} ms"
                    for mode, ms in spent.items()
                    if ms
                )
                print(f"{name}, {kind}: {figures}")
        sizes: dict[str, int] = {}
        for path in root.glob("pages/*/*.md"):
            head = path.read_text().split("---\n")[1]
            if "superseded" not in head:
                scope = head.split("scope: ", 1)[1].split("\n", 1)[0]
                sizes[scope] = sizes.get(scope, 0) + 1
        # scopes of every size from 10 pages up, smallest first
        chosen = sorted((s for s in scopes if sizes.get(s, 0) >= 10), key=lambda s: sizes[s])
        pairs = [(query(), chosen[i * len(chosen) // args.scoped]) for i in range(args.scoped)]
        ours = [
            [h.path for h in kb.semantic_search(q, limit=10, scope=s).results] for q, s in pairs
        ]
        cut = []
        for q, s in pairs:
            nearest = kb.semantic_search(q, limit=200).results
            frontmatter = {h.path: kb.frontmatter(h.path).get("scope") for h in nearest}
            cut.append([h.path for h in nearest if frontmatter[h.path] == s][:10])
        Serving(kb).stop_watching()
    truth = brute_force(root, model, pairs)
    exact = sum(o == t for o, t in zip(ours, truth, strict=True))
    recall = statistics.mean(
        len(set(o) & set(t)) / len(t) for o, t in zip(ours, truth, strict=True)
    )
    cut_recall = statistics.mean(
        len(set(c) & set(t)) / len(t) for c, t in zip(cut, truth, strict=True)
    )
    smallest = min(sizes[s] for _, s in pairs)
    print(
        f"scoped queries ({args.scoped}, scopes of {smallest}-{max(sizes[s] for _, s in pairs)}"
        f" pages): recall@10 {recall:.3f}, identical to brute force {exact}/{args.scoped};"
        f" filtering after a 200-nearest cut: recall@10 {cut_recall:.3f}"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
