"""Attribution of a finished run: read its hallucinated units, classify them against a corpus,
and write the ``attribution`` table and ``attribution.json`` into the run.

The paper matches each model to its own corpus (OLMo -> Dolma, Llama -> C4, GPT -> OpenWebText),
so one run is attributed once per corpus with that corpus's models. Each (corpus, model) gets a
part of its own, and its entries in ``attribution.json``: attributing again with the same corpus
name replaces them and leaves other corpora's results in place."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.compute as pc

from halluscope.errors import RunError
from halluscope.halogen.attribution.classify import (
    CODE_TASK,
    HISTORICAL_TASK,
    Lookups,
    Unit,
    classify_code,
    classify_historical,
    coverage,
    pair_atom,
)
from halluscope.halogen.attribution.corpus import CorpusIndex
from halluscope.records import stable_id
from halluscope.storage.parquet import read_parquet
from halluscope.storage.run import RunStore

TABLE = "attribution"
SUMMARY = "attribution.json"
TASKS = (CODE_TASK, HISTORICAL_TASK)
_PEOPLE = ("name1", "birth1", "death1", "name2", "birth2", "death2")

ATTRIBUTION = pa.schema([
    ("run_id", pa.string()),
    ("model", pa.string()),
    ("task", pa.string()),
    ("gen_id", pa.string()),
    ("atom", pa.string()),  # code: the package name; historical events: "name1 | name2"
    ("type_a", pa.bool_()),
    ("type_b", pa.bool_()),
    ("type_c", pa.bool_()),
    ("evidence", pa.string()),  # JSON: each query, its document count and sample document ids
    ("corpus", pa.string()),
])


def _hallucinated(store: RunStore, models: list[str] | None) -> tuple[list[dict], set[tuple[str, str]]]:
    """Scored rows of the attributable tasks that hallucinated, and every (model, task) in scope."""
    scores = store.read_table("scores", ["gen_id", "model", "task", "item_id", "error", "responded",
                                         "n_unsupported", "unsupported_atoms"])
    if scores.num_rows == 0:
        raise RunError(f"{store.loc.url} has no committed scores: not a halluscope run, or no batch finished")
    scores = scores.filter(pc.is_in(scores["task"], pa.array(TASKS)))
    if scores.num_rows == 0:
        raise RunError(f"{store.loc.url} has no scores for {' or '.join(TASKS)}, the tasks attribution covers")
    present = sorted(set(scores["model"].to_pylist()))
    if models:
        missing = sorted(set(models) - set(present))
        if missing:
            raise RunError(f"{store.loc.url} has no {'/'.join(TASKS)} scores for model(s) {missing}; "
                           f"it has {present}")
        scores = scores.filter(pc.is_in(scores["model"], pa.array(models)))
    scope = {(r["model"], r["task"]) for r in scores.select(["model", "task"]).to_pylist()}
    rows = [r for r in scores.to_pylist()
            if r["error"] is None and r["responded"] and r["n_unsupported"]]
    return rows, scope


def _item_fields(store: RunStore, task: str) -> dict[str, dict]:
    loc = store.items_location(task)
    if not loc.exists():
        raise RunError(f"{store.loc.url} has no items for {task} ({loc.url}); attribution needs the item fields")
    items = read_parquet(pa.BufferReader(loc.read_bytes()), columns=["item_id", "fields"])
    return {i: json.loads(fields) for i, fields in zip(items["item_id"].to_pylist(), items["fields"].to_pylist())}


def _units(store: RunStore, rows: list[dict]) -> tuple[list[Unit], list[Unit]]:
    code = [Unit(r["model"], CODE_TASK, r["gen_id"], atom)
            for r in rows if r["task"] == CODE_TASK for atom in dict.fromkeys(r["unsupported_atoms"])]
    events = [r for r in rows if r["task"] == HISTORICAL_TASK]
    fields = _item_fields(store, HISTORICAL_TASK) if events else {}
    people = []
    for r in events:
        f = fields.get(r["item_id"])
        if f is None:
            raise RunError(f"{store.loc.url}: {HISTORICAL_TASK} item {r['item_id']} is not in the items file")
        missing = [k for k in _PEOPLE if not str(f.get(k) or "").strip()]
        if missing:
            raise RunError(f"{store.loc.url}: {HISTORICAL_TASK} item {r['item_id']} lacks fields {missing}")
        people.append(Unit(r["model"], HISTORICAL_TASK, r["gen_id"], pair_atom(f), f))
    return code, people


def attribute_run(store: RunStore, corpus: CorpusIndex, corpus_name: str,
                  models: list[str] | None = None) -> list[dict]:
    """Classify a run's hallucinated code packages and historical meetings against ``corpus``;
    returns the summary rows written (one per model and task in scope, as in ``attribution.json``)."""
    rows, scope = _hallucinated(store, models)
    code, people = _units(store, rows)
    lookups = Lookups(corpus)
    flagged = classify_code(code, lookups) + classify_historical(people, lookups)
    for model in sorted({m for m, _ in scope}):
        part = [{"run_id": store.run_id, **r, "corpus": corpus_name} for r in flagged if r["model"] == model]
        store.write_part(TABLE, stable_id(TABLE, corpus_name, model), pa.Table.from_pylist(part, schema=ATTRIBUTION))
    summary = [{"corpus": corpus_name, **s} for s in coverage(flagged, scope)]

    doc = store.read_json(SUMMARY) or {"run_id": store.run_id, "corpora": {}, "summary": []}
    replaced = {(corpus_name, s["model"], s["task"]) for s in summary}
    kept = [s for s in doc["summary"] if (s["corpus"], s["model"], s["task"]) not in replaced]
    doc["summary"] = sorted(kept + summary, key=lambda s: (s["corpus"], s["model"], s["task"]))
    doc["corpora"][corpus_name] = {**corpus.describe(),
                                   "attributed_at": dt.datetime.now(dt.UTC).isoformat()}
    store.write_json(SUMMARY, doc)
    return summary
