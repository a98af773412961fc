"""Whole nodes billed beyond the GPUs a run's deployments held."""

from __future__ import annotations

import pytest

from halluscope.cost.nodes import Interval, stranded_rows
from halluscope.cost.prices import PriceTable

PRICES = PriceTable.model_validate({
    "as_of": "2025-07-01", "source": "test", "gpu_hour_usd": {"H100": 6.0, "L40S": 2.0},
    "node_hour_usd": {"p5": 56.0}, "accelerators": {"H100": {"billing": "node", "gpus_per_node": 8, "node": "p5"}}})


def test_gpus_held_by_no_deployment_on_billed_nodes_are_charged_once():
    # 6 GPUs for 10 s, 4 more from 5 s: one node, then two nodes holding 10 GPUs
    (row,) = stranded_rows([Interval(0, 10, "H100", 6), Interval(5, 10, "H100", 4), Interval(0, 10, "L40S", 3)], PRICES)
    assert row["resource"] == "H100" and row["stage"] == "nodes"
    assert row["resource_seconds"] == pytest.approx(2 * 5 + 6 * 5)
    # the bill: 1 node x 5 s + 2 nodes x 5 s at $56/h, less the 6 x 10 + 4 x 5 GPU-seconds at $6/h
    assert row["usd"] == pytest.approx((56 * 5 + 2 * 56 * 5) / 3600 - (6 * 10 + 4 * 5) * 6 / 3600)


def test_nothing_beyond_the_gpus_when_billed_per_gpu_or_without_prices():
    assert stranded_rows([Interval(0, 10, "L40S", 3)], PRICES) == []
    assert stranded_rows([Interval(0, 10, "H100", 3)], None) == []
    (full,) = stranded_rows([Interval(0, 10, "H100", 8)], PRICES)
    assert full["resource_seconds"] == 0 and full["usd"] == pytest.approx((56 - 48) * 10 / 3600)
