"""A run id is bound to its input files as to its config: resuming after a data file changed is
refused, naming the file, before any work (its committed results came from the old file)."""

import gzip
import json
import shutil

import pytest
from tests.conftest import SHARED_DATA

from halluscope.config.load import parse_config
from halluscope.errors import RunError
from halluscope.pipeline import runner
from halluscope.resolve.run import ResolvedRun
from halluscope.sources import DataResolver
from halluscope.task_registry import get_task

pytestmark = pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")

RELEASED = "halogen/responses/code/gpt_4_0125_turbo_code.csv.gz"


class Started(Exception):
    """Stands in for Ray: the run got past every check and its manifest is written."""


@pytest.fixture()
def started(monkeypatch):
    def stop(_spec, **_):
        raise Started()
    monkeypatch.setattr(runner, "init_ray", stop)


def _config(tmp_path, replay):
    prompts = [i.prompt for i in get_task("halogen/code").load_items(DataResolver(download=False)).items[:3]]
    replay.write_text("".join(json.dumps({"prompt": p, "text": "import numpy"}) + "\n" for p in prompts))
    data = tmp_path / "data"
    (data / RELEASED).parent.mkdir(parents=True)
    shutil.copy(SHARED_DATA / RELEASED, data / RELEASED)
    return parse_config({
        "storage": {"root": f"file://{tmp_path}/runs"}, "tasks": ["halogen/code"],
        "data": {"dir": str(data), "download": False}, "limits": {"max_items_per_task": 3},
        "ray": {"in_process_below": 0},  # on Ray, whose start the fixture stops
        "models": [{"id": "mine", "backend": "replay", "params": {"source": "file", "path": str(replay)}},
                   {"id": "gpt_4_0125_turbo", "backend": "replay"}]}), data / RELEASED


def test_resume_with_the_same_files_goes_on(tmp_path, started):
    cfg, _ = _config(tmp_path, tmp_path / "gens.jsonl")
    for _ in range(2):
        with pytest.raises(Started):
            runner.run(ResolvedRun.of(cfg), run_id="r", progress=False)


def test_a_changed_replay_file_is_refused(tmp_path, started):
    replay = tmp_path / "gens.jsonl"
    cfg, _ = _config(tmp_path, replay)
    with pytest.raises(Started):
        runner.run(ResolvedRun.of(cfg), run_id="r", progress=False)
    manifest = (tmp_path / "runs" / "r" / "manifest.json").read_bytes()
    replay.write_text(replay.read_text().replace("import numpy", "import nonexistent_pkg"))
    with pytest.raises(RunError, match=rf"{replay} changed since the run started .* use a new run id"):
        runner.run(ResolvedRun.of(cfg), run_id="r", progress=False)
    # nothing was claimed or rewritten: the manifest still names the data the results came from
    assert (tmp_path / "runs" / "r" / "manifest.json").read_bytes() == manifest


def test_a_changed_released_data_file_is_refused(tmp_path, started):
    cfg, released = _config(tmp_path, tmp_path / "gens.jsonl")
    with pytest.raises(Started):
        runner.run(ResolvedRun.of(cfg), run_id="r", progress=False)
    text = gzip.decompress(released.read_bytes()).decode()
    released.write_bytes(gzip.compress(text.replace("import", "from x import", 1).encode()))
    with pytest.raises(RunError, match=rf"{RELEASED} changed since the run started"):
        runner.run(ResolvedRun.of(cfg), run_id="r", progress=False)
