"""`make bench`, cluster layouts: served models under test on a simulated multi-node cluster, the
shared RayService's GPUs placed first, in the layouts an operator of 8-GPU nodes chooses from.

Each layout is a Ray cluster of its own on this machine (``ray.cluster_utils.Cluster``: a head
for the pipeline's actors and N nodes declaring 8 logical GPUs each). Where the RayService holds
the judge (TP4) and the extractor (TP8) of serve/*.yaml, each in a pod of 8 GPUs as on
Kubernetes, stand-in actors hold those whole nodes, and a stand-in judge engine (a scripted Serve
app) answers the run's role calls over HTTP, as the RayService would, at its own prefill and
decode rates on the calls' real token counts; the models under test are scripted stand-ins that
hold their GPUs per replica, wait an injected cold start, load for ``load_s`` and produce
``tokens_per_s``: two TP4 and four TP2, each generating for about two minutes at the default
size. Every run is billed as the cluster would bill it: the models' windows, the shared service
for the run's wall, the head and CPU pods, the GPUs after their release (``costs.overheads``).

- 2 x 8, the RayService first: the plan and the submit check refuse the run before anything
  starts, with the nodes in the message;
- 2 x 8, judge and extractor served by the run instead: the run completes;
- 3 x 8, the RayService first: the run's pod takes the third node;
- 4 x 8 under a quota of 16 GPUs (cluster.gpus), the RayService first.

Records: ``layout_refused_correctly``; ``layout_makespan_ratio`` (each layout's makespan over
its lower bound, max(GPU-work / the run's GPUs, the longest model)); ``layout_plan_error`` (the
plan's makespan and its models' windows in dollars against the run's, the worst layout);
``bill_plan_error`` (per layout: the plan's total against the run's ledger, the plan made before
the run as a user makes it, from the config, ``calibrate --throughput`` of the service's engine
and a pilot run's call sizes; the stand-ins' rates and cold starts are the bench's, not the
shipped throughput table's or the config's overheads, so the two cannot agree by construction);
``resume_redeploys`` (per
layout, on the same cluster: `halluscope run` killed once a wave's models have generated and
resubmitted; how many of those it deploys again, 0 wanted); ``transient_rows_recovered`` (per
layout: rows failed by injected 503s and timeouts and by a replica killed mid-wave, and how many
of them one resubmission after the outage gives a verdict, all wanted, every id once).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support: free ports; bench.many_models: the simulated GPUs' price
SERVICE = [str(REPO / "serve" / "judge-llama-3.1-70b.yaml"), str(REPO / "serve" / "extractor-llama-3.1-405b-fp8.yaml")]
GPUS_PER_NODE = 8
# (id, tensor parallel GPUs, words per answer, tokens/s per replica): each generates for the same
# time, so every layout's models pack its GPUs exactly (two TP4 and two TP2 fill 8 GPUs twice) and
# the lower bound is one a schedule can reach, but for the waves' deployment starts
MODELS = [*((f"tp4-{c}", 4, 40, 20.0) for c in "ab"), *((f"tp2-{c}", 2, 20, 10.0) for c in "abcd")]
ITEMS = 18  # per task: each model generates 36 answers
LOAD_S = 2.0
# the run's tasks: the code prompts make no role call; the historical events make one judge call
# per answer, the shared service's load
TASKS = ["halogen/code", "halogen/historical_events"]
PILOT_ITEMS = 2  # items per task of the pilot run whose call sizes the plan reads
# the stand-in judge engine (one replica): its own rates, unlike the shipped table's, which the
# plan learns only by calibrating it
JUDGE_ENGINE = {"prefill_tokens_per_s": 150.0, "tokens_per_s": 30.0}
# costs.overheads as an operator states them: a fresh node boots in 2 s and pulls a 2 GB image at
# 2 GB/s, so a deployment waits 3 s first; the pods and the GPUs' time after the run
OVERHEADS = {"head_cpus": 2, "cpu_worker_cpus": 2, "node_boot_s": 2.0, "image_gb": 2.0, "pull_gb_per_s": 2.0,
             "scale_down_s": 10.0, "after_finish_s": 30.0}
# what each deployment waits instead: the stated 3 s times a factor drawn per model (seeded) from
# this range, as boots and pulls vary on a real cloud
COLD_START_SPREAD = (0.8, 1.3)
# the simulated GPUs at the H100 list price, and a CPU core at an on-demand m7i vCPU's
PRICES = """schema_version: 1
currency: USD
as_of: "2025-07-01"
source: the H100 list price of cluster/prices.yaml for the simulated GPUs; m7i.xlarge on demand / 4 for a core
gpu_hour_usd:
  GPU: 6.88
  CPU: 0.0504
api_usd_per_million_tokens: {}
"""
SERVICE_NAME = "halluscope-serve"
# the model the stand-in judge answers as: the name serve/judge-llama-3.1-70b.yaml serves
JUDGE_MODEL = "llama-3.1-70b-instruct"
# the fault drill's outage: shares of calls answered with HTTP 503 and never answered (a row fails
# when all 4 of its attempts do: 0.9^4, about two rows in three)
FAULTS = {"error_rate": 0.7, "timeout_rate": 0.2}
# what runs on a layout's cluster after its measured run: a killed driver resubmitted, and an outage
DRILLS = ("resume", "faults")
# name -> (nodes, the RayService holds the first ones, cluster.gpus quota)
LAYOUTS = {"2x8-service": (2, True, None), "2x8-roles-in-run": (2, False, None),
           "3x8-service": (3, True, None), "4x8-quota-16": (4, True, 16)}


@dataclass(frozen=True)
class Size:
    """What runs on each layout: the first ``models`` of ``MODELS`` on ``items`` prompts of each
    of ``tasks``, every modelled time (the stand-ins' cold starts, loads and tokens, the judge
    engine's, the overheads') ``speedup`` times shorter: the same paths in less wall time."""

    items: int
    models: int
    tasks: tuple[str, ...]
    speedup: float

    def overheads(self) -> dict:
        """``OVERHEADS`` with its times divided by ``speedup`` (its pull rate multiplied)."""
        faster = {k: OVERHEADS[k] / self.speedup for k in ("node_boot_s", "scale_down_s", "after_finish_s")}
        return {**OVERHEADS, **faster, "pull_gb_per_s": OVERHEADS["pull_gb_per_s"] * self.speedup}

    def engine_rates(self) -> dict:
        """``JUDGE_ENGINE``'s rates times ``speedup``."""
        return {k: v * self.speedup for k, v in JUDGE_ENGINE.items()}


def config(tmp: Path, layout: str, size: Size, address: str | None = None,
           judge_url: str = "http://127.0.0.1:9/v1", throughput: Path | None = None) -> dict:
    """The layout's run config; ``judge_url``: the stand-in service's judge (where the RayService
    holds it), ``throughput``: the table a calibration wrote."""
    import random

    nodes, service, quota = LAYOUTS[layout]
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "prices.yaml").write_text(PRICES)
    stated = OVERHEADS["node_boot_s"] + OVERHEADS["image_gb"] / OVERHEADS["pull_gb_per_s"]
    rng = random.Random(7)
    serve = {"num_cpus": 0, "max_ongoing_requests": 4, "max_batch_prompts": 2}

    def stand_in(params: dict, gpus: int) -> dict:
        cold_start = stated * rng.uniform(*COLD_START_SPREAD) / size.speedup
        return {**params, "load_s": LOAD_S / size.speedup, "cold_start_s": round(cold_start, 2),
                "serve": {**serve, "num_gpus": gpus}}

    tested = [{"id": mid, "backend": "scripted", "params": stand_in(
        {"default": "import numpy " + "x " * (words - 2), "tokens_per_s": rate * size.speedup}, gpus)}
        for mid, gpus, words, rate in MODELS[:size.models]]
    if service:
        roles = [{"id": "judge", "role": "judge", "backend": "openai",
                  "params": {"base_url": judge_url, "model": JUDGE_MODEL, "max_concurrency": 16}}]
    else:
        roles = [{"id": role, "role": role, "backend": "scripted",
                  "params": stand_in({"default": "No.", **size.engine_rates()}, gpus)}
                 for role, gpus in (("judge", 4),)]
    cluster = {"nodes": [{"name": "gpu", "count": nodes, "gpus": GPUS_PER_NODE, "accelerator": "H100"}],
               **({"pod_gpus": GPUS_PER_NODE, "service": SERVICE} if service else {}),
               **({"gpus": quota} if quota else {})}
    costs = {"price_table": str(tmp / "prices.yaml"), "overheads": size.overheads(),
             **({"throughput_table": str(throughput)} if throughput else {}),
             # the RayService's two pods, billed for the run's wall time
             **({"shared_services": [{"name": SERVICE_NAME, "models": ["judge"], "resource": "GPU",
                                      "gpus": 2 * GPUS_PER_NODE}]} if service else {})}
    return {"storage": {"root": f"file://{tmp}/runs"}, "tasks": list(size.tasks),
            "models": [*tested, *roles], "limits": {"max_items_per_task": size.items}, "cluster": cluster,
            "costs": costs, "cache": {"enabled": False},
            "concurrency": {"batch_size": 64, "generate_batch_size": 64, "verify_actors": 1},
            **({"ray": {"address": address}} if address else {})}


def judge_engine(size: Size) -> str:
    """Deploy the stand-in of the RayService's judge engine (the GPUs are its pods') over HTTP, as
    the RayService serves it; its base URL."""
    from tests.support.servers import free_port

    from halluscope.config.schema import ScriptedModel
    from halluscope.serving.app import deploy_over_http

    spec = ScriptedModel.model_validate({"id": "judge-engine", "backend": "scripted", "params": {
        "default": "No.", **size.engine_rates(), "serve": {"num_cpus": 0, "max_ongoing_requests": 64}}})
    url = deploy_over_http([spec], free_port(), scope="service")[spec.id].base_url
    assert url is not None
    return url


def refused(tmp: Path, layout: str, size: Size) -> str | None:
    """The message plan and submit's check give, None when both let the layout through."""
    from halluscope.config.load import parse_config
    from halluscope.errors import ConfigError
    from halluscope.pipeline.estimate import plan
    from halluscope.resolve.cluster import check_layout
    from halluscope.resolve.run import ResolvedRun

    cfg = parse_config(config(tmp, layout, size))
    messages = []
    for check in (lambda: check_layout(cfg), lambda: plan(ResolvedRun.of(cfg, cache=None))):
        try:
            check()
        except ConfigError as err:
            messages.append(str(err))
    return messages[0] if len(messages) == 2 and messages[0] == messages[1] else None


def measure(tmp: Path, layout: str, size: Size, drills: Sequence[str] = DRILLS) -> dict:
    """One run of the layout on a Ray cluster of its own, against the plan a user makes first: a
    calibration of the service's engine (where the RayService holds one), a pilot run, the plan.
    At ``size.items`` <= ``PILOT_ITEMS`` the pilot would be the run itself (the same config at the
    same items, scripted answers), so the run is its own pilot: its call sizes are the plan's."""
    import ray
    from bench.many_models import against_plan
    from ray import serve
    from ray.cluster_utils import Cluster

    from halluscope.config.load import parse_config
    from halluscope.pipeline.engine_speed import calibrate_speed, write_table
    from halluscope.pipeline.estimate import plan
    from halluscope.pipeline.runner import run
    from halluscope.pipeline.token_stats import TokenStats
    from halluscope.resolve.cluster import layout as run_layout
    from halluscope.resolve.run import ResolvedRun
    from halluscope.storage.fs import Location
    from halluscope.storage.run import RunStore

    nodes, service, _ = LAYOUTS[layout]
    # Ray's API server without the dashboard's modules: nothing here reads them, and they load and poll
    # on the cores the layout's runs are measured on
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "num_gpus": 0, "include_dashboard": False})
    try:
        for i in range(nodes):
            cluster.add_node(num_cpus=1, num_gpus=GPUS_PER_NODE, resources={f"gpu-{i}": 1})
        doc = config(tmp, layout, size, cluster.address)
        ray.init(address=cluster.address)
        # the RayService's pods: whole nodes, where the layout placed them, and its judge engine
        placed = run_layout(parse_config(doc))
        assert placed is not None
        held = [ray.remote(num_gpus=GPUS_PER_NODE, resources={m.name: 0.01})(_Pod).remote()
                for m in placed.machines if any(r.owner == "service" for r in m.ray_nodes)]
        ray.get([h.ready.remote() for h in held])
        judge_url = judge_engine(size) if service else "http://127.0.0.1:9/v1"
        throughput = None
        if service:  # `halluscope calibrate --throughput`: the service's engine measured where the run calls it
            throughput = tmp / "throughput.yaml"
            measured = parse_config(config(tmp, layout, size, cluster.address, judge_url))
            write_table(calibrate_speed(ResolvedRun.of(measured))[0], throughput)
        doc = config(tmp, layout, size, cluster.address, judge_url, throughput)
        cfg = parse_config(doc)
        # a pilot of the config (`halluscope run --max-items-per-task`), whose call sizes the plan reads
        pilot = "pilot" if size.items > PILOT_ITEMS else layout
        if pilot == "pilot":
            pilot_cfg = parse_config({**doc, "limits": {"max_items_per_task": PILOT_ITEMS}})
            run(ResolvedRun.of(pilot_cfg), run_id=pilot, progress=False)
        result = run(ResolvedRun.of(cfg), run_id=layout, progress=False)
        stats = TokenStats.from_runs([f"{cfg.storage.root}/{pilot}"], cfg.storage)
        estimate = plan(ResolvedRun.of(cfg, cache=None), stats)
        store = RunStore(Location.from_url(cfg.storage.root), layout)
        manifest = store.read_json("manifest.json") or {}
        costs = store.read_table_file("costs.parquet").to_pylist()
        drill = resume_drill(tmp / "resume", layout, size, cluster.address, judge_url) if "resume" in drills else None
        faults = fault_drill(tmp / "faults", layout, size, cluster.address, judge_url) if "faults" in drills else None
    finally:
        serve.shutdown()  # Serve keeps its client in the process: the next layout's cluster is another
        ray.shutdown()
        cluster.shutdown()
    run_gpus = estimate.budget["GPU"] if estimate.budget else float(nodes * GPUS_PER_NODE)
    m = against_plan(manifest, costs, estimate, run_gpus)
    tested = {mid for mid, *_ in MODELS[:size.models]}
    windows = bill_lines(estimate.rows, costs, tested)
    planned, billed = windows["plan"]["models under test"], windows["ledger"]["models under test"]
    m["errors"]["usd"] = abs(planned - billed) / billed
    return {"layout": layout, "status": manifest["status"], "processed": result.processed, "run_gpus": run_gpus,
            "makespan_s": m["makespan_s"], "lower_bound_s": m["lower_bound_s"],
            "plan_makespan_s": m["plan"]["makespan_s"], "usd": m["usd"], "plan_usd": m["plan_usd"],
            "plan_wall_s": (estimate.wall_hours or 0.0) * 3600, "wall_s": _pipeline_s(manifest),
            "bill": windows, "calibrated": throughput is not None, "pilot": pilot,
            "waves": m["plan"]["waves"], "errors": m["errors"], "resume": drill, "faults": faults}


# the lines of a bill, by the stage of a plan's or a ledger's row
LINES = {"serve": "models", "generate": "models", "abstain": "models", "decompose": "models", "verify": "models",
         "idle": "models", "cold_start": "models", "shared": "service", "pods": "pods",
         "after_release": "after release"}


def bill_lines(planned: Sequence, ledger: Sequence[dict], tested: set[str]) -> dict[str, dict[str, float]]:
    """The plan's and the ledger's dollars per line of the bill: the served models' windows
    (the models under test's alone, for layout_plan_error), the shared service, the head and
    CPU pods, the GPUs after their release."""
    out: dict[str, dict[str, float]] = {"plan": {}, "ledger": {}}
    for side, rows in (("plan", [(r.stage, r.role, r.model, r.usd) for r in planned]),
                       ("ledger", [(r["stage"], r["role"], r["model"], r["usd"]) for r in ledger])):
        for stage, role, model, usd in rows:
            line = "service" if role == "service" else LINES[stage]
            if usd:
                out[side][line] = out[side].get(line, 0.0) + usd
                if line == "models" and model in tested:
                    out[side]["models under test"] = out[side].get("models under test", 0.0) + usd
    return out


def _pipeline_s(manifest: dict) -> float:
    """The run's own time, from its manifest: created to finished."""
    import datetime as dt

    return (dt.datetime.fromisoformat(manifest["finished_at"]) - dt.datetime.fromisoformat(manifest["created_at"])
            ).total_seconds()


def resume_drill(tmp: Path, layout: str, size: Size, address: str, judge_url: str) -> dict:
    """The same layout's run driven by `halluscope run`, its driver SIGKILLed once a wave's models
    have generated (before the last one has), then resubmitted under the same run id: which of the
    models that had finished the resubmission deploys again (none should be)."""
    from tests.support.configs import config_yaml
    from tests.support.drills import Driver

    from halluscope.models.staged import read_staged
    from halluscope.pipeline.generation import staged_location
    from halluscope.storage.fs import Location
    from halluscope.storage.run import RunStore

    doc = config(tmp, layout, size, address, judge_url)
    (tmp / "run.yaml").write_text(config_yaml(doc))
    store = RunStore(Location.from_url(doc["storage"]["root"]), "resume")
    tested = [m["id"] for m in doc["models"] if m.get("role", "test") == "test"]

    def finished() -> list[str]:
        return [m for m in tested
                if read_staged(staged_location(store.loc, m), ["gen_id"]).num_rows >= size.items]

    first = Driver(tmp / "run.yaml", "resume", tmp / "first.log")
    second = None
    try:
        deadline = time.time() + 600
        while not (done := finished()):
            if first.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the first driver ended or stalled before a model finished:\n{first.tail()}")
            time.sleep(0.05)
        first.kill()
        second = Driver(tmp / "run.yaml", "resume", tmp / "second.log")
        if second.proc.wait(timeout=900) != 0:
            raise RuntimeError(f"the resubmitted driver failed:\n{second.tail()}")
    finally:
        first.kill()
        if second is not None:
            second.kill()
    manifest = store.read_json("manifest.json") or {}
    deployed = [d["model"] for d in manifest.get("schedule", {}).get("deployments", [])]
    return {"finished_before_kill": done, "models": len(tested), "redeployed": [m for m in deployed if m in done],
            "deployed_after": deployed, "status": manifest.get("status")}


def fault_drill(tmp: Path, layout: str, size: Size, address: str, judge_url: str) -> dict:
    """The layout's run while its models under test (answering at once here) are in an outage:
    each call answers HTTP 503 (``FAULTS``' error share) or never (its timeout share, a 1 s
    timeout), drawn per prompt and attempt, and the first model's replica process is SIGKILLed
    once it is up. Rows whose every attempt failed are committed with a transient error; the same
    run id resubmitted once the outage is over must give every row a verdict, every id once."""
    import threading

    from halluscope.config.load import parse_config
    from halluscope.pipeline.runner import run
    from halluscope.records import transient_error
    from halluscope.resolve.run import ResolvedRun
    from halluscope.serving.app import app_name_for
    from halluscope.storage.fs import Location
    from halluscope.storage.run import RunStore

    def config_until(until: float) -> dict:
        doc = config(tmp, layout, size, address, judge_url) | {"max_error_fraction": 1.0}
        for seed, m in enumerate(m for m in doc["models"] if m.get("role", "test") == "test"):
            # answering at once (no modelled throughput), so the 1 s timeout catches only the hangs
            del m["params"]["tokens_per_s"]
            m["params"] |= {**FAULTS, "request_timeout_s": 1.0, "faults_until": until, "seed": seed}
        return doc

    doc = config_until(time.time() + 3600)
    store = RunStore(Location.from_url(doc["storage"]["root"]), "faults")
    first = next(m["id"] for m in doc["models"] if m.get("role", "test") == "test")
    killed: list[int] = []
    killer = threading.Thread(target=lambda: killed.extend(_kill_replica(app_name_for(first, "faults"))), daemon=True)
    killer.start()
    run(ResolvedRun.of(parse_config(doc)), run_id="faults", progress=False)
    failed = sum(map(transient_error, store.read_table("scores", ["error"]).column("error").to_pylist()))
    run(ResolvedRun.of(parse_config(config_until(time.time()))), run_id="faults", progress=False)  # the outage is over
    scores = store.read_table("scores", ["gen_id", "error"]).to_pylist()
    ids = [r["gen_id"] for r in scores]
    return {"rows": len(scores), "failed": failed, "without_verdict": sum(r["error"] is not None for r in scores),
            "ids_once": len(ids) == len(set(ids)), "killed_replica": bool(killed)}


def _kill_replica(app: str, timeout_s: float = 120) -> list[int]:
    """SIGKILL the process of a replica of the Serve app once it runs (its title is
    ``ray::ServeReplica:<app>:...``): an engine lost mid-wave. Returns the pid, or nothing."""
    import os
    import signal

    title = f"ray::ServeReplica:{app}:".encode()
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        for pid in (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()):
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(title):
                    os.kill(pid, signal.SIGKILL)
                    return [pid]
            except OSError:
                continue
        time.sleep(0.05)
    return []


class _Pod:
    """A RayService pod's GPUs, held for the layout's run."""

    def ready(self) -> bool:
        return True


def records(message: str | None, runs: list[dict]) -> list[dict]:
    out = [{"name": "layout_refused_correctly", "value": int(message is not None and "The nodes: 2 nodes" in message),
            "unit": "bool", "baseline": message or "not refused", "baseline_value": 1,
            "ratio": int(message is not None)}]
    for r in runs:
        out.append({"name": "layout_makespan_ratio", "value": round(r["makespan_s"], 1), "unit": "s",
                     "baseline": f"{r['layout']}: lower bound max(GPU-work / {r['run_gpus']:g}, longest model); "
                                 f"status {r['status']}, waves {r['waves']}",
                     "baseline_value": round(r["lower_bound_s"], 1),
                     "ratio": round(r["makespan_s"] / r["lower_bound_s"], 3)})
    for r in (r for r in runs if r["resume"] is not None):
        d = r["resume"]
        out.append({"name": "resume_redeploys", "value": len(d["redeployed"]), "unit": "models",
                    "baseline": f"{r['layout']}: a driver killed once {', '.join(d['finished_before_kill'])} of "
                                f"{d['models']} had generated, resubmitted (status {d['status']}; deployed "
                                f"{', '.join(d['deployed_after']) or 'none'}); none to deploy again",
                    "baseline_value": 0, "ratio": round(len(d["redeployed"]) / len(d["finished_before_kill"]), 3)})
    for r in (r for r in runs if r["faults"] is not None):
        f = r["faults"]
        out.append({"name": "transient_rows_recovered", "value": f["failed"] - f["without_verdict"], "unit": "rows",
                    "baseline": f"{r['layout']}: rows failed by injected 503s and timeouts"
                                f"{' and a replica killed mid-wave' if f['killed_replica'] else ''} of {f['rows']}; "
                                f"after one resubmission {f['without_verdict']} without a verdict, every id once: "
                                f"{f['ids_once']}",
                    "baseline_value": f["failed"],
                    "ratio": round((f["failed"] - f["without_verdict"]) / f["failed"], 3) if f["failed"] else None})
    worst = max(runs, key=lambda r: max(r["errors"].values()))
    error = max(worst["errors"].values())
    windows = {k: v["models under test"] for k, v in worst["bill"].items()}
    out.append({"name": "layout_plan_error", "value": round(error, 4), "unit": "relative error",
                "baseline": (f"worst of {len(runs)} layouts, {worst['layout']}: plan makespan "
                             f"{worst['plan_makespan_s']:.1f} s vs {worst['makespan_s']:.1f} s, the models' windows "
                             f"planned ${windows['plan']:.4f} vs ledger ${windows['ledger']:.4f}; target 0.15"),
                "baseline_value": 0.15, "ratio": round(error / 0.15, 3)})
    for r in runs:
        error = abs(r["plan_usd"] - r["usd"]) / r["usd"]
        lines = "; ".join(f"{line} ${r['bill']['plan'].get(line, 0.0):.4f} vs ${usd:.4f}"
                          for line, usd in sorted(r["bill"]["ledger"].items()) if line != "models under test")
        out.append({"name": "bill_plan_error", "value": round(error, 4), "unit": "relative error",
                    "baseline": (f"{r['layout']}: plan ${r['plan_usd']:.4f} vs ledger ${r['usd']:.4f} (plan wall "
                                 f"{r['plan_wall_s']:.1f} s vs run {r['wall_s']:.1f} s; "
                                 f"{'service engine calibrated, ' if r['calibrated'] else ''}call sizes from "
                                 f"{'a pilot' if r['pilot'] == 'pilot' else 'the run, its own pilot'}); by line, "
                                 f"plan vs ledger: {lines}; target 0.10"),
                    "baseline_value": 0.10, "ratio": round(error / 0.10, 3)})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--layouts", nargs="+", default=[k for k in LAYOUTS if k != "2x8-service"],
                   choices=[k for k in LAYOUTS if k != "2x8-service"], help="the layouts to run")
    p.add_argument("--items", type=int, default=ITEMS, help="prompts per task and model")
    p.add_argument("--models", type=int, default=len(MODELS), choices=range(1, len(MODELS) + 1),
                   help="the first N models under test (two TP4 first, then the TP2 ones)")
    p.add_argument("--tasks", nargs="+", default=TASKS, choices=TASKS, help="the run's tasks (default: both)")
    p.add_argument("--drills", nargs="*", default=list(DRILLS), choices=DRILLS,
                   help="the drills run on each layout's cluster after its measured run (default: both)")
    p.add_argument("--speedup", type=float, default=1.0,
                   help="every modelled time this many times shorter (the stand-ins' cold starts, loads and token "
                        "rates, the judge engine's rates, the overheads' boot, pull and billed times): the same "
                        "paths in less wall time, for the test suite's smallest size")
    p.add_argument("--json", action="store_true", help="print the records as one JSON line last")
    args = p.parse_args()
    size = Size(args.items, args.models, tuple(args.tasks), args.speedup)
    with tempfile.TemporaryDirectory(prefix="layouts-") as folder:
        message = refused(Path(folder), "2x8-service", size)
        runs = [measure(Path(folder) / name, name, size, args.drills) for name in args.layouts]
    print(json.dumps({"refused": message, "runs": runs}, indent=1))
    if args.json:
        print(json.dumps(records(message, runs)))


if __name__ == "__main__":
    main()
