"""A small run with nothing to serve runs its stages in the driver, without Ray; replayed models
under aliases are answered by the recorded steps of the model they replay."""

from __future__ import annotations

import json
import math
import time

import pytest
import ray
from tests.conftest import SHARED_DATA

from halluscope.config.load import parse_config
from halluscope.pipeline import stages, workset
from halluscope.pipeline.execute import driver_batches, in_process
from halluscope.pipeline.runner import run
from halluscope.pipeline.workset import list_work
from halluscope.records import GenerationIds
from halluscope.resolve.run import ResolvedRun
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

pytestmark = pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")
ROLES = [{"id": f"halogen-recorded-{r}", "role": r, "backend": "recorded",
          "params": {"steps": "halluscope.halogen.recorded:replies"}} for r in ("extractor", "judge")]


def _config(root: str, **extra) -> dict:
    return {"storage": {"root": root}, "tasks": ["halogen/summarization", "halogen/rationalization_binary@corrected"],
            "limits": {"max_items_per_task": 12},
            "models": [{"id": "alpaca_7b", "backend": "replay", "params": {"source": "recorded"}},
                       {"id": "a1", "backend": "replay", "params": {"source": "recorded", "name": "alpaca_7b"}},
                       *ROLES], **extra}


def test_aliases_are_answered_by_the_recorded_steps_of_the_model_they_replay(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = parse_config(_config(f"file://{tmp_path}"))
    result = run(ResolvedRun.of(cfg), run_id="r", progress=False)
    assert not ray.is_initialized()
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["execution"] == "in the driver's process" and "ray_init_s" not in manifest["timings"]
    assert result.failure is None and result.processed == 48
    by_model: dict[str, dict] = {}
    for r in result.metrics:
        if r["model"] in ("alpaca_7b", "a1"):
            by_model.setdefault(r["model"], {})[r["task"]] = {k: v for k, v in r.items() if k != "model"}
    assert by_model["a1"] == by_model["alpaca_7b"] and by_model["a1"]["halogen/summarization"]["n_errors"] == 0


def test_which_runs_go_in_the_driver(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    small = parse_config(_config("file:///tmp/unused"))
    assert in_process(ResolvedRun.of(small), 24_999) and not in_process(ResolvedRun.of(small), 25_000)
    assert not in_process(ResolvedRun.of(parse_config(_config("file:///tmp/unused", ray={"in_process_below": 0}))), 1)
    assert not in_process(ResolvedRun.of(parse_config(_config("file:///tmp/unused", ray={"address": "127.0.0.1:1"}))), 1)
    served = _config("file:///tmp/unused")
    served["models"][-1] = {"id": "judge", "role": "judge", "backend": "scripted"}
    assert not in_process(ResolvedRun.of(parse_config(served)), 1)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    assert not in_process(ResolvedRun.of(small), 1)


def _slow_writes(monkeypatch) -> list[str]:
    """Batch keys in the order their parts reached storage, each write held up a little so the
    next part is scored meanwhile."""
    written: list[str] = []
    original = RunStore.write_batch

    def slow(self: RunStore, key: str, tables: dict) -> dict[str, str]:
        time.sleep(0.05)
        parts = original(self, key, tables)
        written.append(key)
        return parts

    monkeypatch.setattr(RunStore, "write_batch", slow)
    return written


def test_a_part_is_reported_committed_only_once_it_is_written(tmp_path, monkeypatch):
    """Parts are written on a thread while the next is scored; the driver counts (and keeps, at
    the end of the run) only what has reached storage."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    written = _slow_writes(monkeypatch)
    reported: list[str] = []
    evaluate = stages.Evaluate.__call__

    def checked(self: stages.Evaluate, batch):
        for committed in evaluate(self, batch):
            keys = committed.column("key").to_pylist()
            assert set(keys) <= set(written)
            reported.extend(dict.fromkeys(keys))
            yield committed

    monkeypatch.setattr(stages.Evaluate, "__call__", checked)
    result = run(ResolvedRun.of(parse_config(_config(f"file://{tmp_path}", concurrency={"batch_size": 5}))), run_id="r",
                 progress=False)
    assert result.failure is None and result.processed == 48
    assert len(written) == 12 and sorted(reported) == sorted(written)  # 4 units of 12 rows, parts of 5


def test_a_stopped_evaluation_finishes_the_part_in_flight(tmp_path, monkeypatch):
    written = _slow_writes(monkeypatch)
    cfg = parse_config(_config(f"file://{tmp_path}", concurrency={"batch_size": 5}))
    store = RunStore(Location.from_url(cfg.storage.root), "r")
    store.claim()
    run = ResolvedRun.of(cfg)
    work = list_work(run, store)
    batches = driver_batches(run, store, work, work.blocks, GenerationIds(), cfg.models)
    first = next(batches)
    assert first.column("key").to_pylist()[0] == written[0]
    batches.close()
    assert len(written) == 2 and store.committed_keys() == set(written)


def test_a_worker_fetches_what_was_committed_before_once_for_all_its_blocks(tmp_path, monkeypatch):
    """A resumed run hands every block the same reference to the ids committed before; a worker
    fetches them once."""
    cfg = parse_config(_config(f"file://{tmp_path}"))
    store = RunStore(Location.from_url(cfg.storage.root), "r")
    resolved = ResolvedRun.of(cfg)
    items = resolved.items
    work = list_work(resolved, store)
    first = next(workset.expand_unit(work.blocks[0], workset.Expansion(store, items, resolved.tested), GenerationIds()))
    done = GenerationIds(first.column("gen_id").slice(0, 5))
    fetched: list[ray.ObjectRef] = []
    monkeypatch.setattr(workset.ray, "get", lambda ref: fetched.append(ref) or done)
    ref = ray.ObjectRef(b"\x01" * 28)
    workset.committed_before.cache_clear()
    try:
        ids = [g for b in work.blocks for t in workset.expand_unit(b, workset.Expansion(store, items, resolved.tested), ref)
               for g in t.column("gen_id").to_pylist()]
    finally:
        workset.committed_before.cache_clear()
    assert len(work.blocks) > 1 and fetched == [ref]
    assert len(ids) == 48 - 5 and not any(g in done for g in ids)


def test_a_budgeted_run_reads_its_price_table_once(tmp_path, monkeypatch):
    """The price table is read and validated once per run, however many places price it (the
    budget gate, the ledger, shared services, stranded GPUs)."""
    from halluscope.cost import prices
    from halluscope.resolve import tables

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    reads = []
    monkeypatch.setattr(tables, "load_prices", lambda path: reads.append(path) or prices.load_prices(path))
    table = tmp_path / "prices.yaml"
    table.write_text("as_of: '2026-01-01'\nsource: test prices\napi_usd_per_million_tokens: {}\n")
    cfg = parse_config(_config(f"file://{tmp_path}", costs={"price_table": str(table), "budget_usd": 1.0}))
    assert run(ResolvedRun.of(cfg), run_id="r", progress=False).failure is None
    assert reads == [str(table)]


def test_each_benchmarks_options_are_parsed_once_for_a_config_and_its_run(tmp_path, monkeypatch):
    """Loading the config validates each benchmark's section; the run (plan, items, knowledge,
    aggregation) reuses that parse rather than validating the raw dict at every use."""
    from halluscope.contract.benchmark import Benchmark

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    parsed = []
    parse = Benchmark.parse_options
    monkeypatch.setattr(Benchmark, "parse_options", lambda self, raw: parsed.append(self.name) or parse(self, raw))
    cfg = parse_config(_config(f"file://{tmp_path}"))
    assert run(ResolvedRun.of(cfg), run_id="r", progress=False).failure is None
    assert parsed == ["halogen"]
    cfg.benchmarks["halogen"] = {"import_name_aliases": False}  # a changed section is parsed anew
    cfg.options_for("halogen")
    assert parsed == ["halogen", "halogen"]


def test_rows_that_failed_transiently_are_done_again_when_the_run_is_resubmitted(tmp_path, monkeypatch):
    """An endpoint that answers 503 to its first calls: those rows are committed with the error
    (the call ran out of retries); resubmitting the run id takes back the batches holding them and
    does them again (the call cache answers the rest), unless --keep-failed."""
    from tests.support.openai_server import FailPlan, OpenAIStubServer

    from halluscope.records import transient_error

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    plan = FailPlan(first_n=4, status=503, prompt_status={})
    with OpenAIStubServer(fail_plan=plan) as server:
        model = {"id": "api", "backend": "openai",
                 "params": {"base_url": server.base_url, "max_retries": 0, "max_concurrency": 1}}
        cfg = parse_config({"storage": {"root": f"file://{tmp_path}"}, "tasks": ["halogen/code"],
                            "limits": {"max_items_per_task": 12}, "max_error_fraction": 1.0, "models": [model],
                            "concurrency": {"batch_size": 4}})
        store = RunStore(Location.from_url(f"file://{tmp_path}"), "t")

        def errors() -> list[str | None]:
            return store.read_table("scores", ["error"]).column("error").to_pylist()

        run(ResolvedRun.of(cfg), run_id="t", progress=False)
        assert sum(map(transient_error, errors())) == 4 and errors().count(None) == 8
        kept = run(ResolvedRun.of(cfg), run_id="t", progress=False, retry_failed=False)
        assert kept.processed == 0 and sum(map(transient_error, errors())) == 4
        calls = server.calls
        again = run(ResolvedRun.of(cfg), run_id="t", progress=False)
        manifest = store.read_json("manifest.json")
    assert errors() == [None] * 12 and again.processed == manifest["counts"]["processed"]
    assert manifest["counts"]["batches_redone"] >= 1 and server.calls - calls == 4  # the rest from the cache
    ids = store.read_table("scores", ["gen_id"]).column("gen_id").to_pylist()
    assert len(ids) == len(set(ids)) == 12


def test_a_full_disk_is_one_line_naming_the_file_leaves_no_temporary_and_resumes(tmp_path, monkeypatch, capsys):
    import errno
    import os

    import yaml

    from halluscope.cli import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg_path = tmp_path / "run.yaml"
    cfg_path.write_text(yaml.safe_dump(_config(f"file://{tmp_path / 'runs'}")))
    real_fsync, writes = os.fsync, []

    def full(fd: int) -> None:  # the disk fills up after the run's first few files
        writes.append(fd)
        if len(writes) > 6:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    assert main(["run", str(cfg_path), "--run-id", "full", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "cannot write " in err and "No space left on device" in err and "Traceback" not in err
    assert "--run-id full" in err  # the command that resumes it
    assert not [p for p in (tmp_path / "runs").rglob(".tmp-*")]
    monkeypatch.setattr(os, "fsync", real_fsync)  # space freed
    assert main(["run", str(cfg_path), "--run-id", "full", "--quiet"]) == 0
    ids = RunStore(Location.from_url(f"file://{tmp_path / 'runs'}"), "full").read_table("scores", ["gen_id"])
    assert ids.num_rows == len(set(ids.column("gen_id").to_pylist())) == 48


def test_a_run_whose_spend_crosses_its_budget_stops_there_and_resumes_under_a_raised_one(tmp_path, monkeypatch):
    """The plan assumed one-token answers (max_tokens 1), the endpoint answers at length: the
    estimate passes the budget, what the calls cost does not. The run stops over_budget once its
    committed spend crosses it, and resumes under a raised budget to every id once."""
    from tests.support.openai_server import OpenAIStubServer

    from halluscope.errors import OverBudget

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    prices = tmp_path / "prices.yaml"
    prices.write_text("as_of: '2026-01-01'\nsource: test prices\n"
                      "api_usd_per_million_tokens: {stub: {input: 10000.0, output: 10000.0}}\n")  # a cent a token
    with OpenAIStubServer() as server:
        def cfg(budget: float):
            return parse_config({
                "storage": {"root": f"file://{tmp_path}"}, "tasks": ["halogen/code"], "limits": {"max_items_per_task": 12},
                "concurrency": {"batch_size": 2, "generate_batch_size": 2},
                "costs": {"price_table": str(prices), "budget_usd": budget},
                "models": [{"id": "stub", "backend": "openai",
                            "params": {"base_url": server.base_url, "sampling": {"max_tokens": 1}}}]})

        store = RunStore(Location.from_url(f"file://{tmp_path}"), "b")
        with pytest.raises(OverBudget, match=r"costs.budget_usd \$5.00 crossed: \$[0-9.]+ spent so far"):
            run(ResolvedRun.of(cfg(5.0)), run_id="b", progress=False)
        manifest = store.read_json("manifest.json")
        assert manifest["status"] == "over_budget" and "raise the budget and resume" in manifest["reason"]
        stopped_at = store.read_table("scores", ["gen_id"]).num_rows
        assert 0 < stopped_at < 12, stopped_at
        resumed = run(ResolvedRun.of(cfg(100.0)), run_id="b", progress=False)
    assert resumed.failure is None and resumed.processed == 12 - stopped_at
    ids = store.read_table("scores", ["gen_id"]).column("gen_id").to_pylist()
    assert len(ids) == len(set(ids)) == 12


def test_a_run_over_budget_resubmitted_as_the_jobs_retry_policy_would_spends_its_budget_once(
        tmp_path, monkeypatch, capsys):
    """KubeRay's backoffLimit retries a failed Ray job: the same command, the same run id, the same
    budget, twice more. The first attempt stops once its spend crosses the budget (exit 3); each
    retry counts what the earlier attempts spent, starts nothing and makes no call; over the three,
    the spend is at most the budget and one batch."""
    import yaml
    from tests.support.openai_server import OpenAIStubServer

    from halluscope.cli import main
    from halluscope.errors import OverBudget
    from halluscope.pipeline.spend import spent_before, tally_of

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    prices = tmp_path / "prices.yaml"
    prices.write_text("as_of: '2026-01-01'\nsource: test prices\n"
                      "api_usd_per_million_tokens: {stub: {input: 10000.0, output: 10000.0}}\n")  # a cent a token
    with OpenAIStubServer() as server:
        config = tmp_path / "run.yaml"
        config.write_text(yaml.safe_dump({
            "storage": {"root": f"file://{tmp_path}/runs"}, "tasks": ["halogen/code"],
            "limits": {"max_items_per_task": 12}, "concurrency": {"batch_size": 2, "generate_batch_size": 2},
            "costs": {"price_table": str(prices), "budget_usd": 5.0},
            "models": [{"id": "stub", "backend": "openai",  # the plan assumes one-token answers: it passes
                        "params": {"base_url": server.base_url, "sampling": {"max_tokens": 1}}}]}))
        codes, calls = [], []
        for _ in range(3):
            codes.append(main(["run", str(config), "--run-id", "b", "--quiet"]))
            calls.append(server.calls)
    err = capsys.readouterr().err
    assert codes == [OverBudget.EXIT_CODE] * 3, err
    assert calls[0] > 0 and calls[1] == calls[2] == calls[0]  # the retries asked the endpoint nothing
    assert "earlier attempts of this run spent" in err and "nothing was started" in err
    store = RunStore(Location.from_url(f"file://{tmp_path}/runs"), "b")
    manifest = store.read_json("manifest.json")
    assert manifest["status"] == "over_budget" and manifest["attempts_refused"] == 2
    run_ = ResolvedRun.of(parse_config(yaml.safe_load(config.read_text())))
    keys = store.committed_keys()
    (spent, _) = spent_before(run_, store, keys)
    batch_usd = max(spent_before(run_, store, {k})[0].usd for k in keys)
    assert 5.0 < spent.usd <= 5.0 + batch_usd, (spent, batch_usd)
    # every call the endpoint answered was committed and counted: no spend escaped the tally
    assert sum(a["calls"] for a in tally_of(run_, store, keys).acc.values()) == calls[0]


def test_show_prints_a_response_its_units_and_each_verdict(tmp_path, monkeypatch, capsys):
    from halluscope.cli import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = parse_config(_config(f"file://{tmp_path}"))
    run(ResolvedRun.of(cfg), run_id="s", progress=False)
    scores = RunStore(Location.from_url(f"file://{tmp_path}"), "s").read_table("scores").to_pylist()
    worst = min((r for r in scores if r["model"] == "alpaca_7b" and r["task"] == "halogen/summarization"
                 and (r["f"] or 0.0) > 0), key=lambda r: (-r["f"], r["item_id"]))  # the most hallucinated
    assert main(["show", str(tmp_path / "s"), "--model", "alpaca_7b", "--task", "halogen/summarization",
                 "--hallucinated"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"alpaca_7b on halogen/summarization, item {worst['item_id']} (run s)")
    assert f"{worst['n_unsupported']} of {worst['n_atoms']} units unsupported" in out
    assert out.count("UNSUPPORTED ") == worst["n_unsupported"] and "judge" in out
    assert main(["show", str(tmp_path / "s"), "--model", "alpaca_7b", "--task", "halogen/summarization",
                 "--item", "no-such-item"]) == 0
    assert "no item no-such-item of model alpaca_7b" in capsys.readouterr().out


def test_a_committed_part_edited_before_the_resume_is_done_again(tmp_path, monkeypatch, caplog):
    """A scores part edited after its commit (as between a kill and the resume) is not read: the
    resubmitted run warns naming it, does its batch again, and ends with the numbers of the run
    as it was written."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    from halluscope.storage.parquet import table_to_bytes

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = parse_config(_config(f"file://{tmp_path}"))
    first = run(ResolvedRun.of(cfg), run_id="r", progress=False)
    folder = tmp_path / "r" / "scores"
    name = sorted(os.listdir(folder))[0]
    part = pq.read_table(folder / name)
    abstained = pa.array([False] * part.num_rows, pa.bool_())  # every answer turned into a refusal
    (folder / name).write_bytes(table_to_bytes(part.set_column(part.schema.get_field_index("responded"),
                                                               "responded", abstained)))
    with caplog.at_level("WARNING"):
        again = run(ResolvedRun.of(cfg), run_id="r", progress=False)
    assert again.processed == part.num_rows and again.skipped == first.processed - part.num_rows
    assert name in caplog.text and "does not hash to the sha256 in its name" in caplog.text

    def numbers(metrics: list[dict]) -> list[dict]:
        return [r for r in metrics if r["task"] in cfg.tasks]

    assert numbers(again.metrics) == numbers(first.metrics)


def test_a_row_its_judge_failed_keeps_its_generation_and_is_billed_as_an_answered_call(tmp_path, monkeypatch):
    """The model under test answered; the judge's answer could not be read. The row's score holds
    the judge's error; the generation is the answer, without it, and the ledger counts an answered
    call, not a failed one."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    answer = "Yes. They met in Geneva in 1998 and talked for hours."
    cfg = parse_config({
        "storage": {"root": f"file://{tmp_path}"}, "tasks": ["halogen/historical_events@corrected"],
        "limits": {"max_items_per_task": 3}, "max_error_fraction": 1.0, "costs": {"price_table": None},
        "models": [{"id": "m", "backend": "scripted", "params": {"in_process": True, "default": answer}},
                   {"id": "j", "role": "judge", "backend": "scripted", "params": {"in_process": True,
                                                                                  "default": "perhaps"}}]})
    run(ResolvedRun.of(cfg), run_id="t", progress=False)
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "t")

    scores = store.read_table("scores", ["error"]).column("error").to_pylist()
    assert len(scores) == 3 and all(e and "judge" in e for e in scores), scores
    gens = store.read_table("generations", ["text", "error"]).to_pylist()
    assert gens == [{"text": answer, "error": None}] * 3
    (generate,) = [r for r in store.read_table_file("costs.parquet").to_pylist() if r["stage"] == "generate"]
    assert (generate["calls"], generate["failed_calls"]) == (3, 0)


def test_the_ledger_bills_the_head_and_cpu_pods_of_every_attempt_as_measured(tmp_path, monkeypatch):
    """costs.overheads' pods are billed for each attempt's pipeline as the run measured it, and the
    head's time after the end as assumed; a second attempt's time adds to the first's."""
    import pyarrow.parquet as pq

    from halluscope.cost.overheads import HEAD

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    prices = tmp_path / "prices.yaml"
    prices.write_text("as_of: '2026-01-01'\nsource: test prices\ngpu_hour_usd: {CPU: 0.036}\n")
    cfg = parse_config(_config(f"file://{tmp_path}", costs={
        "price_table": str(prices), "overheads": {"head_cpus": 8, "cpu_worker_cpus": 16, "after_finish_s": 600}}))
    run(ResolvedRun.of(cfg), run_id="r", progress=False)
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "r")
    first = json.loads((tmp_path / "r" / "manifest.json").read_text())["timings"]["pipeline_s"]
    (pods,) = [r for r in pq.read_table(tmp_path / "r" / "costs.parquet").to_pylist() if r["stage"] == "pods"]
    assert pods["model"] == HEAD and pods["resource"] == "CPU" and "measured" in pods["note"]
    measured = pods["resource_seconds"] - 8 * 600
    assert 0 < measured <= 24 * (first + 1.0)  # the pipeline's time, measured: within the manifest's timing
    assert math.isclose(pods["usd"], pods["resource_seconds"] * 0.00001)
    names = next(iter(store.parts("scores").values()))  # one batch undone: a second attempt does it again
    store.part_file("scores", names[0]).remove()
    run(ResolvedRun.of(cfg), run_id="r", progress=False)
    (again,) = [r for r in pq.read_table(tmp_path / "r" / "costs.parquet").to_pylist() if r["stage"] == "pods"]
    assert again["resource_seconds"] > pods["resource_seconds"]  # both attempts' pipelines
