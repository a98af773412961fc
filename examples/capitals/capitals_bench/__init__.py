"""A fifth benchmark in one file: "name the capital", verified by a program.

Everything halluscope needs is here: the task (items, R, D, V), the options it reads from
``benchmarks.capitals`` in a run config, the metrics it computes from the committed rows and its
section of the report. Resume, fencing, call cache, progress, costs, manifest and the report's
rendering come from the engine.
"""

from __future__ import annotations

import csv
import hashlib
from collections import defaultdict
from collections.abc import Sequence
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from halluscope.contract.benchmark import Benchmark, MetricInputs
from halluscope.contract.metrics import MetricRecord
from halluscope.contract.report import Column, Section, Table
from halluscope.contract.task import Item, LoadedItems, Task, Verdict
from halluscope.records import stable_id

TASK = "capitals/name_the_capital"


class CapitalsOptions(BaseModel):
    """The run config's ``benchmarks.capitals`` section."""

    model_config = ConfigDict(extra="forbid")
    abstain_phrases: list[str] = Field(default_factory=lambda: ["i don't know", "i do not know", "not sure"],
                                       description="a response containing one (any case) is an abstention")


def _questions() -> tuple[list[dict[str, str]], str]:
    text = resources.files(__package__).joinpath("questions.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines())), hashlib.sha256(text.encode()).hexdigest()


class NameTheCapital(Task):
    name = TASK
    kind = "response"
    abstention_rule = "capitals-phrases-v1"
    decomposer = "whole-answer-v1"
    verifier = "capital-named-v1"

    def load_items(self, resolver, testsets=(), options=None) -> LoadedItems:
        rows, digest = _questions()
        items = []
        for row in rows:
            prompt = f"What is the capital of {row['country']}? Answer in one sentence."
            items.append(Item(self.name, stable_id(self.name, prompt), prompt,
                              {"country": row["country"], "capital": row["capital"],
                               "abstain_phrases": list(self._options(options).abstain_phrases)}))
        return LoadedItems(items, {"capitals_bench/questions.csv": digest})

    @staticmethod
    def _options(options: BaseModel | None) -> CapitalsOptions:
        return options if isinstance(options, CapitalsOptions) else CapitalsOptions()

    def responded(self, text: str, item: Item, replies=()) -> bool:
        lowered = text.lower()
        return bool(text.strip()) and not any(p in lowered for p in item.fields["abstain_phrases"])

    def decompose(self, text: str, item: Item, replies=()) -> list[str]:
        return [text.strip()]

    def verify(self, atoms: list[str], text: str, item: Item, kb, replies=()) -> list[Verdict]:
        capital = item.fields["capital"]
        return [Verdict(capital.lower() in a.lower(), f"the capital is {capital}") for a in atoms]


def metrics(inputs: MetricInputs) -> list[MetricRecord]:
    """Per model: how often it answered, and how often an answer named the wrong city."""
    tally: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])  # scored, answered, wrong
    for r in inputs.scores.select(["model", "task", "error", "responded", "f"]).to_pylist():
        if r["error"] is not None:
            continue
        t = tally[(r["model"], r["task"])]
        t[0] += 1
        t[1] += int(bool(r["responded"]))
        t[2] += int(bool(r["responded"]) and (r["f"] or 0.0) > 0)
    return [MetricRecord(model, task, values={"n": n, "response_ratio": answered / n,
                                              "wrong_answer_rate": wrong / answered if answered else None})
            for (model, task), (n, answered, wrong) in sorted(tally.items())]


def report(records: Sequence[MetricRecord]) -> list[Section]:
    """Its section of leaderboard.md and report.html: plain values, formatted and escaped by the engine."""
    rows = [[r.model, r.values["response_ratio"], r.values["wrong_answer_rate"]] for r in records]
    return [Section("Capitals (worked example)", ["Answered: share of questions answered rather than declined; "
                                                  "wrong answers: share of the answers that name another city."],
                    parts=[Table("", ["model", Column("answered", ".2f"), Column("wrong answers", ".2f")], rows)])]


BENCHMARK = Benchmark("capitals", (NameTheCapital(),), options=CapitalsOptions, metrics=metrics,
                      report=report,
                      description="worked example: name the capital, checked by a program")
