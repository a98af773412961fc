"""Prepare every question of a benchmark for FEWL: join references, IW/CO pairs and neighbours.

The neighbours' answers are the same references' answers to other questions of the benchmark
(spec §2, Step 3), so a full pass needs no extra LLM call. What could not be prepared is kept in
``PreparedQuestions``: questions without any reference answer or (with ``missing_pairs: exclude``)
without IW/CO pairs are excluded with the reason, and fallbacks to uniform weights are listed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from halluscope.fewl.datasets import Question
from halluscope.fewl.neighbours import QuestionIndex
from halluscope.fewl.prompts import IwCoAnswers
from halluscope.fewl.score import Fewl, QuestionArtefacts

# {question id: {reference id: answer}}
ReferenceAnswers = Mapping[str, Mapping[str, str]]


@dataclass
class PreparedQuestions:
    artefacts: dict[str, QuestionArtefacts] = field(default_factory=dict)
    excluded: dict[str, str] = field(default_factory=dict)  # question id -> reason
    uniform_fallback: list[str] = field(default_factory=list)
    missing_references: dict[str, list[str]] = field(default_factory=dict)  # question id -> absent ref ids


def prepare_questions(fewl: Fewl, questions: Sequence[Question], ref_ids: Sequence[str],
                      references: ReferenceAnswers, iw_co: Mapping[str, IwCoAnswers | None],
                      index: QuestionIndex) -> PreparedQuestions:
    """Artefacts for each question; ``ref_ids`` is the reference set, in order, that every
    question should have (a reference missing for a question is dropped there and recorded)."""
    out = PreparedQuestions()
    p = fewl.params
    for q in questions:
        answers = references.get(q.question_id, {})
        present = {r: answers[r] for r in ref_ids if r in answers}
        absent = [r for r in ref_ids if r not in answers]
        if absent:
            out.missing_references[q.question_id] = absent
        if not present:
            out.excluded[q.question_id] = "no reference answer"
            continue
        nbrs = index.neighbours(q.question_id, p.k_nn, p.neighbour_max_similarity) if p.k_nn else []
        neighbour_answers = [(n.question_id, references.get(n.question_id, {})) for n in nbrs]
        art = fewl.prepare(q.question_id, present, iw_co.get(q.question_id), neighbour_answers)
        if art is None:
            out.excluded[q.question_id] = "no readable IW/CO pairs"
            continue
        if art.expertise.source == "uniform-fallback":
            out.uniform_fallback.append(q.question_id)
        out.artefacts[q.question_id] = art
    return out
