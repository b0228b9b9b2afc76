"""Embedders and their configuration: a real model2vec model on disk, a real HTTP endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kiwifs.config import EmbedderConfig, parse_config
from kiwifs.errors import ConfigError, Unavailable
from kiwifs.index.vectors.embedders import make_embedder
from vectorkit import DIM, EmbeddingServer, hashed


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddingServer]:
    with EmbeddingServer() as srv:
        yield srv


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# -- local (model2vec) ---------------------------------------------------------------------------


def test_local_model_loads_through_model2vec_and_embeds_by_topic(model: Path) -> None:
    assert {p.name for p in model.iterdir()} >= {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    }
    embedder = make_embedder(EmbedderConfig(provider="local", model=str(model)), Path("/"))
    vectors = embedder.embed(["the kiwi is a flightless bird", "feathers in a nest", "sqlite"])
    assert vectors.shape == (3, DIM) and vectors.dtype == np.float32
    assert cosine(vectors[0], vectors[1]) > 0.8 > cosine(vectors[0], vectors[2])
    assert embedder.name.startswith(f"local:m2v:{DIM}:")


def test_local_model_path_is_relative_to_the_root(model: Path) -> None:
    config = EmbedderConfig(provider="local", model=model.name)
    assert make_embedder(config, model.parent).embed(["rain"]).shape == (1, DIM)


def test_missing_local_model_is_a_config_error_naming_the_folder(tmp_path: Path) -> None:
    config = EmbedderConfig(provider="local", model="models/none")
    with pytest.raises(ConfigError, match=r"models/none must be a model2vec folder"):
        make_embedder(config, tmp_path)


def test_broken_local_model_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="cannot load the local embedding model"):
        make_embedder(EmbedderConfig(provider="local", model=str(tmp_path)), tmp_path)


# -- HTTP providers ------------------------------------------------------------------------------


def test_openai_protocol(server: EmbeddingServer) -> None:
    config = EmbedderConfig(
        provider="openai", model="m-1", base_url=server.url + "/v1", api_key="sk-1", dimensions=64
    )
    embedder = make_embedder(config, Path("/"))
    texts = [f"text number {i}" for i in range(300)]  # three requests of at most 128
    vectors = embedder.embed(texts)
    assert vectors.shape == (300, 64)
    # the server answers in reverse order; the index field puts them back
    assert vectors[5].tolist() == hashed(texts[5])
    calls = [r for r in server.requests if r["body"].get("model") == "m-1"]
    assert [len(r["body"]["input"]) for r in calls] == [128, 128, 44]
    assert calls[0]["path"] == "/v1/embeddings" and calls[0]["auth"] == "Bearer sk-1"
    assert calls[0]["body"]["dimensions"] == 64
    assert embedder.name == "openai:m-1:64"


def test_ollama_protocol(server: EmbeddingServer) -> None:
    config = EmbedderConfig(provider="ollama", model="nomic", base_url=server.url)
    vectors = make_embedder(config, Path("/")).embed(["rain and wind", "snow"])
    assert vectors.tolist() == [hashed("rain and wind"), hashed("snow")]
    assert server.requests[-1]["path"] == "/api/embed"


def test_http_failures_are_unavailable_with_the_reason(server: EmbeddingServer) -> None:
    config = EmbedderConfig(provider="openai", model="m", base_url=server.url + "/v1")
    server.fail_next = 1
    with pytest.raises(Unavailable, match=r"HTTP 500: .*overloaded"):
        make_embedder(config, Path("/")).embed(["x"])
    wrong = EmbedderConfig(provider="openai", model="m", base_url=server.url + "/nope")
    with pytest.raises(Unavailable, match="HTTP 404"):
        make_embedder(wrong, Path("/")).embed(["x"])


def test_unreachable_endpoint_is_unavailable() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    config = EmbedderConfig(provider="ollama", model="m", base_url=f"http://127.0.0.1:{port}")
    with pytest.raises(Unavailable, match="unreachable"):
        make_embedder(config, Path("/")).embed(["x"])


# -- configuration -------------------------------------------------------------------------------

VECTOR = (
    '[search.vector]\nenabled = true\n[search.vector.embedder]\nprovider = "{p}"\nmodel = "m"\n'
)


def test_vector_config_parses_with_defaults() -> None:
    config = parse_config(
        VECTOR.format(p="openai")
        + 'api_key = "k"\nbase_url = "http://x/v1"\ndimensions = 256\ntimeout = 5\n'
    )
    vector = config.search.vector
    assert vector.enabled and vector.embedder.dimensions == 256
    assert (vector.store.provider, vector.chunk.size, vector.chunk.overlap) == ("sqlite", 400, 50)
    assert vector.embedder.timeout == "5"


def test_unknown_provider_names_the_supported_ones() -> None:
    message = "unknown embedder provider 'cohere'.*supported: local, ollama, openai"
    with pytest.raises(ConfigError, match=message):
        parse_config(VECTOR.format(p="cohere"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[search.vector]\nenabled = true\n", "no embedder provider"),
        (
            VECTOR.format(p="local") + '[search.vector.store]\nprovider = "qdrant"\n',
            "unknown vector store provider 'qdrant'.*supported: sqlite",
        ),
        (VECTOR.format(p="local") + "[search.vector.chunk]\nsize = 10\noverlap = 10\n", "overlap"),
        (VECTOR.format(p="local") + 'timeout = "soon"\n', "timeout: invalid duration"),
        (VECTOR.format(p="local") + "timeout = 0\n", "timeout must be more than 0"),
        (VECTOR.format(p="openai").replace('model = "m"', 'model = ""'), "model is required"),
    ],
    ids=["no-provider", "store", "overlap", "timeout-text", "timeout-zero", "no-model"],
)
def test_bad_vector_config_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(text)


def test_vector_config_is_checked_only_when_enabled() -> None:
    text = '[search.vector]\nenabled = false\n[search.vector.embedder]\nprovider = "bedrock"\n'
    assert parse_config(text).search.vector.embedder.provider == "bedrock"
