"""What a cloud that bills whole nodes charges beyond the GPUs a run's deployments held.

The ledger and the plan price each deployment by its GPU-seconds. Where the price table bills an
accelerator per node (``accelerators.<type>.billing: node``), the bill is whole nodes: 6 GPUs
held on 8-GPU nodes cost a node, 9 cost two. This adds one row per such accelerator: the GPU-
seconds the held nodes carried beyond what the deployments held, and their dollars, so the
total is what the cloud bills. It assumes the run's deployments of one accelerator pack into as
few nodes as they need at every moment (Ray places them so, STRICT_PACK within a replica), the
cheapest the bill can be; the roles' deployments count with the models under test.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

from halluscope.cost.prices import PriceTable


class Interval(NamedTuple):
    """A deployment's time on the cluster: from its request to its release (``time.time()``
    seconds, or seconds into a plan), on ``units`` of ``resource``."""

    start: float
    end: float
    resource: str
    units: float
    model: str = "*"


def held_usd(prices: PriceTable | None, intervals: Iterable[Interval]) -> float:
    """The dollars of ``intervals`` at the price table's hourly rates (unpriced resources left out)."""
    if prices is None:
        return 0.0
    return math.fsum(prices.hours_usd(i.resource, (i.end - i.start) * i.units) or 0.0 for i in intervals)


def stranded_rows(intervals: Iterable[Interval], prices: PriceTable | None) -> list[dict]:
    """Ledger rows (stage "nodes", model "*", role "cluster") of the GPUs billed with the nodes
    but held by no deployment, per accelerator the price table bills per node."""
    if prices is None:
        return []
    events: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for start, end, resource, units, _ in intervals:
        billing = prices.accelerators.get(resource)
        if billing is not None and billing.billing == "node" and end > start:
            events[resource] += [(start, units), (end, -units)]
    rows = []
    for resource, evs in sorted(events.items()):
        per_node = prices.gpus_per_node(resource) or 1
        evs.sort()
        held, last, idle_s, usd = 0.0, evs[0][0], 0.0, 0.0
        for t, delta in evs:
            if held > 1e-9 and t > last:
                nodes_usd = prices.nodes_usd(resource, held, t - last) or 0.0
                usd += nodes_usd - (prices.hours_usd(resource, held * (t - last)) or 0.0)
                idle_s += (math.ceil(held / per_node - 1e-9) * per_node - held) * (t - last)
            held, last = max(0.0, held + delta), t
        rows.append({"model": "*", "role": "cluster", "task": "*", "stage": "nodes", "calls": 0,
                     "cached_calls": 0, "failed_calls": 0, "input_tokens": 0, "output_tokens": 0,
                     "resource": resource, "resource_seconds": idle_s, "usd": usd,
                     "note": f"whole {resource} nodes of {per_node} GPUs billed beyond the GPUs held"})
    return rows
