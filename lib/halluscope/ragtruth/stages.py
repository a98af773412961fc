"""The Ray Data stages of a RAGTruth run, one callable class each, holding its model clients.

Each input row is one planned batch: a key and what it covers. All of a batch's prompts to one
model go out in one ``generate_batch`` (so they are in flight together), and the batch's parts are
written under its key with the counts part last: a batch is committed once its counts part exists,
a killed run's leftovers are never read, and a retried batch rewrites the same objects.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Sequence

import pyarrow as pa
import ray

from halluscope.config import ModelSpec
from halluscope.models.base import Completion, GenerationRequest
from halluscope.models.cache import GENERATION_TEMPLATE
from halluscope.models.registry import client
from halluscope.models.usage import Usage
from halluscope.ragtruth.corpus import Record, Source
from halluscope.ragtruth.detectors import DetectorOutput, DetectorProblem, PromptDetector
from halluscope.ragtruth.metrics import MetricOptions, count
from halluscope.ragtruth.tables import (CALLS, PREDICTIONS, RAG_GENERATIONS, RagCounts, counts_table,
                                        detection_fields, prediction_row, rag_counts_table)
from halluscope.ragtruth.taxonomy import Quality
from halluscope.records import stable_id
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

# part tables, in commit order: a batch is committed when the last one exists
DETECT_TABLES = ("predictions", "detect_calls", "counts")
RAG_TABLES = ("rag_generations", "rag_calls", "rag_counts")


def _resolve(value):
    """Ray Data keeps constructor arguments in a closure, so an ObjectRef there arrives unresolved."""
    return ray.get(value) if isinstance(value, ray.ObjectRef) else value


def _problems(output: DetectorOutput) -> dict[str, list[DetectorProblem]]:
    by_id: dict[str, list[DetectorProblem]] = defaultdict(list)
    for p in output.problems:
        by_id[p.response_id].append(p)
    return by_id


def _calls(model: str, role: str, stage: str, replies: Sequence[Completion]) -> dict:
    return {"model": model, "role": role, "stage": stage, **Usage().add(replies).as_dict()}


def _summary(done: list[tuple[str, int]]) -> pa.Table:
    return pa.table({"key": pa.array([k for k, _ in done], pa.string()),
                     "rows": pa.array([n for _, n in done], pa.int64())})


class _Judge:
    """The detector: a judge model behind the call cache, read by ``PromptDetector``."""

    def __init__(self, spec: ModelSpec, endpoints: dict, cache: Location | None, options: MetricOptions) -> None:
        self.id = spec.id
        self.detector = PromptDetector(client(spec, endpoints, cache, PromptDetector.template_id), name=spec.id,
                                       unreadable=options.unreadable)

    def judge(self, records: Sequence[Record]) -> tuple[list[Completion], DetectorOutput]:
        if not records:
            return [], DetectorOutput()
        replies = self.detector.backend.generate_batch(self.detector.requests(records))
        return replies, self.detector.parse(records, replies)

    def fields(self, record: Record, reply: Completion, output: DetectorOutput,
               problems: Mapping[str, list[DetectorProblem]]) -> dict:
        return detection_fields(self.id, PromptDetector.template_id, output.predictions.get(record.id),
                                problems.get(record.id, []), reply.text, bool(reply.extra.get("cached")))


class DetectCorpus:
    """Detector evaluation: judge the corpus' responses of each batch, write predictions and counts."""

    def __init__(self, records, detector: ModelSpec, endpoints: dict, cache: Location | None, store: RunStore,
                 options: MetricOptions) -> None:
        self.records: dict[str, Record] = _resolve(records)
        self.judge = _Judge(detector, endpoints, cache, options)
        self.store = store
        self.options = options

    def __call__(self, batch: pa.Table) -> pa.Table:
        plans = batch.to_pylist()
        records = [self.records[i] for p in plans for i in p["ids"]]
        replies, output = self.judge.judge(records)  # the whole Ray batch in one generate_batch
        problems = _problems(output)
        done, start = [], 0
        for plan in plans:
            end = start + len(plan["ids"])
            recs, reps = records[start:end], replies[start:end]
            start = end
            rows = [prediction_row(self.store.run_id, r, self.judge.fields(r, c, output, problems))
                    for r, c in zip(recs, reps)]
            counts = count(recs, output.predictions, self.options)
            parts = {"predictions": pa.Table.from_pylist(rows, schema=PREDICTIONS),
                     "detect_calls": pa.Table.from_pylist([_calls(self.judge.id, "detector", "detect", reps)],
                                                          schema=CALLS),
                     "counts": counts_table(counts)}
            for name in DETECT_TABLES:
                self.store.write_part(name, plan["key"], parts[name], commit=name == DETECT_TABLES[-1])
            done.append((plan["key"], len(recs)))
        return _summary(done)


def generated_record(gen_id: str, source: Source, model: str, text: str) -> Record:
    """A model's answer to a source, shaped as a corpus record (no gold) so the detector can read it."""
    return Record(id=gen_id, source_id=source.source_id, model=model, temperature=None, split="generated",
                  quality=Quality.GOOD, response=text, labels=(), gold=(), source=source, line=0)


def rag_gen_id(source_id: str, model: str) -> str:
    return stable_id("ragtruth-generation", source_id, model)


class GenerateAndDetect:
    """RAG generation: the models under test answer each source's own prompt, then the detector
    finds spans in their answers; one generate_batch per model and one for the detector per batch."""

    def __init__(self, sources, generators: Sequence[ModelSpec], detector: ModelSpec, endpoints: dict,
                 cache: Location | None, store: RunStore, options: MetricOptions) -> None:
        self.sources: dict[str, Source] = _resolve(sources)
        self.generators = {g.id: client(g, endpoints, cache, GENERATION_TEMPLATE) for g in generators}
        self.judge = _Judge(detector, endpoints, cache, options)
        self.store = store

    def _generate(self, plans: list[dict]) -> dict[tuple[str, str], Completion]:
        by_model: dict[str, list[str]] = defaultdict(list)
        for p in plans:
            by_model[p["model"]].extend(p["source_ids"])
        out = {}
        for model, sids in by_model.items():
            reqs = [GenerationRequest(f"ragtruth/{self.sources[s].task_type.value}", s, self.sources[s].prompt)
                    for s in sids]
            out.update({(s, model): c for s, c in zip(sids, self.generators[model].generate_batch(reqs))})
        return out

    def __call__(self, batch: pa.Table) -> pa.Table:
        plans = batch.to_pylist()
        answers = self._generate(plans)
        records = {key: generated_record(rag_gen_id(*key), self.sources[key[0]], key[1], c.text)
                   for key, c in answers.items() if c.error is None and c.text is not None}
        order = list(records)
        replies, output = self.judge.judge([records[k] for k in order])
        judged = dict(zip(order, replies))
        problems = _problems(output)
        done = []
        for plan in plans:
            model, rows, counts = plan["model"], [], defaultdict(RagCounts)
            gens, judge_replies = [], []
            for sid in plan["source_ids"]:
                key, src = (sid, model), self.sources[sid]
                gen = answers[key]
                gens.append(gen)
                row = {"run_id": self.store.run_id, "gen_id": rag_gen_id(sid, model), "source_id": sid,
                       "task": src.task_type.value, "source": src.source, "model": model, "response": gen.text,
                       "error": gen.error if gen.error is not None else (None if gen.text is not None else "no text"),
                       "input_tokens": gen.input_tokens, "output_tokens": gen.output_tokens,
                       "cached": bool(gen.extra.get("cached")), "n_words": None}
                tally = RagCounts(asked=1)
                if key in records:
                    reply = judged[key]
                    judge_replies.append(reply)
                    row.update(self.judge.fields(records[key], reply, output, problems),
                               n_words=len(records[key].response.split()))
                    pred = output.predictions.get(records[key].id)
                    tally += (RagCounts(unpredicted=1) if pred is None else
                              RagCounts(scored=1, unreadable=int(pred.unreadable), hallucinated=int(pred.positive),
                                        spans=pred.n_spans, words=row["n_words"]))
                else:
                    row.update(detection_fields(self.judge.id, PromptDetector.template_id, None, [], None, False))
                    tally += RagCounts(generation_errors=1)
                counts[(src.task_type.value, model)] += tally
                rows.append(row)
            calls = [_calls(model, "test", "generate", gens),
                     _calls(self.judge.id, "detector", "detect_generated", judge_replies)]
            parts = {"rag_generations": pa.Table.from_pylist(rows, schema=RAG_GENERATIONS),
                     "rag_calls": pa.Table.from_pylist(calls, schema=CALLS),
                     "rag_counts": rag_counts_table(counts)}
            for name in RAG_TABLES:
                self.store.write_part(name, plan["key"], parts[name], commit=name == RAG_TABLES[-1])
            done.append((plan["key"], len(rows)))
        return _summary(done)
