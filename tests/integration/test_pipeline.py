"""The pipeline end to end on a real Ray head, on local storage and on the S3 API server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pytest
import yaml
from tests.conftest import IN_DRIVER, REPO, SHARED_DATA, config_dict
from tests.support.servers import s3_storage

from halluscope.config.load import parse_config
from halluscope.pipeline.runner import run
from halluscope.report.html import render_report
from halluscope.resolve.run import ResolvedRun
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")]

TASKS = ["halogen/code", "halogen/rationalization_binary", "halogen/rationalization_numerical",
         "halogen/false_presuppositions"]
MODELS = ["gpt_4_0125_turbo", "llama_2_7b_chat", "redpajama_incite_7b_chat"]
CONTRACT = {"model", "task", "n_items", "response_ratio", "hallucination_score", "hallucination_score_micro",
            "utility_score"}


def _sorted(table: pa.Table, key: str) -> list[dict]:
    rows = table.drop_columns([c for c in ("run_id",) if c in table.column_names]).to_pylist()
    return sorted(rows, key=lambda r: r[key])


def _tables(store: RunStore) -> dict[str, list[dict]]:
    keys = {"generations": "gen_id", "atoms": "atom_id", "verdicts": "atom_id", "scores": "gen_id"}
    return {t: _sorted(store.read_table(t), k) for t, k in keys.items()}


def test_small_run_local(ray_head, tmp_path):
    cfg = parse_config(config_dict(f"file://{tmp_path}", MODELS, TASKS, limit=40))
    result = run(ResolvedRun.of(cfg), run_id="small", progress=False)
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "small")
    scores = store.read_table("scores")
    assert scores.num_rows == 40 * 4 * 3 == result.processed
    assert len(set(scores.column("gen_id").to_pylist())) == scores.num_rows
    atoms = store.read_table("atoms")
    assert atoms.num_rows == sum(scores.column("n_atoms").to_pylist()) == store.read_table("verdicts").num_rows
    per_task = [m for m in result.metrics if not m.get("aggregate")]
    assert len(per_task) == 12 and all(CONTRACT <= set(m) for m in per_task)
    manifest = store.read_json("manifest.json")
    assert manifest["status"] == "complete" and manifest["config_fingerprint"] == cfg.fingerprint()
    assert any(k.startswith("halogen/prompts/") for k in manifest["data_sources"])
    assert manifest["knowledge"]["pypi"]["sha256"]
    assert {t["abstention_rule"] for t in manifest["tasks"]} >= {"halogen-phrases-paper-v2"}
    # the recorded extractor found the parse of every responded generation
    parses = store.read_table("role_calls").to_pylist()
    assert parses and all(c["role"] == "extractor" and c["failed_calls"] == 0 for c in parses)
    assert (tmp_path / "small" / "leaderboard.md").read_text().startswith("# halluscope leaderboard")
    # report.html, made from the objects the run built for leaderboard.md, is the page its stored files give
    assert (tmp_path / "small" / "report.html").read_text() == render_report(store)
    # the attempt's story is stored beside its results: its own lines, and Ray's logs of its time
    attempt = store.read_json("attempt.json")["attempt"]
    story = (tmp_path / "small" / "logs" / f"driver-{attempt}.log").read_text()
    assert f"run small, attempt {attempt}: 480 generations, 0 committed before" in story
    assert "pipeline (Ray): 480 generations committed" in story and "run small complete" in story
    assert store.read_json("progress.json")["log"] == store.loc.child("logs", f"driver-{attempt}.log").url
    assert any((tmp_path / "small" / "logs" / f"ray-{attempt}").rglob("*.log"))
    # the same run id again: nothing to do, identical tables
    before = _tables(store)
    again = run(ResolvedRun.of(cfg), run_id="small", progress=False)
    assert again.processed == 0 and again.skipped == 480
    assert _tables(store) == before
    # a different config under the same id is refused
    other = parse_config(config_dict(f"file://{tmp_path}", MODELS[:1], TASKS, limit=40))
    with pytest.raises(Exception, match="different configuration"):
        run(ResolvedRun.of(other), run_id="small", progress=False)


def test_resume_after_kill_equals_uninterrupted_run(in_driver, tmp_path):
    """A run in the driver's process (the engine's kill drill on Ray is tests/integration/test_faults.py),
    SIGKILLed after three commits and resumed, equals an uninterrupted one."""
    cfg = config_dict(f"file://{tmp_path}", MODELS, TASKS, limit=60)
    cfg["concurrency"] = {"batch_size": 16, "verify_actors": 1}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    scores_dir = tmp_path / "killed" / "scores"
    proc = subprocess.Popen([sys.executable, "-m", "halluscope.cli", "run", str(path), "--run-id", "killed",
                             "--quiet"], cwd=REPO, env=os.environ.copy(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(scores_dir.glob("part-*.parquet"))) < 3:
        assert proc.poll() is None, "the run finished before it could be killed"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "killed")
    committed_before = len(store.read_table("scores", ["gen_id"]))
    assert 0 < committed_before < 720
    # as if the kill had landed between a batch's first part and its commit
    store.write_part("generations", "orphan", store.read_table("generations").slice(0, 5))

    resumed = run(ResolvedRun.of(parse_config(cfg)), run_id="killed", progress=False)
    assert store.read_json("manifest.json")["execution"] == IN_DRIVER
    assert resumed.skipped == committed_before and resumed.skipped + resumed.processed == 720
    fresh = run(ResolvedRun.of(parse_config(cfg)), run_id="fresh", progress=False)
    assert fresh.processed == 720
    resumed_tables = _tables(store)
    assert resumed_tables == _tables(RunStore(Location.from_url(f"file://{tmp_path}"), "fresh"))
    ids = [r["gen_id"] for r in resumed_tables["generations"]]
    assert len(ids) == len(set(ids)) == 720
    assert resumed.metrics == fresh.metrics


def test_run_on_s3(ray_head, s3_endpoint, bucket, monkeypatch, capsys):
    import boto3

    cfg = parse_config(config_dict(f"s3://{bucket}/runs", MODELS[:2], ["halogen/code"], limit=30,
                                   storage=s3_storage(s3_endpoint, f"s3://{bucket}/runs")))
    result = run(ResolvedRun.of(cfg), run_id="s3run", progress=False)
    keys = {o["Key"] for o in boto3.client("s3", endpoint_url=s3_endpoint)
            .list_objects_v2(Bucket=bucket, Prefix="runs/s3run/")["Contents"]}
    for name in ("manifest.json", "metrics.json", "leaderboard.md", "items/halogen__code.parquet"):
        assert f"runs/s3run/{name}" in keys
    for table in ("generations", "atoms", "verdicts", "scores"):
        assert any(k.startswith(f"runs/s3run/{table}/part-") for k in keys)
    assert not any("/.tmp-" in k for k in keys)
    assert result.uri == f"s3://{bucket}/runs/s3run"
    from halluscope.cli import main

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)
    assert main(["report", result.uri]) == 0
    assert "halogen/code" in capsys.readouterr().out


def test_generations_from_an_openai_endpoint(ray_head, tmp_path):
    from tests.support.openai_server import FailPlan, OpenAIStubServer

    def responder(prompt: str) -> str:
        return "```python\nimport numpy as np\nimport totally_made_up_pkg\n```"

    cfg_dict = {"storage": {"root": f"file://{tmp_path}"}, "tasks": ["halogen/code"],
                "limits": {"max_items_per_task": 12}, "costs": {"price_table": None}}
    with OpenAIStubServer(responder=responder, fail_plan=FailPlan(first_n=3, status=503, retry_after=0)) as server:
        cfg_dict["models"] = [{"id": "stub", "backend": "openai",
                               "params": {"base_url": server.base_url, "max_retries": 4}}]
        result = run(ResolvedRun.of(parse_config(cfg_dict)), run_id="live", progress=False)
        calls_first = server.calls
        # the same config under a new run id: every answer comes from the call cache
        run(ResolvedRun.of(parse_config(cfg_dict)), run_id="live-again", progress=False)
        assert server.calls == calls_first
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "live")
    gens = store.read_table("generations").to_pylist()
    assert gens[0]["text"].startswith("```python") and gens[0]["input_tokens"] > 0 and not gens[0]["cached"]
    m = {r["model"]: r for r in result.metrics if r["task"] == "halogen/code"}
    assert m["stub"]["n_items"] == 12 and m["stub"]["hallucination_score"] == 0.5
    again_store = RunStore(Location.from_url(f"file://{tmp_path}"), "live-again")
    assert all(g["cached"] for g in again_store.read_table("generations").to_pylist())
    assert _tables(again_store)["scores"] == _tables(store)["scores"]
    costs = {(r["model"], r["stage"]): r for r in store.read_table_file("costs.parquet").to_pylist()}
    assert costs[("stub", "generate")]["calls"] == 12
    assert costs[("stub", "generate")]["input_tokens"] == sum(g["input_tokens"] for g in gens)
    total = [r for r in result.metrics if r["task"] == "costs/total"][0]
    assert total["calls"] == 12 and total["usd"] is None  # no price table: tokens only


def test_a_down_endpoint_stops_the_run_with_a_clear_error(ray_head, tmp_path, capsys):
    from halluscope.cli import main

    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({
        "storage": {"root": f"file://{tmp_path}"}, "tasks": ["halogen/code"], "limits": {"max_items_per_task": 30},
        "models": [{"id": "down", "backend": "openai",
                    "params": {"base_url": "http://127.0.0.1:9/v1", "max_retries": 1, "timeout_s": 2}}]}))
    assert main(["run", str(cfg), "--run-id", "down", "--quiet"]) == 2
    assert "endpoint http://127.0.0.1:9/v1 of model 'down' is down" in capsys.readouterr().err


def test_bad_recorded_rows_are_quarantined(ray_head, tmp_path):
    recorded = tmp_path / "mine.csv"
    prompts = RunStore  # noqa: F841 - keep imports used
    from halluscope.sources import DataResolver
    from halluscope.task_registry import get_task

    items = get_task("halogen/code").load_items(DataResolver(download=False)).items[:3]
    recorded.write_text("prompt,response\n" + "".join(f'"{i.prompt}","import os"\n' for i in items[:2])
                        + '"broken row","x","extra"\n')
    cfg = parse_config({"storage": {"root": f"file://{tmp_path}"}, "tasks": ["halogen/code"],
                        "limits": {"max_items_per_task": 3},
                        "models": [{"id": "mine", "backend": "replay",
                                    "params": {"source": "file", "path": str(recorded)}}]})
    result = run(ResolvedRun.of(cfg), run_id="q", progress=False)
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "q")
    q = store.read_table("quarantine").to_pylist()
    assert [(r["row"], r["reason"]) for r in q] == [(2, "1 more field(s) than the header")]
    manifest = store.read_json("manifest.json")
    assert manifest["counts"]["quarantined_rows"] == 1 and manifest["counts"]["missing"] == {"mine/halogen/code": 1}
    m = [r for r in result.metrics if r["task"] == "halogen/code"][0]
    assert (m["n_items"], m["n_errors"], m["n_missing"]) == (2, 0, 1)  # not in the file: no error


def test_a_run_with_nothing_scored_fails_loudly(ray_head, tmp_path, capsys):
    """A replay file with no usable row: every item is missing, the run went through but is no
    result. It exits non-zero with status failed, and says which items were not in the file."""
    from halluscope.cli import main

    (tmp_path / "mine.jsonl").write_text('{"prompt": "a prompt of no task", "response": "import os"}\n')
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({
        "storage": {"root": f"file://{tmp_path}"}, "tasks": ["halogen/code"], "limits": {"max_items_per_task": 3},
        "costs": {"price_table": None},
        "models": [{"id": "mine", "backend": "replay", "params": {"source": "file", "path": "mine.jsonl"}}]}))
    assert main(["run", str(cfg), "--run-id", "empty", "--quiet"]) == 1
    out, err = capsys.readouterr()
    assert f"mine/halogen/code: 3 item(s) not in your file {tmp_path}/mine.jsonl" in out
    assert "limits.max_items_per_task" in out
    assert "run empty FAILED: no generation could be scored for model 'mine' (0 failed, 3 with no recorded " \
           "response)" in err
    manifest = RunStore(Location.from_url(f"file://{tmp_path}"), "empty").read_json("manifest.json")
    assert manifest["status"] == "failed" and manifest["reason"].startswith("no generation could be scored")
