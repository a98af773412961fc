"""Per-question artefacts (embeddings, similarity matrices) cached by a hash of their content.

FEWL's costly parts - reference answers against 25 IW/CO pairs, candidates against neighbours'
answers - depend only on texts and the similarity backend, so they are keyed by those and reused
across candidates, methods and runs. Memory first, then an optional storage Location (a folder on
disk or S3) holding one ``.npy`` per artefact; a damaged stored entry is recomputed.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from halluscope.storage.fs import Location


def content_key(*parts: object) -> str:
    """sha256 of the JSON of the parts: lists of texts are hashed as lists, so no join can collide."""
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()


@dataclass
class CacheStats:
    memory_hits: int = 0
    storage_hits: int = 0
    misses: int = 0
    damaged: int = 0  # stored entries that could not be read and were recomputed


@dataclass
class ArtefactCache:
    location: Location | None = None
    stats: CacheStats = field(default_factory=CacheStats)
    _memory: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def __getstate__(self) -> dict:
        # a cache shipped to a worker starts with an empty memory and shares the storage
        return {**self.__dict__, "_memory": {}, "stats": CacheStats()}

    def _stored(self, kind: str, key: str) -> Location:
        assert self.location is not None
        return self.location.child(kind, key[:2], f"{key}.npy")

    def get(self, kind: str, key: str) -> np.ndarray | None:
        mem_key = f"{kind}/{key}"
        found = self._memory.get(mem_key)
        if found is not None:
            self.stats.memory_hits += 1
            return found
        if self.location is not None:
            loc = self._stored(kind, key)
            if loc.exists():
                try:
                    found = np.load(io.BytesIO(loc.read_bytes()), allow_pickle=False)
                except (OSError, ValueError):
                    self.stats.damaged += 1
                else:
                    self.stats.storage_hits += 1
                    self._memory[mem_key] = found
                    return found
        self.stats.misses += 1
        return None

    def put(self, kind: str, key: str, value: np.ndarray) -> None:
        self._memory[f"{kind}/{key}"] = value
        if self.location is not None:
            buf = io.BytesIO()
            np.save(buf, value, allow_pickle=False)
            self._stored(kind, key).write_bytes_atomic(buf.getvalue())

    def get_or_compute(self, kind: str, key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        found = self.get(kind, key)
        if found is None:
            found = np.asarray(compute())
            self.put(kind, key, found)
        return found
