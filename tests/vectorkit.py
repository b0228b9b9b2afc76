"""Real embedders for tests, made here (no model is downloaded, there is no network).

* :func:`build_model` writes a tiny model2vec model in the library's own on-disk format
  (``config.json``, ``model.safetensors``, ``tokenizer.json`` from the ``tokenizers`` library)
  with topic-clustered random vectors: words of one topic point the same way, so a query about
  birds finds a page about kiwis that shares no word with it. kiwifs loads it through model2vec's
  real loader.
* :class:`EmbeddingServer` is a small real HTTP server speaking OpenAI's ``/v1/embeddings`` and
  Ollama's ``/api/embed``: each text becomes a hashed bag of words (texts sharing words are
  near). It can fail on purpose and hold a request until the test lets it go.
"""

from __future__ import annotations

import functools
import json
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

TOPICS: dict[str, list[str]] = {
    "birds": ["kiwi", "bird", "birds", "feather", "feathers", "wing", "nest", "egg", "flightless"],
    "storage": ["sqlite", "database", "index", "table", "query", "disk", "storage", "row"],
    "weather": ["rain", "storm", "cloud", "wind", "snow", "weather", "forecast", "sunny"],
    "cooking": ["recipe", "bake", "oven", "flour", "sugar", "butter", "cook", "kitchen"],
}
FILLER = ["the", "a", "of", "and", "to", "in", "is", "on", "for", "with", "note", "page"]
DIM = 32


def build_model(folder: Path, dim: int = DIM, seed: int = 7) -> Path:
    """Write the tiny topic model into ``folder`` and return it."""
    from model2vec import StaticModel
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    words = ["[UNK]", "[PAD]"] + FILLER + [w for topic in TOPICS.values() for w in topic]
    rng = np.random.default_rng(seed)
    centres = {name: rng.standard_normal(dim) * 3 for name in TOPICS}
    vectors = np.zeros((len(words), dim), dtype=np.float32)
    for i, word in enumerate(words):
        topic = next((name for name, ws in TOPICS.items() if word in ws), None)
        noise = rng.standard_normal(dim)
        vectors[i] = (centres[topic] + noise) if topic else noise * 0.2
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    StaticModel(vectors=vectors, tokenizer=tokenizer, normalize=True).save_pretrained(str(folder))
    return folder


def local_config(model: Path, size: int = 400, overlap: int = 50) -> str:
    """A ``.kiwi/config.toml`` turning vectors on with the local model at ``model``."""
    return (
        "[search.vector]\nenabled = true\n"
        f'[search.vector.embedder]\nprovider = "local"\nmodel = "{model}"\n'
        f"[search.vector.chunk]\nsize = {size}\noverlap = {overlap}\n"
    )


def http_config(provider: str, url: str, model: str = "test-embed", timeout: str = "10s") -> str:
    return (
        "[search.vector]\nenabled = true\n"
        f'[search.vector.embedder]\nprovider = "{provider}"\nmodel = "{model}"\n'
        f'base_url = "{url}"\ntimeout = "{timeout}"\napi_key = "sk-test"\n'
    )


def hashed(text: str, dim: int = 64) -> list[float]:
    """A bag of words hashed into ``dim`` buckets (stable across processes)."""
    out = [0.0] * dim
    for word in text.lower().split():
        out[zlib.crc32(word.strip(".,:;!?").encode()) % dim] += 1.0
    return out


class EmbeddingServer:
    """A real HTTP embedding endpoint on 127.0.0.1 (OpenAI and Ollama protocols)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail_next = 0  # answer HTTP 500 to this many requests
        self.fail_words: set[str] = set()  # answer HTTP 500 to batches holding these words
        self.gate: threading.Event | None = None  # when set up, request number hold_at waits
        self.hold_at = 0
        self.arrived = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, answer = server.answer(self.path, body, self.headers)
                data = json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except BrokenPipeError:
                    pass  # the client was killed on purpose

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # polled every 50 ms for the stop (socketserver's 0.5 s made each stop cost up to 0.5 s)
        serve = functools.partial(self.httpd.serve_forever, poll_interval=0.05)
        self._thread = threading.Thread(target=serve, daemon=True)

    def answer(self, path: str, body: dict[str, Any], headers: Any) -> tuple[int, Any]:
        with self._lock:
            self.requests.append({"path": path, "body": body, "auth": headers["Authorization"]})
            number = len(self.requests)
            failing = self.fail_next > 0
            if failing:
                self.fail_next -= 1
        if self.gate is not None and number == self.hold_at:
            self.arrived.set()
            self.gate.wait(60)
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if failing or any(w in t.split() for t in texts for w in self.fail_words):
            return 500, {"error": {"message": "the model is overloaded"}}
        vectors = [hashed(t) for t in texts]
        if path == "/v1/embeddings":
            data = [
                {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
            ]
            return 200, {"object": "list", "model": body["model"], "data": data[::-1]}
        if path == "/api/embed":
            return 200, {"model": body["model"], "embeddings": vectors}
        return 404, {"error": "not found"}

    def __enter__(self) -> EmbeddingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.gate is not None:
            self.gate.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def embedding_server() -> Iterator[EmbeddingServer]:
    with EmbeddingServer() as server:
        yield server
