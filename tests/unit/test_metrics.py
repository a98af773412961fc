import math

import pyarrow as pa
from tests.support.totals import with_groups

from halluscope import records
from halluscope.halogen.metrics import AVG_REFUSAL, AVG_RESPONSE, task_metrics


def compute(scores: pa.Table) -> list[dict]:
    """HALOGEN's records of a run as metrics.json holds them: per task, then the engine's averages."""
    return with_groups("halogen", task_metrics(scores))


def _row(model, task, kind, responded, n_atoms, n_unsup, n_unver=0, error=None):
    f = None
    if error is None and responded:
        verified = n_atoms - n_unver
        f = n_unsup / verified if verified else 0.0
    g = None if error else ((0.0 if responded else 1.0) if kind == "refusal" else ((1 - f) if responded else 0.0))
    return {"gen_id": f"{model}{task}{n_atoms}{n_unsup}{responded}{error}", "model": model, "task": task,
            "item_id": "i", "prompt": "p", "task_kind": kind, "error": error,
            "responded": None if error else responded, "abstention_rule": "r", "n_atoms": n_atoms,
            "n_unsupported": n_unsup, "n_unverified": n_unver, "f": f, "g": g,
            "atoms": [], "unsupported_atoms": []}


def test_hand_computed():
    rows = [
        _row("m", "halogen/code", "response", True, 4, 1),   # f = .25
        _row("m", "halogen/code", "response", True, 1, 1),   # f = 1
        _row("m", "halogen/code", "response", False, 0, 0),  # abstained
        _row("m", "halogen/code", "response", True, 3, 0, n_unver=1),  # f = 0 over 2 verified
        _row("m", "halogen/code", "response", None, 0, 0, error="no recorded response"),
        _row("m", "halogen/false_presuppositions", "refusal", True, 2, 2),    # f = 1, g = 0
        _row("m", "halogen/false_presuppositions", "refusal", False, 0, 0),   # g = 1
    ]
    metrics = {(r["model"], r["task"]): r for r in compute(pa.Table.from_pylist(rows, schema=records.SCORES))}
    t1 = metrics[("m", "halogen/code")]
    # no recorded response: counted as missing, not as an error of the run
    assert t1["n_items"] == 4 and (t1["n_errors"], t1["n_missing"]) == (0, 1) and t1["n_responded"] == 3
    assert t1["response_ratio"] == 3 / 4
    assert math.isclose(t1["hallucination_score"], (0.25 + 1 + 0) / 3)  # macro over responded
    assert math.isclose(t1["hallucination_score_micro"], 2 / (4 + 1 + 2))  # unsupported / verified atoms
    assert math.isclose(t1["utility_score"], (0.75 + 0 + 0 + 1) / 4)
    t2 = metrics[("m", "halogen/false_presuppositions")]
    assert t2["response_ratio"] == 0.5 and t2["utility_score"] == 0.5 and t2["hallucination_score"] == 1.0
    assert metrics[("m", AVG_RESPONSE)]["utility_score"] == t1["utility_score"]
    assert metrics[("m", AVG_REFUSAL)]["n_tasks"] == 1


def test_shards_do_not_change_results():
    rows = [_row("m", "t", "response", i % 3 != 0, i % 5, min(i % 5, i % 2)) for i in range(50)]
    whole = compute(pa.Table.from_pylist(rows, schema=records.SCORES))
    shards = pa.concat_tables([pa.Table.from_pylist(rows[i:i + 7], schema=records.SCORES) for i in range(0, 50, 7)])
    assert compute(shards) == whole


def test_empty_scores():
    assert compute(records.SCORES.empty_table()) == []


def test_the_leaderboard_counts_items_not_in_the_file_apart_from_errors():
    from halluscope.contract.metrics import MetricRecord
    from halluscope.report.leaderboard import leaderboard

    rows = [_row("m", "halogen/code", "response", True, 1, 0),
            _row("m", "halogen/code", "response", None, 0, 0, error="HTTP 500"),
            *[_row("m", "halogen/code", "response", None, 0, n, error="no recorded response") for n in range(3)]]
    board = leaderboard([MetricRecord.from_json(r) for r in compute(pa.Table.from_pylist(rows, schema=records.SCORES))],
                        "r")
    assert "| errors | not in file |" in board
    assert board.split("\n| m | 1 |")[1].rstrip().split("\n")[0].endswith("| 1 | 3 |")


def test_top_unsupported_counts_responses_and_breaks_ties_by_name():
    def named(model, units, **kw):
        return {**_row(model, "halogen/code", "response", True, len(units), len(units), **kw),
                "gen_id": f"{model}{units}{kw}", "unsupported_atoms": units}

    rows = [named("m", ["zeta", "zeta", "alpha"]),  # a response counts a unit once
            named("m", ["zeta", "beta"]), named("m", ["beta"]),
            named("m", ["gamma"], error="HTTP 500"),  # failed rows name nothing
            named("m", [f"u{i:02d}" for i in range(40)]),  # 40 names seen once: the top 30 is cut
            named("other", ["alpha"])]
    top = {(r["model"], r["task"]): r["top_unsupported"]
           for r in compute(pa.Table.from_pylist(rows, schema=records.SCORES)) if "top_unsupported" in r}
    m = top[("m", "halogen/code")]
    assert m[:4] == [["beta", 2], ["zeta", 2], ["alpha", 1], ["u00", 1]] and len(m) == 30
    assert m[-1] == ["u26", 1] and top[("other", "halogen/code")] == [["alpha", 1]]
