"""The paper's evaluation of FEWL as a measure (§4.1, App. C.6): does it score the labelled
non-hallucinated answer above the hallucinated one, and more often than the naive baseline?

Pairwise: the share of questions where score(positive) > score(negative), strictly (a tie is
counted apart, not as a win). Ranked first: the count of questions where the positive answer
outscores every other candidate (Table 3 counts 'best' answers ranked top). Each method is a
``FewlParams`` variant scored on the same prepared artefacts; the default pair is FEWL against
"single + no penalty" (one reference, lambda = 1, no laziness penalty).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from halluscope.errors import ConfigError, DataError
from halluscope.fewl import datasets as ds
from halluscope.fewl.score import Fewl, FewlParams, MissingReference, QuestionArtefacts

# (positive label, negative label) compared per dataset; the first pair's positive is "ranked first"
DEFAULT_PAIRS: dict[str, tuple[tuple[str, str], ...]] = {
    "chale": ((ds.NON_HALLUCINATED, ds.HALF_HALLUCINATED), (ds.NON_HALLUCINATED, ds.HALLUCINATED)),
    "truthfulqa-gen": ((ds.BEST, ds.BAD),),
    "truthfulqa-mc": ((ds.CORRECT, ds.INCORRECT),),
    "halueval-qa": ((ds.NON_HALLUCINATED, ds.HALLUCINATED),),
}


def paper_methods(params: FewlParams, single_reference: str) -> dict[str, FewlParams]:
    """FEWL and the baselines of Tables 1, 3, 10 (and the uniform-lambda ablation of Table 2)."""
    single = {"single_reference": single_reference, "form": "eq1"}
    return {
        "fewl": params,
        "single_no_penalty": params.variant(**single, penalty=False),
        "single_penalty": params.variant(**single, penalty=True),
        "multi_no_penalty": params.variant(weighting="uniform", penalty=False, form="eq1"),
        "fewl_uniform": params.variant(weighting="uniform"),
    }


@dataclass
class PairTally:
    method: str
    positive: str
    negative: str
    wins: int = 0
    ties: int = 0
    losses: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason -> questions

    @property
    def compared(self) -> int:
        return self.wins + self.ties + self.losses

    @property
    def share(self) -> float | None:
        return self.wins / self.compared if self.compared else None


@dataclass
class FirstTally:
    method: str
    label: str
    first: int = 0
    compared: int = 0
    skipped: Counter = field(default_factory=Counter)


@dataclass
class EvaluationReport:
    setups: dict[str, str]  # method -> setup id of its scores
    pairwise: list[PairTally]
    ranked_first: list[FirstTally]

    def share(self, method: str, positive: str, negative: str) -> float | None:
        return next(t.share for t in self.pairwise
                    if (t.method, t.positive, t.negative) == (method, positive, negative))

    def to_dict(self) -> dict:
        return {"setups": self.setups,
                "pairwise": [{"method": t.method, "positive": t.positive, "negative": t.negative, "wins": t.wins,
                              "ties": t.ties, "losses": t.losses, "compared": t.compared, "share": t.share,
                              "skipped": dict(t.skipped)} for t in self.pairwise],
                "ranked_first": [{"method": t.method, "label": t.label, "first": t.first, "compared": t.compared,
                                  "skipped": dict(t.skipped)} for t in self.ranked_first]}


# What one question's candidates scored under each method: {candidate key: score}, or why the
# method could not score them (a missing reference, a question that could not be prepared).
QuestionScores = Mapping[str, "dict[str, float] | str"]


def candidate_scores(question: ds.Question, art: QuestionArtefacts | None,
                     methods: Mapping[str, Fewl]) -> dict[str, dict[str, float] | str]:
    """Every candidate of a question scored by each method's scorer; a method that cannot score
    it gets the reason instead."""
    out: dict[str, dict[str, float] | str] = {}
    for m, scorer in methods.items():
        if art is None:
            out[m] = "not prepared"
            continue
        try:
            out[m] = {c.key: scorer.score(c.text, art).score for c in question.candidates}
        except MissingReference as err:
            out[m] = f"no answer from reference {err.ref_id}"
    return out


def default_pairs(questions: Sequence[ds.Question]) -> tuple[tuple[str, str], ...]:
    datasets = {q.dataset for q in questions}
    if len(datasets) != 1 or next(iter(datasets)) not in DEFAULT_PAIRS:
        raise ConfigError(f"evaluate: no default answer pairs for datasets {sorted(datasets)}; pass pairs")
    return DEFAULT_PAIRS[next(iter(datasets))]


def tally(questions: Sequence[ds.Question], scores: Mapping[str, QuestionScores], setups: Mapping[str, str],
          pairs: Sequence[tuple[str, str]]) -> EvaluationReport:
    """The comparisons from scores already computed (``scores``: question id -> method -> scores);
    the methods are those of ``setups`` (method -> setup id); a question without scores is skipped
    as not prepared."""
    tallies = {(m, pos, neg): PairTally(m, pos, neg) for m in setups for pos, neg in pairs}
    top_label = pairs[0][0]
    firsts = {m: FirstTally(m, top_label) for m in setups}
    for q in questions:
        mine = scores.get(q.question_id, {})
        for m in setups:
            got = mine.get(m, "not prepared")
            skip = got if isinstance(got, str) else None
            by_key = got if isinstance(got, dict) else {}
            for pos, neg in pairs:
                pair = tallies[(m, pos, neg)]
                a, b = q.first(pos), q.first(neg)
                if skip or a is None or b is None:
                    pair.skipped[skip or f"no {pos if a is None else neg} answer"] += 1
                elif by_key[a.key] > by_key[b.key]:
                    pair.wins += 1
                elif by_key[a.key] == by_key[b.key]:
                    pair.ties += 1
                else:
                    pair.losses += 1
            top = q.first(top_label)
            if skip or top is None:
                firsts[m].skipped[skip or f"no {top_label} answer"] += 1
            else:
                firsts[m].compared += 1
                firsts[m].first += all(by_key[top.key] > s for k, s in by_key.items() if k != top.key)
    return EvaluationReport(dict(setups), list(tallies.values()), list(firsts.values()))


def evaluate(fewl: Fewl, questions: Sequence[ds.Question], artefacts: Mapping[str, QuestionArtefacts],
             single_reference: str | None = None, methods: Mapping[str, FewlParams] | None = None,
             pairs: Sequence[tuple[str, str]] | None = None) -> EvaluationReport:
    """Score every candidate of every prepared question under each method and tally the comparisons.

    ``methods`` default to FEWL (``fewl.params``) and single + no penalty against ``single_reference``;
    ``pairs`` default to the dataset's (``DEFAULT_PAIRS``)."""
    if methods is None:
        if single_reference is None:
            raise ConfigError("evaluate: name the single_reference of the baseline, or pass methods")
        methods = {k: v for k, v in paper_methods(fewl.params, single_reference).items()
                   if k in ("fewl", "single_no_penalty")}
    if not questions:
        raise DataError("evaluate: no question to evaluate")
    pairs = pairs if pairs is not None else default_pairs(questions)
    scorers = {name: fewl.with_params(p) for name, p in methods.items()}
    scores = {q.question_id: candidate_scores(q, artefacts.get(q.question_id), scorers) for q in questions}
    return tally(questions, scores, {m: s.setup_id for m, s in scorers.items()}, pairs)
