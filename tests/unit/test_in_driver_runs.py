"""A small run with nothing to serve runs its stages in the driver, without Ray; replayed models
under aliases are answered by the recorded steps of the model they replay."""

from __future__ import annotations

import json

import pytest
import ray
from tests.conftest import SHARED_DATA

from halluscope.config.load import parse_config
from halluscope.pipeline.runner import in_process, run

pytestmark = pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")
ROLES = [{"id": f"halogen-recorded-{r}", "role": r, "backend": "recorded",
          "params": {"steps": "halluscope.halogen.recorded:replies"}} for r in ("extractor", "judge")]


def _config(root: str, **extra) -> dict:
    return {"storage": {"root": root}, "tasks": ["halogen/summarization", "halogen/rationalization_binary@corrected"],
            "limits": {"max_items_per_task": 12},
            "models": [{"id": "alpaca_7b", "backend": "replay", "params": {"source": "recorded"}},
                       {"id": "a1", "backend": "replay", "params": {"source": "recorded", "name": "alpaca_7b"}},
                       *ROLES], **extra}


def test_aliases_are_answered_by_the_recorded_steps_of_the_model_they_replay(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = parse_config(_config(f"file://{tmp_path}"))
    result = run(cfg, run_id="r", progress=False)
    assert not ray.is_initialized()
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["execution"] == "in the driver's process" and "ray_init_s" not in manifest["timings"]
    assert result.failure is None and result.processed == 48
    by_model: dict[str, dict] = {}
    for r in result.metrics:
        if r["model"] in ("alpaca_7b", "a1"):
            by_model.setdefault(r["model"], {})[r["task"]] = {k: v for k, v in r.items() if k != "model"}
    assert by_model["a1"] == by_model["alpaca_7b"] and by_model["a1"]["halogen/summarization"]["n_errors"] == 0


def test_which_runs_go_in_the_driver(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    small = parse_config(_config("file:///tmp/unused"))
    assert in_process(small, 24_999) and not in_process(small, 25_000)
    assert not in_process(parse_config(_config("file:///tmp/unused", ray={"in_process_below": 0})), 1)
    assert not in_process(parse_config(_config("file:///tmp/unused", ray={"address": "127.0.0.1:1"})), 1)
    served = _config("file:///tmp/unused")
    served["models"][-1] = {"id": "judge", "role": "judge", "backend": "scripted"}
    assert not in_process(parse_config(served), 1)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    assert not in_process(small, 1)
