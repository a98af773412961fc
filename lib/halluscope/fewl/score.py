"""FEWL (Wei et al., Eq. 1): score an answer against reference LLMs, without a gold answer.

    FEWL(y|x) = 1/N sum_i [ g*( lambda_i(x) Sim(y, h_i(x)) ) - f*( g*( 1/K sum_k Sim(y, h_i(x_knn_k)) ) ) ]

with raw expertise r_i = max_k Sim(h_i, CO_k) - max_k Sim(h_i, IW_k), weights lambda = softmax(r / tau)
and (g*, f*) from the variational form of an f-divergence (TV by default). Higher is better.

Everything that does not depend on the scored answer y - the references' answers, lambda, the
neighbours' answers - is prepared once per question (``QuestionArtefacts``); a score carries its
components per reference, so runs with different backends or settings can be compared term by term.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from halluscope.errors import ConfigError, DataError
from halluscope.fewl.cache import content_key
from halluscope.fewl.prompts import TEMPLATES, IwCoAnswers
from halluscope.fewl.similarity import Similarity

Divergence = Literal["tv", "js", "kl"]


class MissingReference(DataError):
    """The single reference a baseline scores against did not answer this question."""

    def __init__(self, question_id: str, ref_id: str) -> None:
        super().__init__(f"question {question_id} has no answer from reference {ref_id!r}")
        self.ref_id = ref_id


class FewlParams(BaseModel):
    """Hyperparameters with the paper's values where it gives them, the spec's suggestions where not."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    iw_pairs: int = Field(default=25, gt=0, description="IW/CO pairs asked for per question (App. C.1)")
    reference_samples: int = Field(default=1, gt=0, description="answers per reference model; 5 in 'multi'")
    tau: float = Field(default=1.0, gt=0, description="softmax temperature of lambda; Alg. 1 uses 1")
    k_nn: int = Field(default=10, ge=0, description="neighbour questions of the penalty; unstated, Fig. 2 uses 10")
    neighbour_max_similarity: float = Field(default=0.8, gt=0, le=1,
                                            description="neighbours above this are too close (App. C.6)")
    divergence: Divergence = "tv"
    penalty: bool = True
    weighting: Literal["expertise", "uniform"] = "expertise"
    form: Literal["eq1", "lambda_outside", "weighted_truthful"] = Field(
        default="eq1", description="eq1: Eq. 1; lambda_outside: sum_i lambda_i [g*(s_i) - f*(g*(p_i))] (§3.1); "
                                   "weighted_truthful: sum_i lambda_i s_i (§2.1, no penalty)")
    single_reference: str | None = Field(default=None, description="score against this reference alone, lambda=1 "
                                                                   "(the paper's 'single' baselines)")
    min_pairs: int = Field(default=1, gt=0, description="fewer readable IW/CO pairs count as none")
    missing_pairs: Literal["uniform", "exclude"] = Field(
        default="uniform", description="a question without readable IW/CO pairs: uniform lambda, or not scored")

    @model_validator(mode="after")
    def _penalty_fits_form(self) -> FewlParams:
        if self.form == "weighted_truthful" and self.penalty:
            raise ValueError("form 'weighted_truthful' (§2.1) has no laziness penalty: set penalty: false")
        return self

    def variant(self, **changes: Any) -> FewlParams:
        """A validated copy with some fields changed (baselines and ablations)."""
        try:
            return FewlParams.model_validate({**self.model_dump(), **changes})
        except ValueError as err:
            raise ConfigError(f"invalid FEWL parameters {changes}: {err}") from None


# --- the formulas ---------------------------------------------------------------------------------

def g_star(divergence: Divergence, v: float) -> float:
    """Output activation of the variational f-divergence bound (footnotes 5/6, App. C.9)."""
    if divergence == "tv":
        return 0.5 * math.tanh(v)
    if divergence == "js":
        return math.log(2.0) - math.log1p(math.exp(-v))  # log(2 / (1 + e^-v))
    return v


def f_star(divergence: Divergence, u: float) -> float:
    """Fenchel conjugate of the divergence's generator f."""
    if divergence == "tv":
        return u
    if divergence == "js":
        return -math.log(2.0 - math.exp(u))  # finite: g*_js(v) < log 2 for every v
    return math.exp(u - 1.0)


def raw_expertise(sim_corrected: np.ndarray, sim_wrong: np.ndarray) -> np.ndarray:
    """r_i = max_k Sim(h_i, CO_k) - max_k Sim(h_i, IW_k); rows are references (Alg. 1, §2.1)."""
    return np.max(sim_corrected, axis=1) - np.max(sim_wrong, axis=1)


def expertise_weights(raw: np.ndarray, tau: float = 1.0) -> np.ndarray:
    """lambda = softmax(r / tau) over the references; sums to 1."""
    z = np.asarray(raw, dtype=np.float64) / tau
    e = np.exp(z - np.max(z))
    return e / e.sum()


def laziness_penalty(similarities: Sequence[float] | np.ndarray) -> float | None:
    """1/K sum_k Sim(y, h_i(x_knn_k)): how much y looks like reference i's answers to *other*
    questions (§2.2); None when reference i answered none of the neighbours."""
    return math.fsum(similarities) / len(similarities) if len(similarities) else None


# --- per-question artefacts and scores -------------------------------------------------------------

@dataclass(frozen=True)
class Expertise:
    raw: tuple[float, ...] | None  # r_i; None when the weights are a fallback
    weights: tuple[float, ...]  # lambda_i
    source: Literal["iw_co", "uniform-fallback"]
    tau: float
    n_pairs: int
    generator: str | None = None  # the model that wrote the IW/CO pairs


@dataclass(frozen=True)
class QuestionArtefacts:
    """What FEWL needs of a question, independent of the answer scored: compute once, reuse."""

    question_id: str
    ref_ids: tuple[str, ...]
    answers: tuple[str, ...]  # h_i(x)
    expertise: Expertise
    neighbour_ids: tuple[str, ...]
    neighbour_answers: tuple[tuple[str, ...], ...]  # per reference: h_i(x') for the neighbours it answered


@dataclass(frozen=True)
class ReferenceTerm:
    ref_id: str
    raw_expertise: float | None
    weight: float  # lambda_i as used (1 for a single reference, 1/N uniform)
    similarity: float  # s_i = Sim(y, h_i(x))
    agreement: float  # the truthfulness term of reference i (form-dependent, see FewlParams.form)
    neighbour_similarity: float | None  # mean Sim(y, h_i(x')); None if no neighbour or penalty off
    n_neighbours: int
    penalty: float  # f*(g*(neighbour_similarity)); 0 when off or without neighbours


@dataclass(frozen=True)
class FewlScore:
    question_id: str
    score: float  # truthfulness - penalty; higher = less hallucinated
    truthfulness: float
    penalty: float
    references: tuple[ReferenceTerm, ...]
    weighting: str  # iw_co | uniform | uniform-fallback | single
    setup: str  # id of (params, similarity backend, prompt templates)

    def to_dict(self) -> dict:
        """Plain values for a scores table (the terms as a list of records)."""
        return asdict(self)

    @property
    def missing_neighbours(self) -> int:
        """References whose penalty could not be computed (no answered neighbour)."""
        return sum(1 for t in self.references if t.n_neighbours == 0)


class Fewl:
    """FEWL under one similarity backend and one set of parameters."""

    def __init__(self, similarity: Similarity, params: FewlParams | None = None) -> None:
        self.similarity = similarity
        self.params = params or FewlParams()
        self.setup = {"params": self.params.model_dump(mode="json"), "similarity": similarity.name,
                      "templates": list(TEMPLATES)}
        self.setup_id = content_key(self.setup)[:12]

    def with_params(self, params: FewlParams) -> Fewl:
        return Fewl(self.similarity, params)

    def expertise(self, answers: Sequence[str], pairs: IwCoAnswers | None) -> Expertise | None:
        """lambda over the references; without usable pairs a uniform fallback, or None to exclude."""
        n_pairs = min(len(pairs.wrong), len(pairs.corrected)) if pairs else 0
        if n_pairs < self.params.min_pairs:
            if self.params.missing_pairs == "exclude":
                return None
            return Expertise(None, (1.0 / len(answers),) * len(answers), "uniform-fallback", self.params.tau, 0)
        assert pairs is not None
        sim_co = self.similarity.matrix(list(answers), list(pairs.corrected))
        sim_iw = self.similarity.matrix(list(answers), list(pairs.wrong))
        raw = raw_expertise(sim_co, sim_iw)
        weights = expertise_weights(raw, self.params.tau)
        return Expertise(tuple(float(r) for r in raw), tuple(float(w) for w in weights), "iw_co",
                         self.params.tau, n_pairs, pairs.model)

    def prepare(self, question_id: str, references: Mapping[str, str], pairs: IwCoAnswers | None,
                neighbours: Sequence[tuple[str, Mapping[str, str]]]) -> QuestionArtefacts | None:
        """Artefacts of a question from its references' answers {ref id: answer}, its IW/CO pairs and
        its neighbours [(question id, {ref id: answer})]; None when it cannot be scored."""
        ref_ids = tuple(references)
        if not ref_ids:
            return None
        answers = tuple(references[r] for r in ref_ids)
        expertise = self.expertise(answers, pairs)
        if expertise is None:
            return None
        per_ref = tuple(tuple(ans[r] for _, ans in neighbours if r in ans) for r in ref_ids)
        return QuestionArtefacts(question_id, ref_ids, answers, expertise, tuple(q for q, _ in neighbours), per_ref)

    def _weights(self, art: QuestionArtefacts) -> tuple[list[int], list[float], str]:
        p = self.params
        if p.single_reference is not None:
            if p.single_reference not in art.ref_ids:
                raise MissingReference(art.question_id, p.single_reference)
            return [art.ref_ids.index(p.single_reference)], [1.0], "single"
        n = len(art.ref_ids)
        if p.weighting == "uniform":
            return list(range(n)), [1.0 / n] * n, "uniform"
        if art.expertise.source == "iw_co" and art.expertise.tau != p.tau:
            raise ConfigError(f"artefacts of {art.question_id} were prepared with tau={art.expertise.tau}, "
                              f"not {p.tau}: prepare them again")
        return list(range(n)), list(art.expertise.weights), art.expertise.source

    def score(self, answer: str, art: QuestionArtefacts) -> FewlScore:
        p = self.params
        idx, weights, source = self._weights(art)
        sims = self.similarity.matrix([answer], [art.answers[i] for i in idx])[0]
        nbr_texts = [art.neighbour_answers[i] for i in idx] if p.penalty else [() for _ in idx]
        flat = [t for texts in nbr_texts for t in texts]
        nbr_sims = self.similarity.matrix([answer], flat)[0] if flat else np.zeros(0)
        terms: list[ReferenceTerm] = []
        offset = 0
        for i, w, s, texts in zip(idx, weights, sims, nbr_texts):
            mean_nbr = laziness_penalty(nbr_sims[offset:offset + len(texts)])
            offset += len(texts)
            pen = f_star(p.divergence, g_star(p.divergence, mean_nbr)) if mean_nbr is not None else 0.0
            if p.form == "eq1":
                agree = g_star(p.divergence, w * float(s))
            elif p.form == "lambda_outside":
                agree = g_star(p.divergence, float(s))
            else:
                agree = float(s)
            raw = art.expertise.raw[i] if art.expertise.raw is not None else None
            terms.append(ReferenceTerm(art.ref_ids[i], raw, w, float(s), agree, mean_nbr,
                                       len(art.neighbour_answers[i]), pen))
        if p.form == "eq1":  # 1/N sum_i [...]
            truth = math.fsum(t.agreement for t in terms) / len(terms)
            penalty = math.fsum(t.penalty for t in terms) / len(terms)
        else:  # sum_i lambda_i [...]
            truth = math.fsum(t.weight * t.agreement for t in terms)
            penalty = math.fsum(t.weight * t.penalty for t in terms)
        return FewlScore(art.question_id, truth - penalty, truth, penalty, tuple(terms), source, self.setup_id)
