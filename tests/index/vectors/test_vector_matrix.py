"""The in-memory vector matrix of a long-lived process, caught up from ``vec_log``: after
writes, renames, deletes, collected garbage, contents stored again with other vectors and
another process's writes, it holds exactly what a fresh load reads, and answers as a fresh
process does."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from kiwifs.index.upkeep import IndexKeeper
from kiwifs.index.vectors import matrix as matrix_module
from kiwifs.index.vectors.candidates import CandidateCache
from kiwifs.index.vectors.matrix import MatrixCache, VectorMatrix, load
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving
from partskit import index_keeper
from vectorkit import local_config

MakeRoot = Callable[..., Path]
QUERIES = ("kiwi bird nest egg", "rain snow weather", "sqlite index table")
FILTERS: list[dict[str, Any]] = [{}, {"path_prefix": "p/"}, {"scope": "s-1"}]


@pytest.fixture
def watched_root(make_root: MakeRoot, model: Path) -> Path:
    """24 pages with vectors on (the local model)."""
    topics = ("kiwi bird nest egg feather", "rain snow weather storm", "sqlite index table row")
    files = {
        f"p/{i:02}.md": page(f"{topics[i % 3]} note {i}", scope=f"s-{i % 4}") for i in range(24)
    }
    return make_root({**files, ".kiwi/config.toml": local_config(model, 8, 2)})


@pytest.fixture
def watched_keeper(watched_root: Path) -> IndexKeeper:
    """The index keeper ``watched_kb`` is opened with."""
    return index_keeper(watched_root)


@pytest.fixture
def watched_kb(watched_root: Path, watched_keeper: IndexKeeper) -> Iterator[Knowledge]:
    """``watched_root`` watched as a server watches its root."""
    opened = Knowledge.open(watched_root, index=watched_keeper)
    Serving(opened).start_watching()
    try:
        while not opened.ready():
            time.sleep(0.01)
        yield opened
    finally:
        Serving(opened).stop_watching()
        opened.close()


def page(body: str, **frontmatter: Any) -> str:
    return "---\n" + yaml.safe_dump(frontmatter, sort_keys=True) + "---\n" + body + "\n"


def cached(keeper: IndexKeeper) -> VectorMatrix:
    """The process's matrix, brought up to date as a query would."""
    recall = keeper.recall()
    with recall.store.index.reader() as conn:
        return recall.matrix.get(conn)


def fresh(keeper: IndexKeeper) -> VectorMatrix:
    with keeper.recall().store.index.reader() as conn:
        return load(conn, "", 0)


def contents(vectors: VectorMatrix) -> dict[bytes, tuple[bytes, bytes]]:
    """Each live content's vectors and spans, as bytes (what the ranking sees of it)."""
    out: dict[bytes, tuple[bytes, bytes]] = {}
    assert len(set(vectors.keys.tolist())) == len(vectors.keys)
    assert list(vectors.keys) == sorted(vectors.keys)
    for key, group in zip(vectors.keys.tolist(), vectors.key_groups.tolist(), strict=True):
        assert vectors.alive[group]
        rows = slice(int(vectors.starts[group]), int(vectors.ends[group]))
        out[key] = (vectors.matrix[rows].tobytes(), vectors.spans[rows].tobytes())
    return out


def answers(kb: Knowledge) -> list[Any]:
    return [
        (kb.semantic_search(q, limit=6, **f).to_json(), kb.hybrid_search(q, limit=6, **f).to_json())
        for q in QUERIES
        for f in FILTERS
    ]


def assert_current(kb: Knowledge, keeper: IndexKeeper, caught_up: bool = True) -> None:
    """The cached matrix equals a fresh load, was caught up (not loaded) when ``caught_up``,
    and the process answers as one with nothing cached does (the same index state: opening
    another process here could change the schema, and the candidates would start afresh)."""
    before = keeper.recall().matrix._current
    now = cached(keeper)
    assert contents(now) == contents(fresh(keeper))
    if caught_up:
        assert before is not None and now.lineage == before.lineage
    ours = answers(kb)
    recall = keeper.recall()
    kept = recall.matrix, recall.candidates
    recall.matrix, recall.candidates = MatrixCache(), CandidateCache()  # as a new process
    try:
        assert ours == answers(kb)
    finally:
        recall.matrix, recall.candidates = kept


def embed(keeper: IndexKeeper) -> None:
    keeper.recall().store.embed_all()


def test_the_matrix_caught_up_after_every_kind_of_change_equals_a_fresh_load(
    watched_kb: Knowledge,
    watched_keeper: IndexKeeper,
) -> None:
    embed(watched_keeper)
    answers(watched_kb)  # the matrix and the candidates are loaded once
    first = cached(watched_keeper)
    assert not first.empty
    watched_kb.write("p/new.md", page("kiwi bird nest egg storm", scope="s-1"))
    embed(watched_keeper)
    assert_current(watched_kb, watched_keeper)
    watched_kb.write("p/01.md", page("sqlite row table kiwi", scope="s-1"))  # new content, old dies
    watched_kb.rename("p/02.md", "q/02.md")  # same content: no vectors change
    watched_kb.delete("p/03.md")
    embed(watched_keeper)
    assert_current(watched_kb, watched_keeper)
    assert watched_keeper.recall().store.collect_garbage()  # the old contents' vectors go
    assert_current(watched_kb, watched_keeper)
    assert cached(watched_keeper).dead_rows  # their rows stay, dead
    # a content stored again with other vectors (another embedder run, say)
    store = watched_keeper.recall().store
    etag = str(first.keys[0].decode())
    with store.index.reader() as conn:
        spans = conn.execute(
            "SELECT seq, start, end FROM vec_chunks WHERE etag = ? ORDER BY seq", (etag,)
        ).fetchall()
    from kiwifs.index.vectors.chunking import Chunk

    chunks = [Chunk(seq, start, end, "") for seq, start, end in spans]
    other = np.repeat(store.embed_texts(["rain snow weather"]), len(chunks), axis=0)
    with store.index.transaction() as conn:
        store._store(conn, [(etag, chunks, other)])
        path = conn.execute("SELECT path FROM files WHERE etag = ?", (etag,)).fetchone()[0]
    assert_current(watched_kb, watched_keeper)
    assert watched_kb.semantic_search("rain snow weather", limit=1).results[0].path == path
    # another process writes and embeds (no watcher of this one sees its rows first)
    writer_keeper = index_keeper(watched_kb.root)
    with Knowledge.open(watched_kb.root, index=writer_keeper) as writer:
        writer.write("p/other.md", page("rain snow weather kiwi", scope="s-1"))
        writer.delete("p/04.md")
        writer.semantic_search("rain", limit=1)  # embeds what it queued
        writer_keeper.recall().store.collect_garbage()
    assert_current(watched_kb, watched_keeper)
    # every vector thrown away and made again: a new generation, loaded afresh
    watched_kb.reindex_vectors()
    assert cached(watched_keeper).generation != first.generation
    assert_current(watched_kb, watched_keeper, caught_up=False)


def test_too_many_dead_rows_load_afresh(
    watched_kb: Knowledge, watched_keeper: IndexKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    embed(watched_keeper)
    answers(watched_kb)
    lineage = cached(watched_keeper).lineage
    monkeypatch.setattr(matrix_module, "DEAD_SHARE", 0.0)
    watched_kb.write("p/05.md", page("kiwi kiwi bird", scope="s-1"))
    embed(watched_keeper)
    assert (
        cached(watched_keeper).lineage == lineage
    )  # nothing dead yet: the new content is appended
    watched_keeper.recall().store.collect_garbage()
    assert cached(watched_keeper).lineage != lineage and not cached(watched_keeper).dead_rows
    assert_current(watched_kb, watched_keeper, caught_up=False)


def test_a_matrix_loaded_empty_catches_up_its_first_vectors(
    make_root: MakeRoot, model: Path
) -> None:
    """A process that queried before any page had vectors holds a matrix of width 0; the first
    vectors that arrive (of the embedder's width) are appended to it, not refused."""
    root = make_root({".kiwi/config.toml": local_config(model, 8, 2)})
    keeper = index_keeper(root)
    with Knowledge.open(root, index=keeper) as kb:
        assert kb.semantic_search("kiwi bird", limit=3).results == []
        empty = cached(keeper)
        assert empty.empty and empty.matrix.shape[1] == 0
        kb.write("p/first.md", page("kiwi bird nest egg", scope="s-1"))
        embed(keeper)
        assert_current(kb, keeper)
        assert [r.path for r in kb.semantic_search("kiwi bird", limit=3).results] == ["p/first.md"]
        kb.delete("p/first.md")
        embed(keeper)
        keeper.recall().store.collect_garbage()
        assert kb.semantic_search("kiwi bird", limit=3).results == []
