"""The responses behind report.html's numbers: per (model, task) the most hallucinated responses,
then a clean one and a refusal, each with its units and verdicts, in a page of bounded size.

Picked from the engine's own tables (scores, generations, atoms, verdicts), so every benchmark's
pairs get them. Texts are cut to fixed lengths, and pairs take turns (every pair's first sample,
then every pair's second, ...) while the samples fit ``budget`` characters, so the page stays
bounded whatever the run's size; `halluscope show` prints a response whole.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from halluscope.storage.run import RunStore

BUDGET_CHARS = 1_000_000  # every sample of a page together: their text and a markup allowance
PER_PAIR = 5  # samples a pair can have: up to three hallucinated, a clean one, a refusal
HALLUCINATED = 3
PROMPT_CHARS, RESPONSE_CHARS, UNIT_CHARS, EVIDENCE_CHARS = 300, 800, 200, 160
UNITS = 8  # units shown per response (the count of the rest is given)
OVERHEAD_CHARS, UNIT_OVERHEAD_CHARS = 400, 80  # the markup around a sample and a unit, counted in the budget
_SCORE_COLUMNS = ["gen_id", "model", "task", "item_id", "responded", "abstention_rule", "n_atoms", "n_unsupported",
                  "f", "error"]


@dataclass(frozen=True)
class Unit:
    text: str
    supported: bool | None  # None: the verifier could not decide, or no verdict was written
    verifier: str | None
    evidence: str | None


@dataclass(frozen=True)
class Sample:
    why: str  # "most hallucinated", "clean", "refusal"
    item_id: str
    prompt: str
    response: str | None
    responded: bool | None
    abstention_rule: str | None
    f: float | None
    n_atoms: int | None
    n_unsupported: int | None
    units: tuple[Unit, ...]
    more_units: int  # units not shown

    def chars(self) -> int:
        """Its text, and a fixed allowance per sample and unit for the markup around it."""
        return (OVERHEAD_CHARS + len(self.item_id) + len(self.prompt) + len(self.response or "")
                + sum(UNIT_OVERHEAD_CHARS + len(u.text) + len(u.evidence or "") + len(u.verifier or "")
                      for u in self.units))


@dataclass(frozen=True)
class PairSamples:
    model: str
    task: str
    anchor: str  # the id report.html's cells of this pair link to
    samples: tuple[Sample, ...]
    scored: int  # the pair's scored responses


def anchor(model: str, task: str) -> str:
    """An HTML id for a pair that holds no character of a model id or task name."""
    return "sample-" + hashlib.sha256(f"{model}\0{task}".encode()).hexdigest()[:16]


def _cut(text: str | None, n: int, lines: bool = False) -> str:
    """At most n characters; on one line unless ``lines`` (a response keeps its line breaks)."""
    text = (text or "").strip() if lines else " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


Pair = tuple[str, str]  # (model, task)


def _firsts(rows: pa.Table, order: list[tuple[str, str]], n: int) -> dict[Pair, list[dict]]:
    """The first ``n`` rows of each pair in ``order`` (pyarrow sort keys after model and task)."""
    rows = rows.sort_by([("model", "ascending"), ("task", "ascending"), *order])
    codes = pc.dictionary_encode(pc.binary_join_element_wise(rows["model"], rows["task"], "\0")).combine_chunks()
    pair = codes.indices.to_numpy()
    at = np.arange(len(pair))
    first = np.maximum.accumulate(np.where(np.r_[True, pair[1:] != pair[:-1]], at, 0)) if len(pair) else at
    out: dict[Pair, list[dict]] = defaultdict(list)
    for r in rows.filter(pa.array(at - first < n)).to_pylist():
        out[(r["model"], r["task"])].append(r)
    return out


def _candidates(store: RunStore) -> tuple[dict[Pair, list[tuple[str, dict]]], dict[Pair, int]]:
    """Each pair's picks in the order they are shown - its most hallucinated response (the highest
    share of unsupported units, then the most of them), a clean one, a refusal, its next most
    hallucinated - and its count of scored responses."""
    scores = store.read_table("scores", _SCORE_COLUMNS)
    scored = scores.filter(pc.is_null(scores["error"]))
    f = pc.fill_null(scored["f"], 0.0)
    worst = _firsts(scored.filter(pc.greater(f, 0.0)),
                    [("f", "descending"), ("n_unsupported", "descending"), ("item_id", "ascending")], HALLUCINATED)
    by_item = [("item_id", "ascending")]
    clean = _firsts(scored.filter(pc.and_(pc.fill_null(scored["responded"], False), pc.equal(f, 0.0))), by_item, 1)
    refused = _firsts(scored.filter(pc.fill_null(pc.invert(scored["responded"]), False)), by_item, 1)
    counts = {(r["model"], r["task"]): r["gen_id_count"]
              for r in scored.group_by(["model", "task"]).aggregate([("gen_id", "count")]).to_pylist()}
    pairs = sorted((r["model"], r["task"]) for r in scores.group_by(["model", "task"]).aggregate([]).to_pylist())
    picks = {pair: [*(("most hallucinated", r) for r in worst[pair][:1]), *(("clean", r) for r in clean[pair]),
                    *(("refusal", r) for r in refused[pair]), *(("most hallucinated", r) for r in worst[pair][1:])]
             for pair in pairs}
    return picks, {pair: counts.get(pair, 0) for pair in pairs}


def _in_turns(samples: dict[Pair, list[Sample]], budget: int) -> dict[Pair, list[Sample]]:
    """Every pair's first sample, then every pair's second, ..., while their text fits the budget."""
    kept: dict[Pair, list[Sample]] = {pair: [] for pair in samples}
    spent = 0
    for turn in range(PER_PAIR):
        for pair, queue in samples.items():
            if turn < len(queue) and spent + queue[turn].chars() <= budget:
                kept[pair].append(queue[turn])
                spent += queue[turn].chars()
    return kept


def _by_gen(table: pa.Table) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in table.to_pylist():
        out[r["gen_id"]].append(r)
    return out


def collect(store: RunStore, budget: int = BUDGET_CHARS) -> list[PairSamples]:
    """Every scored (model, task) pair of the run with its samples, in model and task order."""
    picks, counts = _candidates(store)
    gen_ids = sorted({r["gen_id"] for queue in picks.values() for _, r in queue})
    if not gen_ids:
        return [PairSamples(m, t, anchor(m, t), (), counts[(m, t)]) for m, t in picks]
    wanted: list[tuple[str, str, object]] = [("gen_id", "in", gen_ids)]
    texts = {r["gen_id"]: r["text"] for r in store.read_table("generations", ["gen_id", "text"], wanted).to_pylist()}
    prompts = {r["gen_id"]: r["prompt"] for r in store.read_table("scores", ["gen_id", "prompt"], wanted).to_pylist()}
    atoms = _by_gen(store.read_table("atoms", ["gen_id", "atom_id", "atom_idx", "atom"], wanted))
    verdicts = {v["atom_id"]: v for v in store.read_table(
        "verdicts", ["gen_id", "atom_id", "verifier", "supported", "evidence"], wanted).to_pylist()}

    def sample(why: str, r: dict) -> Sample:
        units = sorted(atoms.get(r["gen_id"], []), key=lambda a: a["atom_idx"])
        shown = [Unit(_cut(a["atom"], UNIT_CHARS), (v := verdicts.get(a["atom_id"], {})).get("supported"),
                      v.get("verifier"), _cut(v.get("evidence"), EVIDENCE_CHARS) or None) for a in units[:UNITS]]
        return Sample(why, r["item_id"], _cut(prompts.get(r["gen_id"]), PROMPT_CHARS),
                      _cut(texts.get(r["gen_id"]), RESPONSE_CHARS, lines=True) or None, r["responded"],
                      r["abstention_rule"], r["f"], r["n_atoms"], r["n_unsupported"], tuple(shown),
                      max(0, len(units) - UNITS))

    kept = _in_turns({pair: [sample(why, r) for why, r in queue] for pair, queue in picks.items()}, budget)
    return [PairSamples(m, t, anchor(m, t), tuple(kept[(m, t)]), counts[(m, t)]) for m, t in picks]
