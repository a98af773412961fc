"""Scale: HALOGEN's released generations of 14 models on all nine domains by both rule sets (18
tasks), scripted judge and extractor served by Ray Serve (the extractor also answers the parse
steps), one run per size on a Ray head, written to moto's S3 server; rows/s end to end and the
driver's peak memory. With --faults, the largest size runs once more under faults and must end
with the tables of its clean run.

Each size runs in a fresh driver process (so its peak RSS is its own); the item limit per task
is chosen so the run holds about that many generations. The biography and reference checks
need knowledge sources that are not public offline: stand-ins are built from the recorded
responses (GPT-4's bios as the articles, half the cited titles as the title dump), so the
work per row is real but the verdicts mean nothing. Usage:

    python bench/scale.py [--sizes 10000 50000 140000] [--tasks TASK ...] [--faults] [--json]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests.support: the servers and drills the tests use too
MODELS = 14
BUCKET = "bench"


def _stand_in_knowledge(data: Path, folder: Path) -> tuple[Path, Path]:
    from halluscope.halogen.common import RELEASED
    from halluscope.halogen.stand_in import reference_titles

    def rows(rel: str) -> list[dict]:
        with gzip.open(data / "halogen" / "responses" / rel, "rt", newline="") as f:
            return list(csv.DictReader(f))

    titles = set()
    for name in RELEASED["responses"]["references"].values():
        for r in rows(f"references/{name}"):
            titles.update(reference_titles(r["response"]))
    (folder / "titles.txt").write_text("\n".join(sorted(titles)[::2]) + "\n")
    with open(folder / "articles.jsonl", "w") as f:
        for r in rows(f"biographies/{RELEASED['responses']['biographies']['gpt_4_0125_turbo']}"):
            f.write(json.dumps({"title": r["prompt"].removeprefix("Tell me a bio of ").strip(),
                                "text": r["response"]}) + "\n")
    return folder / "titles.txt", folder / "articles.jsonl"


def halogen_tasks() -> list[str]:
    from halluscope.task_registry import task_names

    return [t for t in task_names() if t.startswith("halogen/")]


def config(storage: dict, limit: int, titles: Path, articles: Path, tasks: list[str]) -> dict:
    from halluscope.halogen.common import RELEASED

    serve = {"num_cpus": 0.25, "max_batch_prompts": 64, "max_ongoing_requests": 256}
    return {"storage": storage, "tasks": tasks,
            "limits": {"max_items_per_task": limit}, "costs": {"price_table": None}, "cache": {"enabled": False},
            "benchmarks": {"halogen": {"titles": {"dump": str(titles)}, "wiki": {"articles": str(articles)}}},
            "models": [{"id": m, "backend": "replay"} for m in RELEASED["models"]] + [
                {"id": "judge", "role": "judge", "backend": "scripted",
                 "params": {"support_on_overlap": 0.6, "default": "Yes", "serve": serve}},
                {"id": "extractor", "role": "extractor", "backend": "scripted",
                 "params": {"extract": True, "serve": serve}}]}


def one_size(cfg_path: str) -> dict:
    """Run in this process (the driver) and report its own peak RSS."""
    from halluscope.config.load import load_config
    from halluscope.pipeline.runner import run
    from halluscope.resolve.run import ResolvedRun

    t0 = time.perf_counter()
    result = run(ResolvedRun.of(load_config(cfg_path)), run_id="scale", progress=False)
    seconds = time.perf_counter() - t0
    return {"rows": result.processed, "seconds": round(seconds, 1),
            "rows_per_s": round(result.processed / seconds, 1),
            "driver_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def fault_drill(head: dict, endpoint: str, cfg: dict, folder: Path, clean_root: str) -> dict:
    """The run of ``cfg`` again, through an S3 API that fails every 25th PUT and 40th GET: an
    Evaluate worker SIGKILLed mid-batch after the first commit, the driver SIGKILLed at half the
    clean run's commits, the same run id resubmitted, and another Evaluate worker killed after the
    resubmission's first commit. Its tables must equal the clean run's, every id exactly once."""
    from tests.support.configs import config_yaml
    from tests.support.drills import (
        Driver,
        comparable_tables,
        id_problems,
        kill_busy_worker,
        restarts,
        stage_class,
        table_differences,
        wait_until_gone,
    )
    from tests.support.flaky_s3 import FlakyS3Proxy
    from tests.support.servers import s3_storage

    from halluscope.storage.fs import Location
    from halluscope.storage.run import RunStore
    from halluscope.storage.spec import StorageSpec

    def store(storage: dict) -> RunStore:
        return RunStore(Location.from_url(storage["root"], StorageSpec.model_validate(storage)), "scale")

    clean = store(s3_storage(endpoint, f"s3://{BUCKET}/{clean_root}"))
    commits = len(clean.committed_keys())
    with FlakyS3Proxy(endpoint, every={"PUT": 25, "GET": 40}) as proxy:
        storage = s3_storage(proxy.url, f"s3://{BUCKET}/runs-faulted")
        cfg_path = folder / "faulted.yaml"
        cfg_path.write_text(config_yaml(cfg | {"storage": storage}))
        faulted = store(storage)
        t0 = time.perf_counter()
        first = Driver(cfg_path, "scale", folder / "first.log")
        killed = []
        try:
            first.wait_for_commits(faulted, 1, timeout_s=7200, poll_s=0.5)
            killed.append(kill_busy_worker(head, "Evaluate", first.proc))
            first.wait_for_commits(faulted, commits // 2, timeout_s=7200, poll_s=2)
        finally:
            first.kill()
        killed_at = len(faulted.committed_keys())
        wait_until_gone(head["dashboard"], [stage_class(s) for s in ("Generate", "Evaluate")], "the driver's kill")
        second = Driver(cfg_path, "scale", folder / "second.log")
        try:
            second.wait_for_commits(faulted, killed_at + 1, timeout_s=7200, poll_s=0.5)
            killed.append(kill_busy_worker(head, "Evaluate", second.proc))
            if second.proc.wait(timeout=7200) != 0:
                raise RuntimeError(f"the resubmitted driver failed:\n{second.tail()}")
        finally:
            second.kill()
        seconds = time.perf_counter() - t0
        manifest = faulted.read_json("manifest.json")
        tables = comparable_tables(faulted)
        injected = dict(proxy.injected)
    restarted = restarts(head["dashboard"], ("Evaluate",))
    want = comparable_tables(clean)
    problems = id_problems(tables, want["scores"].num_rows) + table_differences(tables, want)
    problems += [f"killed actor {a} was not restarted" for a in killed if restarted.get(a, 0) < 1]
    if manifest["status"] != "complete":
        problems.append(f"manifest status {manifest['status']}")
    if problems:
        raise AssertionError("the faulted run differs from the clean one: " + "; ".join(problems))
    return {"seconds": round(seconds, 1), "commits_at_driver_kill": killed_at, "commits": commits,
            "rows": tables["scores"].num_rows, "atoms": tables["atoms"].num_rows,
            "done_before": manifest["counts"]["done_before"], "workers_killed": len(killed),
            "s3_faults_injected": sum(injected.values())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000, 140_000])
    p.add_argument("--faults", action="store_true", help="drill the largest size under faults")
    p.add_argument("--tasks", nargs="+", help="a subset of the 18 HALOGEN tasks (default: all; a quick check of "
                                             "this script: halogen/code, which loads no knowledge)")
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one config in this process
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.one:
        print(json.dumps(one_size(args.one)))
        return
    from tests.support.configs import config_yaml
    from tests.support.servers import create_bucket, moto_s3, ray_head, s3_storage, use_token_auth

    use_token_auth()

    data = HERE.parent.parent / "shared" / "data"
    results, drill, tasks = [], None, args.tasks or halogen_tasks()
    with tempfile.TemporaryDirectory() as tmp, moto_s3() as endpoint, \
            ray_head(num_cpus=max(4, os.cpu_count() or 1), object_store_bytes=512 * 1024 * 1024) as head:
        create_bucket(endpoint, BUCKET)
        titles, articles = _stand_in_knowledge(data, Path(tmp))
        for size in args.sizes:
            limit = max(1, size // (MODELS * len(tasks)))
            cfg = config(s3_storage(endpoint, f"s3://{BUCKET}/runs-{size}"), limit, titles, articles, tasks)
            cfg_path = Path(tmp) / f"scale-{size}.yaml"
            cfg_path.write_text(config_yaml(cfg))
            done = subprocess.run([sys.executable, __file__, "--one", str(cfg_path)], capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"the {size}-row run failed:\n{done.stderr[-3000:]}")
            results.append({"target_rows": size, **json.loads(done.stdout.strip().splitlines()[-1])})
            print(json.dumps(results[-1]), file=sys.stderr)
        if args.faults:
            drill = {"target_rows": args.sizes[-1],
                     **fault_drill(head, endpoint, cfg, Path(tmp), f"runs-{args.sizes[-1]}")}
            print(json.dumps(drill), file=sys.stderr)
    records = [{"name": f"halogen_all_domains_{r['target_rows']}", "value": r["rows_per_s"], "unit": "rows/s",
                "baseline": f"driver peak RSS {r['driver_peak_rss_mb']} MB over {r['rows']} rows in {r['seconds']} s",
                "baseline_value": r["driver_peak_rss_mb"], "ratio": None} for r in results]
    if drill:
        clean_s = results[-1]["seconds"]
        records.append({
            "name": f"halogen_all_domains_{drill['target_rows']}_under_faults", "value": drill["seconds"], "unit": "s",
            "baseline": (f"the clean run's seconds; {drill['workers_killed']} Evaluate workers SIGKILLed, driver "
                         f"SIGKILLed at {drill['commits_at_driver_kill']}/{drill['commits']} commits and resubmitted, "
                         f"{drill['s3_faults_injected']} S3 faults injected; tables equal the clean run's "
                         f"({drill['rows']} generations, {drill['atoms']} atoms, each once)"),
            "baseline_value": clean_s, "ratio": round(drill["seconds"] / clean_s, 3)})
    print(json.dumps(records) if args.json else "\n".join(json.dumps(r) for r in records))


if __name__ == "__main__":
    main()
