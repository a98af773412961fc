"""The stage functions without Ray: a row whose task function raises fails alone."""

from collections import defaultdict
from functools import cache

import pyarrow as pa
import pytest
from tests.conftest import SHARED_DATA

from halluscope import records
from halluscope.contract.completion import Completion
from halluscope.knowledge.base import Knowledge
from halluscope.pipeline import stages
from halluscope.pipeline.roles import RoleModels
from halluscope.sources import DataResolver
from halluscope.task_registry import get_task

pytestmark = pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")


@cache
def _loaded(task_name):
    return get_task(task_name).load_items(DataResolver(download=False))


def _batch(task_name, texts, errors=None):
    items = _loaded(task_name).items[:len(texts)]
    errors = errors or [None] * len(texts)
    return pa.Table.from_pylist([
        {"gen_id": str(i), "model": "m", "task": it.task, "item_id": it.item_id, "sample_idx": 0,
         "prompt": it.prompt, "text": t, "input_tokens": None, "output_tokens": None,
         "latency_s": None, "attempts": 0, "cached": False, "error": e}
        for i, (it, t, e) in enumerate(zip(items, texts, errors))], schema=records.WORK)


def _item(task_name, model, item_id):
    """The rows' items as a run's workers hold them: by id, from the task's loaded items."""
    return _loaded(task_name).by_id[item_id]


def _evaluate(batch, roles=None, usage=None):
    verify = stages.Verify(Knowledge(DataResolver(download=False)), roles)
    rows = stages.Rows(batch, _item)
    stages.abstain(rows, roles, usage)
    stages.decompose(rows, roles, usage)
    verify(rows, usage)
    return rows.table()


def test_a_raising_decomposer_fails_its_row_only(monkeypatch):
    task = get_task("halogen/code")
    real = task.decompose

    def flaky(text, item, replies=()):
        if "boom" in text:
            raise ValueError("cannot parse")
        return real(text, item, replies)

    monkeypatch.setattr(task, "decompose", flaky)
    out = _evaluate(_batch("halogen/code", ["import os\nimport boom", "import numpy", None],
                           [None, None, "HTTP 503 after 5 attempts"])).to_pylist()
    assert out[0]["row_error"] == "decompose failed: ValueError: cannot parse" and out[0]["atoms"] == []
    assert out[0]["error"] is None  # the generation's own: it answered
    assert out[1]["row_error"] is None and out[1]["atoms"] == ["numpy"] and out[1]["supported"] == [True]
    assert out[2]["row_error"] == out[2]["error"] == "HTTP 503 after 5 attempts" and out[2]["responded"] is None
    scores = stages.split_tables(pa.Table.from_pylist(out), "r")["scores"].to_pylist()
    assert [s["f"] for s in scores] == [None, 0.0, None]  # failed rows are never scored


def test_a_raising_verifier_leaves_verdicts_undecided(monkeypatch):
    task = get_task("halogen/code")
    monkeypatch.setattr(task, "verify", lambda atoms, text, item, kb, replies=(): 1 / 0)
    out = _evaluate(_batch("halogen/code", ["import os"])).to_pylist()[0]
    assert out["supported"] == [None] and out["row_error"].startswith("verify failed: ZeroDivisionError")


class _Scripted:
    """A role backend answering from a function of the prompt; counts what it was sent."""

    def __init__(self, model_id, answer):
        self.model_id, self.answer, self.prompts = model_id, answer, []

    def generate_batch(self, requests):
        self.prompts += [r.prompt for r in requests]
        return [self.answer(r.prompt) for r in requests]


def _roles(extractor, judge):
    roles = RoleModels([], {}, None)
    roles._backends = {("extractor", "facts-v1", None): extractor, ("judge", "entailment-v1", None): judge}
    return roles


def test_role_calls_of_a_batch_go_out_together_and_return_to_their_rows():
    def extract(prompt):
        if "fails" in prompt:
            return Completion(None, error="HTTP 503 after 4 attempts")
        if "garbage" in prompt:
            return Completion("Sure! Here you go:", 5, 4)
        return Completion("Here are the facts:\n- Barker hosted the show.\n- Barker is 91.", 10, 12)

    def judge(prompt):
        if "91" in prompt.split("Hypothesis:")[1]:
            return Completion("I cannot determine that.", 30, 4)
        return Completion("Yes.", 30, 1)

    extractor, judge_backend = _Scripted("x", extract), _Scripted("j", judge)
    usage = defaultdict(list)
    out = _evaluate(_batch("halogen/summarization", ["Barker returned.", "this one fails", "garbage", "I'm sorry"]),
                    _roles(extractor, judge_backend), usage).to_pylist()
    assert len(extractor.prompts) == 3  # one per responded row, in one batch call
    assert out[0]["atoms"] == ["Barker hosted the show.", "Barker is 91."]
    assert out[0]["supported"] == [True, None]  # an unreadable judge answer is never "supported"
    assert out[0]["evidence"][1].startswith("unreadable judge answer")
    assert out[1]["row_error"] == "decompose failed: RuntimeError: extractor call failed: HTTP 503 after 4 attempts"
    assert out[2]["row_error"].startswith("decompose failed: ValueError: unreadable extractor answer")
    assert out[3]["responded"] is False and out[3]["atoms"] == []
    assert len(judge_backend.prompts) == 2
    assert [(u["stage"], u["role"], u["calls"], u["failed_calls"]) for u in usage["0"]] == [
        ("decompose", "extractor", 1, 0), ("verify", "judge", 2, 0)]
    assert usage["1"][0]["failed_calls"] == 1
    tables = stages.split_tables(pa.Table.from_pylist(out), "r", usage)
    assert tables["role_calls"].num_rows == 4
    score = tables["scores"].to_pylist()[0]
    assert score["n_atoms"] == 2 and score["n_unverified"] == 1 and score["f"] == 0.0
