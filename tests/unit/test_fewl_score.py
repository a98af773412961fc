"""FEWL's formulas against hand computations on a two-reference example with fixed similarities.

The example (used throughout): references A and B answer question q; the IW/CO call gave wrong
answers w1, w2 and corrected answers c1, c2; the scored answer is y; q's neighbours are n1, n2,
which A answered with a1, a2 and B with b1, b2.

    Sim(A, c1)=0.9  Sim(A, c2)=0.5  Sim(A, w1)=0.2  Sim(A, w2)=0.4   r_A = 0.9 - 0.4 =  0.5
    Sim(B, c1)=0.3  Sim(B, c2)=0.1  Sim(B, w1)=0.8  Sim(B, w2)=0.6   r_B = 0.3 - 0.8 = -0.5
    Sim(y, A)=0.8   Sim(y, B)=0.4                                     s_A = 0.8, s_B = 0.4
    Sim(y, a1)=0.2  Sim(y, a2)=0.4  -> p_A = 0.3
    Sim(y, b1)=0.1  Sim(y, b2)=0.3  -> p_B = 0.2

lambda_A = e^0.5 / (e^0.5 + e^-0.5) = 1 / (1 + e^-1) = 0.7310585786300049, lambda_B = 0.2689414213699951.
"""

import math

import numpy as np
import pytest

from halluscope.errors import ConfigError
from halluscope.fewl.prompts import IwCoAnswers
from halluscope.fewl.score import (
    Fewl,
    FewlParams,
    MissingReference,
    expertise_weights,
    f_star,
    g_star,
    laziness_penalty,
    raw_expertise,
)

TABLE = {
    ("A", "c1"): 0.9, ("A", "c2"): 0.5, ("A", "w1"): 0.2, ("A", "w2"): 0.4,
    ("B", "c1"): 0.3, ("B", "c2"): 0.1, ("B", "w1"): 0.8, ("B", "w2"): 0.6,
    ("y", "A"): 0.8, ("y", "B"): 0.4,
    ("y", "a1"): 0.2, ("y", "a2"): 0.4, ("y", "b1"): 0.1, ("y", "b2"): 0.3,
}


class FakeSimilarity:
    """Fixed numbers, symmetric; an unknown pair fails the test (every pair FEWL uses is in TABLE)."""

    name = "fake-v1"

    def __init__(self, table=TABLE):
        self.table = table
        self.calls = 0

    def matrix(self, left, right):
        self.calls += 1
        return np.array([[self.table[(a, b)] if (a, b) in self.table else self.table[(b, a)] for b in right]
                         for a in left], dtype=np.float64).reshape(len(left), len(right))


PAIRS = IwCoAnswers(("w1", "w2"), ("c1", "c2"), "gen-model")
NEIGHBOURS = [("n1", {"A": "a1", "B": "b1"}), ("n2", {"A": "a2", "B": "b2"})]
LAMBDA_A, LAMBDA_B = 0.7310585786300049, 0.2689414213699951


def prepared(params=None, pairs=PAIRS, neighbours=NEIGHBOURS):
    fewl = Fewl(FakeSimilarity(), params or FewlParams())
    return fewl, fewl.prepare("q", {"A": "A", "B": "B"}, pairs, neighbours)


def test_defaults_are_the_papers():
    p = FewlParams()
    assert (p.iw_pairs, p.tau, p.k_nn, p.neighbour_max_similarity, p.divergence, p.penalty, p.form) == \
        (25, 1.0, 10, 0.8, "tv", True, "eq1")
    assert (p.weighting, p.single_reference, p.reference_samples) == ("expertise", None, 1)


@pytest.mark.parametrize("changes", [{"tau": 0}, {"k_nn": -1}, {"neighbour_max_similarity": 1.5},
                                     {"divergence": "hellinger"}, {"form": "weighted_truthful"}, {"tua": 1}])
def test_bad_params_are_config_errors(changes):
    with pytest.raises(ConfigError):
        FewlParams().variant(**changes)


def test_raw_expertise_and_weights():
    sim_co = np.array([[0.9, 0.5], [0.3, 0.1]])
    sim_iw = np.array([[0.2, 0.4], [0.8, 0.6]])
    assert raw_expertise(sim_co, sim_iw).tolist() == pytest.approx([0.5, -0.5], abs=1e-15)
    assert expertise_weights(np.array([0.5, -0.5])).tolist() == pytest.approx([LAMBDA_A, LAMBDA_B], rel=1e-15)
    # tau = 0.5 doubles the logits: 1 / (1 + e^-2) = 0.8807970779778823
    assert expertise_weights(np.array([0.5, -0.5]), tau=0.5).tolist() == \
        pytest.approx([0.8807970779778823, 0.11920292202211769], rel=1e-15)
    # large logits do not overflow (max subtracted)
    assert expertise_weights(np.array([1000.0, 0.0])).tolist() == [1.0, 0.0]


def test_laziness_penalty_is_a_mean():
    assert laziness_penalty([0.2, 0.4]) == pytest.approx(0.3, abs=1e-15)
    assert laziness_penalty([]) is None


# (divergence, v, g*(v), u, f*(u))
AGGREGATORS = [
    ("tv", 0.3, 0.14565630622579545, 0.3, 0.3),  # 1/2 tanh(0.3); f* = identity
    ("js", 0.3, 0.13879193609141827, 0.13879193609141827, 0.16120806390858192),  # log(2/(1+e^-0.3)); -log(2-e^u)
    ("kl", 0.3, 0.3, 0.3, 0.4965853037914095),  # identity; e^(0.3-1)
]


@pytest.mark.parametrize("divergence,v,g,u,f", AGGREGATORS)
def test_aggregators(divergence, v, g, u, f):
    assert g_star(divergence, v) == pytest.approx(g, rel=1e-14)
    assert f_star(divergence, u) == pytest.approx(f, rel=1e-14)


def test_prepare_keeps_lambda_and_neighbour_answers_per_reference():
    _, art = prepared()
    assert art.ref_ids == ("A", "B") and art.answers == ("A", "B")
    assert art.expertise.raw == pytest.approx((0.5, -0.5), abs=1e-15)
    assert art.expertise.weights == pytest.approx((LAMBDA_A, LAMBDA_B), rel=1e-15)
    assert (art.expertise.source, art.expertise.n_pairs, art.expertise.generator) == ("iw_co", 2, "gen-model")
    assert art.neighbour_ids == ("n1", "n2")
    assert art.neighbour_answers == (("a1", "a2"), ("b1", "b2"))


def test_eq1_total_variation_with_components():
    fewl, art = prepared()
    s = fewl.score("y", art)
    a, b = s.references
    # agreement_A = 1/2 tanh(lambda_A * 0.8) = 1/2 tanh(0.5848468629040039) = 0.2630896507652702
    # agreement_B = 1/2 tanh(lambda_B * 0.4) = 1/2 tanh(0.10757656854799805) = 0.053581748078401
    assert (a.ref_id, a.raw_expertise, a.similarity) == ("A", pytest.approx(0.5, abs=1e-15), 0.8)
    assert a.weight == pytest.approx(LAMBDA_A, rel=1e-15) and b.weight == pytest.approx(LAMBDA_B, rel=1e-15)
    assert a.agreement == pytest.approx(0.2630896507652702, rel=1e-14)
    assert b.agreement == pytest.approx(0.053581748078401, rel=1e-14)
    # penalty_A = 1/2 tanh(0.3) = 0.14565630622579545; penalty_B = 1/2 tanh(0.2) = 0.098687660112452
    assert a.neighbour_similarity == pytest.approx(0.3, abs=1e-15) and a.n_neighbours == 2
    assert a.penalty == pytest.approx(0.14565630622579545, rel=1e-14)
    assert b.penalty == pytest.approx(0.098687660112452, rel=1e-14)
    # truthfulness = (0.2630896507652702 + 0.053581748078401) / 2 = 0.1583356994218356
    # penalty      = (0.14565630622579545 + 0.098687660112452) / 2 = 0.12217198316912373
    assert s.truthfulness == pytest.approx(0.1583356994218356, rel=1e-14)
    assert s.penalty == pytest.approx(0.12217198316912373, rel=1e-14)
    assert s.score == pytest.approx(0.036163716252711864, rel=1e-12)
    assert (s.weighting, s.setup, s.missing_neighbours) == ("iw_co", fewl.setup_id, 0)
    row = s.to_dict()
    assert row["score"] == s.score and row["references"][1]["ref_id"] == "B"


def test_eq1_jensen_shannon():
    fewl, art = prepared(FewlParams(divergence="js"))
    s = fewl.score("y", art)
    # g*(v) = log 2 - log(1 + e^-v): g*(0.5848468629040039) = 0.25026350660200786,
    #                                g*(0.10757656854799805) = 0.05234239151438534
    # f*(g*(p)) = -log(2 - 2/(1+e^-p)) = p - g*(p): 0.3 - 0.13879193609141827 = 0.16120806390858192,
    #                                                0.2 - 0.09500831117835355 = 0.10499168882164663
    assert [t.agreement for t in s.references] == pytest.approx([0.25026350660200786, 0.05234239151438534], rel=1e-13)
    assert [t.penalty for t in s.references] == pytest.approx([0.16120806390858192, 0.10499168882164663], rel=1e-13)
    # (0.25026350660200786 + 0.05234239151438534)/2 - (0.16120806390858192 + 0.10499168882164663)/2
    assert s.score == pytest.approx(0.01820307269308233, rel=1e-12)


def test_eq1_kl():
    fewl, art = prepared(FewlParams(divergence="kl"))
    s = fewl.score("y", art)
    # g* = identity: agreements are lambda_i s_i = 0.5848468629040039, 0.10757656854799805
    # f*(u) = e^(u-1): e^-0.7 = 0.4965853037914095, e^-0.8 = 0.44932896411722156
    assert [t.penalty for t in s.references] == pytest.approx([0.4965853037914095, 0.44932896411722156], rel=1e-13)
    assert s.score == pytest.approx(-0.1267454182283146, rel=1e-12)


def test_variant_forms():
    # §3.1, lambda outside: lambda_A (1/2 tanh 0.8 - 1/2 tanh 0.3) + lambda_B (1/2 tanh 0.4 - 1/2 tanh 0.2)
    #   = 0.7310585786300049 (0.33201838513392457 - 0.14565630622579545)
    #   + 0.2689414213699951 (0.18997448112761245 - 0.098687660112452) = 0.16079240391327526
    fewl, art = prepared(FewlParams(form="lambda_outside"))
    s = fewl.score("y", art)
    assert [t.agreement for t in s.references] == pytest.approx([0.33201838513392457, 0.18997448112761245], rel=1e-14)
    assert s.score == pytest.approx(0.16079240391327526, rel=1e-12)
    # §2.1, weighted truthful: lambda_A 0.8 + lambda_B 0.4 = 0.6924234314520019, no penalty
    fewl, art = prepared(FewlParams(form="weighted_truthful", penalty=False))
    s = fewl.score("y", art)
    assert (s.score, s.penalty) == (pytest.approx(0.6924234314520019, rel=1e-14), 0.0)


def test_baseline_settings():
    fewl, art = prepared()
    # single + no penalty against A: lambda = 1, 1/2 tanh(0.8) = 0.33201838513392457
    single = fewl.with_params(fewl.params.variant(single_reference="A", penalty=False)).score("y", art)
    assert (single.score, single.weighting, len(single.references)) == (pytest.approx(0.33201838513392457), "single", 1)
    assert single.references[0].weight == 1.0 and single.references[0].penalty == 0.0
    # uniform lambda with penalty: (1/2 tanh(0.4) + 1/2 tanh(0.2))/2 - 0.12217198316912373 = 0.0221590874509085
    uniform = fewl.with_params(fewl.params.variant(weighting="uniform")).score("y", art)
    assert uniform.score == pytest.approx(0.0221590874509085, rel=1e-12)
    assert [t.weight for t in uniform.references] == [0.5, 0.5]
    with pytest.raises(MissingReference):
        fewl.with_params(fewl.params.variant(single_reference="C")).score("y", art)


def test_lambda_is_computed_once_per_question():
    fewl, art = prepared()
    calls = fewl.similarity.calls  # 2 matrices: references x CO, references x IW
    assert calls == 2
    fewl.score("y", art)
    fewl.score("y", art)
    assert fewl.similarity.calls == calls + 4  # per score: y x references, y x neighbour answers


def test_changed_tau_needs_new_artefacts():
    fewl, art = prepared()
    with pytest.raises(ConfigError, match="tau"):
        fewl.with_params(fewl.params.variant(tau=0.5)).score("y", art)


def test_missing_pairs_fall_back_to_uniform_or_exclude():
    fewl, art = prepared(pairs=None)
    assert (art.expertise.source, art.expertise.raw, art.expertise.weights) == ("uniform-fallback", None, (0.5, 0.5))
    s = fewl.score("y", art)
    assert s.weighting == "uniform-fallback" and s.references[0].raw_expertise is None
    assert prepared(FewlParams(min_pairs=3))[1].expertise.source == "uniform-fallback"  # 2 pairs < 3
    assert prepared(FewlParams(missing_pairs="exclude"), pairs=None)[1] is None


def test_reference_without_neighbour_answers():
    # B answered neither neighbour: its penalty term is 0 and it is reported as missing
    fewl, art = prepared(neighbours=[("n1", {"A": "a1"}), ("n2", {"A": "a2"})])
    s = fewl.score("y", art)
    assert [t.n_neighbours for t in s.references] == [2, 0]
    assert s.references[1].neighbour_similarity is None and s.references[1].penalty == 0.0
    assert s.missing_neighbours == 1
    # penalty = (1/2 tanh(0.3) + 0) / 2 = 0.07282815311289772
    assert s.penalty == pytest.approx(0.14565630622579545 / 2, rel=1e-14)


def test_setup_id_changes_with_params_and_backend():
    a = Fewl(FakeSimilarity()).setup_id
    assert a == Fewl(FakeSimilarity()).setup_id
    assert a != Fewl(FakeSimilarity(), FewlParams(k_nn=5)).setup_id
    other = FakeSimilarity()
    other.name = "fake-v2"
    assert a != Fewl(other).setup_id


def test_scale_check_from_the_spec():
    # N = 5, lambda = 1/5, s = 1: 1/2 tanh(0.2) = 0.098687660112452 (spec: "≈ 0.099")
    assert g_star("tv", 0.2) == pytest.approx(0.098687660112452, rel=1e-14)
    assert math.isclose(g_star("tv", 1.0), 0.5 * math.tanh(1.0))
