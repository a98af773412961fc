"""The RAGTruth tasks' own steps, without a run: the detector reply read into atoms and checked
against gold, the judge's spans of a generated answer, and the options' errors before any model."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from halluscope.contract.benchmark import MetricInputs
from halluscope.contract.completion import Completion
from halluscope.errors import ConfigError
from halluscope.pipeline.aggregate import merged
from halluscope.ragtruth.benchmark import BENCHMARK, metrics
from halluscope.ragtruth.tasks import DETECT, GENERATE, Detect, Generation, RagTruthOptions
from halluscope.sources import DataResolver

RESPONSE = "Boil the eggs for 15 minutes and add salt."
SOURCE = {"source_id": "s-qa", "task_type": "QA", "source": "MARCO",
          "source_info": {"question": "how long to boil an egg", "passages": "Boil eggs for 9 to 12 minutes."},
          "prompt": "Briefly answer the following question:\nhow long to boil an egg\noutput:"}
GOLD = {"start": 18, "end": 28, "text": "15 minutes", "meta": "", "label_type": "Evident Conflict"}


def corpus(tmp_path, models=("model-a", "model-b")) -> dict:
    rows = [{"id": f"r-{m}", "source_id": "s-qa", "model": m, "temperature": 0.7, "labels": [GOLD],
             "split": "test", "quality": "good", "response": RESPONSE} for m in models]
    (tmp_path / "response.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "source_info.jsonl").write_text(json.dumps(SOURCE) + "\n")
    return {"responses": str(tmp_path / "response.jsonl"), "sources": str(tmp_path / "source_info.jsonl")}


def reply(*spans: str) -> str:
    return json.dumps({"hallucination list": list(spans)})


def test_detector_spans_are_atoms_checked_against_gold(tmp_path):
    options = RagTruthOptions.model_validate({"corpus": corpus(tmp_path)})
    loaded = Detect().load_items(DataResolver(), (), options)
    item = loaded.items[0]
    assert "Answer to check:\n" + RESPONSE in item.prompt and set(loaded.sources) == {
        "ragtruth/response.jsonl", "ragtruth/source_info.jsonl"}
    text = reply("15 minutes", "add salt", "a tunnel")
    atoms = Detect().decompose(text, item)
    assert atoms == ["15 minutes", "add salt", "a tunnel"]
    verdicts = Detect().verify(atoms, text, item, kb=None)
    assert [(v.supported, v.evidence) for v in verdicts] == [
        (True, "characters 18-28: 10 in gold spans"), (False, "characters 33-41: 0 in gold spans"),
        (False, "not found in the response")]
    assert not Detect().responded("I cannot tell.", item) and Detect().responded(reply(), item)


def test_the_judge_spans_of_a_generated_answer_are_unsupported_atoms(tmp_path):
    options = RagTruthOptions.model_validate({"corpus": corpus(tmp_path), "metrics": {"unreadable": "exclude"}})
    (item,) = Generation().load_items(DataResolver(), (), options).items
    answer = "Eggs boil for an hour in the sea."
    (call,) = [Generation().decompose_call(answer, item)]
    assert call.role == "judge" and "Answer to check:\n" + answer in call.prompts[0]
    # an endpoint that supports it is held to the JSON object the prompt asks for
    assert call.answer_format is not None and call.answer_format.json_schema == {
        "type": "object", "properties": {"hallucination list": {"type": "array", "items": {"type": "string"}}},
        "required": ["hallucination list"], "additionalProperties": False}
    # overlapping spans count once, as the detector's n_spans does
    atoms = Generation().decompose(answer, item, [Completion(reply("an hour", "hour in the sea", "never"))])
    assert atoms == ["an hour in the sea", "never"]
    assert [v.supported for v in Generation().verify(atoms, answer, item, kb=None)] == [False, False]
    with pytest.raises(ValueError, match="no readable list"):
        Generation().decompose(answer, item, [Completion("not sure")])
    with pytest.raises(ValueError, match="the judge gave no answer: HTTP 503"):
        Generation().decompose(answer, item, [Completion(None, error="HTTP 503")])


def test_bad_options_fail_when_items_load(tmp_path):
    with pytest.raises(ConfigError, match=r"benchmarks.ragtruth.corpus: not set"):
        Detect().load_items(DataResolver(), (), RagTruthOptions())
    options = RagTruthOptions.model_validate({"corpus": corpus(tmp_path),
                                              "selection": {"candidates": [["model-a", "model-z"]]}})
    with pytest.raises(ConfigError, match=r"selection.candidates: model\(s\) \['model-z'\] have no response"):
        Detect().load_items(DataResolver(), (), options)


def _inputs(options: RagTruthOptions, generations: pa.Table, scores: pa.Table, items: dict[str, pa.Table],
            model: str | None = None) -> MetricInputs:
    """What the engine hands the metrics hook: every model's rows, or one ``model``'s."""
    def mine(table: pa.Table) -> pa.Table:
        return table if model is None else table.filter(pc.equal(table.column("model"), model))

    def read_table(name: str, columns: list[str] | None = None, filters: list | None = None) -> pa.Table:
        assert name == "generations"
        found = mine(generations)  # the store applies the read's filters as pyarrow's read does
        return found.filter(pq.filters_to_expression(filters)) if filters else found

    return MetricInputs([DETECT, GENERATE], mine(scores), read_table, items.__getitem__, options)


def test_metrics_called_per_model_and_merged_equal_one_call_over_every_model(tmp_path):
    """The engine calls RAGTruth's hook once per model (the driver holds one model's answers):
    merged by the engine, the calls give the records of one call over all models, the corpus'
    records once (each model's records of a task in the same order; the calls' come model by model)."""
    options = RagTruthOptions.model_validate({"corpus": corpus(tmp_path)})
    detect, generate = (t.load_items(DataResolver(), (), options).items for t in (Detect(), Generation()))
    items = {task: pa.table({"item_id": [i.item_id for i in its], "prompt": [i.prompt for i in its],
                             "fields": [json.dumps(i.fields) for i in its]})
             for task, its in ((DETECT, detect), (GENERATE, generate))}
    answers = {"model-a": (reply("15 minutes"), "Boil them for an hour."),
               "model-z": (reply(), "Ten minutes.")}
    rows = [{"gen_id": f"{m}-{task}-{i.item_id}", "model": m, "task": task, "item_id": i.item_id,
             "text": text, "error": None, "n_atoms": 1 if m == "model-a" else 0}
            for m, (detected, generated) in answers.items()
            for task, its, text in ((DETECT, detect, detected), (GENERATE, generate, generated)) for i in its]
    generations = pa.Table.from_pylist(rows).drop_columns(["n_atoms"])
    scores = pa.Table.from_pylist(rows).drop_columns(["text"])
    whole = metrics(_inputs(options, generations, scores, items))
    per_model = [r for m in sorted(answers) for r in metrics(_inputs(options, generations, scores, items, m))]
    assert BENCHMARK.metrics_per_model and len(per_model) > len(whole)  # each call repeats the corpus' records
    by_calls, at_once = (merged(BENCHMARK.name, rs) for rs in (per_model, whole))
    assert len(by_calls) == len(whole) and by_calls[0].model == "*"
    assert sorted(by_calls, key=lambda r: (r.model, r.task)) == sorted(at_once, key=lambda r: (r.model, r.task))
    assert {r.model for r in whole} == {"*", "model-a", "model-z"} and whole[0].model == "*"
