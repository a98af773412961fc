"""Endpoint saturation: can the pipeline keep a served model at its ceiling?

A scripted deployment answers each prompt in ``LATENCY_S`` with at most ``CAPACITY`` prompts in
progress, so its ceiling is CAPACITY / LATENCY_S calls/s. The pipeline's Generate stage (Ray
Data actors, several prompts per Serve request) sends it ``N_CALLS`` prompts; the baseline sends
the same prompts one HTTP request each from a pool of 32 threads, the way the reference
implementations call their judges.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pyarrow as pa
import ray

from halluscope import records
from halluscope.config.schema import Concurrency, ScriptedModel
from halluscope.pipeline import stages
from halluscope.serving.app import deploy_over_http, shutdown

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support: free_port
N_CALLS = 20_000
LATENCY_S = 0.1
CAPACITY = 40
CEILING = CAPACITY / LATENCY_S  # 400 calls/s
POOL = 32


def _spec() -> ScriptedModel:
    return ScriptedModel.model_validate({
        "id": "saturation-judge", "backend": "scripted",
        "params": {"latency_s": LATENCY_S, "capacity": CAPACITY, "default": "Yes",
                   "serve": {"num_cpus": 0.5, "max_ongoing_requests": 256, "max_batch_prompts": 20}}})


def _work(n: int) -> pa.Table:
    return pa.Table.from_pylist([{
        "gen_id": f"g{i}", "model": "saturation-judge", "task": "halogen/code", "item_id": str(i), "sample_idx": 0,
        "prompt": f"Claim: call {i}\nEvidence: none", "text": None, "input_tokens": None,
        "output_tokens": None, "latency_s": None, "attempts": None, "cached": False, "error": None}
        for i in range(n)], schema=records.WORK)


def pipeline_rate(spec: ScriptedModel, endpoints: dict, calls: int) -> tuple[float, int]:
    work = _work(calls)
    ds = ray.data.from_arrow([work.slice(i, 2000) for i in range(0, calls, 2000)])
    conc = Concurrency()  # the run defaults, as `halluscope run` would use them
    ds = ds.map_batches(stages.Generate, fn_constructor_args=([spec], endpoints, None, None, conc.generate_actors),
                        batch_format="pyarrow",
                        batch_size=conc.generate_batch_size, num_cpus=0.5,
                        compute=ray.data.ActorPoolStrategy(size=conc.generate_actors))
    t0 = time.perf_counter()
    answered = sum(r["text"] is not None for r in ds.select_columns(["text"]).take_all())
    return answered / (time.perf_counter() - t0), answered


def thread_pool_rate(base_url: str, calls: int) -> tuple[float, int]:
    client = httpx.Client(timeout=60, limits=httpx.Limits(max_connections=POOL))

    def call(i: int) -> bool:
        r = client.post(f"{base_url}/chat/completions",
                        json={"model": "saturation-judge",
                              "messages": [{"role": "user", "content": f"Claim: call {i}\nEvidence: none"}]})
        return r.status_code == 200

    t0 = time.perf_counter()
    with ThreadPoolExecutor(POOL) as pool:
        answered = sum(pool.map(call, range(calls)))
    client.close()
    return answered / (time.perf_counter() - t0), answered


def measure(calls: int = N_CALLS) -> list[dict]:
    from tests.support.servers import free_port

    ray.init(address="local", num_cpus=8, object_store_memory=512 * 1024 * 1024, include_dashboard=False,
             log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    spec = _spec()
    endpoints = deploy_over_http([spec], free_port())  # not Serve's 8000, which another Ray may hold
    try:
        pipe, pipe_n = pipeline_rate(spec, endpoints, calls)
        pool, pool_n = thread_pool_rate(endpoints[spec.id].base_url, calls)
    finally:
        shutdown(endpoints)
        ray.shutdown()
    assert pipe_n == pool_n == calls, (pipe_n, pool_n)
    return [
        {"name": "serve_saturation_pipeline", "value": round(pipe, 1), "unit": "calls/s",
         "baseline": f"endpoint ceiling ({CAPACITY} prompts at once / {LATENCY_S} s)", "baseline_value": CEILING,
         "ratio": round(pipe / CEILING, 3)},
        {"name": "serve_saturation_thread_pool", "value": round(pool, 1), "unit": "calls/s",
         "baseline": f"endpoint ceiling; {POOL} threads, one prompt per HTTP request", "baseline_value": CEILING,
         "ratio": round(pool / CEILING, 3)},
    ]


if __name__ == "__main__":
    import argparse
    import json

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--calls", type=int, default=N_CALLS, help="prompts sent each way")
    p.add_argument("--json", action="store_true", help="print the records as one JSON line last")
    args = p.parse_args()
    results = measure(args.calls)
    print(json.dumps(results) if args.json else "\n".join(map(str, results)))
