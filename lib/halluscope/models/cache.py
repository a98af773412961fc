"""A content-addressed cache of model calls, shared across runs.

Key: sha256 over model id, revision, template version, the rendered prompt and the sampling
parameters - everything that determines an answer. Entries are Parquet parts under
``<cache root>/<model>/``, one part per batch of new answers (never rewritten), so many
workers and many runs can add to one cache without locks. Only successful calls are cached.
"""

from __future__ import annotations

import hashlib
import json
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from halluscope.models.base import Completion, GenerationRequest, ModelBackend
from halluscope.records import CALL_CACHE, stable_id
from halluscope.storage.fs import Location
from halluscope.storage.run import table_to_bytes

GENERATION_TEMPLATE = "raw-prompt-v1"  # a generation sends the item's prompt as the only user message



def call_key(model_id: str, revision: str | None, template_version: str, prompt: str, sampling: dict) -> str:
    body = json.dumps([model_id, revision, template_version, prompt, sampling], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


class CachedBackend:
    """Wraps a backend: answers from the cache where it can, calls the backend for the rest."""

    def __init__(self, backend: ModelBackend, cache: Location, revision: str | None, template_version: str,
                 sampling: dict) -> None:
        self.backend = backend
        self.model_id = backend.model_id
        self.loc = cache.child(self.model_id.replace("/", "__"))
        self.revision = revision
        self.template_version = template_version
        self.sampling = sampling
        self._entries: dict[str, dict] | None = None

    def _load(self) -> dict[str, dict]:
        if self._entries is None:
            self._entries = {}
            for name in self.loc.list_names():
                part = self.loc.child(name)
                with part.fs.open(part.path, "rb") as f:
                    for row in pq.read_table(f).to_pylist():
                        self._entries[row["key"]] = row
        return self._entries

    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        entries = self._load()
        keys = [call_key(self.model_id, self.revision, self.template_version, r.prompt, self.sampling)
                for r in requests]
        out: list[Completion | None] = [None] * len(requests)
        misses = []
        for i, key in enumerate(keys):
            hit = entries.get(key)
            if hit is None:
                misses.append(i)
            else:
                out[i] = Completion(hit["text"], hit["input_tokens"], hit["output_tokens"], hit["latency_s"],
                                    attempts=0, extra={"cached": True})
        if misses:
            fresh = self.backend.generate_batch([requests[i] for i in misses])
            new_rows = []
            for i, c in zip(misses, fresh):
                out[i] = c
                if c.error is None and c.text is not None:
                    row = {"key": keys[i], "text": c.text, "input_tokens": c.input_tokens,
                           "output_tokens": c.output_tokens, "latency_s": c.latency_s}
                    entries[keys[i]] = row
                    new_rows.append(row)
            if new_rows:
                part = f"part-{stable_id(*sorted(r['key'] for r in new_rows))}.parquet"
                table = pa.Table.from_pylist(new_rows, schema=CALL_CACHE)
                self.loc.child(part).write_bytes_atomic(table_to_bytes(table))
        return [c for c in out if c is not None]
