"""`make bench`, many models: 12 served models under test of mixed sizes (TP1, TP2, TP4) on 16
simulated GPUs over a HALOGEN + HalluLens slice, beside the plan of the same config.

The run starts a local Ray declaring 17 logical GPUs: 16 for the models under test, one for the
scripted judge the run serves on a GPU of its own (``cluster.gpus`` 17, less the judge). Each
model is a scripted stand-in that holds its GPUs per replica, loads for ``load_s`` and produces
``tokens_per_s`` output tokens a second over all its requests (continuous batching), so its time
depends on its load; time is compressed (a model generates for five to eleven minutes).

Measured from the run's manifest (each deployment's requested, ready, generated and released
times) and ledger:
- makespan: first deployment requested to last released, beside the lower bound max(total
  GPU-work / 16, the longest model's generation), GPU-work = GPUs x generating seconds;
- idle share: held GPU-seconds in which a model under test was not generating (pending, loading,
  being given back) over all its held GPU-seconds;
- plan error: the plan's makespan and total dollars against the measured ones.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from halluscope.pipeline.plan_view import Plan

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support: the HalluLens source tables of the test suite
GPUS = 16
# (id, tensor parallel GPUs, words per answer, tokens/s per replica): each generates 188 answers
# (180 code prompts, 8 HalluLens names), i.e. 9,400 or 4,700 tokens: about 650 s for the TP4
# models, 300 s for the others, so the TP1 models, which start when the TP2 ones end, finish with
# the TP4 ones. A deployment's start here is the modelled load plus Serve starting a replica
# process (10-40 s on 2 cores with several at once): small beside the generation, as a weights
# load is beside hours of generation on a real cluster.
MODELS = [*((f"llama-70b-{c}", 4, 50, 14.5) for c in "ab"),
          *((f"qwen-14b-{c}", 2, 25, 15.7) for c in "abcd"),
          *((f"llama-8b-{c}", 1, 25, 15.7) for c in "abcdef")]
CODE_ITEMS = 180
LOAD_S = 3.0
PRICES = """schema_version: 1
currency: USD
as_of: "2025-07-01"
source: the H100 list price of cluster/prices.yaml, for the simulated GPUs
gpu_hour_usd:
  GPU: 6.88
api_usd_per_million_tokens: {}
"""


def _testset(tmp: Path) -> str:
    from tests.support.hallulens_sources import write_tables

    from halluscope.hallulens.nonexistent import MixedEntitiesConfig, build_mixed_testset
    from halluscope.hallulens.sources import load_itis, load_medicines
    from halluscope.storage.fs import Location

    hierarchy, longnames, medicines = write_tables(tmp)
    root = Location.from_url(f"file://{tmp}/testsets")
    ts = build_mixed_testset(root, MixedEntitiesConfig(seed=3, per_domain=4, domains=["animal", "medicine"]),
                             load_itis(str(hierarchy), str(longnames)), load_medicines(str(medicines)))
    return f"{root.url}/mixed_entities/{ts.testset_id}"


def config(tmp: Path, models: list[tuple[str, int, int, float]], items: int, speedup: float) -> dict:
    """The run's config; ``speedup``: the stand-ins' loads that many times shorter, their rates that
    many times higher (the same paths in less wall time)."""
    (tmp / "prices.yaml").write_text(PRICES)
    # 8 answers in flight: a request waits at most 8 x 50 / 14.5 = 28 s, within the client's 60 s
    serve = {"num_cpus": 0, "max_ongoing_requests": 4, "max_batch_prompts": 2}
    tested = [{"id": mid, "backend": "scripted", "params": {
        "default": "import numpy " + "x " * (words - 2), "tokens_per_s": rate * speedup, "load_s": LOAD_S / speedup,
        "serve": {**serve, "num_gpus": gpus}}} for mid, gpus, words, rate in models]
    judge = {"id": "judge", "role": "judge", "backend": "scripted", "params": {
        "serve": {**serve, "num_gpus": 1, "max_ongoing_requests": 16}, "rules": [
            {"pattern": "is_knowledgeable", "response": '{"is_knowledgeable": true}'},
            {"pattern": "does_believe", "response": '{"does_believe": false}'}]}}
    return {"storage": {"root": f"file://{tmp}/runs"}, "tasks": ["halogen/code", "hallulens/nonexistent_mixed"],
            "testsets": {"hallulens/nonexistent_mixed": [_testset(tmp)]},
            "models": [*tested, judge], "limits": {"max_items_per_task": items},
            "cluster": {"gpus": GPUS + 1}, "ray": {"num_gpus": GPUS + 1},
            "costs": {"price_table": str(tmp / "prices.yaml")}, "cache": {"enabled": False},
            "concurrency": {"batch_size": 256, "generate_batch_size": 256}}


def against_plan(manifest: dict, costs: list[dict], estimate: Plan, gpus: float) -> dict:
    """A run's waves as measured (deployments' times in the manifest, dollars in the ledger) beside
    its plan: makespan, the lower bound max(GPU-work / ``gpus``, the longest model), the errors."""
    deployments = manifest["schedule"]["deployments"]
    start = min(d["requested_at"] for d in deployments)
    makespan = max(d["released_at"] for d in deployments) - start
    busy = {d["model"]: d["generated_at"] - d["ready_at"] for d in deployments}
    work = math.fsum(d["units"] * busy[d["model"]] for d in deployments)
    usd = math.fsum(r["usd"] for r in costs if r["usd"] is not None)
    planned = estimate.schedule_dict()
    return {"start": start, "busy": busy, "work": work, "makespan_s": makespan,
            "lower_bound_s": max(work / gpus, max(busy.values())), "plan": planned, "plan_usd": estimate.total_usd,
            "usd": usd, "errors": {"makespan": abs(planned["makespan_s"] - makespan) / makespan,
                                   "usd": abs(estimate.total_usd - usd) / usd}}


def measure(models: list[tuple[str, int, int, float]], items: int, speedup: float) -> dict:
    from halluscope.config.load import parse_config
    from halluscope.pipeline.estimate import plan
    from halluscope.pipeline.runner import run
    from halluscope.resolve.run import ResolvedRun
    from halluscope.storage.fs import Location
    from halluscope.storage.run import RunStore

    with tempfile.TemporaryDirectory(prefix="many-models-") as folder:
        tmp = Path(folder)
        cfg = parse_config(config(tmp, models, items, speedup))
        estimate = plan(ResolvedRun.of(cfg))
        result = run(ResolvedRun.of(cfg), run_id="many", progress=False)
        store = RunStore(Location.from_url(cfg.storage.root), "many")
        manifest = store.read_json("manifest.json") or {}
        costs = store.read_table_file("costs.parquet").to_pylist()
    deployments = manifest["schedule"]["deployments"]
    m = against_plan(manifest, costs, estimate, GPUS)
    start, busy, work = m.pop("start"), m.pop("busy"), m.pop("work")
    held = math.fsum(d["units"] * (d["released_at"] - d["requested_at"]) for d in deployments)
    return {**m, "status": manifest["status"], "processed": result.processed, "idle_share": 1 - work / held,
            "ids_once": _ids_once(result, manifest),
            "deployments": [{k: d[k] for k in ("model", "units", "wave")} | {
                "deploy_s": round(d["ready_at"] - d["requested_at"], 2), "generate_s": round(busy[d["model"]], 2),
                "release_s": round(d["released_at"] - d["generated_at"], 2),
                "start_s": round(d["requested_at"] - start, 2)} for d in deployments]}


def _ids_once(result: object, manifest: dict) -> bool:
    counts = manifest["counts"]
    return counts["processed"] == counts["generations"] and not counts["uncommitted_parts_removed"]


def records(m: dict) -> list[dict]:
    what = (f"{len(m['deployments'])} models (TP1/TP2/TP4) on {GPUS} simulated GPUs, "
            "HALOGEN code + HalluLens mixed entities")
    return [
        {"name": "many_models_makespan", "value": round(m["makespan_s"], 1), "unit": "s",
         "baseline": f"lower bound max(GPU-work / {GPUS}, longest model); {what}",
         "baseline_value": round(m["lower_bound_s"], 1), "ratio": round(m["makespan_s"] / m["lower_bound_s"], 3)},
        {"name": "many_models_idle_gpu_share", "value": round(m["idle_share"], 4), "unit": "share",
         "baseline": "target: at most 0.15 of held GPU-seconds idle (pending, loading, given back)",
         "baseline_value": 0.15, "ratio": round(m["idle_share"] / 0.15, 3)},
        {"name": "many_models_plan_error", "value": round(max(m["errors"].values()), 4), "unit": "relative error",
         "baseline": (f"plan makespan {m['plan']['makespan_s']:.1f} s vs {m['makespan_s']:.1f} s, plan "
                      f"${m['plan_usd']:.4f} vs ledger ${m['usd']:.4f}; target 0.15"),
         "baseline_value": 0.15, "ratio": round(max(m["errors"].values()) / 0.15, 3)},
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--models", type=int, default=len(MODELS), help="the first N of the 12 models")
    p.add_argument("--items", type=int, default=CODE_ITEMS, help="items per task (code prompts, HalluLens names)")
    p.add_argument("--speedup", type=float, default=1.0,
                   help="the models' loads this many times shorter and their token rates this many times higher: "
                        "the same paths in less wall time, for the test suite's smallest size")
    p.add_argument("--json", action="store_true", help="print the records as one JSON line last")
    args = p.parse_args()
    m = measure(MODELS[:args.models], args.items, args.speedup)
    print(json.dumps({k: v for k, v in m.items() if k != "plan"} | {"waves": m["plan"]["waves"]}, indent=1))
    if args.json:
        print(json.dumps(records(m)))


if __name__ == "__main__":
    main()
