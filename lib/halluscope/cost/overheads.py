"""What a cloud bills around the served models' own work (``costs.overheads``): a deployment's
cold start (a fresh node's boot, its image pull, a weights download), the head and CPU pods of
the run's Ray cluster, and GPUs still held after the run's last model is given back.

The plan adds a cold start to each served model's start-up (so its window, the schedule and the
wall grow by it) and prices it as a line of its own; the head and CPU pods for the wall time
(the head until ``after_finish_s`` past it); and the last wave's GPUs until the autoscaler or the
cluster's deletion removes them, whichever comes first. The ledger measures what the run sees:
a deployment is billed from its request to its release, so its cold start is inside its own
time; the head and CPU pods from each attempt's pipeline start to end (``after_finish_s`` added,
assumed); the GPUs' time after the run is assumed, as the plan does, and marked so."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from halluscope.config.schema import Overheads
from halluscope.cost.nodes import Interval
from halluscope.cost.prices import PriceTable

HEAD = "(head and CPU pods)"  # the model name of their intervals in a run's held/ table


def cold_start_s(oh: Overheads, weights_gb: float, replicas: int) -> float:
    """Seconds a fresh deployment waits before its engine loads: the node's boot, the image pull,
    the weights download (``weights_gb``: serving.throughput.model_size's bytes) at the node's
    bandwidth (every replica's pod its own with a per-pod cache, as if they shared one node;
    once with a shared one)."""
    downloads = {"none": 0, "per_pod": replicas, "shared": 1}[oh.weights_cache]
    return oh.node_boot_s + oh.image_gb / oh.pull_gb_per_s + downloads * weights_gb / oh.weights_gb_per_s


def pods_cpus(oh: Overheads) -> float:
    """Cores the run's head and CPU worker pods hold."""
    return oh.head_cpus + oh.cpu_worker_cpus


def after_release_s(oh: Overheads) -> float:
    """How long a GPU given back at the run's end is still billed: until the autoscaler removes
    its idle node or the cluster is deleted, whichever comes first."""
    return min(oh.scale_down_s, oh.after_finish_s) if oh.after_finish_s else oh.scale_down_s


def ledger_rows(oh: Overheads, intervals: Iterable[Interval], last_wave: Iterable[tuple[str, float]],
                prices: PriceTable | None) -> list[dict]:
    """The ledger's rows of the pods (their ``HEAD`` intervals over every attempt, measured, and
    the head's ``after_finish_s``, assumed) and of the GPUs of ``last_wave`` (resource, units)
    billed after their release (assumed: the run has ended by then)."""
    measured = sum((i.end - i.start) * i.units for i in intervals if i.model == HEAD)
    rows = []
    if measured or oh.head_cpus * oh.after_finish_s:
        seconds = measured + oh.head_cpus * oh.after_finish_s
        rows.append(_row(HEAD, "pods", "CPU", seconds, prices,
                         f"{measured:,.0f} core-s measured over each attempt's pipeline; the head's "
                         f"{oh.after_finish_s:g} s after the end assumed"))
    tail: dict[str, float] = defaultdict(float)
    for resource, units in last_wave:
        tail[resource] += units * after_release_s(oh)
    rows += [_row("*", "after_release", r, s, prices, "assumed: the last wave's GPUs until the autoscaler or the "
                  "cluster's deletion removes them") for r, s in sorted(tail.items()) if s]
    return rows


def _row(model: str, stage: str, resource: str, seconds: float, prices: PriceTable | None, note: str) -> dict:
    usd = prices.hours_usd(resource, seconds) if prices is not None else None
    return {"model": model, "role": "cluster", "task": "*", "stage": stage, "calls": 0, "cached_calls": 0,
            "failed_calls": 0, "input_tokens": 0, "output_tokens": 0, "resource": resource,
            "resource_seconds": seconds, "usd": usd, "note": note}
