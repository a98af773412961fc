"""``halluscope show RUN``: the evidence behind one number - a response, its atoms and each
verdict with what the verifier (the judge's own answer, a lookup) gave for it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from halluscope.report.escape import terminal
from halluscope.storage.run import RunStore

_MARK = {True: "supported  ", False: "UNSUPPORTED", None: "unverified "}
_EVIDENCE_CHARS = 300


def _of(store: RunStore, table: str, model: str, task: str, columns: list[str]) -> pa.Table:
    return store.read_table(table, columns, filters=[("model", "=", model), ("task", "=", task)])


def chosen(store: RunStore, model: str, task: str, item: str | None, hallucinated: bool) -> dict | None:
    """The scored row to show: the item asked for, else the most hallucinated response (with
    ``hallucinated``) or the first one by item id."""
    scores = _of(store, "scores", model, task, ["gen_id", "item_id", "prompt", "error", "responded",
                                                  "abstention_rule", "n_atoms", "n_unsupported", "f"])
    if item is not None:
        scores = scores.filter(pc.equal(scores.column("item_id"), item))
    elif hallucinated:
        scores = scores.filter(pc.fill_null(pc.greater(scores.column("f"), 0.0), False))
    rows = sorted(scores.to_pylist(), key=lambda r: (-(r["f"] or 0.0) if hallucinated else 0.0, r["item_id"]))
    return rows[0] if rows else None


def show(store: RunStore, model: str, task: str, item: str | None = None, hallucinated: bool = False) -> str:
    row = chosen(store, model, task, item, hallucinated)
    if row is None:
        what = f"item {item}" if item else "a hallucinated response" if hallucinated else "a scored response"
        return f"run {store.run_id}: no {what} of model {model} on {task}"
    gen = row["gen_id"]
    text = _of(store, "generations", model, task, ["gen_id", "text"]).filter(pc.equal(pc.field("gen_id"), gen))
    atoms = _of(store, "atoms", model, task, ["gen_id", "atom_id", "atom_idx", "atom"]).filter(
        pc.equal(pc.field("gen_id"), gen))
    verdicts = {v["atom_id"]: v for v in _of(store, "verdicts", model, task, ["gen_id", "atom_id", "verifier",
                                                                               "supported", "evidence"])
                .filter(pc.equal(pc.field("gen_id"), gen)).to_pylist()}
    f = "undefined (did not respond)" if row["f"] is None else f"{row['f']:.3f}"
    lines = [f"{model} on {task}, item {row['item_id']} (run {store.run_id})", "", "prompt:", row["prompt"], "",
             "response:", (text.column("text")[0].as_py() if text.num_rows else None) or f"(none: {row['error']})", "",
             f"responded: {row['responded']} ({row['abstention_rule'] or 'no abstention rule fired'}); "
             f"{row['n_unsupported']} of {row['n_atoms']} units unsupported; f = {f}", ""]
    for a in sorted(atoms.to_pylist(), key=lambda a: a["atom_idx"]):
        v = verdicts.get(a["atom_id"], {})
        lines.append(f"{_MARK[v.get('supported')]} {a['atom']}")
        if v.get("evidence"):
            evidence = " ".join(str(v["evidence"]).split())
            lines.append(f"    {v.get('verifier')}: {evidence[:_EVIDENCE_CHARS]}"
                         f"{'...' if len(evidence) > _EVIDENCE_CHARS else ''}")
    return terminal("\n".join(lines))
