"""Standard errors beside HALOGEN's figures, checked against an independent computation."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from scipy import stats

from halluscope.contract.errorbars import Z95, mean_se, proportion_se, ratio_se
from halluscope.contract.metrics import MetricRecord
from halluscope.halogen.metrics import task_metrics
from halluscope.pipeline.aggregate import merged

RNG = np.random.default_rng(7)


def test_the_error_of_a_mean_is_scipys_sem():
    values = RNG.random(57).tolist()
    assert mean_se(values) == pytest.approx(stats.sem(values))
    flags = (RNG.random(80) < 0.3).astype(float)
    assert proportion_se(int(flags.sum()), 80) == pytest.approx(stats.sem(flags))
    assert mean_se([0.5]) is None and proportion_se(1, 1) is None


def test_the_ratio_error_is_the_linearised_variance_of_its_clusters():
    num, den = RNG.integers(0, 6, 40).astype(float), RNG.integers(1, 9, 40).astype(float)
    r = num.sum() / den.sum()
    # the delta method by hand: the ratio's influence of each cluster, its sample variance over n
    z = (num - r * den) / den.mean()
    assert ratio_se(num.tolist(), den.tolist()) == pytest.approx(stats.sem(z))
    # clusters of unequal size: more spread than a mean over atoms would claim
    atoms = np.repeat(num / den, den.astype(int))
    assert ratio_se(num.tolist(), den.tolist()) != pytest.approx(stats.sem(atoms))


def _scores(model: str, n: int, p_respond: float) -> list[dict]:
    rows = []
    for _ in range(n):
        responded = bool(RNG.random() < p_respond)
        atoms = int(RNG.integers(1, 6)) if responded else 0
        bad = int(RNG.integers(0, atoms + 1)) if responded else 0
        rows.append({"model": model, "task": "halogen/code", "task_kind": "response", "error": None,
                     "responded": responded, "n_atoms": atoms, "n_unsupported": bad, "n_unverified": 0,
                     "f": bad / atoms if atoms else None, "g": 1.0 - (bad / atoms if atoms else 0.0) if responded
                     else 0.0})
    return rows


def test_every_task_record_carries_its_error_interval_and_method():
    rows = _scores("a", 200, 0.8)
    (rec,) = task_metrics(pa.Table.from_pylist(rows))
    f = [r["f"] for r in rows if r["responded"]]
    assert rec["stderr"]["hallucination_score"] == pytest.approx(stats.sem(f))
    lo, hi = rec["ci95"]["hallucination_score"]
    assert (lo + hi) / 2 == pytest.approx(rec["hallucination_score"]) and hi - lo == pytest.approx(
        2 * Z95 * stats.sem(f))
    assert rec["stderr"]["utility_score"] == pytest.approx(stats.sem([r["g"] for r in rows]))
    assert set(rec["stderr"]) == set(rec["ci95"]) == set(rec["method"]) == {
        "response_ratio", "hallucination_score", "hallucination_score_micro", "utility_score"}
    two = [MetricRecord.from_json(r) for r in (rec, {**rec, "task": "halogen/biographies"})]  # both response-based
    (avg,) = [r.as_json() for r in merged("halogen", two) if r.values.get("aggregate")]
    assert avg["stderr"]["utility_score"] == pytest.approx(math.sqrt(2) * rec["stderr"]["utility_score"] / 2)


def test_neighbours_in_the_ranking_are_told_apart_only_beyond_their_interval():
    from halluscope.halogen.report import rank_separations
    from halluscope.report.ranking import separated

    def rec(model, h, se):
        return {"model": model, "task": "halogen/code", "hallucination_score": h, "stderr": {"hallucination_score": se}}

    a, b, c = rec("a", 0.10, 0.01), rec("b", 0.12, 0.01), rec("c", 0.30, 0.02)
    assert separated(a, b, None, "hallucination_score") is False  # 0.02 < 1.96 * sqrt(2) * 0.01
    assert separated(b, c, None, "hallucination_score") is True
    assert separated(a, {"model": "x", "hallucination_score": 0.5}, None, "hallucination_score") is None
    (row,) = rank_separations([c, a, b], []).rows
    assert row[:4] == ["halogen/code", 3, 1, 2] and row[4] == "a ≈ b ＜ c"


def test_the_plan_says_the_smallest_difference_each_task_can_detect():
    from halluscope.pipeline.plan_view import detectable

    found = detectable({"halogen/code": 1085, "halogen/references": 100, "empty": 0})
    # (z_.975 + z_.8) * 0.5 * sqrt(2 / n): 0.060 with the code domain's 1,085 prompts
    assert found["halogen/code"] == {"items": 1085, "difference": pytest.approx(0.0601, abs=5e-4)}
    assert found["halogen/references"]["difference"] == pytest.approx(
        (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * 0.5 * math.sqrt(2 / 100))
    assert "empty" not in found


def test_fewl_means_carry_the_standard_error_of_a_mean_over_questions():
    from halluscope.fewl.report import _model_record

    scores = [0.5, -0.25, 0.125, 0.0, 0.75]
    rows = [{"gen_id": f"g{i}"} for i in range(len(scores) + 1)]  # the last one unscored
    evidence = {f"g{i}": {"score": s, "truthfulness": s + 1, "penalty": 0.5, "methods": {}} for i, s in enumerate(scores)}
    r = _model_record("m", "fewl/score", rows, evidence)
    assert (r["scored"], r["unscored"]) == (5, 1)
    assert r["stderr"]["mean_score"] == pytest.approx(stats.sem(scores))
    assert r["stderr"]["mean_truthfulness"] == pytest.approx(stats.sem(scores))
    assert r["stderr"]["mean_penalty"] == 0.0
    assert r["stderr"]["share_above_zero"] == pytest.approx(stats.sem([1, 0, 1, 0, 1]))
    low, high = r["ci95"]["mean_score"]
    assert (low + high) / 2 == pytest.approx(r["mean_score"])


# --- paired differences ---------------------------------------------------------------------------


def test_the_paired_error_of_a_mean_difference_is_scipys_paired_t_error():
    from halluscope.contract.errorbars import paired_difference

    a, b = RNG.random(60), RNG.random(60)
    ones = np.ones(60)
    diff, se = paired_difference(a, ones, b, ones)
    t = stats.ttest_rel(a, b).statistic  # the paired t statistic: mean difference / its standard error
    assert diff == pytest.approx(a.mean() - b.mean()) and se == pytest.approx(diff / t)
    assert paired_difference(a[:1], ones[:1], b[:1], ones[:1])[1] is None
    assert paired_difference(a, np.zeros(60), b, ones) == (None, None)  # a ratio over no responded item
    one = np.eye(1, 60)[0]  # a ratio over one responded item: defined, its error not
    assert paired_difference(a, one, b, ones)[1] is None


def test_the_paired_ratio_error_is_the_linearised_variance_of_each_items_two_terms():
    from halluscope.contract.errorbars import paired_difference, ratio_se

    num_a, den_a = RNG.random(50), (RNG.random(50) < 0.8).astype(float)
    num_b, den_b = RNG.random(50), (RNG.random(50) < 0.6).astype(float)
    num_a, num_b = num_a * den_a, num_b * den_b
    diff, se = paired_difference(num_a, den_a, num_b, den_b)
    ra, rb = num_a.sum() / den_a.sum(), num_b.sum() / den_b.sum()
    z = (num_a - ra * den_a) / den_a.sum() - (num_b - rb * den_b) / den_b.sum()
    assert diff == pytest.approx(ra - rb) and se == pytest.approx(math.sqrt(50 / 49 * (z ** 2).sum()))
    # against a model of zeros (nothing in common), the error is the first ratio's own
    zeros = np.zeros(50)
    assert paired_difference(num_a, den_a, zeros, np.ones(50))[1] == pytest.approx(
        ratio_se(num_a.tolist(), den_a.tolist()))


def test_models_answering_the_same_items_alike_are_told_apart_by_the_paired_error_only():
    """Two models whose hallucination follows the items' difficulty, one a little worse everywhere:
    the unpaired interval of their difference holds 0, the paired one does not."""
    from halluscope.halogen.paired import paired
    from halluscope.halogen.report import rank_separations

    difficulty = RNG.random(300)
    rows = [{"model": m, "task": "halogen/code", "task_kind": "response", "item_id": f"i{i}", "error": None,
             "responded": True, "n_atoms": 10, "n_unsupported": 0, "n_unverified": 0,
             "f": min(1.0, d + shift), "g": 1.0 - min(1.0, d + shift)}
            for m, shift in (("a", 0.0), ("b", 0.02)) for i, d in enumerate(difficulty)]
    scores = pa.Table.from_pylist(rows)
    per_task = task_metrics(scores)
    (record,) = paired(scores, ["halogen/code"])
    (pair,) = record["pairs"]
    h = pair["hallucination_score"]
    assert (pair["a"], pair["b"], pair["n"]) == ("a", "b", 300)
    assert h["diff"] == pytest.approx(per_task[0]["hallucination_score"] - per_task[1]["hallucination_score"])
    unpaired = math.hypot(*(r["stderr"]["hallucination_score"] for r in per_task))
    assert abs(h["diff"]) < Z95 * unpaired and abs(h["diff"]) > Z95 * h["stderr"]
    (told,) = rank_separations(per_task, [record]).rows
    (not_told,) = rank_separations(per_task, []).rows
    assert told[2] == 1 and not_told[2] == 0
    # items only one model answered are left out of the pair
    b_lost_one = pc.invert(pc.and_(pc.equal(scores["model"], "b"), pc.equal(scores["item_id"], "i0")))
    (fewer,) = paired(scores.filter(b_lost_one), ["halogen/code"])
    assert fewer["pairs"][0]["n"] == 299


def test_halogens_means_over_items_pair_with_scipys_paired_t_error():
    """R and U are means over the items: HALOGEN's hook gives their paired error as scipy's paired t
    error of the per-item differences."""
    from halluscope.halogen.paired import paired

    g = {m: RNG.random(50) for m in ("a", "b")}
    responded = {m: RNG.random(50) < 0.8 for m in ("a", "b")}
    rows = [{"model": m, "task": "halogen/code", "item_id": f"i{i}", "error": None, "responded": bool(responded[m][i]),
             "f": float(1 - g[m][i]) if responded[m][i] else None, "g": float(g[m][i])}
            for m in ("a", "b") for i in range(50)]
    (record,) = paired(pa.Table.from_pylist(rows), ["halogen/code"])
    pair = record["pairs"][0]
    for figure, per_item in (("utility_score", g), ("response_ratio", {m: responded[m].astype(float) for m in g})):
        d = pair[figure]
        assert d["diff"] == pytest.approx(per_item["a"].mean() - per_item["b"].mean())
        assert d["stderr"] == pytest.approx(d["diff"] / stats.ttest_rel(per_item["a"], per_item["b"]).statistic)


def test_with_an_earlier_runs_paired_records_the_plan_says_what_two_models_answering_alike_detect(tmp_path):
    from halluscope.pipeline.plan_view import detectable
    from halluscope.pipeline.token_stats import TokenStats
    from halluscope.storage.fs import Location
    from halluscope.storage.run import RunStore

    def pair(a: str, b: str, se: float) -> dict:
        return {"a": a, "b": b, "n": 400, "hallucination_score": {"diff": 0.01, "stderr": se, "ci95": None},
                "utility_score": {"diff": 0.0, "stderr": None, "ci95": None}}

    store = RunStore(Location.from_url(f"file://{tmp_path}"), "earlier")
    store.write_json("manifest.json", {"run_id": "earlier"})
    store.write_json("metrics.json", [
        {"model": "a", "task": "halogen/code", "hallucination_score": 0.1},
        {"model": "*", "task": "halogen/code", "table": "paired", "figures": ["hallucination_score", "utility_score"],
         "pairs": [pair("a", "b", 0.010), pair("a", "c", 0.020), pair("b", "c", 0.015)], "method": "m"}])
    measured = TokenStats.from_runs([f"file://{tmp_path}/earlier"])
    # the median pair's sd of per-item differences: 0.015 * sqrt(400) = 0.3; no error, no spread
    assert measured.spreads == {"halogen/code": {"hallucination_score": pytest.approx(0.3)}}
    found = detectable({"halogen/code": 100, "halogen/references": 100}, measured.spreads)
    expected = (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * 0.3 / math.sqrt(100)
    assert found["halogen/code"]["paired"] == {"hallucination_score": pytest.approx(expected)}
    assert found["halogen/code"]["paired"]["hallucination_score"] < found["halogen/code"]["difference"]
    assert "paired" not in found["halogen/references"]  # no earlier measurement: the stated bound alone


def test_a_spread_measured_over_prompts_of_several_trials_is_taken_per_item(tmp_path):
    """HalluLens pairs by prompt, each asked in two trials here: 30 prompts, 60 items. The plan
    counts items, so the spread is per item: se x sqrt(30 x 60 / 30)."""
    import pyarrow.parquet as pq

    from halluscope.pipeline.token_stats import paired_spreads
    from halluscope.storage.fs import Location
    from halluscope.storage.run import RunStore

    store = RunStore(Location.from_url(f"file://{tmp_path}"), "earlier")
    task = "hallulens/precise_wikiqa"
    store.write_json("metrics.json", [
        {"model": "*", "task": task, "table": "paired", "figures": ["correct_rate"], "method": "m",
         "pairs": [{"a": "a", "b": "b", "n": 30, "correct_rate": {"diff": 0.1, "stderr": 0.05, "ci95": None}}]}])
    folder = tmp_path / "earlier" / "items"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"item_id": [f"i{i}" for i in range(60)]}), folder / "hallulens__precise_wikiqa.parquet")
    assert paired_spreads([store]) == {task: {"correct_rate": pytest.approx(0.05 * math.sqrt(60))}}


def _many_models(n_models: int, n_items: int, seed: int = 3) -> pa.Table:
    """Models whose H follows the items' difficulty, each shifted by its own amount; some items
    unanswered (no response) and one model that answers nothing."""
    rng = np.random.default_rng(seed)
    difficulty = rng.random(n_items)
    rows = []
    for m in range(n_models):
        shift = 0.01 * m
        for i, d in enumerate(difficulty):
            responded = m != n_models - 1 and rng.random() > 0.1
            f = min(1.0, max(0.0, d + shift + rng.normal(0, 0.05)))
            rows.append({"model": f"m{m:02d}", "task": "halogen/code", "task_kind": "response", "item_id": f"i{i}",
                         "error": None, "responded": responded, "n_atoms": 10, "n_unsupported": 0,
                         "n_unverified": 0, "f": f if responded else None, "g": 1.0 - f if responded else 0.0})
    return pa.Table.from_pylist(rows)


def _brute_ranks(scores: pa.Table, figure: str) -> dict[str, list[int]]:
    """Rank intervals from every two models' ``paired_difference``, one pair at a time."""
    from halluscope.contract.errorbars import paired_difference
    from halluscope.halogen.paired import _PARTS, _grid

    models, present, values = _grid(scores.sort_by([("model", "ascending"), ("item_id", "ascending")]))
    num, den = _PARTS[figure]
    ranked = [i for i in range(len(models)) if (present[i] if den is None else values[den][i]).sum() > 0]
    lower = dict.fromkeys(ranked, 0)
    higher = dict.fromkeys(ranked, 0)
    for a, b in combinations(ranked, 2):
        both = present[a] & present[b]
        ones = np.ones(int(both.sum()))
        da, db = (ones, ones) if den is None else (values[den][a, both], values[den][b, both])
        diff, se = paired_difference(values[num][a, both], da, values[num][b, both], db)
        if diff is not None and se is not None and abs(diff) > Z95 * se:
            low, high = (a, b) if diff < 0 else (b, a)
            lower[high] += 1
            higher[low] += 1
    return {models[i]: [1 + lower[i], len(ranked) - higher[i]] for i in ranked}


def test_a_run_keeps_pairs_linear_in_its_models_and_rank_intervals_counted_over_every_pair():
    """Beyond 16 models a task keeps each figure's neighbours (not every two models: 2,000 models
    wrote a 1.08 GB metrics.json); each model's rank interval still counts every other model, as
    ``paired_difference`` one pair at a time does; a pair asked for is computed on demand."""
    from halluscope.contract.pairing import ALL_PAIRS_UP_TO
    from halluscope.halogen.paired import FIGURES, paired
    from halluscope.halogen.report import rank_intervals

    scores = _many_models(ALL_PAIRS_UP_TO + 4, 40)
    (record,) = paired(scores, ["halogen/code"])
    n = ALL_PAIRS_UP_TO + 4
    assert n - 1 <= len(record["pairs"]) <= len(FIGURES) * (n - 1) < n * (n - 1) // 2
    for figure in FIGURES:
        assert record["ranks"][figure] == _brute_ranks(scores, figure), figure
    (asked,) = paired(scores, ["halogen/code"], wanted=[("m19", "m00")])
    assert ("m00", "m19") in {(p["a"], p["b"]) for p in asked["pairs"]}
    table = rank_intervals([record])
    assert table is not None
    shown = {row[0]: row[1] for row in table.rows}
    lo, hi = record["ranks"]["hallucination_score"]["m05"]
    assert shown["m05"] == (f"{lo}" if lo == hi else f"{lo}-{hi}") and f"m{n - 1:02d}" not in shown
    (few,) = paired(_many_models(4, 40), ["halogen/code"])
    assert len(few["pairs"]) == 6  # up to 16 models: every two


def test_bars_with_intervals_carry_whiskers_and_the_intervals_also_as_text():
    from halluscope.report import svg

    style = svg.style(0)
    with_ci = svg.grouped_bars(["code"], [svg.StyledSeries("m", style, [0.2], [(0.15, 0.25)])], "t", "H")
    without = svg.grouped_bars(["code"], [svg.StyledSeries("m", style, [0.2])], "t", "H")
    assert with_ci.count("<path d=\"M") == 1 and "0.200 (95% interval 0.150 to 0.250)" in with_ci
    assert "<path d=\"M" not in without and "95% interval" not in without
