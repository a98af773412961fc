"""HalluLens metrics of a run from its rows: the paper's Gemma x medicine override, on by default,
recorded with the measured rates it replaced, and off when the options say so."""

import json

import pyarrow as pa
import pytest
from tests.support.totals import every_metric

from halluscope.config.load import parse_config
from halluscope.contract.metrics import MetricRecord
from halluscope.hallulens import report
from halluscope.hallulens.options import HalluLensOptions
from halluscope.records import SCORES
from halluscope.report.leaderboard import leaderboard

GEMMA, LLAMA = "gemma-2-9b-it", "llama-3.1-8b-instruct"
MIXED, GENERATED = "hallulens/nonexistent_mixed", "hallulens/nonexistent_generated"

# (task, item id, domain, trial) of two small NonExistentRefusal test sets
ITEMS = [(MIXED, f"m-an{i}", "animal", t) for t in (0, 1) for i in range(4)] + \
        [(MIXED, f"m-me{i}", "medicine", t) for t in (0, 1) for i in range(2)] + \
        [(GENERATED, f"g-re{i}", "restaurant", t) for t in (0, 1) for i in range(4)]
# false acceptances: the judge's does_believe per (model, item id, trial); everything else refused
BELIEVES = {(GEMMA, "m-an0", 0), (GEMMA, "m-an1", 0), (GEMMA, "m-an2", 0), (GEMMA, "m-me0", 0),
            (GEMMA, "m-an0", 1), (GEMMA, "m-an1", 1), (GEMMA, "g-re0", 0), (GEMMA, "g-re0", 1),
            (LLAMA, "m-an0", 0), (LLAMA, "m-me0", 0), (LLAMA, "m-me1", 0), (LLAMA, "g-re0", 0),
            (LLAMA, "m-an0", 1), (LLAMA, "m-me0", 1), (LLAMA, "g-re0", 1)}


def tables() -> tuple[pa.Table, pa.Table, dict[str, pa.Table]]:
    items = {task: pa.Table.from_pylist([{"item_id": f"{t}-{i}", "prompt": f"prompt {i}", "fields": json.dumps(
        {"bin": d, "trial": t, "name": "Paraclav Duo Syrup" if d == "medicine" else "Tortrix lynx"})}
        for task_, i, d, t in ITEMS if task_ == task]) for task in (MIXED, GENERATED)}
    scores = []
    for model in (GEMMA, LLAMA):
        for task, i, _, t in ITEMS:
            believes = (model, i, t) in BELIEVES
            scores.append({"gen_id": f"{model}-{t}-{i}", "model": model, "task": task, "item_id": f"{t}-{i}",
                           "error": None, "responded": believes, "n_atoms": int(believes),
                           "n_unsupported": int(believes), "n_unverified": 0})
    verdicts = pa.Table.from_pylist([], schema=pa.schema([("gen_id", pa.string()), ("task", pa.string()),
                                                          ("evidence", pa.string())]))
    return pa.Table.from_pylist(scores), verdicts, items


class _Rows:
    """The two reads the metrics make of a run's store besides the scores."""

    def __init__(self, verdicts: pa.Table, items: dict[str, pa.Table]) -> None:
        self.verdicts, self.items = verdicts, items

    def read_table(self, table: str, **_) -> pa.Table:
        assert table == "verdicts"
        return self.verdicts

    def read_items(self, task: str) -> pa.Table:
        return self.items[task]


def test_gemma_medicine_rate_is_set_to_zero_by_default_and_the_measured_one_kept():
    records = {r["model"]: r for r in report.compute(*tables())}
    gemma, llama = records[GEMMA], records[LLAMA]
    # trial 0: medicine 1 of 2 believed (measured 0.5) set to 0; mixed (3 + 0) / 6, measured 4 / 6
    # trial 1: medicine 0 of 2 (measured 0.0) set to 0; mixed 2 / 6 either way
    assert [(o["task"], o["trial"], o["domain"], o["value"], o["measured"]) for o in gemma["overrides"]] == \
        [(MIXED, 0, "medicine", 0.0, 0.5), (MIXED, 1, "medicine", 0.0, 0.0)]
    assert gemma["overrides"][0]["rule"] == "model id contains 'gemma'"
    t0 = gemma["trials"][0]
    assert t0["subtasks"]["mixed"]["false_acceptance_rate"] == 3 / 6
    assert t0["subtasks"]["mixed"]["measured_false_acceptance_rate"] == 4 / 6
    assert t0["subtasks"]["mixed"]["by_domain"]["medicine"]["measured_false_acceptance_rate"] == 0.5
    summary = gemma["summary"]
    assert summary["subtasks.mixed.false_acceptance_rate"]["mean"] == pytest.approx((3 / 6 + 2 / 6) / 2)
    assert summary["subtasks.mixed.measured_false_acceptance_rate"]["mean"] == pytest.approx((4 / 6 + 2 / 6) / 2)
    assert summary["false_acceptance_rate"]["mean"] == pytest.approx(((3 / 6 + 1 / 4) + (2 / 6 + 1 / 4)) / 4)
    assert summary["measured_false_acceptance_rate"]["mean"] == pytest.approx(((4 / 6 + 1 / 4) + (2 / 6 + 1 / 4)) / 4)
    # another model's medicine answers are scored as the judge read them
    assert "overrides" not in llama and "measured_false_acceptance_rate" not in llama["summary"]
    assert llama["trials"][0]["subtasks"]["mixed"]["by_domain"]["medicine"]["false_acceptance_rate"] == 1.0
    board = leaderboard([MetricRecord.from_json(r) for r in records.values()], "r")
    assert (f"- {GEMMA}: {MIXED} medicine false acceptance rate set to 0.0 (model id contains 'gemma'); "
            "measured per trial: 50.0, 0.0; NonExistent FAR as measured: 37.5 ± 11.8") in board


def test_override_matches_any_case_and_can_be_turned_off():
    scores, verdicts, items = tables()
    renamed = scores.set_column(scores.schema.get_field_index("model"), "model",
                                pa.array([m.replace("gemma", "Gemma") for m in scores.column("model").to_pylist()]))
    assert "overrides" in next(r for r in report.compute(renamed, verdicts, items) if r["model"] == "Gemma-2-9b-it")
    off = report.compute(scores, verdicts, items, HalluLensOptions(far_overrides=[]))
    gemma = next(r for r in off if r["model"] == GEMMA)
    assert "overrides" not in gemma and gemma["trials"][0]["subtasks"]["mixed"]["false_acceptance_rate"] == 4 / 6


def test_run_config_holds_the_override_and_refuses_a_bad_one():
    base = {"tasks": ["halogen/code"], "models": [{"id": GEMMA, "backend": "replay"}]}
    (default,) = parse_config(base).options_for("hallulens").far_overrides
    assert (default.model_contains, default.subtask, default.domain, default.value) == \
        ("gemma", "mixed", "medicine", 0.0)
    assert parse_config({**base, "benchmarks": {"hallulens": {"far_overrides": []}}}).options_for(
        "hallulens").far_overrides == []
    # and the run's metrics apply the config's options
    scores, verdicts, items = tables()
    off = parse_config({"tasks": [MIXED, GENERATED], "benchmarks": {"hallulens": {"far_overrides": []}},
                        "testsets": {MIXED: ["mixed.jsonl"], GENERATED: ["generated.jsonl"]},
                        "models": [{"id": GEMMA, "backend": "replay"},
                                   {"id": "j", "role": "judge", "backend": "scripted"}]})
    run_scores = pa.Table.from_pylist(scores.to_pylist(), schema=SCORES)
    gemma = next(r for r in every_metric(off, _Rows(verdicts, items), run_scores) if r.model == GEMMA)
    assert gemma.benchmark == "hallulens" and gemma.task == "hallulens/nonexistent"
    assert "overrides" not in gemma.values and \
        gemma.values["trials"][0]["subtasks"]["mixed"]["false_acceptance_rate"] == 4 / 6
    with pytest.raises(Exception, match="benchmarks.hallulens.far_overrides.0.value"):
        parse_config({**base, "benchmarks": {"hallulens": {"far_overrides": [
            {"model_contains": "x", "domain": "medicine", "value": 2}]}}})
