"""A judge calibrated against HALOGEN's recorded judge on the released models' responses, in the
driver: the recorded judge under another id agrees throughout; a judge that says No to everything
is flagged, and a run with a calibration section opens its leaderboard with the warning."""

from __future__ import annotations

import json

import pytest
from tests.conftest import SHARED_DATA

from halluscope.cli import main
from halluscope.config.load import parse_config
from halluscope.errors import ConfigError
from halluscope.pipeline.calibration import calibrate
from halluscope.resolve.run import ResolvedRun
from halluscope.task_registry import benchmarks

pytestmark = pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")

STEPS = {"steps": "halluscope.halogen.recorded:replies"}
TASKS = ["halogen/historical_events", "halogen/summarization", "halogen/code"]


def _config(root: str, judge: dict, **extra) -> dict:
    return {"storage": {"root": root}, "tasks": TASKS, "limits": {"max_items_per_task": 3},
            "models": [{"id": "olmo_7b_instruct", "backend": "replay", "params": {"source": "recorded"}},
                       {"id": "ex", "role": "extractor", "backend": "recorded", "params": STEPS},
                       {"id": "my-judge", "role": "judge", **judge}], **extra}


def test_the_recorded_judge_agrees_with_itself_throughout(tmp_path, in_driver):
    cfg = parse_config(_config(f"file://{tmp_path}", {"backend": "recorded", "params": STEPS},
                               calibration={"items_per_model": 1}))
    records = calibrate(ResolvedRun.of(cfg))
    # code asks no judge; historical events asks it whether a response answered, summarization per fact
    got = {(r.task, r.values["decision"]): r.as_json() for r in records}
    assert sorted(got) == [("halogen/historical_events", "responded"), ("halogen/summarization", "supported")]
    released = len(benchmarks()["halogen"].recorded_models)
    for v in got.values():
        assert (v["accuracy"], v["kappa"], v["below_threshold"]) == (1.0, 1.0, False)
        assert v["responses"] <= released and v["decisions"] >= v["responses"]
        assert v["reference"] == "halogen-recorded-judge" and v["runs"][0] != v["runs"][1]
    assert got[("halogen/summarization", "supported")]["decisions"] > released  # several facts a summary


def test_a_judge_that_says_no_to_everything_is_flagged_at_the_top_of_the_leaderboard(tmp_path, in_driver, capsys):
    no = {"backend": "scripted", "params": {"default": "No", "in_process": True}}
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(_config(f"file://{tmp_path}", no, calibration={"items_per_model": 1})))
    assert main(["run", str(path), "--run-id", "flagged", "--quiet"]) == 0
    board = (tmp_path / "flagged" / "leaderboard.md").read_text()
    assert board.index("Judge agreement with the reference judge") < board.index("HALOGEN")
    assert "WARNING: the judge 'my-judge' agrees with the reference below the threshold" in board
    manifest = json.loads((tmp_path / "flagged" / "manifest.json").read_text())
    summarization = next(a for a in manifest["judge_agreement"] if a["task"] == "halogen/summarization")
    assert summarization["below_threshold"] and summarization["kappa"] < 0.4
    metrics = json.loads((tmp_path / "flagged" / "metrics.json").read_text())
    assert sum(r.get("table") == "judge_agreement" for r in metrics) == 2
    # `halluscope calibrate` alone reads the same two stored runs back
    capsys.readouterr()
    assert main(["calibrate", str(path), "--json", "--quiet"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert [r["kappa"] for r in again] == [a["kappa"] for a in manifest["judge_agreement"]]


def test_a_run_without_a_judge_or_a_reference_cannot_be_calibrated(tmp_path):
    judged = _config(f"file://{tmp_path}", {"backend": "recorded", "params": STEPS}) | {"tasks": ["halogen/code"]}
    with pytest.raises(ConfigError, match="none of the run's tasks asks the judge and has a benchmark's recorded"):
        calibrate(ResolvedRun.of(parse_config(judged)))
    with pytest.raises(ConfigError, match="the run has no judge to calibrate"):
        calibrate(ResolvedRun.of(parse_config(judged | {"models": judged["models"][:2]})))
