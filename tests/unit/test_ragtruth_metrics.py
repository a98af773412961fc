"""RAGTruth detection metrics from counts (hand-computed), acceptance properties, selection report."""

import random
from fractions import Fraction

import pytest
from tests.support.ragtruth_detectors import EmptyDetector, OracleDetector

from halluscope.errors import ConfigError, DataError
from halluscope.ragtruth.corpus import Label, Record, Source
from halluscope.ragtruth.metrics import Counts, MetricOptions, count, merge_counts, score_rows, scores
from halluscope.ragtruth.selection import select
from halluscope.ragtruth.spans import Prediction, Span
from halluscope.ragtruth.taxonomy import LabelType, Quality, TaskType

EC, EB, SB = LabelType.EVIDENT_CONFLICT, LabelType.EVIDENT_BASELESS, LabelType.SUBTLE_BASELESS
INFO = {TaskType.QA: {"question": "q", "passages": "p"}, TaskType.DATA2TXT: {"name": "n"}, TaskType.SUMMARY: "article"}


def rec(rid, task, model, length, gold=(), source_id=None):
    """A record with a response of ``length`` characters and gold spans given as (start, end, type)."""
    response = "".join(chr(ord("a") + i % 26) for i in range(length))
    labels = tuple(Label(s, e, response[s:e], t) for s, e, t in gold)
    src = Source(source_id or f"src-{rid}", task, "X", INFO[task], "prompt", 1)
    return Record(rid, src.source_id, model, None, "test", Quality.GOOD, response, labels, labels, src, 1)


def pred(*spans, unlocated=()):
    return Prediction(tuple(Span(s, e) for s, e in spans), tuple(unlocated))


# A tiny example, every number below derived by hand in comments.
RECORDS = [
    rec("A", TaskType.QA, "m1", 20, [(2, 8, EC), (6, 12, EB)]),  # gold chars [2,12) = 10; EC 6, EB 6
    rec("B", TaskType.QA, "m2", 20),
    rec("C", TaskType.SUMMARY, "m1", 30, [(10, 20, SB)]),  # gold 10
    rec("D", TaskType.SUMMARY, "m2", 30),
    rec("E", TaskType.SUMMARY, "m1", 30, [(0, 5, EC)]),  # no prediction
]
PREDICTIONS = {
    "A": pred((0, 4), (3, 6)),  # overlapping: P = [0,6) = 6 chars, P∩G = [2,6) = 4  -> TP
    "B": pred((5, 10), unlocated=["abc"]),  # 5 chars + 3 unlocated = 8 false-positive chars -> FP
    "C": pred(),  # -> FN
    "D": pred(),  # -> TN
    "E": None,
}


def test_hand_computed_example():
    total = sum(count(RECORDS, PREDICTIONS).values())
    assert total == Counts(
        n_responses=4, unpredicted=1, tp=1, fp=1, fn=1, tn=1, gold_chars=20, pred_chars=14, tp_chars=4,
        unlocated_spans=1, unlocated_chars=3, type_gold_chars=(6, 0, 6, 10), type_tp_chars=(4, 0, 0, 0),
        # per-response precision: A 4/6, B 0/8; recall: A 4/10, C 0/10; F1: A 2*4/16, B 0, C 0
        macro_p_sum=Fraction(2, 3), macro_p_n=2, macro_r_sum=Fraction(2, 5), macro_r_n=2,
        macro_f1_sum=Fraction(1, 2), macro_f1_n=3)
    s = scores(total)
    # response: P = 1/(1+1), R = 1/(1+1), F1 = 1/2
    assert (s.response.precision, s.response.recall, s.response.f1) == (0.5, 0.5, 0.5)
    # chars: P = 4/14 = 2/7, R = 4/20 = 1/5, F1 = 2(2/7)(1/5) / (2/7 + 1/5) = (4/35) / (17/35) = 4/17
    assert s.span.precision == pytest.approx(2 / 7) and s.span.recall == pytest.approx(1 / 5)
    assert s.span.f1 == pytest.approx(4 / 17)
    # macro: P = (2/3 + 0)/2 = 1/3, R = (2/5 + 0)/2 = 1/5, F1 = (1/2 + 0 + 0)/3 = 1/6
    assert (s.span_macro.precision, s.span_macro.recall, s.span_macro.f1) == pytest.approx((1 / 3, 1 / 5, 1 / 6))
    # per type: EC 4/6; EB 0/6; SB 0/10; SC has no gold (0/0 -> 0, reported)
    assert s.type_recall == pytest.approx({"Evident Conflict": 2 / 3, "Subtle Conflict": 0.0,
                                           "Evident Baseless Info": 0.0, "Subtle Baseless Info": 0.0})
    assert s.undefined == ("recall[Subtle Conflict]",)


def test_unpredicted_scored_as_empty_when_asked():
    total = sum(count(RECORDS, PREDICTIONS, MetricOptions(unpredicted="empty")).values())
    # E joins as a false negative with 5 gold EC characters
    assert (total.n_responses, total.unpredicted, total.fn, total.gold_chars, total.type_gold_chars[0]) == \
        (5, 1, 2, 25, 11)
    assert scores(total).response.recall == pytest.approx(1 / 3)


def test_summary_rows_per_task_and_pooled_overall(caplog):
    rows = {(r["task"], r["model"]): r for r in score_rows(count(RECORDS, PREDICTIONS))}
    assert set(rows) == {("QA", "*"), ("QA", "m1"), ("QA", "m2"), ("Summary", "*"), ("Summary", "m1"),
                         ("Summary", "m2"), ("Overall", "*"), ("Overall", "m1"), ("Overall", "m2")}
    qa = rows[("QA", "*")]
    # QA: A is TP, B is FP -> P 1/2, R 1/1, F1 2/3; chars: 4 / (6 + 8) and 4 / 10
    assert (qa["response_precision"], qa["response_recall"], qa["response_f1"]) == pytest.approx((0.5, 1.0, 2 / 3))
    assert (qa["span_precision"], qa["span_recall"]) == pytest.approx((2 / 7, 2 / 5))
    summ = rows[("Summary", "*")]
    # Summary: C is FN, D is TN, E unpredicted: P is 0/0 -> 0 and reported
    assert (summ["response_precision"], summ["response_recall"], summ["unpredicted"]) == (0.0, 0.0, 1)
    assert "response_precision" in summ["undefined"]
    # Overall is pooled (F1 0.5), not the mean of the task F1s ((2/3 + 0) / 2 = 1/3)
    assert rows[("Overall", "*")]["response_f1"] == 0.5
    assert rows[("Overall", "m1")]["tp"] == 1 and rows[("Overall", "m1")]["fn"] == 1


def _random_corpus(seed=7, n=60):
    rng = random.Random(seed)
    tasks, types = list(TaskType), list(LabelType)
    records, preds = [], {}
    for i in range(n):
        length = rng.randint(5, 80)
        gold = []
        for _ in range(rng.choice([0, 0, 1, 2, 3])):
            s = rng.randrange(length - 1)
            gold.append((s, rng.randint(s + 1, length), rng.choice(types)))
        r = rec(f"r{i}", rng.choice(tasks), rng.choice(["m1", "m2", "m3"]), length, gold)
        records.append(r)
        if rng.random() < 0.1:
            preds[r.id] = None
            continue
        spans = []
        for _ in range(rng.choice([0, 1, 2, 4])):
            s = rng.randrange(length - 1)
            spans.append((s, rng.randint(s + 1, length)))
        preds[r.id] = pred(*spans, unlocated=["zz"] * rng.choice([0, 0, 1]))
    return records, preds


def test_one_shard_equals_n_shards():
    records, preds = _random_corpus()
    whole = count(records, preds)
    for n_shards in (2, 3, 7, 60):
        shuffled = records[:]
        random.Random(n_shards).shuffle(shuffled)
        parts = [count(shuffled[i::n_shards], preds) for i in range(n_shards)]
        merged = merge_counts(*reversed(parts))
        assert merged == whole
        assert score_rows(merged) == score_rows(whole)


def test_oracle_all_positive_and_empty_detectors():
    records, _ = _random_corpus(seed=3, n=80)
    oracle = scores(sum(count(records, OracleDetector().predict(records).predictions).values()))
    assert (oracle.response.precision, oracle.response.recall, oracle.response.f1) == (1.0, 1.0, 1.0)
    assert (oracle.span.precision, oracle.span.recall, oracle.span.f1) == (1.0, 1.0, 1.0)
    assert (oracle.span_macro.precision, oracle.span_macro.recall, oracle.span_macro.f1) == (1.0, 1.0, 1.0)

    everything = {r.id: pred((0, len(r.response))) for r in records}
    allpos = scores(sum(count(records, everything).values()))
    prevalence = sum(bool(r.gold) for r in records) / len(records)
    assert allpos.response.recall == 1.0 and allpos.response.precision == pytest.approx(prevalence)
    assert allpos.span.recall == 1.0

    empty = scores(sum(count(records, EmptyDetector().predict(records).predictions).values()))
    assert (empty.response.recall, empty.span.recall, empty.response.precision) == (0.0, 0.0, 0.0)
    assert "response_precision" in empty.undefined and "span_precision" in empty.undefined


def test_overlapping_predictions_not_double_counted():
    r = rec("A", TaskType.QA, "m1", 20, [(0, 10, EC)])
    repeated = pred((2, 6), (2, 6), (2, 6), (3, 5), (4, 9))  # union [2, 9) = 7 characters, all gold
    c = sum(count([r], {"A": repeated}).values())
    assert (c.pred_chars, c.tp_chars, c.gold_chars) == (7, 7, 10)
    assert scores(c).span.precision == 1.0 and repeated.n_spans == 1
    # overlapping gold labels of two types: the union counts once, each type counts its own characters
    r2 = rec("B", TaskType.QA, "m1", 20, [(0, 10, EC), (5, 15, EB)])
    c2 = sum(count([r2], {"B": pred((0, 20))}).values())
    assert (c2.gold_chars, c2.tp_chars, c2.pred_chars, c2.type_gold_chars) == (15, 15, 20, (10, 0, 10, 0))


def test_counts_add_and_sum():
    a, b = Counts(tp=1, type_gold_chars=(1, 0, 0, 2)), Counts(fp=2, type_gold_chars=(0, 3, 0, 0))
    assert a + b == Counts(tp=1, fp=2, type_gold_chars=(1, 3, 0, 2)) == sum([a, b])


# --- selection experiment -------------------------------------------------------------------------

def _selection_case():
    """(gold-positive?, predicted span count) per source for models m1, m2."""
    table = {
        "s1": ((True, 2), (False, 0)),
        "s2": ((True, 1), (True, 1)),  # tie
        "s3": ((False, 0), (False, 0)),  # tie at zero
        "s4": ((False, 1), (True, 3)),
    }
    records, preds = [], {}
    for sid, cands in table.items():
        for model, (positive, n) in zip(("m1", "m2"), cands):
            r = rec(f"{sid}-{model}", TaskType.SUMMARY, model, 40, [(0, 3, EC)] if positive else [], source_id=sid)
            records.append(r)
            preds[r.id] = pred(*[(5 * i, 5 * i + 2) for i in range(n)])
    records.append(rec("s5-m1", TaskType.SUMMARY, "m1", 40, source_id="s5"))  # m2 missing
    preds["s5-m1"] = pred()
    for model in ("m1", "m2"):
        records.append(rec(f"s6-{model}", TaskType.SUMMARY, model, 40, source_id="s6"))
    preds["s6-m1"] = pred()  # s6-m2 has no prediction
    return records, preds


def test_selection_expected_rates():
    records, preds = _selection_case()
    report = select(records, preds, ["m1", "m2"])
    assert report.n_instances == 4 and report.skipped == {"missing_response": ["s5"], "unpredicted": ["s6"]}
    assert report.candidate_rates == {"m1": 0.5, "m2": 0.5}  # m1: s1, s2; m2: s2, s4
    st = report.strategies
    # random: s1 1/2 + s2 1 + s3 0 + s4 1/2 = 2 of 4
    assert (st["random"].valid, st["random"].hallucinated, st["random"].rate) == (4, Fraction(2), 0.5)
    # fewer spans: s1 -> m2 (clean), s2 tie (both positive) 1, s3 tie 0, s4 -> m1 (clean): 1 of 4
    assert (st["fewer_spans"].valid, st["fewer_spans"].rate, st["fewer_spans"].reduction) == (4, 0.25, 0.5)
    # no spans: s1 -> m2, s3 -> either (both clean); s2 and s4 have no candidate without spans
    assert (st["no_spans"].valid, st["no_spans"].rate, st["no_spans"].reduction) == (2, 0.0, 1.0)
    assert report.as_dict()["skipped"] == {"missing_response": 1, "unpredicted": 1}


def test_selection_seeded_is_deterministic_and_order_free():
    records, preds = _selection_case()
    first = select(records, preds, ["m1", "m2"], seed=11)
    again = select(list(reversed(records)), preds, ["m1", "m2"], seed=11)
    assert first == again
    st = first.strategies
    # the only random choices are ties: fewer_spans is certain on s1 (0) and s4 (0), and s2's tie is
    # positive either way, s3's negative either way -> exactly 1 of 4, as the expectation says
    assert st["fewer_spans"].hallucinated == 1 and st["no_spans"].hallucinated == 0
    assert st["random"].hallucinated in (1, 2, 3)


def test_selection_input_errors():
    records, preds = _selection_case()
    with pytest.raises(ConfigError, match="two distinct"):
        select(records, preds, ["m1"])
    with pytest.raises(DataError, match="two responses from m1"):
        select(records + [rec("dup", TaskType.SUMMARY, "m1", 10, source_id="s1")], preds, ["m1", "m2"])
