"""Arrow schemas of every table and the id scheme.

Ids are hashes of natural keys, so a re-run computes the same ids, skips what is written and
never duplicates a row."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MISSING = "no recorded response"  # generations.error of an item its replay file lacks: counted apart
NOT_STAGED = "no staged generation: the model's deployment ended before this row was generated"
_GAVE_UP = re.compile(r" \(after \d+ attempts\)$")


def gave_up(reason: str, attempts: int) -> str:
    """The error of a call that failed in a way worth retrying until it ran out of attempts
    (timeouts, 5xx, busy, lost connections): transient, so a resubmitted run tries its row again."""
    return f"{reason} (after {attempts} attempts)"


def transient_error(error: str | None) -> bool:
    """Whether a row's error may go away on another try (``gave_up``, or a generation its
    deployment ended before), as opposed to a final answer such as HTTP 400 or a task's own
    failure on the text."""
    return error is not None and (error == NOT_STAGED or _GAVE_UP.search(error) is not None)


def stable_id(*parts: object) -> str:
    """16 hex chars of sha256 over the parts joined by a separator that cannot occur in them."""
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:16]


def generation_id(task: str, item_id: str, model: str, sample_idx: int = 0) -> str:
    return stable_id("gen", task, item_id, model, sample_idx)


_HEX = np.full(256, 255, np.uint8)
_HEX[np.frombuffer(b"0123456789abcdef", np.uint8)] = np.arange(16, dtype=np.uint8)


class GenerationIds:
    """A set of generation ids held as sorted 64-bit integers (an id is 16 hex digits): 8 bytes
    an id where a set of Python strings takes about 100, built from an Arrow column without a
    string per id, and one buffer that crosses Ray's object store without being unpickled. What
    a resumed run holds, and hands every worker, of the ids an earlier attempt committed."""

    def __init__(self, ids: pa.Array | pa.ChunkedArray | None = None) -> None:
        values = np.sort(_as_ints(ids)) if ids is not None and len(ids) else np.zeros(0, np.uint64)
        # repeats dropped from the sorted values: np.unique hashes, 1 s for 1M ids against 0.02 s
        self._ids = values[np.concatenate(([True], values[1:] != values[:-1]))] if len(values) else values

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, gen_id: object) -> bool:
        try:
            return isinstance(gen_id, str) and not self.unseen([gen_id])[0]
        except ValueError:  # not an id of this scheme, so not one of these
            return False

    def unseen(self, gen_ids: list[str]) -> list[bool]:
        """Per id, whether it is not in the set: one search for a unit's ids, as a lookup per id
        costs more in numpy than the set it replaces."""
        if not len(self._ids) or not gen_ids:
            return [True] * len(gen_ids)
        wanted = _as_ints(pa.array(gen_ids, pa.string()))
        at = np.minimum(np.searchsorted(self._ids, wanted), len(self._ids) - 1)
        return (self._ids[at] != wanted).tolist()


def _as_ints(ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """16-hex-digit ids as integers, decoded from the column's character buffer in bulk."""
    column = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    column = column.cast(pa.string())
    if column.null_count or pc.any(pc.not_equal(pc.binary_length(column), 16)).as_py():
        raise ValueError("a generation id is not 16 hex digits (an id from another id scheme?)")
    offsets = np.frombuffer(column.buffers()[1], np.int32)[column.offset:column.offset + len(column) + 1]
    chars = np.frombuffer(column.buffers()[2], np.uint8)[offsets[0]:offsets[-1]]
    digits = _HEX[chars].reshape(-1, 16)
    if (digits == 255).any():
        raise ValueError("a generation id is not 16 lower-case hex digits (an id from another id scheme?)")
    packed = np.ascontiguousarray((digits[:, 0::2] << 4) | digits[:, 1::2])  # two digits a byte
    return packed.view(">u8").ravel().astype(np.uint64)


def atom_ids(gen_ids: pa.ChunkedArray | pa.Array, atom_idx: pa.Array) -> pa.Array:
    """``<gen_id>-<atom_idx>`` per atom: already unique and stable, the generation's id and the
    atom's position in it."""
    return pc.binary_join_element_wise(gen_ids, atom_idx.cast(pa.string()), "-")


ITEMS = pa.schema([
    ("task", pa.string()),
    ("item_id", pa.string()),
    ("prompt", pa.string()),
    ("fields", pa.string()),  # task fields as JSON: gold answers, lists, categories
    ("source_row", pa.int64()),  # row in the released prompt file (0-based, header excluded)
])

# What flows through the pipeline: one row per (model, task, item, sample).
WORK = pa.schema([
    ("gen_id", pa.string()),
    ("model", pa.string()),
    ("task", pa.string()),
    ("item_id", pa.string()),
    ("sample_idx", pa.int32()),
    ("prompt", pa.string()),
    ("text", pa.string()),
    ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("latency_s", pa.float64()),
    ("attempts", pa.int32()),
    ("cached", pa.bool_()),
    ("error", pa.string()),
])

GENERATIONS = pa.schema([
    ("gen_id", pa.string()),
    ("run_id", pa.string()),
    ("model", pa.string()),
    ("task", pa.string()),
    ("item_id", pa.string()),
    ("sample_idx", pa.int32()),
    ("text", pa.string()),
    ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("latency_s", pa.float64()),
    ("attempts", pa.int32()),
    ("cached", pa.bool_()),  # answered from the call cache: no model call was made
    ("error", pa.string()),  # the generation's own (no answer); a later stage's failure of the row is in scores
])

ATOMS = pa.schema([
    ("atom_id", pa.string()),
    ("gen_id", pa.string()),
    ("model", pa.string()),
    ("task", pa.string()),
    ("atom_idx", pa.int32()),
    ("atom", pa.string()),
    ("decomposer", pa.string()),
])

VERDICTS = pa.schema([
    ("atom_id", pa.string()),
    ("gen_id", pa.string()),
    ("model", pa.string()),
    ("task", pa.string()),
    ("verifier", pa.string()),
    ("supported", pa.bool_()),  # null: the verifier could not decide
    ("evidence", pa.string()),
])

SCORES = pa.schema([
    ("gen_id", pa.string()),
    ("model", pa.string()),
    ("task", pa.string()),
    ("item_id", pa.string()),
    ("prompt", pa.string()),
    ("task_kind", pa.string()),  # response | refusal
    ("error", pa.string()),  # generation failed or missing: excluded from metrics, counted
    ("responded", pa.bool_()),
    ("abstention_rule", pa.string()),
    ("n_atoms", pa.int32()),
    ("n_unsupported", pa.int32()),
    ("n_unverified", pa.int32()),
    ("f", pa.float64()),  # fraction of verified atoms unsupported; null when not responded
    ("g", pa.float64()),  # utility of this generation
    ("atoms", pa.list_(pa.string())),
    ("unsupported_atoms", pa.list_(pa.string())),
])

# Calls to the judge and extractor, per (generation, stage, role), for the cost ledger.
ROLE_CALLS = pa.schema([
    ("run_id", pa.string()),
    ("gen_id", pa.string()),
    ("model", pa.string()),  # the model under test whose generation was judged
    ("task", pa.string()),
    ("stage", pa.string()),
    ("role", pa.string()),
    ("role_model", pa.string()),
    ("calls", pa.int64()),
    ("cached_calls", pa.int64()),
    ("failed_calls", pa.int64()),
    ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
])

QUARANTINE = pa.schema([
    ("source", pa.string()),
    ("row", pa.int64()),
    ("model", pa.string()),
    ("task", pa.string()),
    ("reason", pa.string()),
])

# The cost ledger of a run (cost/ledger.py), one file per run. usd is null where no price is
# known; note says why, or what prices a row at 0 (its deployment's or a shared service's time).
COSTS = pa.schema([
    ("model", pa.string()),
    ("role", pa.string()),
    ("task", pa.string()),
    ("stage", pa.string()),
    ("calls", pa.int64()),
    ("cached_calls", pa.int64()),
    ("failed_calls", pa.int64()),
    ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("resource", pa.string()),
    ("resource_seconds", pa.float64()),
    ("usd", pa.float64()),
    ("note", pa.string()),
])

# One entry of the model-call cache (models/cache.py).
# generations of a served model under test, written while it is deployed (<run>/staged/<model>/),
# read by the evaluation after its deployment is given back
STAGED = pa.schema([WORK.field(name) for name in ("gen_id", "text", "input_tokens", "output_tokens", "latency_s",
                                                   "attempts", "cached", "error")])

CALL_CACHE = pa.schema([
    ("key", pa.string()),
    ("text", pa.string()),
    ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("latency_s", pa.float64()),
])

TABLES: dict[str, pa.Schema] = {
    "generations": GENERATIONS,
    "atoms": ATOMS,
    "verdicts": VERDICTS,
    "scores": SCORES,
    "role_calls": ROLE_CALLS,
}
