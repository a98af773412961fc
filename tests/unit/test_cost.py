import math

import pyarrow as pa
import pytest
from tests.conftest import REPO, SHARED_DATA
from tests.support.totals import tally

from halluscope import records
from halluscope.config.load import parse_config
from halluscope.cost.ledger import cost_record, ledger, total_usd
from halluscope.cost.prices import PriceTable, load_prices
from halluscope.errors import ConfigError
from halluscope.report.leaderboard import leaderboard

CFG = parse_config({"tasks": ["halogen/code"], "models": [
    {"id": "api", "backend": "openai", "params": {"base_url": "http://127.0.0.1:1/v1", "model": "gpt-4o-mini"}},
    {"id": "judge", "role": "judge", "backend": "scripted"},
    {"id": "rec", "backend": "replay"}]})


def _gen(model, tokens_in, tokens_out, cached=False, error=None):
    return {"gen_id": f"{model}{tokens_in}{cached}{error}", "run_id": "r", "model": model, "task": "halogen/code",
            "item_id": "i", "sample_idx": 0, "text": None if error else "x", "input_tokens": tokens_in,
            "output_tokens": tokens_out, "latency_s": 0.1, "attempts": 0 if cached else 1, "cached": cached,
            "error": error}


def test_ledger_sums_calls_and_prices_tokens_and_seconds():
    prices = load_prices(str(REPO / "cluster" / "prices.yaml"))
    gens = pa.Table.from_pylist([_gen("api", 1000, 200), _gen("api", 3000, 800), _gen("api", 50, 5, cached=True),
                                 _gen("api", 10, 0, error="HTTP 503 after 5 attempts"), _gen("rec", 0, 0)],
                                schema=records.GENERATIONS)
    deployments = [{"model": "judge", "resource": "H100", "resource_seconds": 7200.0}]
    costs = {(r["model"], r["stage"]): r for r in ledger(tally(CFG.models, gens), CFG.models, deployments, prices).to_pylist()}
    api = costs[("api", "generate")]
    assert (api["calls"], api["cached_calls"], api["failed_calls"]) == (3, 1, 1)
    assert (api["input_tokens"], api["output_tokens"]) == (4010, 1000)
    price = prices.api_usd_per_million_tokens["gpt-4o-mini"]
    assert math.isclose(api["usd"], (4010 * price.input + 1000 * price.output) / 1e6)
    judge = costs[("judge", "serve")]
    assert judge["role"] == "judge" and math.isclose(judge["usd"], 2 * prices.gpu_hour_usd["H100"])
    assert ("rec", "generate") not in costs  # recorded generations cost this run nothing
    assert math.isclose(total_usd(ledger(tally(CFG.models, gens), CFG.models, deployments, prices)), api["usd"] + judge["usd"])


def test_unpriced_models_are_not_guessed():
    gens = pa.Table.from_pylist([_gen("api", 10, 10)], schema=records.GENERATIONS)
    costs = ledger(tally(CFG.models, gens), CFG.models, [], None)
    assert costs.column("usd").to_pylist() == [None] and total_usd(costs) is None
    assert costs.column("note").to_pylist() == ["no price table (costs.price_table)"]


# a run whose judge and extractor are reached over HTTP, as the shipped configs reach the RayService
HTTP_ROLES = parse_config({"tasks": ["halogen/code"], "models": [
    {"id": "api", "backend": "openai", "params": {"base_url": "http://127.0.0.1:1/v1", "model": "gpt-4o-mini"}},
    {"id": "judge", "role": "judge", "backend": "openai",
     "params": {"base_url": "http://127.0.0.1:1/judge/v1", "model": "llama-3.1-70b-instruct"}},
    {"id": "extractor", "role": "extractor", "backend": "openai",
     "params": {"base_url": "http://127.0.0.1:1/extractor/v1", "model": "llama-3.1-405b-instruct-fp8"}},
    {"id": "local", "backend": "scripted"}]})


def role_calls(*rows):
    return pa.Table.from_pylist([{"run_id": "r", "gen_id": f"g{i}", "model": "api", "task": "halogen/code",
                                  "role_model": m, "stage": stage, "calls": calls, "cached_calls": cached,
                                  "failed_calls": 0, "input_tokens": 100 * calls, "output_tokens": 10 * calls}
                                 for i, (m, stage, calls, cached) in enumerate(rows)], schema=records.ROLE_CALLS)


def test_a_total_with_unpriced_items_is_not_given_as_the_cost():
    prices = load_prices(str(REPO / "cluster" / "prices.yaml"))
    gens = pa.Table.from_pylist([_gen("api", 1000, 200), _gen("local", 10, 10)], schema=records.GENERATIONS)
    calls = role_calls(("judge", "abstain", 3, 0), ("extractor", "decompose", 2, 0), ("judge", "verify", 0, 4))
    deployments = [{"model": "local", "resource": "CPU", "resource_seconds": 3600.0}]
    costs = ledger(tally(HTTP_ROLES.models, gens, calls), HTTP_ROLES.models, deployments, prices)
    by = {(r["model"], r["stage"]): r for r in costs.to_pylist()}
    # llama models have no token price; a row of cache hits only costs nothing
    assert by[("judge", "abstain")]["usd"] is None and by[("extractor", "decompose")]["usd"] is None
    assert by[("judge", "verify")]["usd"] == 0.0
    # a model this run serves: its calls are priced by its deployment's time, not by tokens
    assert by[("local", "generate")]["usd"] == 0.0 and "stage serve" in by[("local", "generate")]["note"]
    priced = by[("api", "generate")]["usd"] + 0.048
    total = cost_record(costs)
    record = total.values
    assert record["usd"] is None and record["complete"] is False and record["unpriced_rows"] == 2
    assert math.isclose(record["usd_priced"], priced) and math.isclose(total_usd(costs), priced)
    assert record["unpriced"] == [
        "extractor (extractor) decompose: no price for API model 'llama-3.1-405b-instruct-fp8' in the price table",
        "judge (judge) abstain: no price for API model 'llama-3.1-70b-instruct' in the price table"]
    board = leaderboard([total], "r")
    assert f"Cost of this run: incomplete: 2 line items unpriced (priced items ${priced:,.4f})" in board
    assert "- unpriced: judge (judge) abstain: no price for API model" in board


def test_a_total_with_every_item_priced_is_complete():
    prices = load_prices(str(REPO / "cluster" / "prices.yaml"))
    gens = pa.Table.from_pylist([_gen("api", 1000, 200)], schema=records.GENERATIONS)
    total = cost_record(ledger(tally(HTTP_ROLES.models, gens), HTTP_ROLES.models, [], prices))
    record = total.values
    assert (total.model, total.task, total.benchmark) == ("*", "costs/total", None)
    assert record["complete"] and record["unpriced_rows"] == 0 and record["unpriced"] == []
    assert record["usd"] == record["usd_priced"] == (1000 * 0.15 + 200 * 0.60) / 1e6
    assert f"Cost of this run: ${record['usd']:,.4f};" in leaderboard([total], "r")
    # nothing live (replayed answers only): complete, and free
    assert cost_record(ledger(tally(CFG.models, records.GENERATIONS.empty_table()), CFG.models, [], None)).values["usd"] == 0.0


def test_served_calls_without_deployment_time_are_unpriced():
    gens = pa.Table.from_pylist([_gen("local", 10, 10)], schema=records.GENERATIONS)
    record = cost_record(ledger(tally(HTTP_ROLES.models, gens), HTTP_ROLES.models, [], None)).values
    assert record["usd"] is None and record["unpriced"] == [
        "local (test) generate: served by this run, but no deployment time was recorded for it"]


def test_report_html_says_the_total_is_incomplete(tmp_path):
    from halluscope.report.html import render_report
    from halluscope.storage.fs import Location
    from halluscope.storage.run import RunStore

    calls = role_calls(("judge", "abstain", 3, 0))
    gens = pa.Table.from_pylist([_gen("api", 1000, 0)], schema=records.GENERATIONS)
    costs = ledger(tally(HTTP_ROLES.models, gens, calls), HTTP_ROLES.models, [],
                   load_prices(str(REPO / "cluster" / "prices.yaml")))
    store = RunStore(Location.from_url(str(tmp_path)), "r")
    store.write_json("manifest.json", {"run_id": "r", "status": "complete"})
    store.write_json("metrics.json", [cost_record(costs).as_json()])
    store.write_costs(costs)
    page = render_report(store)
    assert "Cost of this run: incomplete: 1 line item unpriced (priced items $0.0001)" in page
    assert "<li>judge (judge) abstain: no price for API model &#39;llama-3.1-70b-instruct&#39;" in page


# --- node billing -------------------------------------------------------------------------------

NODE_PRICES = PriceTable.model_validate({
    "as_of": "test", "source": "written in the test", "gpu_hour_usd": {"H100": 7.0, "L40S": 2.0},
    "node_hour_usd": {"p5": 50.0}, "accelerators": {"H100": {"billing": "node", "gpus_per_node": 8, "node": "p5"},
                                                    "L40S": {"billing": "gpu", "gpus_per_node": 4}}})


@pytest.mark.parametrize("resource, gpus, seconds, usd", [
    ("H100", 12, 3600, 100.0),  # 12 GPUs are two 8-GPU nodes
    ("H100", 8, 1800, 25.0),
    ("H100", 1, 3600, 50.0),  # one GPU still holds a whole node
    ("H100", 0, 3600, 0.0),
    ("L40S", 3, 3600, 6.0),  # billed per GPU: no rounding
    ("A10G", 1, 3600, None),  # no price
])
def test_nodes_usd_rounds_up_to_whole_nodes_where_nodes_are_billed(resource, gpus, seconds, usd):
    got = NODE_PRICES.nodes_usd(resource, gpus, seconds)
    assert got == usd if usd is None else math.isclose(got, usd, abs_tol=1e-12)
    assert NODE_PRICES.hours_usd("H100", 3600) == 7.0  # per-GPU prices are unchanged


def test_node_billing_needs_a_node_price(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("as_of: x\nsource: y\naccelerators: {H100: {billing: node, gpus_per_node: 8, node: p5}}\n")
    with pytest.raises(ConfigError, match="node_hour_usd"):
        load_prices(str(bad))
    with pytest.raises(ValueError, match=">= 0"):
        NODE_PRICES.nodes_usd("H100", -1, 10)


def test_shipped_node_prices_follow_the_node_types():
    import yaml

    prices = load_prices(str(REPO / "cluster" / "prices.yaml"))
    gpu_worker = yaml.safe_load((REPO / "cluster" / "node_types.yaml").read_text())["node_types"]["gpu-worker"]
    billing = prices.accelerators[gpu_worker["accelerator"]]
    assert (billing.billing, billing.node, billing.gpus_per_node) == ("node", gpu_worker["aws_instance_type"],
                                                                      gpu_worker["gpus"])
    # the RayService's judge (4 GPUs) and extractor (8 GPUs): two p5.48xlarge, about $110/h
    assert round(prices.nodes_usd("H100", 12, 3600)) == 110
    for name, b in prices.accelerators.items():  # a node costs its GPUs at the per-GPU figure
        assert math.isclose(prices.node_hour_usd[b.node], b.gpus_per_node * prices.gpu_hour_usd[name])


def test_bad_price_tables(tmp_path):
    with pytest.raises(ConfigError, match="price table not found"):
        load_prices(str(tmp_path / "none.yaml"))
    bad = tmp_path / "p.yaml"
    bad.write_text("as_of: x\nsource: y\ngpu_hour_usd: {H100: -1}\n")
    with pytest.raises(ConfigError, match="gpu_hour_usd"):
        load_prices(str(bad))


@pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")
def test_a_run_over_its_budget_stops_before_anything_is_written(tmp_path):
    from halluscope.errors import RunError
    from halluscope.pipeline.runner import run
    from halluscope.resolve.run import ResolvedRun

    cfg = parse_config({"tasks": ["halogen/code"], "storage": {"root": f"file://{tmp_path}"},
                        "costs": {"price_table": str(REPO / "cluster" / "prices.yaml"), "budget_usd": 0.0001},
                        "models": [{"id": "api", "backend": "openai",
                                    "params": {"base_url": "http://127.0.0.1:1/v1", "model": "gpt-4o"}}]})
    with pytest.raises(RunError, match="exceeds costs.budget_usd"):
        run(ResolvedRun.of(cfg), run_id="over", progress=False)
    assert not (tmp_path / "over").exists()


def test_what_an_earlier_attempts_deployments_held_counts_against_the_budget_and_in_the_ledger(tmp_path):
    """A stopped attempt's GPU time was billed: the next attempt of the run counts it before it
    starts anything, and the ledger bills it beside its own; a held part edited since is not believed."""
    import os

    from halluscope.cost.nodes import Interval
    from halluscope.pipeline.spend import HELD_TABLE, deployment_rows, held_by_attempts, record_held, spent_before
    from halluscope.resolve.run import ResolvedRun
    from halluscope.storage.fs import Location
    from halluscope.storage.run import RunStore

    run = ResolvedRun.of(parse_config({
        "storage": {"root": f"file://{tmp_path}"}, "tasks": ["halogen/code"],
        "costs": {"price_table": str(REPO / "cluster" / "prices.yaml")},
        "models": [{"id": "m", "backend": "scripted", "params": {"default": "import numpy"}}]}))
    root = Location.from_url(f"file://{tmp_path}")
    first = RunStore(root, "r")
    first.claim()
    record_held(first, [Interval(0.0, 1800.0, "H100", 8, "m")])
    record_held(first, [Interval(0.0, 3600.0, "H100", 8, "m")])  # as it grows: the part is replaced
    assert len(first.parts(HELD_TABLE)[first.attempt]) == 1
    second = RunStore(root, "r")
    second.claim()
    record_held(second, [Interval(7200.0, 9000.0, "H100", 8, "m")])
    (before, _) = spent_before(run, second, set())
    assert before.calls_usd == 0 and before.held_usd == pytest.approx(8 * 6.88)  # the first attempt's hour
    assert deployment_rows(held_by_attempts(second)) == [
        {"model": "m", "resource": "H100", "resource_seconds": 8 * 3600.0 + 8 * 1800.0}]
    (name,) = first.parts(HELD_TABLE)[first.attempt]
    path = tmp_path / "r" / HELD_TABLE / name
    os.chmod(path, 0o600)
    path.write_bytes(path.read_bytes()[:-8] + b"00000000")
    assert spent_before(run, second, set())[0].held_usd == 0.0
