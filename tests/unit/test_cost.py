import math

import pyarrow as pa
import pytest

from halluscope import records
from halluscope.config import parse_config
from halluscope.cost.ledger import ledger, total_usd
from halluscope.cost.prices import load_prices
from halluscope.errors import ConfigError
from tests.conftest import REPO, SHARED_DATA

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
    costs = {(r["model"], r["stage"]): r for r in ledger(gens, CFG.models, deployments, prices).to_pylist()}
    api = costs[("api", "generate")]
    assert (api["calls"], api["cached_calls"], api["failed_calls"]) == (3, 1, 1)
    assert (api["input_tokens"], api["output_tokens"]) == (4010, 1000)
    price = prices.api_usd_per_million_tokens["gpt-4o-mini"]
    assert math.isclose(api["usd"], (4010 * price.input + 1000 * price.output) / 1e6)
    judge = costs[("judge", "serve")]
    assert judge["role"] == "judge" and math.isclose(judge["usd"], 2 * prices.gpu_hour_usd["H100"])
    assert ("rec", "generate") not in costs  # recorded generations cost this run nothing
    assert math.isclose(total_usd(ledger(gens, CFG.models, deployments, prices)), api["usd"] + judge["usd"])


def test_unpriced_models_are_not_guessed():
    gens = pa.Table.from_pylist([_gen("api", 10, 10)], schema=records.GENERATIONS)
    costs = ledger(gens, CFG.models, [], None)
    assert costs.column("usd").to_pylist() == [None] and total_usd(costs) is None


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

    cfg = parse_config({"tasks": ["halogen/code"], "storage": {"root": f"file://{tmp_path}"},
                        "costs": {"price_table": str(REPO / "cluster" / "prices.yaml"), "budget_usd": 0.0001},
                        "models": [{"id": "api", "backend": "openai",
                                    "params": {"base_url": "http://127.0.0.1:1/v1", "model": "gpt-4o"}}]})
    with pytest.raises(RunError, match="exceeds costs.budget_usd"):
        run(cfg, run_id="over", progress=False)
    assert not (tmp_path / "over").exists()
