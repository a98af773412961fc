"""The one admission rule of served models under test, in the estimate and the run."""

from __future__ import annotations

import pytest

from halluscope.config.load import parse_config
from halluscope.errors import ConfigError
from halluscope.pipeline.schedule import Admission, order, simulate
from halluscope.resolve.cluster import Job, budget, check_cpus, cpu_demand, pool_of, refusals


def test_models_beyond_the_budget_run_in_waves_largest_first_with_backfill():
    jobs = [Job("small", "GPU", 1, 1, 10), Job("big", "GPU", 4, 1, 19), Job("mid", "GPU", 2, 1, 9),
            Job("mid2", "GPU", 2, 1, 9)]
    s = simulate(jobs, {"GPU": 5})
    starts = {w.model: w.start_s for w in s.windows}
    # big (4 x 20 s) first; small fills the fifth GPU; the two mids start when big gives its 4 back
    assert starts["big"] == 0 and starts["small"] == 0
    assert starts["mid"] == starts["mid2"] == 20
    assert s.waves() == [["big", "small"], ["mid", "mid2"]]
    assert s.peak() == 5
    assert s.makespan_s == 30
    assert s.lower_bound_s({"GPU": 5}) == pytest.approx(max((80 + 11 + 20 + 20) / 5, 20))
    assert s.held_hours() * 3600 == pytest.approx(80 + 11 + 20 + 20)
    assert s.busy_hours() * 3600 == pytest.approx(76 + 10 + 18 + 18)


def test_a_model_larger_than_the_budget_is_refused_with_the_numbers():
    with pytest.raises(ConfigError, match=r"model 'huge' needs 8 H100 GPUs, the budget has 4 H100 GPUs"):
        Admission([Job("ok", "H100", 2), Job("huge", "H100", 8)], {"H100": 4})
    assert refusals([Job("a", "A100-80G", 1)], {"H100": 4}) == [
        "model 'a' needs 1 A100-80G GPUs, the budget has 0 GPUs (cluster.gpus)"]


def test_budget_pools():
    assert pool_of("H100", {"GPU": 8}) == "GPU"
    assert pool_of("GPU", {"H100": 8, "CPU": 4}) == "H100"  # an untyped demand on a one-type budget
    assert pool_of("GPU", {"H100": 8, "L40S": 8}) is None
    assert pool_of("CPU", {"GPU": 8}) is None


def test_admission_holds_back_what_the_dollar_gate_refuses_and_takes_it_later():
    a = Admission([Job("x", "GPU", 1, 0, 5), Job("y", "GPU", 1, 0, 1)], {"GPU": 2})
    assert [j.model for j in a.start(lambda j: j.model != "x")] == ["y"]
    assert [j.model for j in a.start()] == ["x"]


def test_unknown_sizes_keep_the_config_order():
    jobs = [Job("a", "GPU", 1, None, None), Job("b", "GPU", 4, 1, 100)]
    assert [j.model for j in order(jobs)] == ["a", "b"]
    s = simulate(jobs, {"GPU": 4})
    assert s.notes and "unknown" in s.notes[0]


def _cfg(**extra):
    return parse_config({"tasks": ["halogen/code"], "models": [
        {"id": "t1", "backend": "scripted", "params": {"serve": {"num_gpus": 2, "num_cpus": 0.5}}},
        {"id": "j", "role": "judge", "backend": "scripted", "params": {"serve": {"num_gpus": 1}}}], **extra})


def test_budget_leaves_out_the_roles_the_run_serves():
    b = budget(_cfg(cluster={"gpus": 8}), None, 10)
    assert b == {"GPU": 7, "CPU": 10 - 1 - 2 - 0.5 - 1}  # the judge's GPU and CPU, Evaluate x2, Generate, tasks
    assert budget(_cfg(), None, None) is None  # nothing known: the estimate runs every model at once
    assert budget(_cfg(), 4, None)["GPU"] == 3


def test_cpus_that_cannot_hold_the_roles_and_actors_fail_before_the_start_naming_each_holder():
    cfg = parse_config({"tasks": ["halogen/code"], "models": [
        {"id": "t", "backend": "scripted"}, {"id": "j", "role": "judge", "backend": "scripted"}]})
    assert sum(cpu_demand(cfg).values()) == 1 + 1 + 2 + 0.5 + 1
    with pytest.raises(ConfigError, match=r"needs 5.5 logical CPUs at once and the cluster has 4: model 'j' "
                                          r"\(judge\) 1; Evaluate actors"):
        check_cpus(cfg, 4)
    check_cpus(cfg, 6)


def test_the_dollar_budget_holds_back_a_model_that_would_cross_it(tmp_path):
    from tests.support.resolved import resolved

    from halluscope.pipeline.spend import dollar_gate
    from halluscope.pipeline.waves import Deployment
    from halluscope.resolve.run import ResolvedRun
    from halluscope.resolve.tables import price_table

    prices = tmp_path / "prices.yaml"
    prices.write_text("as_of: '2025-07-01'\nsource: test\ngpu_hour_usd: {GPU: 2.0}\n")
    cfg = _cfg(costs={"price_table": str(prices), "budget_usd": 5.0})
    jobs = {"a": Job("a", "GPU", 1, 0, 3600), "b": Job("b", "GPU", 1, 0, 3600), "c": Job("c", "GPU", 1, 0, 1800)}
    gate = dollar_gate(ResolvedRun.of(cfg), jobs)
    assert gate is not None
    done = Deployment("a", "GPU", 1, 0, requested_at=0.0, released_at=3600.0)  # $2 held
    assert gate(jobs["b"], [done]) is None  # $2 + $2 <= $5
    running = Deployment("b", "GPU", 1, 0, requested_at=1e12)  # still held: its estimate counts
    reason = gate(jobs["b"], [done, running])
    assert reason is not None and "costs.budget_usd $5.00 would be crossed: model 'b' is estimated at $2.00" in reason
    assert gate(jobs["c"], [done, running]) is None  # $2 + $2 + $1
    assert dollar_gate(resolved(_cfg(), prices=price_table(cfg)), jobs) is None  # no budget: nothing held back
