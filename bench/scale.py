"""Scale: HALOGEN's recorded generations of 14 models on all nine domains, scripted judge and
extractor served by Ray Serve, one run per size; rows/s end to end and the driver's peak memory.

Each size runs in a fresh driver process (so its peak RSS is its own); the item limit per task
is chosen so the run holds about that many generations. The biography and reference checks
need knowledge sources that are not public offline: stand-ins are built from the recorded
responses (GPT-4's bios as the articles, half the cited titles as the title dump), so the
work per row is real but the verdicts mean nothing. Usage:

    python bench/scale.py [--sizes 10000 50000 140000] [--json]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = 14


def _stand_in_knowledge(data: Path, folder: Path) -> tuple[Path, Path]:
    from halluscope.serving.scripted_extract import reference_titles
    from halluscope.tasks.halogen.common import RELEASED

    def rows(rel: str) -> list[dict]:
        with gzip.open(data / "halogen" / "responses" / rel, "rt", newline="") as f:
            return list(csv.DictReader(f))

    titles = set()
    for model, name in RELEASED["responses"]["references"].items():
        for r in rows(f"references/{name}"):
            titles.update(reference_titles(r["response"]))
    (folder / "titles.txt").write_text("\n".join(sorted(titles)[::2]) + "\n")
    with open(folder / "articles.jsonl", "w") as f:
        for r in rows(f"biographies/{RELEASED['responses']['biographies']['gpt_4_0125_turbo']}"):
            f.write(json.dumps({"title": r["prompt"].removeprefix("Tell me a bio of ").strip(),
                                "text": r["response"]}) + "\n")
    return folder / "titles.txt", folder / "articles.jsonl"


def config(root: str, limit: int | None, titles: Path, articles: Path) -> dict:
    from halluscope.tasks.halogen.common import RELEASED
    from halluscope.tasks.registry import task_names

    serve = {"num_cpus": 0.25, "max_batch_prompts": 64, "max_ongoing_requests": 256}
    return {"storage": {"root": root}, "tasks": [t for t in task_names() if t.startswith("halogen/")],
            "limits": {"max_items_per_task": limit}, "costs": {"price_table": None}, "cache": {"enabled": False},
            "verifiers": {"titles": {"dump": str(titles)}, "wiki": {"articles": str(articles)}},
            "models": [{"id": m, "backend": "replay"} for m in RELEASED["models"]] + [
                {"id": "judge", "role": "judge", "backend": "scripted",
                 "params": {"support_on_overlap": 0.6, "default": "Yes", "serve": serve}},
                {"id": "extractor", "role": "extractor", "backend": "scripted",
                 "params": {"extract": True, "serve": serve}}]}


def one_size(cfg_path: str) -> dict:
    """Run in this process (the driver) and report its own peak RSS."""
    from halluscope.config import load_config
    from halluscope.pipeline.runner import run

    t0 = time.perf_counter()
    result = run(load_config(cfg_path), run_id="scale", progress=False)
    seconds = time.perf_counter() - t0
    return {"rows": result.processed, "seconds": round(seconds, 1),
            "rows_per_s": round(result.processed / seconds, 1),
            "driver_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000, 140_000])
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one config in this process
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.one:
        print(json.dumps(one_size(args.one)))
        return
    import yaml

    data = HERE.parent.parent / "shared" / "data"
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        titles, articles = _stand_in_knowledge(data, Path(tmp))
        for size in args.sizes:
            limit = max(1, size // (MODELS * 9)) if size < 140_000 else None  # None: every item
            cfg_path = Path(tmp) / f"scale-{size}.yaml"
            cfg_path.write_text(yaml.safe_dump(config(f"file://{tmp}/runs-{size}", limit, titles, articles)))
            out = subprocess.run([sys.executable, __file__, "--one", str(cfg_path)], check=True,
                                 capture_output=True, text=True).stdout.strip().splitlines()[-1]
            results.append({"target_rows": size, **json.loads(out)})
            print(json.dumps(results[-1]), file=sys.stderr)
    records = [{"name": f"halogen_all_domains_{r['target_rows']}", "value": r["rows_per_s"], "unit": "rows/s",
                "baseline": f"driver peak RSS {r['driver_peak_rss_mb']} MB over {r['rows']} rows in {r['seconds']} s",
                "baseline_value": r["driver_peak_rss_mb"], "ratio": None} for r in results]
    print(json.dumps(records) if args.json else "\n".join(json.dumps(r) for r in records))


if __name__ == "__main__":
    main()
