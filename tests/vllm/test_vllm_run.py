"""A halluscope run whose model under test is the tiny Llama on vLLM, deployed by the run itself."""

from __future__ import annotations

import pytest
from tests.conftest import SHARED_DATA

from halluscope.config.load import parse_config
from halluscope.config.schema import VLLMModel
from halluscope.pipeline.runner import run
from halluscope.resolve.run import ResolvedRun
from halluscope.serving.vllm import vllm_installed
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not vllm_installed(), reason="needs vLLM: make test-vllm"),
              pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")]


@pytest.mark.timeout(900)  # an engine start, on 2 cores beside the other suites
def test_a_vllm_model_under_test_gives_its_cpus_back_to_the_next_wave(ray_local: None, smollm2: VLLMModel,
                                                                      tmp_path) -> None:
    """Two models under test answer HALOGEN code, its corrected-rule twin (the same prompts, so no
    call of its own) and HalluLens PreciseWikiQA (a test set built from small sources), a scripted
    judge judges: one on a CPU engine, the other a scripted stand-in
    served with as many CPUs (one engine start is most of this test's time). The run has CPUs for
    one of them beside the pipeline's own: it deploys one, generates, gives its CPUs back, then
    deploys the other. Every stage's rows are written, tokens are accounted and the rates
    computed, for both."""
    from ray import serve
    from tests.support.hallulens_sources import EDGES, FakeGenerator, write_wiki_sources

    from halluscope.hallulens.generation import PreciseWikiQAConfig, build_wiki_testset
    from halluscope.hallulens.sources import load_goodwiki, load_harmonic_centrality
    from halluscope.resolve.cluster import cpu_demand, job_of

    goodwiki, titles, scores = write_wiki_sources(tmp_path)
    root = Location.from_url(f"file://{tmp_path}/testsets")
    ts = build_wiki_testset(root, PreciseWikiQAConfig(per_bin=1, min_words=20, max_words=60, bin_edges=EDGES),
                            load_goodwiki(str(goodwiki)), load_harmonic_centrality(str(titles), str(scores)),
                            FakeGenerator())
    judge = {"id": "judge", "role": "judge", "backend": "scripted", "params": {
        "serve": {"num_cpus": 0.25}, "rules": [{"pattern": "is_abstaining", "response": '{"is_abstaining": false}'},
                                               {"pattern": "Judgement:", "response": "INCORRECT"}]}}
    engine_spec = smollm2.model_dump(mode="json") | {"id": "tiny-a"}
    stand_in = {"id": "tiny-b", "backend": "scripted", "params": {
        "default": "import numpy", "serve": {"num_cpus": job_of(smollm2).units}}}
    models = [engine_spec, stand_in]
    raw = {"storage": {"root": f"file://{tmp_path}"},
           "tasks": ["halogen/code", "halogen/code@corrected", "hallulens/precise_wikiqa"],
           "testsets": {"hallulens/precise_wikiqa": [f"{root.url}/precise_wikiqa/{ts.testset_id}"]},
           "limits": {"max_items_per_task": 4}, "costs": {"price_table": None}, "cache": {"enabled": False},
           "concurrency": {"verify_actors": 1, "generate_actors": 1}, "models": [*models, judge]}
    cfg = parse_config(raw)
    engine = job_of(cfg.models[0]).units
    fixed = sum(cpu_demand(cfg, scheduled_models=False).values())
    # the engine worker and the replica's front end; 1 Evaluate actor, 0.5 for the Generate actor, 1
    # for tasks, 0.25 for the judge
    assert (engine, fixed) == (2.0, 2.75)
    cfg = parse_config({**raw, "cluster": {"cpus": fixed + engine}})
    try:
        result = run(ResolvedRun.of(cfg), run_id="waves", progress=False)
    finally:
        serve.shutdown()  # the next test starts Serve on a port of its own
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "waves")
    manifest = store.read_json("manifest.json")
    assert manifest["status"] == "complete", manifest.get("reason")
    assert manifest["schedule"]["budget"]["CPU"] == engine  # what the pipeline's actors leave
    first, second = sorted(manifest["schedule"]["deployments"], key=lambda d: d["requested_at"])
    assert {first["model"], second["model"]} == {"tiny-a", "tiny-b"}
    assert [(d["status"], d["generated"], d["resource"], d["units"]) for d in (first, second)] == \
        [("generated", 12, "CPU", engine)] * 2
    assert first["wave"] < second["wave"]
    assert first["requested_at"] < first["ready_at"] < first["released_at"] <= second["requested_at"]
    assert second["requested_at"] < second["ready_at"] < second["released_at"]

    gens = store.read_table("generations").to_pylist()
    assert len(gens) == 24 and all(g["error"] is None and g["text"] is not None for g in gens), gens
    costs = {(r["model"], r["stage"], r["task"]): r for r in store.read_table_file("costs.parquet").to_pylist()}
    for model in ("tiny-a", "tiny-b"):
        (code,) = [r for r in result.metrics if r["task"] == "halogen/code" and r["model"] == model]
        assert code["n_items"] == 4 and code["n_errors"] == 0
        billed = costs[(model, "generate", "halogen/code")]
        assert billed["calls"] == 4 and billed["output_tokens"] == sum(
            g["output_tokens"] for g in gens if g["task"] == "halogen/code" and g["model"] == model)
        # the twin's prompts were generated once: its rows share those answers, as cache hits
        twin = costs[(model, "generate", "halogen/code@corrected")]
        assert (twin["calls"], twin["cached_calls"]) == (0, 4)
        texts = {t: sorted(g["text"] for g in gens if g["model"] == model and g["task"] == t)
                 for t in ("halogen/code", "halogen/code@corrected")}
        assert texts["halogen/code"] == texts["halogen/code@corrected"]
        (pw,) = [r for r in result.metrics if r["task"] == "hallulens/precise_wikiqa" and r["model"] == model]
        assert pw["trials"][0]["hallucination_rate"] == 1.0 and pw["trials"][0]["false_refusal_rate"] == 0.0
