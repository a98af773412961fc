"""Arrow schemas of every table and the id scheme.

Ids are hashes of natural keys, so a re-run computes the same ids, skips what is written and
never duplicates a row."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.compute as pc

MISSING = "no recorded response"  # generations.error of an item its replay file lacks: counted apart


def stable_id(*parts: object) -> str:
    """16 hex chars of sha256 over the parts joined by a separator that cannot occur in them."""
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:16]


def generation_id(task: str, item_id: str, model: str, sample_idx: int = 0) -> str:
    return stable_id("gen", task, item_id, model, sample_idx)


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
    ("fields", pa.string()),
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
    ("error", pa.string()),
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
