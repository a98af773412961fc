"""RAGTruth's paired differences: detectors by response, their pooled P/R/F1 with a paired
bootstrap over sources (scipy.stats.bootstrap, paired, on the same draws); models answering
sources by source, the rate's error scipy's paired t error; and models that follow the items'
difficulty, told apart by the paired error only."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from halluscope.contract.benchmark import MetricInputs
from halluscope.contract.errorbars import Z95, paired_bootstrap, proportion_se
from halluscope.ragtruth import report
from halluscope.ragtruth.benchmark import generate_metrics
from halluscope.ragtruth.corpus import load_corpus
from halluscope.ragtruth.intervals import cluster_bootstrap
from halluscope.ragtruth.metrics import count
from halluscope.ragtruth.paired import DETECTION, detection_figures, detection_record, generation_record
from halluscope.ragtruth.spans import Prediction, locate
from halluscope.ragtruth.tasks import DETECT, GENERATE, RagTruthOptions

RESAMPLES, SEED = 400, 7
_GENS = pa.schema([("gen_id", pa.string()), ("model", pa.string()), ("item_id", pa.string()),
                   ("text", pa.string()), ("error", pa.string())])
_SCORES = pa.schema([("gen_id", pa.string()), ("model", pa.string()), ("task", pa.string()),
                     ("item_id", pa.string()), ("n_atoms", pa.int64()), ("error", pa.string())])


def _corpus(tmp_path, n_sources: int) -> dict:
    """Two writers' responses per source, each with one annotated span (the year)."""
    responses, sources = [], []
    for i in range(n_sources):
        sources.append({"source_id": f"s{i:03d}", "task_type": "QA", "source": "MARCO",
                        "source_info": {"question": f"when was bridge {i} built", "passages": "p"},
                        "prompt": f"when was bridge {i} built?"})
        for w in ("w1", "w2"):
            text = f"Bridge {i} of {w} was built in {1800 + i} of stone."
            start = text.index(str(1800 + i))
            responses.append({"id": f"s{i:03d}-{w}", "source_id": f"s{i:03d}", "model": w, "temperature": 0.7,
                              "split": "test", "quality": "good", "response": text,
                              "labels": [{"start": start, "end": start + 4, "text": str(1800 + i), "meta": "",
                                          "label_type": "Evident Conflict"}]})
    (tmp_path / "response.jsonl").write_text("".join(json.dumps(r) + "\n" for r in responses))
    (tmp_path / "source_info.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sources))
    return {"responses": str(tmp_path / "response.jsonl"), "sources": str(tmp_path / "source_info.jsonl")}


def _inputs(task: str, gens: list[dict], options: RagTruthOptions | None = None) -> MetricInputs:
    """What the compare hook reads: scores of every model, and generations read a model at a time."""
    table = pa.Table.from_pylist([{k: g.get(k) for k in _GENS.names} for g in gens], _GENS)
    scores = pa.Table.from_pylist([{"task": task, "n_atoms": g.get("n_atoms", 0), **{k: g.get(k) for k in (
        "gen_id", "model", "item_id")}, "error": None} for g in gens], _SCORES)

    def read(name: str, columns: list[str], filters: list) -> pa.Table:
        (model,) = (v for c, _, v in filters if c == "model")
        return table.filter(pa.compute.equal(table.column("model"), model)).select(columns)

    return MetricInputs([task], scores, read, lambda t: None, options or RagTruthOptions())


def _reply(*spans: str) -> str:
    return json.dumps({"hallucination list": list(spans)})


def _detectors(tmp_path, n_sources: int, finds) -> tuple[MetricInputs, list]:
    """Two detectors' replies to every corpus response; ``finds(detector, source index, writer)``
    -> the spans it lists."""
    options = RagTruthOptions.model_validate({"corpus": _corpus(tmp_path, n_sources),
                                              "metrics": {"bootstrap_resamples": RESAMPLES, "bootstrap_seed": SEED}})
    corpus = load_corpus(options.corpus.responses, options.corpus.sources)
    gens = [{"gen_id": f"{d}-{r.id}", "model": d, "item_id": r.id, "error": None,
             "text": _reply(*finds(d, int(r.source_id[1:]), r.model))} for d in ("a", "b") for r in corpus.records]
    return _inputs(DETECT, gens, options), corpus.records


def _per_source(records: list, gens: list[dict], detector: str) -> np.ndarray:
    """A detector's counts summed per source (rows in source order), by ``metrics.count``."""
    text = {g["item_id"]: g["text"] for g in gens if g["model"] == detector}
    rows = []
    for source in sorted({r.source_id for r in records}):
        mine = [r for r in records if r.source_id == source]
        preds = {r.id: Prediction(*map(tuple, locate(json.loads(text[r.id])["hallucination list"], r.response)))
                 for r in mine}
        c = sum(count(mine, preds).values())
        rows.append([float(getattr(c, k)) for k in ("tp", "fp", "fn", "tp_chars", "pred_chars", "gold_chars",
                                                      "macro_p_sum", "macro_p_n", "macro_r_sum", "macro_r_n",
                                                      "macro_f1_sum", "macro_f1_n")])
    return np.array(rows)


def test_the_detectors_paired_bootstrap_is_scipys_paired_bootstrap_on_the_same_draws(tmp_path):
    rng = np.random.default_rng(1)
    pattern = {(d, i, w): (rng.random() < 0.6, rng.random() < 0.3) for d in "ab" for i in range(40) for w in ("w1", "w2")}

    def finds(d: str, i: int, w: str) -> list[str]:
        year, stone = pattern[(d, i, w)]
        return [str(1800 + i)] * year + ["stone"] * stone

    inputs, records = _detectors(tmp_path, 40, finds)
    record = detection_record(inputs, [("a", "b")])
    (pair,) = record["pairs"]
    assert (pair["a"], pair["b"], pair["n"]) == ("a", "b", 80)  # responses, both detectors scored each
    gens = inputs.read_table("generations", ["model", "item_id", "text"], [("model", "==", "a")]).to_pylist() + \
        inputs.read_table("generations", ["model", "item_id", "text"], [("model", "==", "b")]).to_pylist()
    sums_a, sums_b = _per_source(records, gens, "a"), _per_source(records, gens, "b")
    idx = np.arange(len(sums_a))
    for k, figure in enumerate(DETECTION):
        ref = stats.bootstrap((idx, idx), lambda i, j, axis, k=k: detection_figures(sums_a[i].sum(-2))[..., k]
                              - detection_figures(sums_b[j].sum(-2))[..., k], paired=True, vectorized=True,
                              n_resamples=RESAMPLES, method="percentile", random_state=np.random.default_rng(SEED))
        whole = detection_figures(np.stack([sums_a.sum(0), sums_b.sum(0)]))[:, k]
        assert pair[figure]["diff"] == pytest.approx(whole[0] - whole[1])
        assert pair[figure]["stderr"] == pytest.approx(ref.standard_error)
        assert pair[figure]["ci95"] == pytest.approx([ref.confidence_interval.low, ref.confidence_interval.high])
    # each detector's value the same as its own detection record's
    assert record["values"]["a"]["span_f1"] == pytest.approx(detection_figures(sums_a.sum(0, keepdims=True))[0, 5])
    assert "bootstrap" in record["method"] and f"{RESAMPLES} resamples" in record["method"]


def test_detectors_following_the_sources_difficulty_are_told_apart_by_the_paired_bootstrap_only(tmp_path):
    """Both find a source's annotated year where the source is easy enough, b a little further:
    the unpaired interval of their recall difference (their own bootstrap errors) holds 0, the
    paired one does not."""
    difficulty = np.random.default_rng(2).random(120)

    def finds(d: str, i: int, w: str) -> list[str]:
        return [str(1800 + i)] if difficulty[i] < (0.5 if d == "a" else 0.56) else []

    inputs, records = _detectors(tmp_path, 120, finds)
    record = detection_record(inputs)
    d = record["pairs"][0]["response_recall"]
    assert d["diff"] < 0 and d["ci95"][1] < 0  # a finds fewer: the paired interval excludes 0
    gens = [g for m in "ab" for g in inputs.read_table("generations", ["model", "item_id", "text"],
                                                       [("model", "==", m)]).to_pylist()]
    own = [cluster_bootstrap(_per_source(records, gens, m)[:, :6], RESAMPLES, np.random.default_rng(SEED))[0][1]
           for m in "ab"]  # each detector's own error of its recall
    assert abs(d["diff"]) < Z95 * math.hypot(*own)
    assert record["ranks"]["response_recall"] == {"a": [1, 1], "b": [2, 2]}
    # the report's tables: a's and b's F1 told apart by the paired record, each rank known
    rows = [{"model": m, "task": DETECT, "table": "detection", "task_type": "Overall", "generator": "*",
             "response_f1": v["response_f1"], "stderr": {"response_f1": 0.1}} for m, v in
            detection_record(inputs, [("a", "b")])["values"].items()]
    told, intervals = report.rankings(rows, [record])[:2]
    assert told.rows[0][1:4] == [2, 1, 1] and intervals.rows == [["a", "1"], ["b", "2"]]


def _writers(n: int, hallucinates) -> list[dict]:
    """Two writers' answers to n sources; ``hallucinates(writer, i)``: whether the judge found a span."""
    return [{"gen_id": f"{w}-{i}", "model": w, "item_id": f"s{i:03d}", "error": None,
             "text": "one two three four five six seven eight nine ten", "n_atoms": int(hallucinates(w, i))}
            for w in ("x", "y") for i in range(n)]


def test_the_hallucination_rate_pairs_by_source_its_error_scipys_paired_t_error():
    rng = np.random.default_rng(3)
    gens = _writers(60, lambda w, i: rng.random() < (0.3 if w == "x" else 0.5))
    record = generation_record(_inputs(GENERATE, gens), [("x", "y")])
    (pair,) = record["pairs"]
    x = np.array([g["n_atoms"] > 0 for g in gens if g["model"] == "x"], float)
    y = np.array([g["n_atoms"] > 0 for g in gens if g["model"] == "y"], float)
    d = pair["hallucination_rate"]
    assert pair["n"] == 60 and d["diff"] == pytest.approx(x.mean() - y.mean())
    assert d["stderr"] == pytest.approx(d["diff"] / stats.ttest_rel(x, y).statistic)
    assert record["values"] == {"x": {"hallucination_rate": pytest.approx(x.mean()), "density": pytest.approx(
        10 * x.mean())}, "y": {"hallucination_rate": pytest.approx(y.mean()), "density": pytest.approx(10 * y.mean())}}


def test_writers_following_the_sources_difficulty_are_told_apart_by_the_paired_error_only():
    """x hallucinates on the hardest sources, y on those and a few more: the rates' own errors
    (one answer per source, as the run reports them) leave the difference's unpaired interval over
    0, the paired one not."""
    difficulty = np.random.default_rng(4).random(400)
    gens = _writers(400, lambda w, i: difficulty[i] > (0.5 if w == "x" else 0.45))
    (pair,) = generation_record(_inputs(GENERATE, gens))["pairs"]
    d = pair["hallucination_rate"]
    k = {w: sum(g["n_atoms"] > 0 for g in gens if g["model"] == w) for w in "xy"}
    unpaired = math.hypot(*(proportion_se(k[w], 400) or 0.0 for w in "xy"))
    assert abs(d["diff"]) < Z95 * unpaired and d["ci95"][1] < 0
    assert generation_record(_inputs(GENERATE, gens))["ranks"]["hallucination_rate"] == {"x": [1, 1], "y": [2, 2]}


def test_a_pair_bootstrapped_alone_draws_as_it_does_among_others():
    """A generator seeded afresh per pair: `halluscope compare` asks for pairs a run does not keep."""
    sums = np.random.default_rng(5).integers(0, 9, (3, 30, 12)).astype(float)
    first = paired_bootstrap(sums[0], sums[1], detection_figures, 200, 0)
    paired_bootstrap(sums[1], sums[2], detection_figures, 200, 0)
    again = paired_bootstrap(sums[0], sums[1], detection_figures, 200, 0)
    assert all(np.array_equal(x, y) for x, y in zip(first, again))


def test_the_run_reports_the_generation_figures_it_pairs():
    """generate_metrics' figures over all task types are the paired record's values."""
    gens = _writers(20, lambda w, i: (i + (w == "y")) % 3 == 0)
    inputs = _inputs(GENERATE, gens)
    items = pa.table({"item_id": [f"s{i:03d}" for i in range(20)],
                      "fields": [json.dumps({"task_type": "QA"})] * 20})
    with_items = MetricInputs(inputs.tasks, inputs.scores, lambda name, columns, filters: pa.Table.from_pylist(
        [{"gen_id": g["gen_id"], "model": g["model"], "task": GENERATE, "item_id": g["item_id"], "text": g["text"],
          "error": None} for g in gens]).select(columns), lambda t: items, inputs.options)
    overall = {r["model"]: r for r in generate_metrics(with_items) if r["task_type"] == "Overall"}
    values = generation_record(inputs, [("x", "y")])["values"]
    for w in "xy":
        assert values[w]["hallucination_rate"] == pytest.approx(overall[w]["hallucination_rate"])
        assert values[w]["density"] == pytest.approx(overall[w]["density"])
