"""Driver memory and rows/s against the number of generations: the demo's 16 HALOGEN tasks, its
recorded extractor and judge, and its 14 models replayed under aliases (``alpaca_7b.a3`` replays
alpaca_7b and is answered by alpaca_7b's recorded steps), at about 100,000 generations (5
aliases) and at over 1,000,000 (52). Each size runs in a fresh driver process (on a local Ray
from 25,000 generations, ``ray.in_process_below``), so its peak RSS (getrusage of the driver
itself, not of Ray's workers) is its own.

Then many models on few items: 2,002 aliases (14 x 143) of the recorded models on 5
items of halogen/code, whose records pair the models per task. Its records, each against its
target: metrics.json's size (under 50 MB), the driver's peak RSS (under 2 GB) and the seconds
from the pipeline's end to the run's return (the aggregation, the ledger, metrics.json,
leaderboard.md, the manifest and report.html) over the pipeline's own seconds (the manifest's
``timings.pipeline_s``; under 1). Usage:

    python bench/driver_memory.py [--aliases 5 52] [--many-models 2002] [--many-items 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support: the configs' YAML writer
MODELS = ["alpaca_7b", "falcon_40b_instruct", "gpt_3.5_turbo_0125", "gpt_4_0125_turbo", "llama_2_7b_chat",
          "llama_2_13b_chat", "llama_2_70b_chat", "llama_3_8b_chat", "llama_3_70b_chat", "mistral_7b_instruct",
          "mixtral_8x7b_instruct", "olmo_7b_instruct", "redpajama_incite_3b_chat", "redpajama_incite_7b_chat"]


MB = 1024 * 1024
MANY_TASKS = ["halogen/code"]
# the targets for many models on few items: what a run of them writes, holds and takes after its pipeline
METRICS_JSON_MB, PEAK_MB, AFTER_OVER_PIPELINE = 50.0, 2048.0, 1.0


def config(aliases: int, root: str, max_items: int | None = None, tasks: list[str] | None = None) -> dict:
    """The embedded demo with its models under test replaced by ``aliases`` aliases of them, in turn
    (``max_items``: at most that many items per task, for a quick check of this script; ``tasks``:
    only these of the demo's tasks)."""
    from halluscope.config.load import default_config

    demo = default_config().model_dump(mode="json", exclude_unset=True)
    roles = [m for m in demo["models"] if m.get("role", "test") != "test"]
    tested = [{"id": f"{MODELS[i % len(MODELS)]}.a{i}", "backend": "replay",
               "params": {"source": "recorded", "name": MODELS[i % len(MODELS)]}} for i in range(aliases)]
    limits = {**demo.get("limits", {}), **({"max_items_per_task": max_items} if max_items else {})}
    return {**demo, "storage": {"root": root}, "models": tested + roles, "limits": limits,
            **({"tasks": tasks} if tasks else {})}


def one_size(cfg_path: str) -> dict:
    """Run in this process (the driver) and report its own peak RSS, its metrics.json's size, the
    manifest's timings and the seconds from the pipeline's end to the run's return."""
    from halluscope.config.load import load_config
    from halluscope.pipeline.runner import run
    from halluscope.resolve.run import ResolvedRun

    cfg = load_config(cfg_path)
    t0 = time.perf_counter()
    result = run(ResolvedRun.of(cfg), run_id="mem", progress=False)
    seconds = time.perf_counter() - t0
    if result.failure:
        raise RuntimeError(result.failure)
    folder = Path(cfg.storage.root.removeprefix("file://")) / "mem"
    timings = json.loads((folder / "manifest.json").read_text())["timings"]
    return {"rows": result.processed, "seconds": round(seconds, 1), "rows_per_s": round(result.processed / seconds, 1),
            "driver_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "metrics_json_mb": round((folder / "metrics.json").stat().st_size / MB, 2),
            "pipeline_s": timings["pipeline_s"], "aggregate_s": timings["aggregate_s"],
            "after_pipeline_s": round(result.finish_s, 2)}


def in_driver(cfg: dict, tmp: str, name: str) -> dict:
    """``cfg`` run in a fresh driver process: what ``one_size`` reports of it."""
    from tests.support.configs import config_yaml

    cfg_path = Path(tmp) / f"{name}.yaml"
    cfg_path.write_text(config_yaml(cfg))
    done = subprocess.run([sys.executable, __file__, "--one", str(cfg_path)], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the run {name} failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps({"run": name, **out}), file=sys.stderr)
    return out


def many_records(m: dict, models: int, items: int) -> list[dict]:
    """Many models on few items against their targets."""
    run = f"{models} models x {items} items of {', '.join(MANY_TASKS)}: {m['rows']} generations"
    after, pipe = m["after_pipeline_s"], m["pipeline_s"]
    return [
        {"name": "many_replayed_models_metrics_json", "value": m["metrics_json_mb"], "unit": "MB",
         "baseline": f"target: metrics.json under {METRICS_JSON_MB:.0f} MB; {run}",
         "baseline_value": METRICS_JSON_MB, "ratio": round(m["metrics_json_mb"] / METRICS_JSON_MB, 3)},
        {"name": "many_replayed_models_driver_memory", "value": m["driver_peak_rss_mb"], "unit": "MB",
         "baseline": f"target: driver peak RSS under {PEAK_MB:.0f} MB; {run}",
         "baseline_value": PEAK_MB, "ratio": round(m["driver_peak_rss_mb"] / PEAK_MB, 3)},
        {"name": "many_replayed_models_after_pipeline", "value": after, "unit": "s",
         "baseline": f"target: under the pipeline's own seconds (manifest timings.pipeline_s), the time after "
                     f"it from the pipeline's end to the run's return (aggregation, ledger, views, report; "
                     f"aggregate_s {m['aggregate_s']} s); {run}",
         "baseline_value": pipe, "ratio": round(after / pipe, 3) if pipe else None},
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--aliases", type=int, nargs=2, default=[5, 52], metavar=("SMALL", "LARGE"))
    p.add_argument("--max-items", type=int, help="items per task (default: every item, as the demo)")
    p.add_argument("--many-models", type=int, default=2002,
                   help="models under test (aliases) of the many-models case (default 2002: 14 x 143)")
    p.add_argument("--many-items", type=int, default=5, help="items of halogen/code in the many-models case")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.one:
        print(json.dumps(one_size(args.one)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        sizes = [{"aliases": n, **in_driver(config(n, f"file://{tmp}/runs-{n}", args.max_items), tmp, f"aliases-{n}")}
                 for n in args.aliases]
        many = in_driver(config(args.many_models, f"file://{tmp}/runs-many", args.many_items, MANY_TASKS), tmp,
                         f"many-{args.many_models}")
    small, large = sizes
    runs = f"{large['rows']} generations ({large['aliases']} aliases) vs {small['rows']} ({small['aliases']})"
    records = [
        {"name": "scale_driver_memory", "value": large["driver_peak_rss_mb"], "unit": "MB",
         "baseline": f"driver peak RSS at {small['rows']} generations; {runs}",
         "baseline_value": small["driver_peak_rss_mb"],
         "ratio": round(large["driver_peak_rss_mb"] / small["driver_peak_rss_mb"], 3)},
        {"name": "scale_rows_per_s", "value": large["rows_per_s"], "unit": "rows/s",
         "baseline": f"rows/s at {small['rows']} generations, Ray's start included ({small['seconds']} s vs "
                     f"{large['seconds']} s); {runs}",
         "baseline_value": small["rows_per_s"], "ratio": round(large["rows_per_s"] / small["rows_per_s"], 3)},
    ]
    records += many_records(many, args.many_models, args.many_items)
    print(json.dumps(records) if args.json else "\n".join(json.dumps(r) for r in records))


if __name__ == "__main__":
    main()
