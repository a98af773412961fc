"""`make bench`: the demo workload through the pipeline, beside a single-process loop.

Both sides run the same stage functions on the same rows and write the same tables; the
pipeline side is timed as a user sees it (a fresh process, Ray start included). Results go to
bench/results.json as {name, value, unit, baseline, baseline_value, ratio} records.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests.support: the configs' YAML writer
TARGET_S = 30.0  # issue 2: the whole demo run in under 30 s on 2 cores


def demo_config(max_items: int) -> dict:
    """The embedded demo with at most ``max_items`` items per task: a quick check of this script."""
    from halluscope.config.load import default_config

    demo = default_config().model_dump(mode="json", exclude_unset=True)
    return {**demo, "limits": {**demo.get("limits", {}), "max_items_per_task": max_items}}


def pipeline_seconds(root: str, max_items: int | None) -> tuple[float, int]:
    from tests.support.configs import config_yaml

    config = []
    if max_items is not None:
        path = Path(root[len("file://"):] + ".yaml")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(config_yaml(demo_config(max_items)))
        config = [str(path)]
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "halluscope.cli", "run", *config, "--run-id", "bench", "--storage-root", root,
                    "--quiet"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - t0
    manifest = json.loads((Path(root[len("file://"):]) / "bench" / "manifest.json").read_text())
    return seconds, manifest["counts"]["processed"]


def loop_seconds(root: str, max_items: int | None) -> tuple[float, int]:
    """The same stages as plain function calls in one process, one batch after another."""
    from halluscope.config.load import default_config, parse_config
    from halluscope.pipeline.execute import driver_batches
    from halluscope.pipeline.workset import list_work
    from halluscope.records import GenerationIds
    from halluscope.resolve.run import ResolvedRun
    from halluscope.storage.fs import Location
    from halluscope.storage.run import RunStore

    t0 = time.perf_counter()
    cfg = default_config() if max_items is None else parse_config(demo_config(max_items))
    store = RunStore(Location.from_url(root), "loop")
    run = ResolvedRun.of(cfg)
    work = list_work(run, store)
    committed = driver_batches(run, store, work, work.blocks, GenerationIds(), cfg.models)
    rows = sum(sum(t.column("rows").to_pylist()) for t in committed)
    return time.perf_counter() - t0, rows


def compare(max_items: int | None = None) -> list[dict]:
    """The pipeline beside the loop on the same rows, back to back."""
    with tempfile.TemporaryDirectory() as tmp:
        pipe_s, pipe_rows = pipeline_seconds(f"file://{tmp}/pipe", max_items)
        loop_s, loop_rows = loop_seconds(f"file://{tmp}/loop", max_items)
    assert pipe_rows == loop_rows, (pipe_rows, loop_rows)
    return [
        {"name": "halogen_demo_pipeline_throughput", "value": round(pipe_rows / pipe_s, 1), "unit": "rows/s",
         "baseline": "single-process loop over the same stage functions and rows",
         "baseline_value": round(loop_rows / loop_s, 1), "ratio": round(loop_s / pipe_s, 3)},
        {"name": "halogen_demo_pipeline_wall_time", "value": round(pipe_s, 2), "unit": "s",
         "baseline": f"target: {pipe_rows} rows in under {TARGET_S:.0f} s, Ray start included",
         "baseline_value": TARGET_S, "ratio": round(pipe_s / TARGET_S, 3)},
    ]


def scripts() -> dict[str, tuple[list[str], str, int | None]]:
    """Each bench script after the comparison, in the order they run (each in a process of its
    own: it starts the Ray it measures): its arguments, Python and stderr."""
    vllm_python = str(HERE.parent / ".venv-vllm" / "bin" / "python")
    return {
        "saturation.py": ([], sys.executable, subprocess.PIPE),
        # all nine domains at 10k/50k/140k rows (BENCH_SCALE_SIZES overrides) on S3, the largest run
        # again under faults: the longest part, about an hour on 2 cores
        "scale.py": (["--faults", "--sizes", *os.environ.get("BENCH_SCALE_SIZES", "10000 50000 140000").split()],
                     sys.executable, None),
        # driver memory and rows/s at ~100k and over 1M generations (recorded models under aliases): ~8 minutes;
        # then 2,002 of them on 5 code items (metrics.json's size, peak memory, the time after the pipeline): ~75 s
        "driver_memory.py": ([], sys.executable, None),
        # 12 served models in waves on 16 simulated GPUs: about 13 minutes
        "many_models.py": ([], sys.executable, None),
        # FEWL's per-(task, model) reads of a 500-part run, pruned by footers and opening every part: ~15 s
        "filtered_reads.py": ([], sys.executable, None),
        # the RayService's GPUs placed first on simulated 8-GPU nodes: a refusal and three layouts, ~12 minutes
        "cluster_layouts.py": ([], sys.executable, None),
        # SmolLM2 through vLLM offline and through a run that serves it, in the vLLM environment: ~12 minutes
        "live_engine.py": ([], vllm_python, None),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--compare-only", action="store_true",
                   help="only the pipeline beside the loop (seconds), not the hour of saturation and scale benches")
    p.add_argument("--max-items", type=int,
                   help="with --compare-only: at most this many items per task (a quick check of this script)")
    table = scripts()
    p.add_argument("--only", nargs="+", choices=list(table), metavar="SCRIPT",
                   help="run only these bench scripts, and replace their records in bench/results.json, keeping "
                        f"the others (one of: {', '.join(table)})")
    args = p.parse_args()
    out = HERE / "results.json"
    if args.only:
        fresh = [r for name in args.only for r in _records(name, *table[name])]
        renewed = {r["name"] for r in fresh}
        kept = [r for r in json.loads(out.read_text()) if r["name"] not in renewed] if out.exists() else []
        out.write_text(json.dumps(kept + fresh, indent=2) + "\n")
        _report(fresh)
        return
    results = compare(args.max_items)
    if args.compare_only:
        _report(results)
        return
    for name, how in table.items():
        results += _records(name, *how)
    out.write_text(json.dumps(results, indent=2) + "\n")
    _report(results)


def _records(script: str, args: list[str], python: str, stderr: int | None) -> list[dict]:
    """A bench script's records: the JSON line it prints last with ``--json``."""
    done = subprocess.run([python, str(HERE / script), "--json", *args], check=True, stdout=subprocess.PIPE,
                          stderr=stderr, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _report(results: list[dict]) -> None:
    for r in results:
        print(f"{r['name']}: {r['value']} {r['unit']}  (baseline {r['baseline_value']}: {r['baseline']}; "
              f"ratio {r['ratio']})")


if __name__ == "__main__":
    main()
