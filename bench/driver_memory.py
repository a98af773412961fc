"""Driver memory and rows/s against the number of generations: the demo's 16 HALOGEN tasks, its
recorded extractor and judge, and its 14 models replayed under aliases (``alpaca_7b.a3`` replays
alpaca_7b and is answered by alpaca_7b's recorded steps), at about 100,000 generations (5
aliases) and at over 1,000,000 (52). Each size runs in a fresh driver process on a local Ray, so
its peak RSS (getrusage of the driver itself, not of Ray's workers) is its own. Usage:

    python bench/driver_memory.py [--aliases 5 52] [--json]
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


def config(aliases: int, root: str, max_items: int | None = None) -> dict:
    """The embedded demo with its models under test replaced by ``aliases`` aliases of them, in turn
    (``max_items``: at most that many items per task, for a quick check of this script)."""
    from halluscope.config.load import default_config

    demo = default_config().model_dump(mode="json", exclude_unset=True)
    roles = [m for m in demo["models"] if m.get("role", "test") != "test"]
    tested = [{"id": f"{MODELS[i % len(MODELS)]}.a{i}", "backend": "replay",
               "params": {"source": "recorded", "name": MODELS[i % len(MODELS)]}} for i in range(aliases)]
    limits = {**demo.get("limits", {}), **({"max_items_per_task": max_items} if max_items else {})}
    return {**demo, "storage": {"root": root}, "models": tested + roles, "limits": limits}


def one_size(cfg_path: str) -> dict:
    """Run in this process (the driver) and report its own peak RSS."""
    from halluscope.config.load import load_config
    from halluscope.pipeline.runner import run
    from halluscope.resolve.run import ResolvedRun

    t0 = time.perf_counter()
    result = run(ResolvedRun.of(load_config(cfg_path)), run_id="mem", progress=False)
    seconds = time.perf_counter() - t0
    if result.failure:
        raise RuntimeError(result.failure)
    return {"rows": result.processed, "seconds": round(seconds, 1), "rows_per_s": round(result.processed / seconds, 1),
            "driver_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--aliases", type=int, nargs=2, default=[5, 52], metavar=("SMALL", "LARGE"))
    p.add_argument("--max-items", type=int, help="items per task (default: every item, as the demo)")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    from tests.support.configs import config_yaml

    if args.one:
        print(json.dumps(one_size(args.one)))
        return
    sizes = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.aliases:
            cfg_path = Path(tmp) / f"aliases-{n}.yaml"
            cfg_path.write_text(config_yaml(config(n, f"file://{tmp}/runs-{n}", args.max_items)))
            done = subprocess.run([sys.executable, __file__, "--one", str(cfg_path)], capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"the run with {n} aliases failed:\n{done.stderr[-3000:]}")
            sizes.append({"aliases": n, **json.loads(done.stdout.strip().splitlines()[-1])})
            print(json.dumps(sizes[-1]), file=sys.stderr)
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
    print(json.dumps(records) if args.json else "\n".join(json.dumps(r) for r in records))


if __name__ == "__main__":
    main()
