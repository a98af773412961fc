"""One run config holding a HALOGEN task, a HalluLens task, RAGTruth's detector task and FEWL
scoring: `halluscope run` runs them together on the S3 API server (one engine, one ledger, one
report), and the same YAML file is submitted as a RayJob to the fake Kubernetes API."""

from __future__ import annotations

import boto3
import pytest
import yaml
from tests.conftest import SHARED_DATA
from tests.integration.test_fewl_run import IWCO, QUESTIONS, REF_1, REF_2, TESTED, truthfulqa_csv
from tests.integration.test_ragtruth_run import JUDGE_RULES, RESPONSES, SOURCES, answer, judge_list, write_jsonl
from tests.support.hallulens_sources import write_tables
from tests.support.openai_server import OpenAIStubServer
from tests.support.servers import s3_storage
from tests.unit.test_kuberay_submit import COMPLETE, FakeKube, created, kube, kubeconfig, run_submit  # noqa: F401

from halluscope.config.load import load_config
from halluscope.hallulens.nonexistent import MixedEntitiesConfig, build_mixed_testset
from halluscope.hallulens.sources import load_itis, load_medicines
from halluscope.pipeline.runner import run
from halluscope.report.html import render_report
from halluscope.resolve.run import ResolvedRun
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore
from halluscope.storage.spec import StorageSpec

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")]

TASKS = ["halogen/code", "hallulens/nonexistent_mixed", "ragtruth/detect", "fewl/score"]
HALOGEN_ITEMS = 12  # limits.max_items_per_task: the first prompts of HALOGEN's code file


def _tested(prompt: str) -> str:
    """The model under test on HalluLens and FEWL: FEWL's answers by keyword, else it doubts the entity."""
    if any(k in prompt for k in ("watermelon", "fortune cookies", "veins", "chili")):
        return TESTED(prompt)
    return "I have never heard of that; it may not exist."


def _judge(prompt: str) -> str:
    return '{"does_believe": false}' if "never heard" in prompt else '{"does_believe": true}'


def _config(tmp_path, storage: dict, bucket: str, servers: dict[str, OpenAIStubServer]) -> dict:
    spec = StorageSpec(**storage)
    hierarchy, longnames, medicines = write_tables(tmp_path)
    mixed = build_mixed_testset(Location.from_url(f"s3://{bucket}/testsets", spec),
                                MixedEntitiesConfig(seed=3, per_domain=3, domains=["animal", "medicine"]),
                                load_itis(str(hierarchy), str(longnames)), load_medicines(str(medicines)))
    s3 = boto3.client("s3", endpoint_url=storage["endpoint_url"])
    s3.put_object(Bucket=bucket, Key="data/response.jsonl", Body=write_jsonl(RESPONSES))
    s3.put_object(Bucket=bucket, Key="data/source_info.jsonl", Body=write_jsonl(SOURCES))

    def api(model_id: str, role: str = "test", tasks: list[str] | None = None) -> dict:
        return {"id": model_id, "role": role, "backend": "openai", **({"tasks": tasks} if tasks else {}),
                "params": {"base_url": servers[model_id].base_url, "model": f"{model_id}-api"}}

    prices = tmp_path / "prices.yaml"
    prices.write_text(yaml.safe_dump({"as_of": "2026-01-01", "source": "test prices", "api_usd_per_million_tokens": {
        f"{m}-api": {"input": 3.0, "output": 15.0} for m in servers}}))
    return {
        "storage": storage, "tasks": TASKS, "limits": {"max_items_per_task": HALOGEN_ITEMS},
        "testsets": {"hallulens/nonexistent_mixed": [f"s3://{bucket}/testsets/mixed_entities/{mixed.testset_id}"]},
        "models": [
            {"id": "gpt_4_0125_turbo", "backend": "replay", "tasks": ["halogen/code"]},
            api("tested", tasks=["hallulens/nonexistent_mixed", "fewl/score"]),
            api("detector", tasks=["ragtruth/detect"]),
            api("judge", "judge"), api("ref-1", "reference"), api("ref-2", "reference"), api("iwco", "reference")],
        "benchmarks": {
            "ragtruth": {"corpus": {"responses": f"s3://{bucket}/data/response.jsonl",
                                    "sources": f"s3://{bucket}/data/source_info.jsonl", "storage": storage}},
            "fewl": {"dataset": {"name": "truthfulqa-gen", "source": truthfulqa_csv(tmp_path / "TruthfulQA.csv")},
                     "references": ["ref-1", "ref-2"], "generator": "iwco", "params": {"iw_pairs": 2, "k_nn": 2}}},
        "costs": {"price_table": str(prices)}, "concurrency": {"batch_size": 4}}


def test_one_config_runs_four_benchmarks_and_submits_as_a_rayjob(ray_head, s3_endpoint, bucket, tmp_path,
                                                                  monkeypatch, kube: FakeKube,  # noqa: F811
                                                                  kubeconfig: str):  # noqa: F811
    storage = s3_storage(s3_endpoint, f"s3://{bucket}/runs")
    responders = {"tested": _tested, "detector": answer(JUDGE_RULES, judge_list()), "judge": _judge,
                  "ref-1": REF_1, "ref-2": REF_2, "iwco": IWCO}
    servers = {m: OpenAIStubServer(responder=r) for m, r in responders.items()}
    for s in servers.values():
        s.__enter__()
    try:
        path = tmp_path / "four.yaml"
        path.write_text(yaml.safe_dump(_config(tmp_path, storage, bucket, servers)))
        cfg = load_config(str(path))
        result = run(ResolvedRun.of(cfg), run_id="four", progress=False)
    finally:
        for s in servers.values():
            s.__exit__(None, None, None)
    assert result.failure is None
    store = RunStore(Location.from_url(storage["root"], cfg.storage), "four")
    scores = store.read_table("scores", ["model", "task"]).to_pylist()
    per_task = {t: {(s["model"]) for s in scores if s["task"] == t} for t in TASKS}
    # each model answered only the tasks it lists
    assert per_task == {"halogen/code": {"gpt_4_0125_turbo"}, "hallulens/nonexistent_mixed": {"tested"},
                        "ragtruth/detect": {"detector"}, "fewl/score": {"tested"}}
    assert sum(s["task"] == "halogen/code" for s in scores) == HALOGEN_ITEMS
    assert sum(s["task"] == "ragtruth/detect" for s in scores) == 6
    assert sum(s["task"] == "fewl/score" for s in scores) == len(QUESTIONS)

    benchmarks = {r.get("benchmark") for r in result.metrics}
    assert {"halogen", "hallulens", "ragtruth", "fewl"} <= benchmarks
    halogen = next(r for r in result.metrics if r["task"] == "halogen/code" and r["model"] == "gpt_4_0125_turbo")
    assert halogen["n_items"] == HALOGEN_ITEMS
    # every model the run called is priced in one ledger
    costs = store.read_table_file("costs.parquet").to_pylist()
    priced = {c["model"] for c in costs if (c["usd"] or 0) > 0}
    assert {"tested", "detector", "judge", "ref-1", "ref-2", "iwco"} <= priced
    board = store.loc.child("leaderboard.md").read_bytes().decode()
    html = store.loc.child("report.html").read_bytes().decode()
    for title in ("RAGTruth", "FEWL"):
        assert f"<h2>{title}</h2>" in html
    assert html == render_report(store)  # the run's own objects give the page its stored files give
    assert "HalluLens" in board and "halogen/code" in board.lower()
    assert store.read_json("manifest.json")["status"] == "complete"

    # the same file, uploaded where the cluster reads it, as a RayJob: validated, passed by reference
    uri = f"s3://{bucket}/configs/four.yaml"
    boto3.client("s3", endpoint_url=s3_endpoint).put_object(Bucket=bucket, Key="configs/four.yaml",
                                                            Body=path.read_bytes())
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)
    outcome, _ = run_submit(kubeconfig, config=uri, name="four-benchmarks")
    job = created(kube)
    assert outcome["status"] == COMPLETE and job["metadata"]["name"] == "four-benchmarks"
    assert job["spec"]["entrypoint"].startswith("python jobs/evaluate.py --config")
    (submitter,) = job["spec"]["submitterPodTemplate"]["spec"]["containers"]
    assert {"name": "HALLUSCOPE_CONFIG", "value": uri} in submitter["env"]
