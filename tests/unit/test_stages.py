"""The stage functions without Ray: a row whose task function raises fails alone."""

import pyarrow as pa
import pytest

from halluscope import records
from halluscope.config import VerifierOptions
from halluscope.pipeline import stages
from halluscope.sources import DataResolver
from halluscope.tasks.registry import get_task
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")


def _batch(task_name, texts, errors=None):
    items = get_task(task_name).load_items(DataResolver(download=False)).items[:len(texts)]
    errors = errors or [None] * len(texts)
    return pa.Table.from_pylist([
        {"gen_id": str(i), "model": "m", "task": it.task, "item_id": it.item_id, "sample_idx": 0,
         "prompt": it.prompt, "fields": it.fields_json(), "text": t, "input_tokens": None, "output_tokens": None,
         "latency_s": None, "attempts": 0, "cached": False, "error": e}
        for i, (it, t, e) in enumerate(zip(items, texts, errors))], schema=records.WORK)


def _evaluate(batch):
    verify = stages.Verify(DataResolver(download=False), "pypi/project-names.txt.gz", VerifierOptions())
    return verify(stages.decompose(stages.abstain(batch)))


def test_a_raising_decomposer_fails_its_row_only(monkeypatch):
    task = get_task("halogen/code")
    real = task.decompose

    def flaky(text, item):
        if "boom" in text:
            raise ValueError("cannot parse")
        return real(text, item)

    monkeypatch.setattr(task, "decompose", flaky)
    out = _evaluate(_batch("halogen/code", ["import os\nimport boom", "import numpy", None],
                           [None, None, "HTTP 503 after 5 attempts"])).to_pylist()
    assert out[0]["error"] == "decompose failed: ValueError: cannot parse" and out[0]["atoms"] == []
    assert out[1]["error"] is None and out[1]["atoms"] == ["numpy"] and out[1]["supported"] == [True]
    assert out[2]["error"] == "HTTP 503 after 5 attempts" and out[2]["responded"] is None
    scores = stages.split_tables(pa.Table.from_pylist(out), "r")["scores"].to_pylist()
    assert [s["f"] for s in scores] == [None, 0.0, None]  # failed rows are never scored


def test_a_raising_verifier_leaves_verdicts_undecided(monkeypatch):
    task = get_task("halogen/code")
    monkeypatch.setattr(task, "verify", lambda atoms, text, item, kb: 1 / 0)
    out = _evaluate(_batch("halogen/code", ["import os"])).to_pylist()[0]
    assert out["supported"] == [None] and out["error"].startswith("verify failed: ZeroDivisionError")
