"""Every offline example under examples/<benchmark>/run.yaml runs as the README says it does: loaded
as `halluscope run` loads it, from the repository root, with its scripted stand-ins answered in
process (so in the driver, as a user's run of it goes), to status complete with its benchmark's
metrics and its own leaderboard preamble."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import IN_DRIVER, SHARED_DATA

from halluscope.config.load import load_config
from halluscope.halogen.report import PREAMBLE
from halluscope.pipeline.runner import run
from halluscope.report.render import md_text
from halluscope.resolve.run import ResolvedRun
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

pytestmark = pytest.mark.slow
HALOGEN_PREAMBLE = md_text(PREAMBLE)  # as leaderboard.md writes it

REPO = Path(__file__).resolve().parents[2]

# example -> (benchmark of its records, tasks it must have records for, a phrase of its preamble)
EXAMPLES = {
    "halogen": ("halogen", {"halogen/code", "halogen/code@corrected", "halogen/summarization",
                            "halogen/historical_events"}, HALOGEN_PREAMBLE),
    "hallulens": ("hallulens", {"hallulens/precise_wikiqa", "hallulens/nonexistent"},
                  "false refusal = share of questions the model declined"),
    "ragtruth": ("ragtruth", {"ragtruth/detect", "ragtruth/generate"},
                 "Hallucination rate = share of answers with at least one span"),
    "fewl": ("fewl", {"fewl/score"}, "FEWL scores an answer without a gold answer"),
}


def test_every_example_folder_is_tested():
    # the plug-ins: test_fifth_benchmark and test_installed_provider install and run them; live
    # serves a real model (a download, a conversion and an engine start: minutes, not seconds)
    folders = {p.parent.name for p in (REPO / "examples").glob("*/run.yaml")} - {"capitals", "canned_provider", "live"}
    assert folders == set(EXAMPLES)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs_offline_to_complete(name, in_driver, tmp_path, monkeypatch):
    if name == "halogen" and not SHARED_DATA.exists():
        pytest.skip("needs ../shared/data")
    monkeypatch.chdir(REPO)  # the examples' data paths are taken from the repository root
    cfg = load_config(f"examples/{name}/run.yaml")
    assert all(m.backend in ("replay", "scripted") for m in cfg.models)
    assert not any(m.served for m in cfg.models)
    cfg.storage.root = f"file://{tmp_path}/runs"
    result = run(ResolvedRun.of(cfg), run_id=name, progress=False)

    assert result.failure is None and not result.missing
    manifest = RunStore(Location.from_url(cfg.storage.root), name).read_json("manifest.json")
    assert manifest["status"] == "complete"
    assert manifest["execution"] == IN_DRIVER
    # HALOGEN's released files repeat a few prompts: the repeats are quarantined, the others have none
    assert (manifest["counts"]["quarantined_rows"] > 0) == (name == "halogen")
    bench, tasks, preamble = EXAMPLES[name]
    records = [r for r in result.metrics if r.get("benchmark") == bench]
    assert tasks <= {r["task"] for r in records}
    assert any(r["task"] == "costs/total" and r["complete"] for r in result.metrics)
    assert preamble in result.leaderboard
    assert (HALOGEN_PREAMBLE in result.leaderboard) == (name == "halogen")
    assert "&gt;" not in result.leaderboard and "&lt;" not in result.leaderboard
