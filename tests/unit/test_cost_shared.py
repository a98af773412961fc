"""Shared services' time charged to the runs that used it (halluscope.cost.shared): usage records
under <root>/_shared/services/, each run's share of overlapping intervals, and the ledger rows."""

import datetime as dt
import json
import math

import pyarrow as pa
import pytest
from tests.support.totals import tally

from halluscope import records
from halluscope.config.load import parse_config
from halluscope.cost.ledger import cost_record, ledger
from halluscope.cost.prices import PriceTable
from halluscope.cost.shared import (
    MAX_OPEN_S,
    charged_seconds,
    check_services,
    record_run_usage,
    record_usage,
    service_rows,
    usage,
)
from halluscope.errors import ConfigError
from halluscope.storage.fs import Location

HOUR = 3600.0
SERVE = {"name": "halluscope-serve", "usd_per_hour": 110.0, "models": ["judge", "extractor"]}


def config(*services):
    return parse_config({"tasks": ["halogen/code"], "costs": {"price_table": None, "shared_services": list(services)},
                         "models": [
                             {"id": "api", "backend": "openai",
                              "params": {"base_url": "http://127.0.0.1:1/v1", "model": "gpt-4o-mini"}},
                             {"id": "judge", "role": "judge", "backend": "openai",
                              "params": {"base_url": "http://127.0.0.1:1/judge/v1", "model": "llama-70b"}},
                             {"id": "extractor", "role": "extractor", "backend": "openai",
                              "params": {"base_url": "http://127.0.0.1:1/extractor/v1", "model": "llama-405b"}}]})


CFG = config(SERVE)
NOW = 100 * HOUR


@pytest.fixture()
def root(tmp_path):
    """A storage root where the runs these tests name exist (a usage record of a run that does not
    is not read), each alive from the epoch to NOW."""
    loc = Location.from_url(str(tmp_path / "runs"))
    for run_id in ("a", "b", "other", "alone", "r"):
        lived(loc, run_id)
    return loc


def lived(root, run_id, created_at=0.0, finished_at=None):
    iso = lambda t: None if t is None else dt.datetime.fromtimestamp(t, dt.UTC).isoformat()  # noqa: E731
    root.child(run_id, "manifest.json").write_bytes_atomic(json.dumps(
        {"run_id": run_id, "created_at": iso(created_at), "finished_at": iso(finished_at)}).encode())


def rows(root, run_id, start, end, cfg=CFG, prices=None):
    return service_rows(cfg.models, cfg.costs.shared_services, root, run_id, start, end, prices, now=NOW)


def test_two_overlapping_runs_each_pay_half_of_the_overlap(root):
    # a: hours 0-2, b: hours 1-4; both used the service during hour 1-2
    record_usage(root, "halluscope-serve", "a", 0, 2 * HOUR)
    record_usage(root, "halluscope-serve", "b", 1 * HOUR, 4 * HOUR)
    (a,) = rows(root, "a", 0, 2 * HOUR)
    (b,) = rows(root, "b", 1 * HOUR, 4 * HOUR)
    assert math.isclose(a["resource_seconds"], 1.5 * HOUR) and math.isclose(a["usd"], 1.5 * 110)
    assert math.isclose(b["resource_seconds"], 2.5 * HOUR) and math.isclose(b["usd"], 2.5 * 110)
    # together they pay the 4 hours the service was in use, no more
    assert math.isclose(a["usd"] + b["usd"], 4 * 110)
    assert (a["model"], a["role"], a["task"], a["stage"]) == ("halluscope-serve", "service", "*", "shared")
    assert a["covers"] == ["judge", "extractor"] and "shared with 1 other run(s) at $110.00/h" in a["note"]


def test_a_run_alone_pays_every_hour(root):
    record_usage(root, "halluscope-serve", "other", 5 * HOUR, 6 * HOUR)  # later, no overlap
    (row,) = rows(root, "alone", 0, 2 * HOUR)  # not recorded yet: the interval given counts
    assert math.isclose(row["usd"], 2 * 110) and "shared with 0 other run(s)" in row["note"]


def test_a_services_share_is_split_into_its_engines_busy_time_and_the_rest_held_idle(root):
    """With the engines' busy seconds for the run (its calls' tokens at their rates), the share
    is two rows, as the plan has them: "shared" for the busy part, "idle" for the rest; busy time
    beyond the share (two runs overlapping) is cut to it."""
    record_usage(root, "halluscope-serve", "other", 1 * HOUR, 2 * HOUR)
    busy, idle = service_rows(CFG.models, CFG.costs.shared_services, root, "alone", 0, 2 * HOUR, None, now=NOW,
                              busy_s={"halluscope-serve": 0.5 * HOUR})
    assert (busy["stage"], idle["stage"]) == ("shared", "idle") and busy["covers"] == ["judge", "extractor"]
    assert "covers" not in idle and "estimated" in busy["note"] and "idle" in idle["note"]
    assert math.isclose(busy["resource_seconds"], 0.5 * HOUR) and math.isclose(idle["resource_seconds"], HOUR)
    assert math.isclose(busy["usd"] + idle["usd"], 1.5 * 110)  # the share, split with the other run
    (_, idle) = service_rows(CFG.models, CFG.costs.shared_services, root, "alone", 0, 2 * HOUR, None, now=NOW,
                             busy_s={"halluscope-serve": 9 * HOUR})
    assert idle["resource_seconds"] == 0


def test_three_runs_split_a_moment_three_ways():
    # [0,3] against [1,3] and [2,3]: 1 + 1/2 + 1/3 hours
    got = charged_seconds([(0, 3 * HOUR)], [[(1 * HOUR, 3 * HOUR)], [(2 * HOUR, 3 * HOUR)]], NOW)
    assert math.isclose(got, (1 + 1 / 2 + 1 / 3) * HOUR)
    # one run with two intervals that overlap another run's single interval counts once per moment
    assert math.isclose(charged_seconds([(0, 2 * HOUR)], [[(0, 1 * HOUR), (0.5 * HOUR, 2 * HOUR)]], NOW), HOUR)


def test_no_shared_services_no_rows(root):
    cfg = config()
    assert rows(root, "a", 0, HOUR, cfg) == []
    assert record_run_usage(root, cfg.costs.shared_services, cfg.models, "a", 0, HOUR) == []
    assert not root.child("_shared").exists()
    # a service that serves none of the run's models is not this run's
    other = config({"name": "elsewhere", "usd_per_hour": 1.0, "models": ["not-here"]})
    assert rows(root, "a", 0, HOUR, other) == []


def test_a_run_in_flight_is_shared_with(root):
    # b began at hour 1 and is still running (no end yet) when a, done at hour 2, aggregates
    record_usage(root, "halluscope-serve", "b", 1 * HOUR)
    (a,) = service_rows(CFG.models, CFG.costs.shared_services, root, "a", 0, 2 * HOUR, None, now=2 * HOUR)
    assert math.isclose(a["resource_seconds"], 1.5 * HOUR)
    # an interval left open by a run that died counts MAX_OPEN_S at most
    assert math.isclose(charged_seconds([(0, 3 * MAX_OPEN_S)], [[(0, None)]], 3 * MAX_OPEN_S),
                        3 * MAX_OPEN_S - MAX_OPEN_S / 2)


def test_usage_records_are_json_under_the_root_and_resumes_add_intervals(root):
    record_run_usage(root, CFG.costs.shared_services, CFG.models, "r", 0)  # the pipeline starts
    record_run_usage(root, CFG.costs.shared_services, CFG.models, "r", 0, HOUR)  # ... and ends
    record_usage(root, "halluscope-serve", "r", 5 * HOUR)  # a second attempt that died
    record_usage(root, "halluscope-serve", "r", 8 * HOUR, 9 * HOUR)  # the third: closes the second at its start
    doc = json.loads(root.child("_shared", "services", "halluscope-serve", "r.json").read_bytes())
    assert doc == {"service": "halluscope-serve", "run_id": "r",
                   "intervals": [[0, HOUR], [5 * HOUR, 8 * HOUR], [8 * HOUR, 9 * HOUR]]}
    (row,) = rows(root, "r", None, None)
    assert math.isclose(row["resource_seconds"], 5 * HOUR)
    with pytest.raises(ValueError, match="before it starts"):
        record_usage(root, "halluscope-serve", "r", 2, 1)
    with pytest.raises(ConfigError, match="not allowed"):
        record_usage(root, "../escape", "r", 0, 1)
    # an unreadable record is skipped and said so
    root.child("_shared", "services", "halluscope-serve", "broken.json").write_bytes_atomic(b"{not json")
    assert set(usage(root, "halluscope-serve")[0]) == {"r"} and usage(root, "halluscope-serve")[1] == 1
    assert "1 usage record(s) skipped: unreadable, unsigned, or not what they claim" in rows(root, "r", None, None)[0]["note"]


def test_calls_to_served_models_are_priced_by_the_service_not_by_tokens(root):
    calls = pa.Table.from_pylist([{"run_id": "r", "gen_id": "g", "model": "api", "task": "halogen/code",
                                   "stage": stage, "role": role, "role_model": role, "calls": 2, "cached_calls": 0,
                                   "failed_calls": 0, "input_tokens": 500, "output_tokens": 50}
                                  for role, stage in (("judge", "abstain"), ("extractor", "decompose"))],
                                 schema=records.ROLE_CALLS)
    gens = records.GENERATIONS.empty_table()
    # without the service, the judge and extractor have no token price: the total is incomplete
    before = cost_record(ledger(tally(CFG.models, gens, calls), CFG.models, [], None)).values
    assert before["usd"] is None and before["unpriced_rows"] == 2
    extra = rows(root, "r", 0, HOUR / 2)
    costs = ledger(tally(CFG.models, gens, calls), CFG.models, [], None, extra_rows=extra)
    by = {(r["model"], r["stage"]): r for r in costs.to_pylist()}
    for key in (("judge", "abstain"), ("extractor", "decompose")):
        assert by[key]["usd"] == 0.0 and by[key]["calls"] == 2
        assert by[key]["note"] == "priced by the time of shared service 'halluscope-serve' (stage shared)"
    assert math.isclose(by[("halluscope-serve", "shared")]["usd"], 55.0)
    record = cost_record(costs).values
    assert record["complete"] and math.isclose(record["usd"], 55.0)
    assert "covers" not in costs.column_names and "covers" in extra[0]  # the caller's rows are not changed


def test_a_service_priced_by_nodes_from_the_price_table(root):
    prices = PriceTable.model_validate({
        "as_of": "t", "source": "test", "gpu_hour_usd": {"H100": 7.0}, "node_hour_usd": {"p5": 55.0},
        "accelerators": {"H100": {"billing": "node", "gpus_per_node": 8, "node": "p5"}}})
    for spec in ({"gpus": 12, "resource": "H100"}, {"nodes": 2, "resource": "H100"}):
        cfg = config({"name": "halluscope-serve", "models": ["judge"], **spec})
        (row,) = rows(root, "r", 0, HOUR, cfg, prices)
        assert math.isclose(row["usd"], 110.0) and row["resource"] == "H100" and row["covers"] == ["judge"]
    # no price: the row is unpriced and says why; the calls it covers still cost nothing themselves
    cfg = config({"name": "halluscope-serve", "models": ["judge"], "gpus": 12, "resource": "A10G"})
    (row,) = rows(root, "r", 0, HOUR, cfg, prices)
    assert row["usd"] is None and row["note"].startswith("no price for resource 'A10G' in the price table; ")
    (row,) = rows(root, "r", 0, HOUR, cfg, None)
    assert row["usd"] is None and row["note"].startswith("no price table (costs.price_table)")
    record = cost_record(ledger(tally(cfg.models, records.GENERATIONS.empty_table()), cfg.models, [], None, extra_rows=[row])).values
    assert record["usd"] is None and record["unpriced"][0].startswith(
        "halluscope-serve (service) shared: no price table (costs.price_table)")


@pytest.mark.parametrize("service, match", [
    ({"name": "s", "models": ["judge"]}, "exactly one of usd_per_hour, nodes, gpus"),
    ({"name": "s", "models": ["judge"], "usd_per_hour": 1, "gpus": 8, "resource": "H100"}, "exactly one"),
    ({"name": "s", "models": ["judge"], "gpus": 8}, "`resource` goes with nodes or gpus"),
    ({"name": "s", "models": ["judge"], "usd_per_hour": 1, "resource": "H100"}, "`resource` goes with"),
    ({"name": "../s", "models": ["judge"], "usd_per_hour": 1}, "pattern"),
    ({"name": "s", "models": [], "usd_per_hour": 1}, "at least 1"),
])
def test_bad_shared_services(service, match):
    with pytest.raises(ConfigError, match=match):
        config(service)


def test_services_are_distinct_and_name_http_models_of_the_run():
    with pytest.raises(ConfigError, match="duplicate service name"):
        config(SERVE, SERVE)
    with pytest.raises(ConfigError, match="model served by more than one service"):
        config(SERVE, {**SERVE, "name": "other"})
    check_services(CFG.costs.shared_services, CFG.models)
    typo = config({**SERVE, "models": ["jduge", "api"]})
    with pytest.raises(ConfigError, match="'jduge', which is not a model of this run"):
        check_services(typo.costs.shared_services, typo.models)
    scripted = parse_config({"tasks": ["halogen/code"], "models": [{"id": "m", "backend": "scripted"}],
                             "costs": {"shared_services": [{"name": "s", "usd_per_hour": 1, "models": ["m"]}]}})
    with pytest.raises(ConfigError, match=r"backend \(scripted\) is not an API billed per token"):
        check_services(scripted.costs.shared_services, scripted.models)


def test_a_usage_record_bills_only_the_run_it_lies_under_inside_its_lifetime(root):
    """Planted records: one naming a run that does not exist (it would cut every other run's share),
    one under a run's name that names another run inside, one with an interval long before the run
    was created (it would bill the run for years), one with a time that is not a number."""
    folder = root.child("_shared", "services", "halluscope-serve")
    record_usage(root, "halluscope-serve", "r", 0, HOUR)
    lived(root, "young", created_at=50 * HOUR, finished_at=60 * HOUR)

    def plant(name, doc):
        folder.child(f"{name}.json").write_bytes_atomic(json.dumps(doc).encode())

    for i in range(99):
        plant(f"ghost{i}", {"service": "halluscope-serve", "run_id": f"ghost{i}", "intervals": [[0, HOUR]]})
    plant("a", {"service": "halluscope-serve", "run_id": "r", "intervals": [[0, HOUR]]})
    plant("young", {"service": "halluscope-serve", "run_id": "young", "intervals": [[0, 60 * HOUR]]})
    plant("b", {"service": "halluscope-serve", "run_id": "b", "intervals": [[0, "NaN"]]})
    runs, skipped = usage(root, "halluscope-serve", NOW)
    assert set(runs) == {"r"} and skipped == 102
    (row,) = rows(root, "r", None, None)
    assert math.isclose(row["resource_seconds"], HOUR)  # alone: the ghosts cut nothing
    assert "102 usage record(s) skipped" in row["note"]


def test_a_hosted_api_listed_under_a_service_is_still_priced_per_token():
    """A model the price table prices per token is what it is, whatever service line names it: a
    $0/h service listing gpt-4o no longer makes its calls free."""
    from halluscope.cost.ledger import service_tokens_usd

    prices = PriceTable.model_validate({"as_of": "2026-01-01", "source": "t",
                                        "api_usd_per_million_tokens": {"gpt-4o": {"input": 2.5, "output": 10.0}}})
    hosted = parse_config({"tasks": ["halogen/code"], "models": [{"id": "gpt4o", "backend": "openai", "params": {
        "base_url": "https://api.example.com/v1", "model": "gpt-4o"}}]}).models[0]
    usd, note = service_tokens_usd(hosted, prices, "free-service", 1_000_000, 100_000)
    assert usd == pytest.approx(3.5) and "hosted API" in note
    judge = CFG.models[1]  # llama-70b on the RayService: no token price, so the service's time prices it
    assert service_tokens_usd(judge, prices, "halluscope-serve", 1000, 10) == (
        0.0, "priced by the time of shared service 'halluscope-serve' (stage shared)")


def test_with_a_usage_key_made_up_runs_cannot_dilute_a_share(root):
    """Anyone who can write the bucket can write run folders, manifests and usage records: 20
    made-up runs "sharing" the service cut run a's share twentyfold. Signed under the runs' key
    (costs.usage_key_env), a record without its signature, or with another key's, is skipped and
    counted; the runs that sign are split as before."""
    key = b"the runs' key"
    record_usage(root, "halluscope-serve", "b", 1 * HOUR, 2 * HOUR, key)  # a real run, signed
    for k in range(20):
        lived(root, f"made-up-{k}")
        record_usage(root, "halluscope-serve", f"made-up-{k}", 0, 2 * HOUR)  # no key: unsigned
    record_usage(root, "halluscope-serve", "other", 0, 2 * HOUR, b"another key")
    (row,) = service_rows(CFG.models, CFG.costs.shared_services, root, "a", 0, 2 * HOUR, None, now=NOW, key=key)
    assert math.isclose(row["resource_seconds"], 1.5 * HOUR)  # alone for an hour, half of the hour b shared
    assert "21 usage record(s) skipped: unreadable, unsigned, or not what they claim" in row["note"]
    (unkeyed,) = service_rows(CFG.models, CFG.costs.shared_services, root, "a", 0, 2 * HOUR, None, now=NOW)
    assert unkeyed["resource_seconds"] < 0.1 * HOUR  # without the key, the made-up runs take the share


def test_a_usage_key_named_but_not_set_is_refused(monkeypatch):
    from halluscope.config.schema import CostSpec
    from halluscope.errors import ConfigError

    monkeypatch.delenv("HALLUSCOPE_USAGE_KEY", raising=False)
    with pytest.raises(ConfigError, match="costs.usage_key_env: environment variable HALLUSCOPE_USAGE_KEY is not set"):
        CostSpec(usage_key_env="HALLUSCOPE_USAGE_KEY").usage_key()
    monkeypatch.setenv("HALLUSCOPE_USAGE_KEY", "s3cret")
    assert CostSpec(usage_key_env="HALLUSCOPE_USAGE_KEY").usage_key() == b"s3cret"
