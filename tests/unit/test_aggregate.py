"""The aggregation reads a run a model at a time and gets what one read of every row gets."""

import random

import pyarrow as pa
import pytest
from tests.support.totals import every_metric, tally

from halluscope import records
from halluscope.config.load import parse_config
from halluscope.cost.ledger import ledger
from halluscope.pipeline.aggregate import RowCounts, aggregate
from halluscope.records import MISSING
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

TASKS = ["halogen/code", "halogen/rationalization_binary", "halogen/code@corrected"]
MODELS = ["m1", "m2", "m3"]


def _score(rng: random.Random, model: str, task: str, i: int) -> dict:
    kind = "refusal" if "rationalization" in task else "response"
    error = rng.choice([None] * 8 + ["HTTP 500", MISSING])
    responded = None if error else rng.random() < 0.8
    atoms = [f"pkg{rng.randrange(40)}" for _ in range(rng.randrange(4))] if responded else []
    bad = [a for a in atoms if rng.random() < 0.4]
    f = (len(bad) / len(atoms) if atoms else 0.0) if responded else None
    return {"gen_id": f"{model}-{task}-{i}", "model": model, "task": task, "item_id": str(i), "prompt": "p",
            "task_kind": kind, "error": error, "responded": responded, "abstention_rule": "r",
            "n_atoms": len(atoms), "n_unsupported": len(bad), "n_unverified": 0, "f": f,
            "g": None if error else rng.random(), "atoms": atoms, "unsupported_atoms": bad}


def _role_calls(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist([{"run_id": "r", "gen_id": r["gen_id"], "model": r["model"], "task": r["task"],
                                  "stage": "verify", "role": "judge", "role_model": "j", "calls": 2,
                                  "cached_calls": 0, "failed_calls": 0, "input_tokens": 7, "output_tokens": 1}
                                 for r in rows], schema=records.ROLE_CALLS)


@pytest.fixture
def store(tmp_path) -> RunStore:
    """Parts of one model and task each, in several parts per unit, and one part of two models
    (as a run written by another version might hold)."""
    rng = random.Random(7)
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "r")
    rows = [_score(rng, m, t, i) for m in MODELS for t in TASKS for i in range(25)]
    units = [rows[i:i + 25] for i in range(0, len(rows), 25)]
    tails = [u[10:] for u in units]  # units[5] is m2's last, units[6] m3's first
    parts = [u[:10] for u in units] + tails[:5] + [tails[5] + tails[6]] + tails[7:]
    for n, part in enumerate(parts):
        store.write_batch(f"k{n:03d}", {"role_calls": _role_calls(part),
                                        "scores": pa.Table.from_pylist(part, schema=records.SCORES)})
    return store


CFG = parse_config({"tasks": TASKS, "models": [{"id": m, "backend": "replay"} for m in MODELS] + [
    {"id": "j", "role": "judge", "backend": "openai", "params": {"base_url": "http://127.0.0.1:9/v1", "model": "j"}},
    {"id": "x", "role": "extractor", "backend": "openai", "params": {"base_url": "http://127.0.0.1:9/v1", "model": "x"}}]})


def test_parts_found_by_model_from_their_footers(store):
    parts = store.parts_by("model")
    assert sorted(parts) == MODELS
    assert len(parts["m3"] & parts["m2"]) == 1  # the part of two models is listed under each


def test_a_model_at_a_time_equals_every_row_at_once(store):
    totals = aggregate(store, CFG.tasks, CFG.models, CFG.options_for)
    everything = store.read_table("scores")
    assert [r.as_json() for r in totals.metrics] == [r.as_json() for r in every_metric(CFG, store, everything)]
    assert {r.model for r in totals.metrics} == {*MODELS, "*"}  # "*": HALOGEN's paired differences
    at_once = RowCounts()
    at_once.add(everything)
    assert (totals.counts.kinds, totals.counts.errors, totals.counts.missing) == \
        (at_once.kinds, at_once.errors, at_once.missing)
    streamed = ledger(totals.calls, CFG.models, [], None)
    whole = ledger(tally(CFG.models, records.GENERATIONS.empty_table(), store.read_table("role_calls")), CFG.models, [],
                   None)
    assert streamed.to_pylist() == whole.to_pylist()
    assert sum(streamed.column("calls").to_pylist()) == 2 * everything.num_rows
