"""HalluLens metrics: hand-computed examples, and the spec's invariants as properties over random trials."""

import math
import random
from fractions import Fraction

import pytest

from halluscope.errors import DataError
from halluscope.hallulens import metrics
from halluscope.hallulens.metrics import CORRECT, INCORRECT, UNVERIFIABLE, EntityJudged, LongFormJudged, QAJudged

CASES = 300


# --- PreciseWikiQA -------------------------------------------------------------------------------


def qa_example():
    return [
        QAJudged("a1", True, bin=0), QAJudged("a2", True, bin=0), QAJudged("a3", True, CORRECT, bin=9),
        QAJudged("c1", False, CORRECT, bin=9), QAJudged("c2", False, CORRECT, bin=9),
        QAJudged("c3", False, CORRECT, bin=0), QAJudged("c4", False, CORRECT, bin=0),
        QAJudged("i1", False, INCORRECT, bin=0), QAJudged("i2", False, INCORRECT, bin=9),
        QAJudged("u1", False, UNVERIFIABLE, bin=0),
        QAJudged("e1", None, error="HTTP 500", bin=0),  # generation failed
        QAJudged("x1", None, bin=0),  # unreadable abstention verdict
        QAJudged("x2", False, None, bin=9),  # answered, unreadable correctness verdict
    ]


def test_precise_wikiqa_hand_example():
    m = metrics.precise_wikiqa(qa_example())
    # 13 items; 3 unscored (1 error, 1 unreadable abstention, 1 unreadable correctness) -> N = 10
    assert (m["n_items"], m["n_errors"], m["n_abstention_unreadable"], m["n_correctness_unreadable"]) == (13, 1, 1, 1)
    assert (m["n_scored"], m["n_abstained"], m["n_answered"]) == (10, 3, 7)
    assert (m["n_correct"], m["n_incorrect"], m["n_unverifiable"], m["n_hallucinated"]) == (4, 2, 1, 3)
    assert m["false_refusal_rate"] == 3 / 10  # |A| / N
    assert m["hallucination_rate"] == 3 / 7  # (2 INCORRECT + 1 UNVERIFIABLE) / (10 - 3)
    assert m["correct_rate"] == 4 / 10  # a3 is abstained: a refusal judged CORRECT is not correct
    assert m["correct_rate"] == pytest.approx((1 - 3 / 10) * (1 - 3 / 7))  # 0.7 * 4/7 = 0.4
    # bin 0: a1 a2 abstained; c3 c4 correct; i1 u1 hallucinated -> N 6, FRR 2/6, HR 2/4, CR 2/6
    b0 = m["by_bin"][0]
    rates = ("n_scored", "false_refusal_rate", "hallucination_rate", "correct_rate")
    assert tuple(b0[r] for r in rates) == (6, 2 / 6, 2 / 4, 2 / 6)
    # bin 9: a3 abstained; c1 c2 correct; i2 hallucinated -> N 4, FRR 1/4, HR 1/3, CR 2/4
    b9 = m["by_bin"][9]
    assert tuple(b9[r] for r in rates) == (4, 1 / 4, 1 / 3, 2 / 4)


def test_bins_come_in_natural_order_whatever_their_type():
    rows = [QAJudged("a", True, bin="10"), QAJudged("b", False, CORRECT, bin="2"), QAJudged("c", True, bin="9")]
    assert list(metrics.precise_wikiqa(rows)["by_bin"]) == ["2", "9", "10"]
    rows = [LongFormJudged("a", True, bin=9), LongFormJudged("b", True, bin=5)]
    assert list(metrics.longwiki(rows)["by_bin"]) == [5, 9]


def test_precise_wikiqa_all_refused_and_empty():
    m = metrics.precise_wikiqa([QAJudged("a", True), QAJudged("b", True)])
    assert (m["false_refusal_rate"], m["hallucination_rate"], m["correct_rate"]) == (1.0, 0.0, 0.0)  # HR defined as 0
    m = metrics.precise_wikiqa([QAJudged("e", None, error="failed")])
    assert (m["n_scored"], m["false_refusal_rate"], m["hallucination_rate"], m["correct_rate"]) == (0, None, None, None)


def test_precise_wikiqa_rejects_an_unknown_verdict():
    with pytest.raises(DataError, match="item q7: verdict 'correct' is not CORRECT"):
        metrics.precise_wikiqa([QAJudged("q7", False, "correct")])


def random_qa(rng: random.Random) -> list[QAJudged]:
    out = []
    for i in range(rng.randint(0, 60)):
        roll = rng.random()
        error = "failed" if roll < 0.05 else None
        abstained = None if roll < 0.1 else rng.random() < rng.choice([0.0, 0.2, 0.8, 1.0])
        verdict = rng.choice([CORRECT, CORRECT, INCORRECT, UNVERIFIABLE, None])
        out.append(QAJudged(f"q{i}", abstained, verdict, bin=rng.randrange(10), error=error))
    return out


def test_precise_wikiqa_invariants():
    for seed in range(CASES):
        rng = random.Random(seed)
        records = random_qa(rng)
        m = metrics.precise_wikiqa(records)
        unscored = m["n_errors"] + m["n_abstention_unreadable"] + m["n_correctness_unreadable"]
        assert m["n_items"] == m["n_scored"] + unscored == len(records)
        assert m["n_scored"] == m["n_abstained"] + m["n_answered"]
        assert m["n_answered"] == m["n_correct"] + m["n_hallucinated"]
        if m["n_scored"]:
            frr, hr, cr = m["false_refusal_rate"], m["hallucination_rate"], m["correct_rate"]
            assert cr == pytest.approx((1 - frr) * (1 - hr), abs=1e-12), seed  # spec section 3.5
            assert all(0.0 <= v <= 1.0 for v in (frr, hr, cr))
        for b in m["by_bin"].values():
            if b["n_scored"]:
                assert b["correct_rate"] == pytest.approx((1 - b["false_refusal_rate"]) * (1 - b["hallucination_rate"]))
        assert sum(b["n_scored"] for b in m["by_bin"].values()) == m["n_scored"]
        assert sum(b["n_abstained"] for b in m["by_bin"].values()) == m["n_abstained"]
        shuffled = records[:]
        rng.shuffle(shuffled)
        assert metrics.precise_wikiqa(shuffled) == m  # shard and row order do not matter


# --- LongWiki ------------------------------------------------------------------------------------


def longwiki_example():
    return [
        LongFormJudged("A", False, n_claims=10, n_supported=8, bin=5),
        LongFormJudged("B", False, n_claims=40, n_supported=36, bin=5),
        LongFormJudged("C", True, bin=6),
        LongFormJudged("D", False, n_claims=0, bin=6),  # no claim: a refusal by default
        LongFormJudged("E", None, error="claim extraction: 1 failed", bin=6),
        LongFormJudged("F", None, bin=7),  # unreadable refusal verdict
        LongFormJudged("G", False, n_claims=3, n_unverified=3, bin=7),  # nothing decided
        LongFormJudged("H", False, n_claims=5, n_supported=2, n_unverified=1, bin=7),
    ]


def test_longwiki_hand_example():
    m = metrics.longwiki(longwiki_example(), k=32)
    assert (m["n_items"], m["n_errors"], m["n_refusal_unreadable"], m["n_all_unverified"]) == (8, 1, 1, 1)
    assert (m["n_scored"], m["n_refused"], m["n_refused_no_claims"], m["n_answered"]) == (5, 2, 1, 3)
    assert (m["n_claims"], m["n_supported"], m["n_unverified"], m["median_claims"]) == (55, 46, 1, 10)
    assert m["false_refusal_rate"] == 2 / 5  # C and D of the 5 scored prompts
    # A: P 8/10, R 8/32, F1 2(.8)(.25)/1.05 = 8/21
    # B: P 36/40, R min(36/32, 1) = 1, F1 1.8/1.9 = 18/19
    # H: 4 decided claims, P 2/4, R 2/32, F1 2(.5)(.0625)/.5625 = 1/9
    assert m["precision"] == pytest.approx((0.8 + 0.9 + 0.5) / 3)
    assert m["recall_at_k"] == pytest.approx((0.25 + 1.0 + 0.0625) / 3)  # 0.4375
    assert m["f1_at_k"] == pytest.approx(float((Fraction(8, 21) + Fraction(18, 19) + Fraction(1, 9)) / 3))  # 1723/3591
    hm = 2 * m["precision"] * m["recall_at_k"] / (m["precision"] + m["recall_at_k"])
    assert m["f1_at_k"] < hm  # 0.4798 < 0.5544: the mean of per-prompt F1, not the F1 of the means
    assert m["by_bin"][5]["precision"] == pytest.approx(0.85) and m["by_bin"][6]["false_refusal_rate"] == 1.0
    assert m["by_bin"][6]["precision"] is None  # nothing answered in bin 6


def test_longwiki_zero_claims_not_a_refusal_and_small_k():
    m = metrics.longwiki(longwiki_example(), k=4, zero_claims_is_refusal=False)
    # D now answered with P = R = F1 = 0; FRR 1/5
    assert (m["n_refused"], m["n_answered"], m["false_refusal_rate"]) == (1, 4, 1 / 5)
    assert m["precision"] == pytest.approx((0.8 + 0.9 + 0.5 + 0) / 4)
    # K = 4: A R = min(8/4, 1) = 1, B 1, H 2/4
    assert m["recall_at_k"] == pytest.approx((1 + 1 + 0.5 + 0) / 4)
    assert m["k"] == 4 and m["zero_claims_is_refusal"] is False


def test_longwiki_rejects_inconsistent_counts():
    with pytest.raises(DataError, match="LongWiki item z: inconsistent counts"):
        LongFormJudged("z", False, n_claims=3, n_supported=3, n_unverified=1)
    with pytest.raises(ValueError, match="K must be at least 1"):
        metrics.longwiki([], k=0)


def random_longwiki(rng: random.Random) -> list[LongFormJudged]:
    out = []
    for i in range(rng.randint(0, 40)):
        roll = rng.random()
        n = rng.choice([0, rng.randint(1, 5), rng.randint(1, 80)])
        unverified = rng.randint(0, n) if rng.random() < 0.2 else 0
        supported = rng.randint(0, n - unverified)
        out.append(LongFormJudged(f"p{i}", None if roll < 0.05 else roll < 0.2, n_claims=n, n_supported=supported,
                                  n_unverified=unverified, bin=rng.randint(5, 9),
                                  error="failed" if rng.random() < 0.05 else None))
    return out


def test_longwiki_invariants():
    for seed in range(CASES):
        rng = random.Random(seed)
        records = random_longwiki(rng)
        k = rng.choice([1, 4, 32])
        m = metrics.longwiki(records, k=k)
        unscored = m["n_errors"] + m["n_refusal_unreadable"] + m["n_all_unverified"]
        assert m["n_items"] == m["n_scored"] + unscored == len(records)
        assert m["n_scored"] == m["n_refused"] + m["n_answered"]
        if m["n_answered"]:
            p, r, f1 = m["precision"], m["recall_at_k"], m["f1_at_k"]
            assert all(0.0 <= v <= 1.0 for v in (p, r, f1))
            # per-prompt F1 averaged never exceeds the harmonic mean of the averages (spec 8.5;
            # the harmonic mean is concave, so Jensen's inequality)
            hm = 0.0 if p + r == 0 else 2 * p * r / (p + r)
            assert f1 <= hm + 1e-12, seed
            assert f1 <= max(p, r) + 1e-12
            # the bins' answered prompts partition the answered prompts
            bins = [b for b in m["by_bin"].values() if b["n_answered"]]
            assert math.fsum(b["precision"] * b["n_answered"] for b in bins) == pytest.approx(p * m["n_answered"])
        shuffled = records[:]
        rng.shuffle(shuffled)
        assert metrics.longwiki(shuffled, k=k) == m


# --- NonExistentRefusal --------------------------------------------------------------------------


def entity_example():
    mixed = [EntityJudged(f"an{i}", "mixed", "animal", b) for i, b in enumerate([True, True, True, False])]
    mixed += [EntityJudged("me0", "mixed", "medicine", False), EntityJudged("me1", "mixed", "medicine", False),
              EntityJudged("me2", "mixed", "medicine", None), EntityJudged("me3", "mixed", "medicine", True, error="x")]
    generated = [EntityJudged(f"b{i}", "generated", "restaurant", b) for i, b in enumerate([True, False, False])]
    generated.append(EntityJudged("p0", "generated", "printer", False))
    return mixed + generated


def test_nonexistent_hand_example():
    m = metrics.nonexistent(entity_example())
    mixed, generated = m["subtasks"]["mixed"], m["subtasks"]["generated"]
    # mixed: animal 3/4 believed, medicine 0/2 (one unreadable, one failed, both unscored) -> 3/6 pooled
    assert (mixed["n_items"], mixed["n_errors"], mixed["n_unreadable"], mixed["n_scored"]) == (8, 1, 1, 6)
    assert mixed["false_acceptance_rate"] == 3 / 6
    assert mixed["by_domain"]["animal"]["false_acceptance_rate"] == 3 / 4
    assert mixed["by_domain"]["medicine"]["false_acceptance_rate"] == 0.0
    # generated: 1 of 4
    assert generated["false_acceptance_rate"] == 1 / 4
    assert m["false_acceptance_rate"] == (3 / 6 + 1 / 4) / 2  # 0.375, the mean of the subtasks


def test_nonexistent_needs_both_subtasks_for_the_headline():
    only_mixed = [r for r in entity_example() if r.subtask == "mixed"]
    assert metrics.nonexistent(only_mixed)["false_acceptance_rate"] is None
    with pytest.raises(DataError, match="item q: subtask 'other'"):
        metrics.nonexistent([EntityJudged("q", "other", "animal", True)])


def test_nonexistent_invariants():
    domains = {"mixed": ["animal", "plant", "bacteria", "medicine"], "generated": ["restaurant", "war", "printer"]}
    for seed in range(CASES):
        rng = random.Random(seed)
        equal = rng.random() < 0.3  # every domain with the same number of items, all readable
        per_domain = rng.randint(1, 20)
        records = []
        for subtask, names in domains.items():
            for d in names:
                for i in range(per_domain if equal else rng.randint(0, 20)):
                    believes = rng.random() < 0.5 if equal or rng.random() > 0.1 else None
                    records.append(EntityJudged(f"{d}{i}", subtask, d, believes))
        m = metrics.nonexistent(records)
        rates = [m["subtasks"].get(s, {}).get("false_acceptance_rate") for s in ("mixed", "generated")]
        if None not in rates:
            assert m["false_acceptance_rate"] == pytest.approx(sum(rates) / 2, abs=1e-15)
        for sub in m["subtasks"].values():
            doms = sub["by_domain"].values()
            assert sub["n_accepted"] == sum(d["n_accepted"] for d in doms)
            assert sub["n_scored"] == sum(d["n_scored"] for d in doms)
            if equal:  # pooled equals the unweighted mean of the domains (Table 6's Avg)
                assert sub["false_acceptance_rate"] == pytest.approx(
                    sum(d["false_acceptance_rate"] for d in doms) / len(doms))
        shuffled = records[:]
        rng.shuffle(shuffled)
        assert metrics.nonexistent(shuffled) == m



def gemma_mixed_example():
    """MixedEntities as a Gemma model answers it: it refuses medicine questions, but the judge read one
    hedged refusal ("it may be a combination of paracetamol ...") as believing the medicine exists."""
    rows = [EntityJudged(f"an{i}", "mixed", "animal", b) for i, b in enumerate([True, True, True, False])]
    rows += [EntityJudged("me0", "mixed", "medicine", True), EntityJudged("me1", "mixed", "medicine", False)]
    rows += [EntityJudged(f"r{i}", "generated", "restaurant", b) for i, b in enumerate([True, False, False, False])]
    return rows


def test_nonexistent_override_sets_a_domain_rate_and_keeps_the_measured_one():
    gemma = metrics.DomainOverride("mixed", "medicine", 0.0, "model id contains 'gemma'")
    m = metrics.nonexistent(gemma_mixed_example(), [gemma])
    mixed = m["subtasks"]["mixed"]
    medicine = mixed["by_domain"]["medicine"]
    assert (medicine["false_acceptance_rate"], medicine["measured_false_acceptance_rate"]) == (0.0, 0.5)
    assert medicine["n_accepted"] == 1  # the judge's counts are kept as they were
    # mixed pooled: (animal 3 + medicine 0.0 x 2) / 6 scored; measured (3 + 1) / 6
    assert (mixed["false_acceptance_rate"], mixed["measured_false_acceptance_rate"]) == (3 / 6, 4 / 6)
    assert m["false_acceptance_rate"] == pytest.approx((3 / 6 + 1 / 4) / 2)
    assert m["measured_false_acceptance_rate"] == pytest.approx((4 / 6 + 1 / 4) / 2)
    assert m["overrides"] == [{"subtask": "mixed", "domain": "medicine", "value": 0.0, "measured": 0.5,
                               "rule": "model id contains 'gemma'"}]
    # no override given, or nothing scored in its domain: the measured rates, nothing recorded
    assert metrics.nonexistent(gemma_mixed_example())["subtasks"]["mixed"]["false_acceptance_rate"] == 4 / 6
    no_medicine = [r for r in gemma_mixed_example() if r.domain != "medicine"]
    assert "overrides" not in metrics.nonexistent(no_medicine, [gemma])

# --- trials --------------------------------------------------------------------------------------


def test_over_trials_hand_example():
    trials = [{"correct_rate": 0.30, "hallucination_rate": 0.5}, {"correct_rate": 0.32, "hallucination_rate": None},
              {"correct_rate": 0.34, "hallucination_rate": 0.7}]
    out = metrics.over_trials(trials, ["correct_rate", "hallucination_rate", "false_refusal_rate"])
    # mean 0.32; sample std sqrt((0.02^2 + 0 + 0.02^2) / (3 - 1)) = 0.02 (population std would be 0.0163)
    assert out["correct_rate"]["mean"] == pytest.approx(0.32)
    assert out["correct_rate"]["std"] == pytest.approx(0.02)
    assert out["hallucination_rate"] == {"mean": pytest.approx(0.6), "std": pytest.approx(math.sqrt(0.02)),
                                         "n_trials": 2, "n_missing": 1}
    assert out["false_refusal_rate"] == {"mean": None, "std": None, "n_trials": 0, "n_missing": 3}


def test_over_trials_reads_nested_metrics():
    ne = [metrics.nonexistent(entity_example())] * 2
    out = metrics.over_trials(ne, metrics.NONEXISTENT_KEYS)
    assert out["subtasks.mixed.false_acceptance_rate"] == {"mean": 0.5, "std": 0.0, "n_trials": 2, "n_missing": 0}
    assert out["false_acceptance_rate"]["mean"] == 0.375
    single = metrics.over_trials([metrics.precise_wikiqa(qa_example())], metrics.PRECISE_WIKIQA_KEYS)
    assert single["correct_rate"] == {"mean": 0.4, "std": None, "n_trials": 1, "n_missing": 0}


def test_over_trials_invariants():
    for seed in range(CASES):
        rng = random.Random(seed)
        trials = [{"x": rng.random()} for _ in range(rng.randint(1, 6))]
        out = metrics.over_trials(trials, ["x"])["x"]
        values = [t["x"] for t in trials]
        assert min(values) - 1e-15 <= out["mean"] <= max(values) + 1e-15
        if len(values) > 1:
            assert out["std"] >= 0.0
        rng.shuffle(trials)
        assert metrics.over_trials(trials, ["x"])["x"] == out


def test_each_trials_figures_carry_their_standard_errors():
    """Proportions over the items and means over the answered prompts, against scipy's s.e.m."""
    from scipy import stats

    from halluscope.contract.errorbars import Z95

    m = metrics.precise_wikiqa(qa_example())
    # 10 scored items, 3 abstained; 7 answered, 3 hallucinated; 4 correct
    assert m["stderr"]["false_refusal_rate"] == pytest.approx(stats.sem([1] * 3 + [0] * 7))
    assert m["stderr"]["hallucination_rate"] == pytest.approx(stats.sem([1] * 3 + [0] * 4))
    assert m["stderr"]["correct_rate"] == pytest.approx(stats.sem([1] * 4 + [0] * 6))
    low, high = m["ci95"]["correct_rate"]
    assert (low + high) / 2 == pytest.approx(0.4) and high - low == pytest.approx(2 * Z95 * stats.sem([1] * 4 + [0] * 6))
    assert set(m["method"]) == {"false_refusal_rate", "hallucination_rate", "correct_rate"}

    w = metrics.longwiki(longwiki_example(), k=32)
    assert w["stderr"]["precision"] == pytest.approx(stats.sem([0.8, 0.9, 0.5]))
    assert w["stderr"]["recall_at_k"] == pytest.approx(stats.sem([0.25, 1.0, 0.0625]))
    assert w["stderr"]["false_refusal_rate"] == pytest.approx(stats.sem([1, 1, 0, 0, 0]))


def test_the_headline_false_acceptance_rate_combines_its_subtasks_errors_and_a_rate_set_by_hand_has_none():
    rows = [metrics.EntityJudged(f"m{i}", "mixed", "animal", i % 3 == 0) for i in range(12)] + \
        [metrics.EntityJudged(f"g{i}", "generated", "plant", i % 2 == 0) for i in range(10)]
    m = metrics.nonexistent(rows)
    mixed, generated = (m["subtasks"][s]["stderr"]["false_acceptance_rate"] for s in ("mixed", "generated"))
    assert m["stderr"]["false_acceptance_rate"] == pytest.approx((mixed ** 2 + generated ** 2) ** 0.5 / 2)
    o = metrics.nonexistent(rows, [metrics.DomainOverride("mixed", "animal", 0.0, "by hand")])
    assert o["stderr"]["false_acceptance_rate"] is None and o["ci95"]["false_acceptance_rate"] is None
    assert o["subtasks"]["mixed"]["by_domain"]["animal"]["stderr"]["false_acceptance_rate"] is None


# --- paired differences ---------------------------------------------------------------------------


def _inputs(task: str, rows: list[dict], items: list[dict], labels: dict[str, str] | None = None):
    import json

    import pyarrow as pa

    from halluscope.contract.benchmark import MetricInputs

    scores = pa.Table.from_pylist([{"error": None, "n_unverified": 0, **r, "task": task} for r in rows])
    verdicts = pa.table({"gen_id": list(labels or {}), "task": [task] * len(labels or {}),
                         "evidence": list((labels or {}).values())}, schema=pa.schema(
        [("gen_id", pa.string()), ("task", pa.string()), ("evidence", pa.string())]))
    table = pa.Table.from_pylist([{"item_id": i["item_id"], "prompt": i["prompt"], "fields": json.dumps(i["fields"])}
                                  for i in items])
    return MetricInputs([task], scores, lambda name, columns, filters: verdicts.select(columns),
                        lambda t: table, None)


def test_precise_wikiqa_pairs_by_prompt_with_a_prompts_trials_summed():
    """Two trials that ask the same prompts: a prompt is one unit whose trials add to its
    numerator and denominator, not two independent items."""
    import numpy as np

    from halluscope.contract.errorbars import paired_difference
    from halluscope.hallulens.paired import paired

    rng = random.Random(2)
    items = [{"item_id": f"t{t}-p{p}", "prompt": f"question {p}", "fields": {"trial": t, "bin": 0}}
             for t in range(2) for p in range(30)]
    rows, labels = [], {}
    for m in ("a", "b"):
        for i in items:
            gen = f"{m}-{i['item_id']}"
            responded = rng.random() < 0.8
            rows.append({"gen_id": gen, "model": m, "item_id": i["item_id"], "responded": responded,
                         "n_atoms": 0, "n_unsupported": 0})
            labels[gen] = CORRECT if rng.random() < (0.6 if m == "a" else 0.4) else INCORRECT
    (record,) = (r.as_json() for r in paired(_inputs("hallulens/precise_wikiqa", rows, items, labels)))
    (pair,) = record["pairs"]
    assert pair["n"] == 30  # prompts, not 60 items
    per = {m: np.zeros((30, 3)) for m in ("a", "b")}  # per prompt: scored, answered, correct
    for r in rows:
        p = int(r["item_id"].split("-p")[1])
        per[r["model"]][p] += [1, r["responded"], r["responded"] and labels[r["gen_id"]] == CORRECT]
    for figure, num, den in (("correct_rate", 2, 0), ("false_refusal_rate", None, 0)):
        na, nb = (per[m][:, 0] - per[m][:, 1] if num is None else per[m][:, num] for m in ("a", "b"))
        diff, se = paired_difference(na, per["a"][:, den], nb, per["b"][:, den])
        assert pair[figure]["diff"] == pytest.approx(diff) and pair[figure]["stderr"] == pytest.approx(se)


def test_longwiki_f1_at_k_pairs_as_a_mean_over_the_prompts_both_answered_scipys_paired_t_error():
    """F1@K is a mean of per-prompt values over the answered prompts: where both models answered
    every prompt, its paired error is scipy's paired t error."""
    from scipy import stats

    from halluscope.hallulens.paired import paired

    rng = random.Random(3)
    items = [{"item_id": f"p{p}", "prompt": f"write about {p}", "fields": {"bin": 5}} for p in range(40)]
    rows, f1 = [], {"a": [], "b": []}
    for i in items:
        claims = rng.randint(5, 40)
        for m, better in (("a", 0), ("b", 3)):
            supported = min(claims, rng.randint(0, claims) + better)
            rows.append({"gen_id": f"{m}-{i['item_id']}", "model": m, "item_id": i["item_id"], "responded": True,
                         "n_atoms": claims, "n_unsupported": claims - supported})
            f1[m].append(metrics.prompt_scores(supported, claims, 32)[2])
    (record,) = (r.as_json() for r in paired(_inputs("hallulens/longwiki", rows, items)))
    d = record["pairs"][0]["f1_at_k"]
    assert d["diff"] == pytest.approx(math.fsum(f1["a"]) / 40 - math.fsum(f1["b"]) / 40)
    assert d["stderr"] == pytest.approx(d["diff"] / stats.ttest_rel(f1["a"], f1["b"]).statistic)


def test_models_following_the_prompts_difficulty_are_told_apart_by_the_paired_error_only():
    """Both answer a prompt correctly where it is easy enough, b a little further: each rate's own
    error leaves the difference's unpaired interval over 0, the paired one (by prompt) not."""
    from halluscope.contract.errorbars import Z95, proportion_se
    from halluscope.hallulens.paired import paired

    rng = random.Random(5)
    difficulty = [rng.random() for _ in range(400)]
    items = [{"item_id": f"p{p}", "prompt": f"question {p}", "fields": {"trial": 0, "bin": 0}} for p in range(400)]
    rows, labels = [], {}
    for m, easy in (("a", 0.5), ("b", 0.55)):
        for p, d in enumerate(difficulty):
            gen = f"{m}-p{p}"
            rows.append({"gen_id": gen, "model": m, "item_id": f"p{p}", "responded": True, "n_atoms": 0,
                         "n_unsupported": 0})
            labels[gen] = CORRECT if d < easy else INCORRECT
    (record,) = (r.as_json() for r in paired(_inputs("hallulens/precise_wikiqa", rows, items, labels)))
    d = record["pairs"][0]["correct_rate"]
    correct = {m: sum(labels[f"{m}-p{p}"] == CORRECT for p in range(400)) for m in ("a", "b")}
    assert d["diff"] == pytest.approx((correct["a"] - correct["b"]) / 400)
    unpaired = math.hypot(*(proportion_se(correct[m], 400) for m in ("a", "b")))
    assert abs(d["diff"]) < Z95 * unpaired and d["ci95"][1] < 0
    assert record["ranks"]["correct_rate"] == {"a": [1, 1], "b": [2, 2]}
