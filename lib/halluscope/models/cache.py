"""A content-addressed cache of model calls, shared across runs.

Key: sha256 over model id, revision, template version, the rendered prompt and the sampling
parameters - everything that determines an answer - and the answer format where the backend has
its model answer in one (a request without a format keys as it always did). Entries are Parquet parts under
``<cache root>/<model>/``, one part per batch of new answers (never rewritten), so many
workers and many runs can add to one cache without locks. Only successful calls are cached.

Only parts this cache wrote are read back (``read_calls``, the one reader: the Generate stage,
the role calls and ``halluscope plan`` all go through it). A part is named by the sha256 of its
bytes, ``part-<sha256>.parquet``, and is used only when

- its bytes still hash to its name (a part altered after it was written is not used),
- it is a Parquet file with the call-cache schema,
- on a local root: it is a regular file directly in the model's folder, neither of them a
  symbolic link (lstat, never followed), owned by this user and writable by no one else. On S3
  and other object stores there are no owners or links; the digest is what is checked there
  (whoever can write the bucket is trusted, as they are for the run's results).

Anything else in the folder - a planted or altered part, a foreign file (``evil.pkl``), a part
that is not Parquet, a part written by an older halluscope (``part-<16 hex>.parquet``, named by
its keys, not by its bytes, so it cannot be verified: treated as foreign and its calls made
again) - is skipped with a warning naming the file and the reason (once per file per process),
counted in ``CacheRead.skipped`` / ``CachedBackend.skipped``, and never fails the run: its calls
are cache misses. A model folder that is a symbolic link (or not a folder) is not read at all and
no new answers are written into it.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from halluscope.contract.completion import Completion
from halluscope.contract.roles import AnswerFormat
from halluscope.models.base import GenerationRequest, ModelBackend, constrains_answers
from halluscope.records import CALL_CACHE
from halluscope.storage.fs import Location, UntrustedPath, list_private, read_private, write_private
from halluscope.storage.run import read_parquet, table_to_bytes

GENERATION_TEMPLATE = "raw-prompt-v1"  # a generation sends the item's prompt as the only user message

logger = logging.getLogger(__name__)

_PART = re.compile(r"part-([0-9a-f]{64})\.parquet")
_LEGACY_PART = re.compile(r"part-[0-9a-f]{16}\.parquet")
_FIELDS = [(f.name, f.type) for f in CALL_CACHE]
_skipped: dict[str, str] = {}  # url -> reason, every file or folder skipped in this process
_skipped_lock = threading.Lock()


def part_name(data: bytes) -> str:
    """The name a part's bytes are stored under: their sha256."""
    return f"part-{hashlib.sha256(data).hexdigest()}.parquet"


def model_folder(cache: Location, model_id: str) -> Location:
    """The folder of one model's parts under the cache root."""
    return cache.child(model_id.replace("/", "__"))


def skipped_parts() -> dict[str, str]:
    """Every cache file or folder skipped in this process so far, with the reason."""
    with _skipped_lock:
        return dict(_skipped)


def _skip(found: dict[str, str], url: str, reason: str, consequence: str) -> None:
    found[url] = reason
    with _skipped_lock:
        first = url not in _skipped
        _skipped[url] = reason
    if first:
        logger.warning("call cache: skipping %s: it %s; %s", url, reason, consequence)


@dataclass
class CacheRead:
    """One model's cached answers (key -> row), the files and folders skipped (url -> reason),
    and whether new parts may be written to the model's folder."""

    entries: dict[str, dict] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    writable: bool = True


def _part_table(folder: Location, name: str) -> tuple[pa.Table | None, str]:
    """A checked part's table, or None and why it is not used."""
    found = _PART.fullmatch(name)
    if found is None:
        if _LEGACY_PART.fullmatch(name):
            return None, ("was written by an older halluscope (named by its keys, not by the sha256 of its "
                          "bytes), so its content cannot be verified; delete it to silence this warning")
        return None, "is not a part this cache wrote (parts are named part-<sha256 of their bytes>.parquet)"
    try:
        data = read_private(folder, name)
    except UntrustedPath as err:
        return None, err.reason
    except OSError as err:
        return None, f"cannot be read ({err.strerror or err})"
    if hashlib.sha256(data).hexdigest() != found[1]:
        return None, "does not hash to the sha256 in its name (altered after it was written)"
    try:
        table = read_parquet(io.BytesIO(data))
    except (pa.ArrowException, OSError, ValueError) as err:
        return None, f"is not a readable Parquet file ({type(err).__name__})"
    if [(f.name, f.type) for f in table.schema] != _FIELDS:
        return None, "does not have the call-cache columns"
    return table, ""


def read_calls(cache: Location, model_id: str) -> CacheRead:
    """The cached answers of ``model_id``: the one reader of the call cache (see the module's
    docstring for what is used and what is skipped)."""
    folder = model_folder(cache, model_id)
    out = CacheRead()
    try:
        names = list_private(folder)
    except UntrustedPath as err:
        out.writable = False
        _skip(out.skipped, err.url, err.reason,
              f"no cached answers of {model_id} are read from it and none are added to it")
        return out
    for name in names:
        table, why = _part_table(folder, name)
        if table is None:
            _skip(out.skipped, folder.child(name).url, why, "its answers are not used (the calls are made again)")
            continue
        for row in table.to_pylist():
            if isinstance(row["key"], str) and isinstance(row["text"], str):
                out.entries[row["key"]] = row
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
            write_private(self.loc, part_name(data), data)
        except UntrustedPath as err:
            self._read.writable = False
            _skip(self._read.skipped, err.url, err.reason, f"new answers of {self.model_id} are not cached")

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
                self._store(new_rows)
        return [c for c in out if c is not None]
