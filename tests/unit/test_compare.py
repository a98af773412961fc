"""`halluscope compare`: one model across two runs, paired over the items both scored."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from halluscope.cli import main
from halluscope.contract.errorbars import paired_difference
from halluscope.halogen.metrics import task_metrics
from halluscope.records import TABLES
from halluscope.report.compare import compare
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

RNG = np.random.default_rng(11)
CONFIG = {"tasks": ["halogen/code"], "models": [{"id": m, "backend": "replay"} for m in ("m", "other")]}


def _run(root: Location, run_id: str, f: dict[str, np.ndarray]) -> RunStore:
    """A finished run: per model its items' f (all responded), and its metrics."""
    store = RunStore(root, run_id)
    rows = [{"gen_id": f"{m}-{i}", "model": m, "task": "halogen/code", "item_id": f"i{i}", "task_kind": "response",
             "error": None, "responded": True, "n_atoms": 4, "n_unsupported": int(round(4 * v)), "n_unverified": 0,
             "f": float(v), "g": 1.0 - float(v)} for m, values in f.items() for i, v in enumerate(values)]
    scores = pa.Table.from_pylist(rows, TABLES["scores"])
    store.write_batch("k0", {"scores": scores})
    store.write_json("metrics.json", task_metrics(pa.Table.from_pylist(rows)))
    store.write_json("manifest.json", {"run_id": run_id, "status": "complete", "config": CONFIG})
    return store


def test_a_model_across_two_runs_is_paired_over_the_items_both_scored(tmp_path, capsys):
    root = Location.from_url(f"file://{tmp_path}")
    old = RNG.integers(0, 5, 40) / 4
    new = np.clip(old - 0.25 * (RNG.random(40) < 0.5), 0, 1)  # the new version hallucinates less on some items
    a = _run(root, "a", {"m": old, "other": RNG.random(40)})
    b = _run(root, "b", {"m": new[:35]})  # five items not scored in B
    rows = compare(a, b)
    h = next(r for r in rows if (r["model"], r["figure"]) == ("m", "hallucination_score"))
    diff, se = paired_difference(new[:35], np.ones(35), old[:35], np.ones(35))
    assert h["n"] == 35 and h["diff"] == pytest.approx(diff) and h["stderr"] == pytest.approx(se)
    assert h["a"] == pytest.approx(old.mean()) and h["b"] == pytest.approx(new[:35].mean())  # each run's own figure
    assert h["ci95"][1] < 0 and h["favours"] == "B"  # told apart: B hallucinates less, and lower H is better
    favours = {r["figure"]: r["favours"] for r in rows}
    assert favours["response_ratio"] is None  # R has no better direction of its own (answer, or refuse?)
    assert favours["utility_score"] in ("B", "neither")
    assert {r["model"] for r in rows} == {"m"}  # "other" is in one run only
    assert {r["figure"] for r in rows} == {"response_ratio", "hallucination_score", "utility_score"}

    assert main(["compare", f"file://{tmp_path}/a", f"file://{tmp_path}/b", "--model", "m", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == rows
    assert main(["compare", f"file://{tmp_path}/a", f"file://{tmp_path}/b"]) == 0
    text = capsys.readouterr().out
    assert "B minus A" in text and "hallucination_score" in text and "*" in text


def test_runs_with_nothing_in_common_say_so(tmp_path, capsys):
    root = Location.from_url(f"file://{tmp_path}")
    _run(root, "a", {"m": RNG.random(5)})
    _run(root, "b", {"n": RNG.random(5)})
    assert main(["compare", f"file://{tmp_path}/a", f"file://{tmp_path}/b"]) == 0
    assert "share no model and task" in capsys.readouterr().out
    assert main(["compare", f"file://{tmp_path}/a", f"file://{tmp_path}/nowhere"]) != 0
    assert "no manifest.json" in capsys.readouterr().err


def test_a_benchmarks_own_table_or_the_generic_one_says_which_way_its_figures_are_better():
    from halluscope.contract.metrics import MetricRecord
    from halluscope.report.sections import generic
    from halluscope.task_registry import benchmarks

    assert {f.key: f.better for f in benchmarks()["halogen"].figures}["hallucination_score"] == "lower"
    section = generic("halogen", [MetricRecord("m", "halogen/code", "halogen",
                                               {"hallucination_score": 0.1, "utility_score": 0.9, "n_items": 3})])
    (table,) = section.parts
    assert table.notes == ["higher is better: utility_score", "lower is better: hallucination_score"]


def test_fewl_compares_a_model_across_two_runs_reading_each_runs_verdicts(tmp_path):
    """FEWL's scores are in its verdicts' evidence: each labelled model's are read from its own run."""
    from pathlib import Path

    import yaml
    from scipy import stats

    root = Location.from_url(f"file://{tmp_path}")
    old = RNG.normal(0.1, 0.2, 30)
    new = old + 0.05 + RNG.normal(0, 0.01, 30)  # better on every question, by about as much

    def run(run_id: str, values: np.ndarray) -> None:
        store = RunStore(root, run_id)
        keys = [{"gen_id": f"g{i}", "model": "m", "task": "fewl/score", "item_id": f"q{i}"} for i in range(30)]
        scores = pa.Table.from_pylist([{**k, "error": None} for k in keys], TABLES["scores"])
        verdicts = pa.Table.from_pylist([{**k, "atom_id": f"a{i}", "verifier": "fewl", "supported": True,
                                          "evidence": json.dumps({"score": float(v), "truthfulness": float(v),
                                                                  "penalty": 0.0, "methods": {}})}
                                         for i, (k, v) in enumerate(zip(keys, values))], TABLES["verdicts"])
        store.write_batch("k0", {"scores": scores, "verdicts": verdicts})
        store.write_json("metrics.json", [{"model": "m", "task": "fewl/score", "mean_score": float(values.mean())}])
        store.write_json("manifest.json", {"run_id": run_id, "status": "complete", "config": config})

    config = yaml.safe_load(open(Path(__file__).parents[2] / "examples" / "fewl" / "run.yaml"))
    run("a", old)
    run("b", new)
    rows = {r["figure"]: r for r in compare(RunStore(root, "a"), RunStore(root, "b"))}
    assert set(rows) == {"mean_score", "mean_truthfulness", "mean_penalty", "share_above_zero"}
    score = rows["mean_score"]
    assert score["n"] == 30 and score["diff"] == pytest.approx(new.mean() - old.mean())
    assert score["stderr"] == pytest.approx(score["diff"] / stats.ttest_rel(new, old).statistic)
    assert score["favours"] == "B" and score["a"] == pytest.approx(old.mean())
