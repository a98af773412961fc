"""Answer-answer similarity, the one learned component of FEWL, behind a small protocol.

The paper scores with Vectara's cross-encoder (App. C.3) in one place and with embedding cosine
(App. C.4) in another, and names neither version nor argument order, so the backend is pluggable
and its ``name`` is recorded with every score. ``matrix(left, right)[i, j]`` scores the pair
``(left[i], right[j])`` in that order (FEWL calls it as (reference, IW/CO) and (candidate,
reference)); every backend returns values in [0, 1], the range the paper's arithmetic assumes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from halluscope.errors import ConfigError, RunError
from halluscope.fewl.cache import ArtefactCache, content_key
from halluscope.knowledge.retrieval import Encoder


class Similarity(Protocol):
    @property
    def name(self) -> str:
        """Backend id and version, recorded with every score."""
        ...

    def matrix(self, left: Sequence[str], right: Sequence[str]) -> np.ndarray:
        """float64 array (len(left), len(right)) of similarities in [0, 1]."""
        ...


class Embedder(Protocol):
    """What the neighbour search needs: unit-length text embeddings under a stable name."""

    @property
    def name(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class EmbeddingCosine:
    """Cosine of sentence embeddings (default: the offline all-MiniLM-L6-v2), negatives clipped to 0.

    A negative cosine means "unrelated" as much as 0 does; clipping keeps the [0, 1] range the
    softmax and tanh scales of the paper were tuned for. Each text is embedded once: a per-text
    memory table, and, with a cache, one stored artefact per batch of new texts (a question's
    reference and IW/CO answers arrive together, so a re-run hits that batch)."""

    def __init__(self, encoder: Encoder | None = None, cache: ArtefactCache | None = None) -> None:
        self.encoder = encoder or Encoder()
        self.cache = cache
        self._vectors: dict[str, np.ndarray] = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_vectors": {}}

    @property
    def name(self) -> str:
        return f"cosine:{self.encoder.name}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        new = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if new:
            encode = lambda: self.encoder.encode(new)  # noqa: E731
            vectors = (self.cache.get_or_compute("embeddings", content_key(self.encoder.name, new), encode)
                       if self.cache else encode())
            self._vectors.update(zip(new, vectors))
        if not texts:
            return np.zeros((0, self.encoder.dim), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts])

    def matrix(self, left: Sequence[str], right: Sequence[str]) -> np.ndarray:
        if not left or not right:
            return np.zeros((len(left), len(right)))
        sims = self.embed(left).astype(np.float64) @ self.embed(right).astype(np.float64).T
        return np.clip(sims, 0.0, 1.0)


class CrossEncoderSimilarity:
    """A sentence-transformers CrossEncoder from a local directory, e.g. Vectara's HHEM.

    HHEM reads (premise, hypothesis) and is asymmetric; ``symmetric`` averages both orders, as the
    spec suggests, since FEWL's formulas treat Similarity as symmetric. A model with one output
    is read through its sigmoid; one with several (an NLI head) needs ``label`` to pick the column
    of the softmax that means "same content" (entailment)."""

    def __init__(self, model_path: str | Path, symmetric: bool = True, label: int | None = None,
                 batch_size: int = 32, device: str | None = None, name: str | None = None) -> None:
        self.model_path = Path(model_path).expanduser()
        if not (self.model_path / "config.json").is_file():
            raise ConfigError(f"cross-encoder model directory not found (no config.json): {self.model_path}")
        self.symmetric = symmetric
        self.label = label
        self.batch_size = batch_size
        self.device = device
        order = "sym" if symmetric else "ordered"
        label_part = f":label{label}" if label is not None else ""
        self.name = f"cross-encoder:{name or self.model_path.name}:{order}{label_part}"
        self._model: Any = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_model": None}

    @property
    def model(self) -> Any:
        if self._model is None:
            from sentence_transformers import CrossEncoder

            self._model = CrossEncoder(str(self.model_path), device=self.device, local_files_only=True)
        return self._model

    def _scores(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        raw = np.asarray(self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False,
                                            apply_softmax=self.label is not None), dtype=np.float64)
        if raw.ndim == 2:
            if self.label is None or not 0 <= self.label < raw.shape[1]:
                raise RunError(f"cross-encoder {self.model_path} has {raw.shape[1]} outputs: set label to the "
                               "index of the one meaning 'same content'")
            raw = raw[:, self.label]
        return np.clip(raw, 0.0, 1.0)

    def matrix(self, left: Sequence[str], right: Sequence[str]) -> np.ndarray:
        if not left or not right:
            return np.zeros((len(left), len(right)))
        pairs = [(a, b) for a in left for b in right]
        scores = self._scores(pairs).reshape(len(left), len(right))
        if self.symmetric:
            scores = (scores + self._scores([(b, a) for a, b in pairs]).reshape(len(left), len(right))) / 2
        return scores


class CachedSimilarity:
    """Any Similarity with its matrices cached by content: one per question's IW/CO comparison and
    one per (candidate, question), so re-scoring under another method or run costs nothing."""

    def __init__(self, inner: Similarity, cache: ArtefactCache) -> None:
        self.inner = inner
        self.cache = cache
        self.name = inner.name

    def matrix(self, left: Sequence[str], right: Sequence[str]) -> np.ndarray:
        key = content_key(self.name, list(left), list(right))
        return self.cache.get_or_compute("similarity", key, lambda: self.inner.matrix(left, right))
