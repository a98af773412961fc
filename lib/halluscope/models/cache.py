"""A content-addressed cache of model calls, shared across runs.

Key: sha256 over model id, revision, template version, the rendered prompt and the sampling
parameters - everything that determines an answer - and the answer format where the backend has
its model answer in one (a request without a format keys as it always did). Entries are Parquet parts under
``<cache root>/<model>/``, one part per batch of new answers (never rewritten), so many
workers and many runs can add to one cache without locks. Only successful calls are cached.

Only parts this cache wrote are read back (``read_calls``, the one reader: the Generate stage,
the role calls and ``halluscope plan`` all go through it), through ``storage.verified``: named
by the sha256 of their bytes, regular files of this user that no one else may write. Anything
else in the folder - a planted or altered part, a foreign file (``evil.pkl``), a part written by
an older halluscope (``part-<16 hex>.parquet``, named by its keys, not by its bytes, so it cannot
be verified) - is skipped with a warning naming the file and the reason, counted in
``CacheRead.skipped`` / ``CachedBackend.skipped``, and never fails the run: its calls are cache
misses. A model folder that is a symbolic link (or not a folder) is not read at all and no new
answers are written into it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from halluscope.contract.completion import Completion
from halluscope.contract.roles import AnswerFormat
from halluscope.models.base import GenerationRequest, ModelBackend, constrains_answers
from halluscope.records import CALL_CACHE
from halluscope.storage.fs import Location, UntrustedPath
from halluscope.storage.parquet import table_to_bytes
from halluscope.storage.verified import read_parts, skip, write_part

GENERATION_TEMPLATE = "raw-prompt-v1"  # a generation sends the item's prompt as the only user message

logger = logging.getLogger(__name__)

_LEGACY_PART = re.compile(r"part-[0-9a-f]{16}\.parquet")


def model_folder(cache: Location, model_id: str) -> Location:
    """The folder of one model's parts under the cache root."""
    return cache.child(model_id.replace("/", "__"))


def _foreign(name: str) -> str:
    if _LEGACY_PART.fullmatch(name):
        return ("was written by an older halluscope (named by its keys, not by the sha256 of its bytes), so its "
                "content cannot be verified; delete it to silence this warning")
    return "is not a part this cache wrote (parts are named part-<sha256 of their bytes>.parquet)"


@dataclass
class CacheRead:
    """One model's cached answers (key -> row), the files and folders skipped (url -> reason),
    and whether new parts may be written to the model's folder."""

    entries: dict[str, dict] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    writable: bool = True


def read_calls(cache: Location, model_id: str) -> CacheRead:
    """The cached answers of ``model_id``: the one reader of the call cache (see the module's
    docstring for what is used and what is skipped)."""
    folder = model_folder(cache, model_id)
    out = CacheRead()
    try:
        for table in read_parts(folder, CALL_CACHE, "call cache", "its answers are not used (the calls are made again)",
                                out.skipped, _foreign):
            for row in table.to_pylist():
                if isinstance(row["key"], str) and isinstance(row["text"], str):
                    out.entries[row["key"]] = row
    except UntrustedPath as err:
        out.writable = False
        skip(out.skipped, "call cache", err.url, err.reason,
             f"no cached answers of {model_id} are read from it and none are added to it")
    return out


def call_key(model_id: str, revision: str | None, template_version: str, prompt: str, sampling: dict,
             answer_format: AnswerFormat | None = None) -> str:
    """The cache key of one call. Without an answer format the hashed text is what it was before
    formats existed, so the keys of existing caches stay valid."""
    parts: list = [model_id, revision, template_version, prompt, sampling]
    if answer_format is not None:
        parts.append(answer_format.key())
    body = json.dumps(parts, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


class CachedBackend:
    """Wraps a backend: answers from the cache where it can, calls the backend for the rest."""

    def __init__(self, backend: ModelBackend, cache: Location, revision: str | None, template_version: str,
                 sampling: dict) -> None:
        self.backend = backend
        self.model_id = backend.model_id
        self.cache = cache
        self.loc = model_folder(cache, self.model_id)
        self.revision = revision
        self.template_version = template_version
        self.sampling = sampling
        # a format the backend does not send changes nothing: such calls share the format-less key
        self.constrains_answers = constrains_answers(backend)
        self._read: CacheRead | None = None

    def _load(self) -> dict[str, dict]:
        if self._read is None:
            self._read = read_calls(self.cache, self.model_id)
        return self._read.entries

    @property
    def skipped(self) -> dict[str, str]:
        """Cache files and folders of this model not used (url -> reason): counted and named."""
        self._load()
        assert self._read is not None
        return self._read.skipped

    def _store(self, rows: list[dict]) -> None:
        assert self._read is not None
        if not self._read.writable:
            return
        data = table_to_bytes(pa.Table.from_pylist(rows, schema=CALL_CACHE))
        try:
            write_part(self.loc, data)
        except UntrustedPath as err:
            self._read.writable = False
            skip(self._read.skipped, "call cache", err.url, err.reason,
                 f"new answers of {self.model_id} are not cached")

    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        entries = self._load()
        keys = [call_key(self.model_id, self.revision, self.template_version, r.prompt, self.sampling,
                         r.answer_format if self.constrains_answers else None)
                for r in requests]
        out: list[Completion | None] = [None] * len(requests)
        misses = []
        for i, key in enumerate(keys):
            hit = entries.get(key)
            if hit is None:
                misses.append(i)
            else:
                out[i] = Completion(hit["text"], hit["input_tokens"], hit["output_tokens"], hit["latency_s"],
                                    attempts=0, cached=True)
        if misses:
            fresh = self.backend.generate_batch([requests[i] for i in misses])
            new_rows = []
            for i, c in zip(misses, fresh):
                out[i] = c
                if c.error is None and c.text is not None and keys[i] not in entries:  # twins: stored once
                    row = {"key": keys[i], "text": c.text, "input_tokens": c.input_tokens,
                           "output_tokens": c.output_tokens, "latency_s": c.latency_s}
                    entries[keys[i]] = row
                    new_rows.append(row)
            if new_rows:
                self._store(new_rows)
        return [c for c in out if c is not None]
