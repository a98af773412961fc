"""HalluLens test sets shared by every model (the default) or generated per model."""

from __future__ import annotations

import pytest
from tests.support.hallulens_sources import EDGES, FakeGenerator, write_wiki_sources
from tests.support.resolved import planned

from halluscope.config.load import parse_config
from halluscope.errors import ConfigError
from halluscope.hallulens import tasks as hallulens_tasks
from halluscope.hallulens.generation import PreciseWikiQAConfig, build_wiki_testset
from halluscope.hallulens.sources import load_goodwiki, load_harmonic_centrality
from halluscope.pipeline import workset
from halluscope.pipeline.workset import expand_unit, list_work
from halluscope.records import GenerationIds
from halluscope.resolve.run import ResolvedRun
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

TASK = "hallulens/precise_wikiqa"
JUDGE = {"id": "judge", "role": "judge", "backend": "scripted"}


def _testsets(tmp_path) -> list[str]:
    goodwiki, titles, scores = write_wiki_sources(tmp_path)
    pages, h = load_goodwiki(str(goodwiki)), load_harmonic_centrality(str(titles), str(scores))
    root = Location.from_url(f"file://{tmp_path}/testsets")
    built = [build_wiki_testset(root, PreciseWikiQAConfig(per_bin=1, seed=seed, min_words=20, max_words=60,
                                                          bin_edges=EDGES), pages, h, FakeGenerator())
             for seed in (0, 1)]
    return [f"{root.url}/precise_wikiqa/{ts.testset_id}" for ts in built]


def _rows(cfg, store) -> dict[str, set[str]]:
    run = ResolvedRun.of(cfg)
    work = list_work(run, store)
    rows: dict[str, set[str]] = {}
    for i in range(work.units.num_rows):
        for t in expand_unit(work.units.slice(i, 1), workset.Expansion(store, run.items, run.tested), GenerationIds()):
            for r in t.to_pylist():
                rows.setdefault(r["model"], set()).add(r["item_id"])
    return rows


def test_per_model_test_sets_give_each_model_its_own_items(tmp_path):
    first, second = _testsets(tmp_path)
    models = [{"id": "a", "backend": "scripted"}, {"id": "b", "backend": "scripted"}, JUDGE]
    per_model = parse_config({"storage": {"root": f"file://{tmp_path}/runs"}, "tasks": [TASK], "models": models,
                              "testsets": {TASK: {"a": [first], "b": [second]}}})
    store = RunStore(Location.from_url(per_model.storage.root), "per-model")
    rows = _rows(per_model, store)
    assert rows["a"] and rows["b"] and not rows["a"] & rows["b"]  # different seeds, different items
    written = set(store.read_items(TASK).column("item_id").to_pylist())
    assert written == rows["a"] | rows["b"]
    totals = list_work(ResolvedRun.of(per_model), store).totals
    assert totals == {("a", TASK): len(rows["a"]), ("b", TASK): len(rows["b"])}

    shared = parse_config({**per_model.model_dump(mode="json"), "testsets": {TASK: [first]}})
    rows = _rows(shared, RunStore(Location.from_url(per_model.storage.root), "shared"))
    assert rows["a"] == rows["b"]
    assert shared.fingerprint() != per_model.fingerprint()


def test_per_model_test_sets_must_cover_every_model(tmp_path):
    with pytest.raises(ConfigError, match=r"testsets.hallulens/precise_wikiqa lists test sets per model but none "
                                          r"for \['b'\]"):
        parse_config({"tasks": [TASK], "testsets": {TASK: {"a": ["s3://x/y"]}}, "models": [
            {"id": "a", "backend": "scripted"}, {"id": "b", "backend": "scripted"}, JUDGE]})


def test_the_estimate_counts_each_models_own_test_sets(tmp_path):
    first, second = _testsets(tmp_path)
    models = [{"id": "a", "backend": "scripted"}, {"id": "b", "backend": "scripted"}, JUDGE]
    cfg = parse_config({"tasks": [TASK], "models": models, "testsets": {TASK: {"a": [first], "b": [first, second]}}})
    generated = {r.model: r.generations for r in planned(cfg, None).rows if r.stage == "generate"}
    first_n, second_n = (len(hallulens_tasks.testset_of(Location.from_url(u)).task_items()) for u in (first, second))
    assert generated == {"a": first_n, "b": first_n + second_n}
