"""FEWL's LLM calls for a whole benchmark: every reference model answers every question, and the
IW/CO generator writes every question's wrong/corrected pairs.

The calls are made from the driver, in chunks of ``chunk`` prompts per ``generate_batch`` and one
thread per model. They are I/O-bound: a backend keeps its ``max_concurrency`` requests (or Serve
chunks) in flight from one process, so Ray workers would add process start and serialisation, not
throughput, at FEWL's benchmark sizes (hundreds to ten thousand questions). Every chunk goes
through the call cache and is stored when it returns, so a killed run asks again only what was
not answered.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

import pyarrow as pa

from halluscope.fewl import prompts
from halluscope.fewl.datasets import Question
from halluscope.fewl.prompts import IwCoAnswers, ParseReport
from halluscope.models.base import Completion, GenerationRequest, ModelBackend
from halluscope.models.usage import Usage

ANSWERS = pa.schema([
    ("run_id", pa.string()),
    ("question_id", pa.string()),
    ("step", pa.string()),  # reference | iw_co
    ("model", pa.string()),
    ("template", pa.string()),
    ("text", pa.string()),  # the raw reply
    ("error", pa.string()),
    ("cached", pa.bool_()),
    ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("parsed", pa.string()),  # JSON: {reference id: answer} or {"wrong": [...], "corrected": [...]}; null if none
])


@dataclass
class Answers:
    references: dict[str, dict[str, str]] = field(default_factory=dict)  # question id -> {reference id: answer}
    iw_co: dict[str, IwCoAnswers | None] = field(default_factory=dict)
    report: ParseReport = field(default_factory=ParseReport)
    usage: dict[tuple[str, str], Usage] = field(default_factory=dict)  # (model, step) -> calls
    rows: list[dict] = field(default_factory=list)

    def table(self) -> pa.Table:
        return pa.Table.from_pylist(self.rows, schema=ANSWERS)


def ask(backend: ModelBackend, task: str, prompts_by_id: Sequence[tuple[str, str]], chunk: int) -> list[Completion]:
    out: list[Completion] = []
    for i in range(0, len(prompts_by_id), chunk):
        part = prompts_by_id[i:i + chunk]
        out.extend(backend.generate_batch([GenerationRequest(task, qid, p) for qid, p in part]))
    return out


def collect(run_id: str, questions: Sequence[Question], references: dict[str, ModelBackend],
            generator: tuple[str, ModelBackend], samples: int, pairs: int, min_pairs: int, chunk: int) -> Answers:
    """Reference answers and IW/CO pairs for every question; failures and unreadable replies go to
    the parse report (and the question's fallbacks), never into the scores as answers."""
    ref_prompts = [(q.question_id, prompts.reference_requests(q.question, samples)[0]) for q in questions]
    iw_prompts = [(q.question_id, prompts.iw_co_requests(q.question, pairs)[0]) for q in questions]
    gen_id, gen_backend = generator
    jobs = {("reference", m): (b, ref_prompts) for m, b in references.items()}
    jobs[("iw_co", gen_id)] = (gen_backend, iw_prompts)
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {key: pool.submit(ask, backend, f"fewl/{key[0]}", todo, chunk)
                   for key, (backend, todo) in jobs.items()}
        replies = {key: f.result() for key, f in futures.items()}

    out = Answers()
    template = prompts.REFERENCE if samples == 1 else prompts.REFERENCE_MULTI
    for (step, model), completions in replies.items():
        out.usage[(model, step)] = Usage().add(completions)
        for q, reply in zip(questions, completions):
            qid = q.question_id
            if step == "reference":
                got = prompts.parse_references(qid, model, [reply], out.report, samples)
                out.references.setdefault(qid, {}).update(got)
                parsed = json.dumps(got, ensure_ascii=False) if got else None
            else:
                pairs_read = prompts.parse_iw_co(qid, model, [reply], out.report, min_pairs)
                out.iw_co[qid] = pairs_read
                parsed = None if pairs_read is None else json.dumps(
                    {"wrong": list(pairs_read.wrong), "corrected": list(pairs_read.corrected)}, ensure_ascii=False)
            out.rows.append({"run_id": run_id, "question_id": qid, "step": step, "model": model,
                             "template": template if step == "reference" else prompts.IW_CO, "text": reply.text,
                             "error": reply.error, "cached": bool(reply.extra.get("cached")),
                             "input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens,
                             "parsed": parsed})
    return out
