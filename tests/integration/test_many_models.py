"""Many models evaluated at once in one job: per-model progress and partial results are visible
in storage while the run goes on."""

from __future__ import annotations

import threading
import time

import pytest
from tests.conftest import SHARED_DATA

from halluscope.cli import _partial_report
from halluscope.config.load import parse_config
from halluscope.pipeline.runner import run
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")]

MODELS = [f"m{i}" for i in range(4)]


def _model(model_id: str) -> dict:
    # one prompt at a time, 0.1 s each: 10 generations a second per model
    return {"id": model_id, "backend": "scripted", "params": {
        "latency_s": 0.1, "capacity": 1, "default": "```python\nimport numpy\n```",
        "serve": {"num_cpus": 0.25, "max_batch_prompts": 4}}}


def test_progress_and_partial_results_while_running(ray_head, tmp_path):
    root = f"file://{tmp_path}"
    cfg = parse_config({"storage": {"root": root}, "tasks": ["halogen/code"], "models": [_model(m) for m in MODELS],
                        "limits": {"max_items_per_task": 40}, "costs": {"price_table": None},
                        "cache": {"enabled": False}, "progress_every_s": 0.5,
                        "concurrency": {"batch_size": 8, "generate_batch_size": 8}})
    store = RunStore(Location.from_url(root), "many")
    result: dict = {}
    worker = threading.Thread(target=lambda: result.setdefault("run", run(cfg, run_id="many", progress=False)))
    worker.start()
    partial = None
    while worker.is_alive():
        snapshot = store.read_json("progress.json")
        if snapshot and not snapshot["finished"]:
            done = [m["done"] for m in snapshot["models"].values()]
            if len(done) == len(MODELS) and 0 < sum(done) < 40 * len(MODELS):
                partial = (snapshot, _partial_report(store.loc))
        time.sleep(0.3)
    worker.join()
    assert partial is not None, "no progress was visible while the run went on"
    snapshot, report = partial
    assert set(snapshot["models"]) == set(MODELS)
    assert "partial results" in report and "generations committed" in report
    final = store.read_json("progress.json")
    assert final["finished"] and all(m["done"] == m["total"] == 40 for m in final["models"].values())
    assert result["run"].processed == 40 * len(MODELS)
    # committed in parts of batch_size rows, not one part per (model, task)
    assert len(store.committed_keys()) == len(MODELS) * 40 // 8
