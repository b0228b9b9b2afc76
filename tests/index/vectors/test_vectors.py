"""Vectors beside the index: chunking, the recall filter, the embedding queue, exact kNN.

Everything runs on real files, a real SQLite index and a real model2vec model built in the test
(:mod:`vectorkit`); the failing embedder is a real HTTP server that refuses some texts.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kiwifs.config import ChunkConfig, EmbedderConfig
from kiwifs.errors import Unavailable, UsageError
from kiwifs.index.core import Index
from kiwifs.index.filters import parse_modified_after
from kiwifs.index.rows import status_columns
from kiwifs.index.upkeep import IndexKeeper
from kiwifs.index.vectors.chunking import chunk_text
from kiwifs.index.vectors.embedders import make_embedder
from kiwifs.index.vectors.hybrid import KEYWORD_WEIGHT, RRF_K, SEMANTIC_WEIGHT
from kiwifs.index.vectors.store import VectorStore
from kiwifs.index.vectorschema import QUEUE_TRIGGERS
from kiwifs.knowledge import Knowledge
from kiwifs.memory.status import is_superseded
from kiwifs.server.lifecycle import Serving
from kiwifs.tuning import Tuning
from partskit import index_keeper
from vectorkit import EmbeddingServer, local_config

MakeRoot = Callable[..., Path]


@pytest.fixture
def keepers() -> dict[int, IndexKeeper]:
    """The index keeper ``open_kb`` built for each root it opened (by the id of its library)."""
    return {}


@pytest.fixture
def open_kb(
    make_root: MakeRoot, model: Path, keepers: dict[int, IndexKeeper]
) -> Iterator[Callable[..., Knowledge]]:
    opened: list[Knowledge] = []

    def make(files: dict[str, str], size: int = 400, overlap: int = 50) -> Knowledge:
        root = make_root({**files, ".kiwi/config.toml": local_config(model, size, overlap)})
        keeper = index_keeper(root)
        kb = Knowledge.open(root, index=keeper)
        keepers[id(kb)] = keeper
        opened.append(kb)
        return kb

    yield make
    for kb in opened:
        kb.close()


def paths(found: Any) -> list[str]:
    return [h.path for h in found.results]


def page(body: str, **frontmatter: Any) -> str:
    if not frontmatter:
        return body + "\n"
    return "---\n" + yaml.safe_dump(frontmatter, sort_keys=True) + "---\n" + body + "\n"


# -- chunking ------------------------------------------------------------------------------------


def test_chunks_are_word_windows_of_the_body_with_offsets() -> None:
    text = "---\ntitle: not embedded\n---\n" + " ".join(f"w{i}" for i in range(10)) + "\n"
    chunks = chunk_text(text, size=4, overlap=1)
    assert [c.text.split() for c in chunks] == [
        ["w0", "w1", "w2", "w3"],
        ["w3", "w4", "w5", "w6"],
        ["w6", "w7", "w8", "w9"],
    ]
    assert all(text[c.start : c.end] == c.text for c in chunks)
    assert [c.seq for c in chunks] == [0, 1, 2]
    assert chunk_text("---\na: 1\n---\n  \n", 4, 1) == []
    assert [c.text for c in chunk_text("one two", 400, 50)] == ["one two"]


def naive_chunks(text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    """The chunking rule word by word: windows of ``size`` words every ``size - overlap``."""
    import re

    from kiwifs.index.vectors.chunking import body_start

    spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", text[body_start(text) :])]
    offset = body_start(text)
    out = []
    first = 0
    while spans:
        last = min(first + size, len(spans)) - 1
        out.append((spans[first][0] + offset, spans[last][1] + offset))
        if last == len(spans) - 1:
            break
        first += size - overlap
    return out


@settings(max_examples=300)
@given(
    words=st.lists(st.text(st.characters(blacklist_categories=["Cs"]), min_size=0, max_size=4)),
    size=st.integers(1, 6),
    overlap=st.integers(0, 5),
)
def test_chunking_matches_the_word_by_word_rule(words: list[str], size: int, overlap: int) -> None:
    overlap = min(overlap, size - 1)
    text = " ".join(words)
    got = [(c.start, c.end) for c in chunk_text(text, size, overlap)]
    assert got == naive_chunks(text, size, overlap)


def test_chunks_keep_offsets_past_non_ascii_frontmatter() -> None:
    text = "---\ntitle: été ☃\n---\nkiwi bird\n"
    (chunk,) = chunk_text(text, 400, 50)
    assert text[chunk.start : chunk.end] == "kiwi bird"


# -- the recall filter ---------------------------------------------------------------------------

FRONTMATTERS: list[dict[str, Any]] = [
    {},
    {"memory_status": "superseded"},
    {"memory_status": "Superseded"},
    {"memory_status": " SUPERSEDED "},
    {"memory_status": "superseded-ish"},
    {"memory_status": "active"},
    {"memory_status": None},
    {"memory_status": True},
    {"memory_status": ["superseded"]},
    {"memory_status": {"state": "superseded"}},
    {"status": "superseded"},
    {"memory_status": 3},
]


def test_the_superseded_rule_is_the_same_in_the_index_and_python() -> None:
    in_rows = [status_columns(json.dumps(fm))[0] for fm in FRONTMATTERS]
    assert in_rows == [int(is_superseded(fm)) for fm in FRONTMATTERS]
    assert in_rows == [0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]


@pytest.mark.parametrize(
    ("frontmatter", "scope"),
    [
        ({}, None),
        ({"scope": "team-a"}, "team-a"),
        ({"scope": ""}, ""),
        ({"scope": 5}, None),
        ({"scope": ["team-a"]}, None),
        ({"nested": {"scope": "team-a"}}, None),
        ({"title": "scope", "memory_status": "superseded"}, None),
    ],
)
def test_the_scope_column_holds_a_string_scope_only(
    frontmatter: dict[str, Any], scope: str | None
) -> None:
    assert status_columns(json.dumps(frontmatter))[1] == scope


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-02T03:04:05Z", 1767323045_000_000_000),
        ("2026-01-02T04:04:05+01:00", 1767323045_000_000_000),
        ("2026-01-02T03:04:05.5z", 1767323045_500_000_000),
        ("2026-01-02", 1767312000_000_000_000),
        ("2999-01-01T00:00:00Z", 2**63 - 1),
        ("", None),
    ],
)
def test_modified_after_is_rfc3339(text: str, expected: int | None) -> None:
    assert parse_modified_after(text) == expected


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "12:00"])
def test_bad_modified_after_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="RFC 3339"):
        parse_modified_after(text)


# -- exact filtered nearest pages -----------------------------------------------------------------


def brute_force(kb: Knowledge, model: Path, query: str, k: int, keep: Callable[..., bool]) -> list:
    """The top ``k`` by a scan of every file, independent of the index: (path, score)."""
    from model2vec import StaticModel

    m2v = StaticModel.from_pretrained(model, normalize=True)
    q = m2v.encode([query])[0]
    scored = []
    for file in sorted(kb.root.rglob("*.md")):
        rel = file.relative_to(kb.root).as_posix()
        text = file.read_text()
        fm = yaml.safe_load(text.split("---\n")[1]) if text.startswith("---\n") else {}
        if not keep(rel, fm or {}):
            continue
        chunks = chunk_text(text, 400, 50)
        if not chunks:
            continue
        vectors = m2v.encode([c.text for c in chunks])
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        scored.append((rel, float((vectors @ q).max())))
    scored.sort(key=lambda e: (-e[1], e[0]))
    return scored[:k]


def flock(n: int = 250, scoped: int = 10) -> dict[str, str]:
    """``n`` pages about birds; ``scoped`` of them (scope flock-7) are the least bird-like."""
    words = ["kiwi", "bird", "feather", "nest", "egg", "wing", "flightless"]
    files = {}
    for i in range(n):
        if i < scoped:
            body = f"kiwi note {i} " + "rain storm cloud wind snow weather forecast " * 3
            files[f"flock/scoped-{i:03}.md"] = page(body, scope="flock-7")
        else:
            body = " ".join(words[(i + j) % len(words)] for j in range(6 + i % 5)) + f" {i}"
            files[f"flock/p-{i:03}.md"] = page(body, scope=f"other-{i % 3}")
    return files


def test_a_scope_of_ten_among_250_returns_all_ten(
    open_kb: Callable[..., Knowledge], model: Path
) -> None:
    kb = open_kb(flock())
    unscoped = paths(kb.semantic_search("kiwi bird feather", limit=200))
    # the scoped pages are the least similar: a cut of the best 200 before filtering loses them all
    assert not any("scoped" in p for p in unscoped)
    for limit in (10, 25):
        found = kb.semantic_search("kiwi bird feather", limit=limit, scope="flock-7")
        assert sorted(paths(found)) == [f"flock/scoped-{i:03}.md" for i in range(10)]
    found = kb.semantic_search("kiwi bird feather", limit=10, scope="flock-7")
    expected = brute_force(
        kb, model, "kiwi bird feather", 10, lambda p, fm: fm.get("scope") == "flock-7"
    )
    assert [(h.path, round(h.score, 4)) for h in found.results] == [
        (p, round(s, 4)) for p, s in expected
    ]


def test_filters_match_a_brute_force_scan(open_kb: Callable[..., Knowledge], model: Path) -> None:
    files = flock(60, 6)
    files["other/rain.md"] = page("rain and snow weather", scope="other-1")
    files["other/old.md"] = page("kiwi bird nest egg", memory_status="superseded")
    kb = open_kb(files)
    cases: list[tuple[dict[str, Any], Callable[..., bool]]] = [
        ({}, lambda p, fm: not is_superseded(fm)),
        ({"include_superseded": True}, lambda p, fm: True),
        (
            {"path_prefix": "/other/"},
            lambda p, fm: p.startswith("other/") and not is_superseded(fm),
        ),
        ({"scope": "other-1"}, lambda p, fm: fm.get("scope") == "other-1"),
    ]
    for kwargs, keep in cases:
        found = kb.semantic_search("kiwi bird", limit=7, **kwargs)
        expected = brute_force(kb, model, "kiwi bird", 7, keep)
        assert [(h.path, round(h.score, 4)) for h in found.results] == [
            (p, round(s, 4)) for p, s in expected
        ], kwargs
    everything = brute_force(kb, model, "kiwi bird", 100, lambda p, fm: not is_superseded(fm))
    cut = everything[20][1]
    found = kb.semantic_search("kiwi bird", limit=100, threshold=cut)
    assert paths(found) == [p for p, s in everything if s >= cut]
    assert paths(kb.semantic_search("kiwi bird", limit=5, offset=3)) == [
        p for p, _ in everything[3:8]
    ]


# -- superseded pages never come back -------------------------------------------------------------


def test_a_superseded_page_never_appears_in_semantic_or_hybrid_results(
    open_kb: Callable[..., Knowledge],
) -> None:
    kb = open_kb(
        {
            "old.md": page("The kiwi bird nest is in a burrow.", memory_status="superseded"),
            "new.md": page("The kiwi bird lays one huge egg."),
            "db.md": page("sqlite stores the index on disk."),
        }
    )
    for found in (
        kb.semantic_search("kiwi bird nest", limit=50),
        kb.hybrid_search("kiwi bird nest", limit=50),
        kb.hybrid_search("burrow", limit=50),
    ):
        assert "old.md" not in paths(found)
        assert paths(found)
    assert paths(kb.semantic_search("kiwi bird nest", include_superseded=True))[0] == "old.md"
    assert "old.md" in paths(kb.hybrid_search("burrow", include_superseded=True))
    # forgetting a page by editing its frontmatter takes it out at once
    (kb.root / "new.md").write_text(page("The kiwi bird lays one egg.", memory_status="superseded"))
    assert paths(kb.semantic_search("kiwi bird nest", limit=50)) == ["db.md"]


# -- keeping vectors in step with the files ---------------------------------------------------


def test_writes_deletes_renames_and_out_of_band_edits(
    open_kb: Callable[..., Knowledge], keepers: dict[int, IndexKeeper]
) -> None:
    kb = open_kb({"a.md": page("rain and storm clouds"), "b.md": page("sqlite index table")})
    keeper = keepers[id(kb)]
    assert paths(kb.semantic_search("weather", limit=1)) == ["a.md"]
    kb.write("c.md", "kiwi bird feathers\n")
    assert paths(kb.semantic_search("flightless birds", limit=1)) == ["c.md"]
    with keeper._open().reader() as conn:
        before = conn.execute("SELECT id, etag FROM vec_chunks ORDER BY id").fetchall()
    kb.rename("c.md", "birds/c.md")
    assert paths(kb.semantic_search("flightless birds", limit=1)) == ["birds/c.md"]
    with keeper._open().reader() as conn:
        assert conn.execute("SELECT id, etag FROM vec_chunks ORDER BY id").fetchall() == before
    kb.delete("birds/c.md")
    assert "birds/c.md" not in paths(kb.semantic_search("flightless birds"))
    # an edit behind kiwifs's back, seen by the next answer of the same object
    (kb.root / "b.md").write_text("kiwi egg in a nest\n")
    assert paths(kb.semantic_search("flightless birds", limit=1)) == ["b.md"]
    status = kb.vector_status()
    assert (status.embedded, status.pending, status.failed) == (2, 0, 0)


def test_a_new_chunking_re_embeds_everything(make_root: MakeRoot, model: Path) -> None:
    body = " ".join(["kiwi bird nest"] * 20)
    root = make_root({"a.md": body, ".kiwi/config.toml": local_config(model)})
    with Knowledge.open(root) as kb:
        assert kb.semantic_search("bird").results
        assert kb.vector_status().chunks == 1
    (root / ".kiwi/config.toml").write_text(local_config(model, size=10, overlap=2))
    with Knowledge.open(root) as kb:
        assert kb.semantic_search("bird").results
        assert kb.vector_status().chunks == 8


def test_without_vectors_semantic_is_unavailable_and_hybrid_is_keyword_only(
    make_root: MakeRoot,
) -> None:
    root = make_root({"a.md": "kiwi bird", "b.md": "the kiwi fruit"})
    with Knowledge.open(root) as kb:
        with pytest.raises(Unavailable, match=r"semantic search is not enabled.*enabled = true"):
            kb.semantic_search("kiwi")
        found = kb.hybrid_search("kiwi")
        assert not found.semantic
        assert sorted(paths(found)) == ["a.md", "b.md"]
        assert {(h.match, h.semantic_rank) for h in found.results} == {("keyword only", None)}
        assert [h.keyword_rank for h in found.results] == [1, 2]
        assert kb.vector_status().to_json() == {"enabled": False}


def test_hybrid_attributes_each_result(open_kb: Callable[..., Knowledge]) -> None:
    kb = open_kb(
        {
            "kiwi.md": page("kiwi bird with feathers"),
            "nest.md": page("a nest with one egg"),
            "fruit.md": page("kiwi recipe bake with sugar"),
        }
    )
    found = kb.hybrid_search("kiwi", limit=10)
    by_path = {h.path: h for h in found.results}
    assert by_path["kiwi.md"].match == "both"
    assert by_path["nest.md"].match == "semantic only" and by_path["nest.md"].keyword_rank is None
    assert by_path["nest.md"].snippet == "a nest with one egg"
    assert {by_path["kiwi.md"].keyword_rank, by_path["fruit.md"].keyword_rank} == {1, 2}
    first = found.results[0]
    assert first.score == pytest.approx(
        KEYWORD_WEIGHT / (RRF_K + first.keyword_rank)
        + SEMANTIC_WEIGHT / (RRF_K + first.semantic_rank)
    )


# -- the queue: failures are retried and counted, never dropped -------------------------------


@pytest.fixture
def failing_store(
    make_root: MakeRoot,
) -> Iterator[tuple[VectorStore, EmbeddingServer, list[float]]]:
    pages = {f"p{i}.md": f"rain number {i}" for i in range(5)}
    root = make_root({**pages, "bad.md": "poison rain", "empty.md": "---\na: 1\n---\n"})
    index = Index(root)
    index.reconcile()
    now = [1000.0]
    with EmbeddingServer() as server:
        config = EmbedderConfig(provider="openai", model="m", base_url=server.url + "/v1")
        store = VectorStore(index, make_embedder(config, root), ChunkConfig(), clock=lambda: now[0])
        yield store, server, now
    index.close()


def test_a_failed_embedding_is_retried_with_backoff_and_counted(
    failing_store: tuple[VectorStore, EmbeddingServer, list[float]],
) -> None:
    store, server, now = failing_store
    server.fail_words = {"poison"}
    first = store.embed_ready()
    assert (first.embedded, first.failed) == (6, 1)  # the batch failed, then page by page
    status = store.status()
    assert (status.embedded, status.pending, status.failed, status.failures) == (6, 1, 1, 1)
    assert "HTTP 500" in (status.last_error or "")
    assert store.embed_ready().attempted == 0  # not due before its backoff
    now[0] += 2.5
    assert store.embed_ready().failed == 1  # retried, failing again: backoff doubles
    now[0] += 2.5
    assert store.embed_ready().attempted == 0
    now[0] += 2.0
    server.fail_words = set()
    assert store.embed_ready().embedded == 1
    status = store.status()
    assert (status.embedded, status.pending, status.failed, status.failures) == (7, 0, 0, 2)


def test_nothing_is_dropped_while_the_embedder_is_down(
    failing_store: tuple[VectorStore, EmbeddingServer, list[float]],
) -> None:
    store, server, now = failing_store
    server.fail_next = 10_000
    done = store.embed_all()
    assert (done.embedded, done.failed) == (1, 6)  # only the page without words needs no call
    assert store.status().pending == 6
    server.fail_next = 0
    now[0] += RETRY_AFTER
    assert store.embed_all().embedded == 6
    assert store.status().pending == 0


RETRY_AFTER = 5.0


VECTOR_UPKEEP = {"files_etag", "files_recall", "files_scope"} | set(QUEUE_TRIGGERS)


def vector_indexes(root: Path) -> set[str]:
    """The indexes and queue triggers of the vector side that the root's index holds."""
    conn = sqlite3.connect(root / ".kiwi/state/index.db")
    try:
        rows = conn.execute("SELECT name FROM sqlite_schema WHERE type IN ('index', 'trigger')")
        return {r[0] for r in rows} & VECTOR_UPKEEP
    finally:
        conn.close()


def test_the_vector_side_indexes_exist_only_while_vectors_are_on(
    make_root: MakeRoot, model: Path
) -> None:
    root = make_root({"a.md": page("kiwi bird", scope="s"), "b.md": "the kiwi fruit"})
    with Knowledge.open(root) as kb:
        kb.search("kiwi")
    assert vector_indexes(root) == set()  # a root that does not embed does not pay for them
    (root / ".kiwi/config.toml").write_text(local_config(model))
    with Knowledge.open(root) as kb:
        assert paths(kb.semantic_search("bird", scope="s")) == ["a.md"]
        assert vector_indexes(root) == VECTOR_UPKEEP
        kb.reindex()  # a rebuild keeps the vectors, and so their indexes and triggers
        assert vector_indexes(root) == VECTOR_UPKEEP
        assert paths(kb.semantic_search("bird", scope="s")) == ["a.md"]
    (root / ".kiwi/config.toml").unlink()
    with Knowledge.open(root) as kb:
        kb.search("kiwi")
        with pytest.raises(Unavailable):
            kb.semantic_search("kiwi")
    assert vector_indexes(root) == set()


def test_an_older_index_loses_its_idle_queue_triggers_when_opened(make_root: MakeRoot) -> None:
    """Indexes made before the queue triggers came and went with vectors have them with
    vectors off; the first opening drops them, and writes still index."""
    root = make_root({"a.md": "kiwi"})
    with Knowledge.open(root) as kb:
        kb.search("kiwi")
    conn = sqlite3.connect(root / ".kiwi/state/index.db")
    for sql in QUEUE_TRIGGERS.values():
        conn.execute(sql)
    conn.commit()
    conn.close()
    assert vector_indexes(root) == set(QUEUE_TRIGGERS)
    with Knowledge.open(root) as kb:
        kb.write("b.md", b"kiwi again\n")
        assert sorted(h.path for h in kb.search("kiwi").results) == ["a.md", "b.md"]
    assert vector_indexes(root) == set()


# -- the cached candidates of a long-lived process --------------------------------------------


def answers_both_ways(
    kb: Knowledge, keeper: IndexKeeper, monkeypatch: pytest.MonkeyPatch, **case: Any
) -> list[Any]:
    """Semantic and hybrid answers with the candidates cached and ties ordered by path rank,
    then uncached (``Tuning.cached_candidates`` off) with ties ordered by reading every tied
    path, over one index state (asked again when a write landed in between)."""
    from kiwifs.index.vectors import semantic

    index = keeper._open()

    def log_end() -> tuple[int, str]:
        with keeper._open().reader() as conn:
            seq = conn.execute("SELECT max(seq) FROM fts_log").fetchone()[0] or 0
            row = conn.execute("SELECT max(seq) FROM vec_log").fetchone()
        return int(seq), str(row[0] if row else "")

    for _ in range(50):
        start = log_end()
        pair = []
        for fast in (True, False):
            index.tuning = Tuning(cached_candidates=fast)
            monkeypatch.setattr(semantic, "TIES_BY_RANK", 0 if fast else 10**9)
            pair.append(
                (
                    kb.semantic_search(**case).to_json(),
                    kb.hybrid_search(**case).to_json(),
                )
            )
        index.tuning = Tuning()
        if log_end() == start:
            return pair
        time.sleep(0.1)
    raise AssertionError("the index never stood still")


def test_cached_candidates_answer_as_the_query_after_every_kind_of_change(
    open_kb: Callable[..., Knowledge],
    keepers: dict[int, IndexKeeper],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files = flock(60, 6)
    for i in range(12):  # copies: the same vectors, tied scores broken by path
        files[f"copies/c-{i:02}.md"] = page("kiwi bird nest egg", scope="other-1")
    files["other/old.md"] = page("kiwi bird nest egg", memory_status="superseded")
    kb = open_kb(files)
    keeper = keepers[id(kb)]
    from kiwifs.index.vectors import candidates

    caught_up = []
    original = candidates.CandidateCache._caught_up

    def counted(self: Any, *args: Any) -> Any:
        caught_up.append(args[-1])
        return original(self, *args)

    monkeypatch.setattr(candidates.CandidateCache, "_caught_up", counted)
    Serving(kb).start_watching()
    try:
        while not kb.ready():
            time.sleep(0.01)
        filters: list[dict[str, Any]] = [
            {},
            {"include_superseded": True},
            {"path_prefix": "copies/"},
            {"scope": "other-1"},
            {"path_prefix": "flock/", "scope": "flock-7"},
        ]

        def check() -> None:
            for query in ("kiwi bird nest egg", "rain snow weather"):
                for kwargs in filters:
                    for limit, offset in ((5, 0), (10, 4)):
                        case = {"query": query, "limit": limit, "offset": offset, **kwargs}
                        fast, plain = answers_both_ways(kb, keeper, monkeypatch, **case)
                        assert fast == plain, case
                        assert plain[0]["results"] or kwargs, case

        keeper.recall().store.embed_all()  # (no worker here: a server runs one)
        check()
        cache = keeper.recall().candidates
        assert cache._entries  # the answers above came from it
        assert not caught_up
        kb.rename("copies/c-01.md", "other/c-01.md")  # no new vectors: only the rows move
        check()
        kb.delete("copies/c-02.md")
        check()
        kb.write("copies/new.md", page("kiwi bird nest egg", scope="other-1"))
        kb.delete("copies/c-03.md")
        kb.rename("copies/c-04.md", "other/c-04.md")
        kb.write("copies/c-05.md", page("kiwi bird nest egg", memory_status="superseded"))
        kb.write("copies/c-06.md", page("kiwi bird nest egg", scope="other-2"))
        keeper.recall().store.embed_all()
        check()
        # another process writes the index (and its vectors) without this one's watcher
        with Knowledge.open(kb.root) as other:
            other.write("copies/c-07.md", page("kiwi bird nest egg", memory_status="superseded"))
            other.write("copies/other.md", page("rain snow weather", scope="other-1"))
            other.semantic_search("rain", limit=1)  # embeds what it queued
        check()
        assert caught_up  # the writes were patched in, not queried again
    finally:
        Serving(kb).stop_watching()


def test_many_ties_at_the_cut_are_ordered_by_path_as_before(
    open_kb: Callable[..., Knowledge], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path-rank order of thousands of tied pages is the order of their paths."""
    files = {f"t/{name}.md": page("kiwi bird nest egg") for name in ("b", "a", "é", "Z", "a0")}
    files.update({f"t/n{i:03}.md": page("kiwi bird nest egg") for i in range(40)})
    kb = open_kb(files)
    found = kb.semantic_search("kiwi", limit=30, offset=3)
    from kiwifs.index.vectors import semantic

    monkeypatch.setattr(semantic, "TIES_BY_RANK", 0)
    assert kb.semantic_search("kiwi", limit=30, offset=3).to_json() == found.to_json()
    assert paths(found) == sorted(f[:-3] + ".md" for f in files)[3:33]
