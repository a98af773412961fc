"""The paper's evaluation tallies (pairwise wins, ties, losses; ranked first) on fixed similarities.

No IW/CO pairs (lambda falls back to 1/2 for two references) and no neighbours (k_nn = 0, so no
penalty), so FEWL(y) = 1/2 [1/2 tanh(s_r1 / 2) + 1/2 tanh(s_r2 / 2)] and the single + no penalty
baseline is 1/2 tanh(s_r1): both increase with the similarities, so the outcomes below follow
from comparing the similarities in TABLE.
"""

import numpy as np
import pytest

from halluscope.errors import ConfigError
from halluscope.fewl.artefacts import prepare_questions
from halluscope.fewl.datasets import Candidate, Question
from halluscope.fewl.evaluate import DEFAULT_PAIRS, evaluate, paper_methods
from halluscope.fewl.neighbours import QuestionIndex
from halluscope.fewl.score import Fewl, FewlParams

# (candidate, reference answer) -> similarity; any other pair is 0
TABLE = {
    # q0: both references agree with the true answer: N > M > H for every method
    ("N0", "a0"): 0.9, ("N0", "b0"): 0.9, ("M0", "a0"): 0.5, ("H0", "a0"): 0.1,
    # q1: r1 backs the hallucination; N and M look the same to every method (a tie)
    ("N1", "a1"): 0.2, ("N1", "b1"): 0.9, ("M1", "a1"): 0.2, ("M1", "b1"): 0.9, ("H1", "a1"): 0.9,
    # q3: only r2 answered
    ("N3", "b3"): 0.8, ("H3", "b3"): 0.3,
    # q4: both references closer to the hallucination; no half-hallucinated answer
    ("N4", "a4"): 0.6, ("N4", "b4"): 0.6, ("H4", "a4"): 0.7, ("H4", "b4"): 0.7,
}


class TableSimilarity:
    name = "table-v1"

    def matrix(self, left, right):
        return np.array([[TABLE.get((a, b), TABLE.get((b, a), 0.0)) for b in right] for a in left]).reshape(
            len(left), len(right))


def chale(i, half=True):
    cands = [Candidate("non-halu", f"N{i}", "non_hallucinated"), Candidate("halu", f"H{i}", "hallucinated")]
    if half:
        cands.insert(1, Candidate("mid-halu", f"M{i}", "half_hallucinated"))
    return Question("chale", f"q{i}", f"question {i}", tuple(cands))


QUESTIONS = [chale(0), chale(1), chale(2), chale(3), chale(4, half=False)]
REFERENCES = {"q0": {"r1": "a0", "r2": "b0"}, "q1": {"r1": "a1", "r2": "b1"}, "q3": {"r2": "b3"},
              "q4": {"r1": "a4", "r2": "b4"}}  # nobody answered q2


@pytest.fixture(scope="module")
def prepared():
    fewl = Fewl(TableSimilarity(), FewlParams(k_nn=0))
    index = QuestionIndex([q.question_id for q in QUESTIONS], np.eye(5, 4, dtype=np.float32), "one-hot")
    return fewl, prepare_questions(fewl, QUESTIONS, ("r1", "r2"), REFERENCES, {}, index)


def test_preparation_reports_what_it_could_not_use(prepared):
    _, prep = prepared
    assert sorted(prep.artefacts) == ["q0", "q1", "q3", "q4"]
    assert prep.excluded == {"q2": "no reference answer"}
    assert prep.uniform_fallback == ["q0", "q1", "q3", "q4"]  # no IW/CO pairs were given
    assert prep.missing_references == {"q2": ["r1", "r2"], "q3": ["r1"]}


def test_pairwise_and_ranked_first_tallies(prepared):
    fewl, prep = prepared
    report = evaluate(fewl, QUESTIONS, prep.artefacts, single_reference="r1")
    got = {(t.method, t.negative): (t.wins, t.ties, t.losses, dict(t.skipped)) for t in report.pairwise}
    assert got == {
        # q0 win, q1 tie, q3 win; q2 not prepared, q4 has no half-hallucinated answer
        ("fewl", "half_hallucinated"): (2, 1, 0, {"not prepared": 1, "no half_hallucinated answer": 1}),
        # q0, q1 (r2 outvotes r1), q3 win; q4 lost
        ("fewl", "hallucinated"): (3, 0, 1, {"not prepared": 1}),
        # q0 win, q1 tie; q3 has no answer from r1
        ("single_no_penalty", "half_hallucinated"): (1, 1, 0, {"not prepared": 1, "no answer from reference r1": 1,
                                                               "no half_hallucinated answer": 1}),
        # q0 win; q1 (r1 backs the hallucination) and q4 lost
        ("single_no_penalty", "hallucinated"): (1, 0, 2, {"not prepared": 1, "no answer from reference r1": 1}),
    }
    assert report.share("fewl", "non_hallucinated", "half_hallucinated") == 2 / 3
    assert report.share("single_no_penalty", "non_hallucinated", "hallucinated") == 1 / 3
    first = {t.method: (t.label, t.first, t.compared) for t in report.ranked_first}
    # strictly above every other candidate: q0 and q3 for FEWL (q1 ties), q0 alone for the baseline
    assert first == {"fewl": ("non_hallucinated", 2, 4), "single_no_penalty": ("non_hallucinated", 1, 3)}
    as_dict = report.to_dict()
    assert as_dict["setups"]["fewl"] == fewl.setup_id and as_dict["pairwise"][0]["compared"] == 3


def test_methods_pairs_and_errors(prepared):
    fewl, prep = prepared
    methods = paper_methods(fewl.params, "r2")
    assert list(methods) == ["fewl", "single_no_penalty", "single_penalty", "multi_no_penalty", "fewl_uniform"]
    assert methods["single_no_penalty"].penalty is False and methods["multi_no_penalty"].weighting == "uniform"
    report = evaluate(fewl, QUESTIONS, prep.artefacts, methods={"m": methods["single_no_penalty"]},
                      pairs=[("non_hallucinated", "hallucinated")])
    (tally,) = report.pairwise
    assert (tally.wins, tally.losses) == (3, 1)  # with r2 as the single reference: q0, q1, q3 won, q4 lost
    assert DEFAULT_PAIRS["truthfulqa-gen"] == (("best", "bad"),)
    with pytest.raises(ConfigError, match="single_reference"):
        evaluate(fewl, QUESTIONS, prep.artefacts)
    other = Question("halueval-qa", "h0", "q", (Candidate("r", "x", "non_hallucinated"),))
    with pytest.raises(ConfigError, match="no default answer pairs"):
        evaluate(fewl, QUESTIONS + [other], prep.artefacts, single_reference="r1")
