"""Every offline example compared with itself after one model's answers changed: `halluscope
compare` prints, per task and figure, both runs' values and B minus A with its interval; and
`halluscope plan --stats` says the smallest difference each task can detect, paired where the
earlier run's records hold pairs. The runs go in the driver's own process (no Ray), at the
examples' own small sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pytest
from tests.conftest import SHARED_DATA, leave_ray

from halluscope.cli import main
from halluscope.config.load import load_config
from halluscope.config.schema import ReplayModel
from halluscope.contract.metrics import PAIRED
from halluscope.pipeline.runner import run
from halluscope.report.compare import compare
from halluscope.resolve.run import ResolvedRun
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

REPO = Path(__file__).resolve().parents[2]
# example -> (the model whose answers run B changes, what every other of its answers becomes)
CHANGED = {
    "halogen": ("gpt_4_0125_turbo", "They met in Paris in 1850, as their letters show."),
    "hallulens": ("confident-model", "I don't know."),
    "ragtruth": ("span-detector", '{"hallucination list": []}'),
    "fewl": ("tested-model", "Yes, it does."),
}


@pytest.fixture(scope="module", params=sorted(CHANGED))
def runs(request, tmp_path_factory) -> tuple[str, RunStore, RunStore]:
    """The example run (A), then again with every other answer of one model changed (B): that
    model replays A's answers from a file, edited."""
    name = request.param
    if name == "halogen" and not SHARED_DATA.exists():
        pytest.skip("needs ../shared/data")
    tmp = tmp_path_factory.mktemp(name)
    with pytest.MonkeyPatch.context() as mp:
        leave_ray(mp)
        mp.chdir(REPO)  # the examples' data paths are taken from the repository root
        stores = []
        for run_id in ("a", "b"):
            cfg = load_config(f"examples/{name}/run.yaml")
            cfg.storage.root = f"file://{tmp}/runs"
            if run_id == "b":
                model, text = CHANGED[name]
                (spec,) = (m for m in cfg.models if m.id == model)
                assert isinstance(spec, ReplayModel)
                spec.params.source, spec.params.path = "file", str(_edited(stores[0], model, text, tmp))
                spec.params.columns = {"item_id": "item_id", "task": "task", "text": "text"}
            assert run(ResolvedRun.of(cfg), run_id=run_id, progress=False).failure is None
            stores.append(RunStore(Location.from_url(cfg.storage.root), run_id))
    return name, stores[0], stores[1]


def _edited(store: RunStore, model: str, text: str, folder: Path) -> Path:
    """The model's answers in run ``store``, every other one (by task and item) replaced by ``text``."""
    gens = store.read_table("generations", ["model", "task", "item_id", "text"])
    rows = gens.filter(pc.equal(gens.column("model"), model)).sort_by([("task", "ascending"),
                                                                        ("item_id", "ascending")]).to_pylist()
    path = folder / f"{model}.jsonl"
    path.write_text("".join(json.dumps({**r, "text": text if i % 2 == 0 else r["text"]}) + "\n"
                            for i, r in enumerate(rows)))
    return path


def _paired(store: RunStore) -> list[dict]:
    return [r for r in store.read_json("metrics.json") or [] if r.get("table") == PAIRED]  # type: ignore[union-attr]


def test_compare_prints_both_values_and_a_difference_with_its_interval_for_every_figure_of_every_task(runs, capsys):
    name, a, b = runs
    rows = compare(a, b)
    # every task and figure the run's paired records hold, which is every task the example runs
    expected = {(r["task"], f) for r in _paired(a) for f in r["figures"]}
    assert {t for t, _ in expected} >= _tasks(a)
    for task, figure in expected:
        found = [r for r in rows if (r["task"], r["figure"]) == (task, figure)
                 and r["diff"] is not None and r["ci95"] is not None and r["a"] is not None and r["b"] is not None]
        assert found, f"{name}: no difference with an interval for {task} {figure}"
        for r in found:
            assert r["ci95"][0] <= r["diff"] <= r["ci95"][1]
    changed = CHANGED[name][0]
    assert any(r["model"] == changed and r["diff"] != 0 for r in rows)  # the runs differ where B's answers do
    assert all(r["diff"] in (0, None) for r in rows if r["model"] != changed)
    assert main(["compare", a.loc.url, b.loc.url]) == 0
    printed = [line.split() for line in capsys.readouterr().out.splitlines()]
    for task, figure in expected:  # model, task, figure, A, B, B-A, s.e., n, favours: numbers, not "-"
        assert any(cells[1:3] == [task, figure] and "-" not in cells[3:7] for cells in printed), (task, figure)


def _tasks(store: RunStore) -> set[str]:
    return set(store.read_table("scores", ["task"]).column("task").unique().to_pylist())


def test_plan_with_stats_says_what_every_task_can_detect(runs, capsys, monkeypatch):
    name, a, _ = runs
    monkeypatch.chdir(REPO)
    assert main(["plan", f"examples/{name}/run.yaml", "--stats", a.loc.url]) == 0
    text = capsys.readouterr().out.split("smallest difference between two models each task can detect", 1)[1]
    lines = {line.split(":", 1)[0].strip(): line for line in text.splitlines() if line.startswith("  ")}
    spread = {r["task"] for r in _paired(a) for p in r["pairs"] if any(
        (p[f] or {}).get("stderr") is not None for f in r["figures"]) and p["n"] > 1}
    for task in _tasks(a):
        assert " items" in lines[task]
        assert ("; paired, at the spread of earlier runs' differences: " in lines[task]) == (task in spread), task
