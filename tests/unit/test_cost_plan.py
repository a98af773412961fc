"""`halluscope plan`: hand-computed estimates on tiny data written here, measured stats from a run
folder built with RunStore, the call cache, replay, and the budget check."""

import csv
import gzip
import io
import json
import math

import pyarrow as pa
import pytest
import yaml
from tests.support.resolved import planned, resolved

from halluscope import records
from halluscope.config.load import parse_config
from halluscope.contract.completion import Completion
from halluscope.contract.cost_rules import Shape
from halluscope.cost.overheads import HEAD
from halluscope.cost.prices import PriceTable, load_prices
from halluscope.errors import ConfigError, DataError, RunError
from halluscope.fewl import prompts as fewl_prompts
from halluscope.fewl.options import FewlOptions
from halluscope.halogen import prompts
from halluscope.models.base import GenerationRequest
from halluscope.models.cache import GENERATION_TEMPLATE, CachedBackend
from halluscope.models.registry import sampling_of
from halluscope.pipeline.estimate import check_budget
from halluscope.pipeline.token_stats import TokenStats
from halluscope.records import GenerationIds, generation_id
from halluscope.resolve.run import ResolvedRun
from halluscope.resolve.tables import plan_options
from halluscope.serving import throughput
from halluscope.serving.served import busy_seconds, placement, startup_seconds
from halluscope.serving.throughput import (
    CHECKOUT,
    DEFAULT_THROUGHPUT_TABLE,
    ModelSize,
    PlanOptions,
    Throughput,
    find_throughput_table,
    load_throughput,
    model_size,
)
from halluscope.sources import DataResolver
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore
from halluscope.task_registry import get_task, task_names

PRICES = PriceTable.model_validate({
    "as_of": "test", "source": "written in the test",
    "gpu_hour_usd": {"H100": 3.6},  # $0.001 per GPU-second
    "api_usd_per_million_tokens": {"gpt-test": {"input": 1.0, "output": 2.0},
                                   "gpt-ext": {"input": 1.0, "output": 1.0},
                                   "gpt-judge": {"input": 2.0, "output": 2.0}}})
# per GPU at 8B: 1000 prompt / 100 output tokens per s; held 100 s before the busiest model's work
OPTIONS = PlanOptions(throughput={"H100": Throughput(prefill_tokens_per_s=1000, decode_tokens_per_s=100)},
                      params_b={"judge": 16}, startup_s=100, api_tokens_per_s=10)

CODE_PROMPTS = ["Write Python code that reads a CSV file, prints it.",  # 10 words
                "Write Python code that downloads a web page, parses every link in it and "
                "prints the links sorted by length."]  # 20 words -> mean 15 words = 19.5 tokens
MEETINGS = [("Ada Lovelace", "Pele"), ("Plato", "Grace Hopper")]  # prompts of 10 words -> 13 tokens


def _meeting(a, b):
    return f"Tell me about the meeting between {a} and {b}."


def _write_csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    path.write_bytes(gzip.compress(buf.getvalue().encode()))


@pytest.fixture()
def data(tmp_path):
    root = tmp_path / "data"
    _write_csv(root / "halogen/prompts/prompts_code.csv.gz", [{"prompt": p} for p in CODE_PROMPTS])
    _write_csv(root / "halogen/prompts/prompts_historicalevents.csv.gz",
               [{"prompt": _meeting(a, b), "name1": a, "birth1": "1", "death1": "2", "name2": b, "birth2": "3",
                 "death2": "4"} for a, b in MEETINGS])
    _write_csv(root / "halogen/prompts/prompts_summarization.csv.gz",
               [{"prompt": "Summarize: " + " ".join(["word"] * 99), "text": "The source article."}])  # 100 words
    return root


API = {"id": "api", "backend": "openai", "params": {"base_url": "http://127.0.0.1:9/v1", "model": "gpt-test",
                                                    "max_concurrency": 4, "sampling": {"max_tokens": 100}}}
LLAMA = {"id": "llama", "backend": "vllm", "params": {"model_source": "org/Llama-3.1-8B-Instruct",
                                                      "accelerator_type": "H100", "tensor_parallel_size": 2,
                                                      "sampling": {"max_tokens": 200}}}
JUDGE = {"id": "judge", "role": "judge", "backend": "vllm",
         "params": {"model_source": "org/judge-model", "accelerator_type": "H100", "tensor_parallel_size": 4,
                    "sampling": {"max_tokens": 20}}}


def _cfg(data, models=(API, LLAMA, JUDGE), tasks=("halogen/code", "halogen/historical_events"), **extra):
    return parse_config({"tasks": list(tasks), "models": list(models),
                         "data": {"dir": str(data), "download": False}, **extra})


def _rows(p):
    return {(r.model, r.task, r.stage): r for r in p.rows}


T_MEETING = len(prompts.meeting_prompt("", "", "").split()) * 1.3  # the judge template's own tokens


def test_hand_computed_plan(data):
    p = planned(_cfg(data), PRICES, options=OPTIONS)
    rows = _rows(p)
    # api: 2 calls per task; prompts 39 / 26 tokens; outputs 2 x 100 max_tokens x 0.5 fill = 100
    api_code = rows[("api", "halogen/code", "generate")]
    api_hist = rows[("api", "halogen/historical_events", "generate")]
    assert (api_code.calls, api_code.input_tokens, api_code.output_tokens) == (2, 39, 100)
    assert math.isclose(api_code.usd, (39 * 1.0 + 100 * 2.0) / 1e6)
    assert (api_hist.calls, api_hist.input_tokens, api_hist.output_tokens) == (2, 26, 100)
    assert math.isclose(api_hist.usd, (26 + 200) / 1e6) and api_hist.resource is None
    # llama (8B, the reference size): 39/1000 + 200/100 = 2.039 GPU-s on code, 0.026 + 2 on history
    llama_code = rows[("llama", "halogen/code", "generate")]
    assert (llama_code.input_tokens, llama_code.output_tokens, llama_code.resource) == (39, 200, "H100")
    assert math.isclose(llama_code.resource_hours * 3600, 2.039) and math.isclose(llama_code.usd, 0.002039)
    assert math.isclose(rows[("llama", "halogen/historical_events", "generate")].usd, 0.002026)
    # judge: one meeting call per generation, 4 in all: prompt = template + generation + item prompt
    # = 2 x (T + 50 + 13) + 2 x (T + 100 + 13); answers 5 tokens each
    judge = rows[("judge", "halogen/historical_events", "abstain")]
    assert (judge.generations, judge.calls, judge.output_tokens) == (4, 4, 20)
    assert judge.input_tokens == round(4 * T_MEETING + 352)
    # 16B judge: half the 8B throughput (500 / 50 per GPU)
    assert math.isclose(judge.resource_hours * 3600, judge.input_tokens / 500 + 20 / 50)
    assert ("judge", "halogen/code", "abstain") not in rows  # code calls no role model
    # held: startup 100 s + the busiest model, the API: 200 output tokens / 10 per s / 4 at once = 5 s;
    # then the evaluation of the last batch: all 8 generations are one batch, so the judge's whole
    # work on its 4 GPUs follows the last generation
    tail = judge.resource_hours * 3600 / 4
    wall = 105 + tail
    assert math.isclose(p.wall_hours * 3600, wall)
    idle = rows[("llama", "*", "idle")]
    # the model under test is held from its deployment to its last answer: startup 100 s + its work
    # on 2 GPUs, (2.039 + 2.026) / 2 s; the judge, a role, for the whole run
    held = 2 * (100 + (2.039 + 2.026) / 2)
    assert math.isclose(idle.resource_hours * 3600, held - 2.039 - 2.026)  # TP 2 x 1 replica
    assert math.isclose(rows[("judge", "*", "idle")].usd + judge.usd, wall * 4 * 0.001)  # TP 4
    # total: API $0.000465 + llama 204.065 GPU-s + judge 4 x wall GPU-s at $0.001
    assert math.isclose(p.total_usd, 0.000465 + held / 1000 + wall * 4 / 1000) and not p.unpriced
    assert p.totals()["resource_hours"] == {"H100": pytest.approx((held + wall * 4) / 3600)}
    schedule = p.as_dict()["schedule"]
    assert schedule["waves"] == [["llama"]] and schedule["peak_gpus"] == 2
    assert schedule["makespan_s"] == pytest.approx(held / 2, abs=1e-3)
    text = p.table()
    assert "halogen/historical_events" in text and "idle" in text and f"total: ${p.total_usd:,.4f}" in text
    assert "wave 1: llama" in text and "peak GPUs 2" in text
    assert json.loads(json.dumps(p.as_dict()))["totals"]["calls"] == 2 + 2 + 2 + 2 + 4


def test_budget(data):
    p = planned(_cfg(data), PRICES, options=OPTIONS)
    check_budget(p, 1.0)
    with pytest.raises(RunError) as err:
        check_budget(p, 0.5)
    msg = str(err.value)
    assert f"estimated cost ${p.total_usd:,.2f} exceeds costs.budget_usd $0.50" in msg
    assert "judge (judge) * idle $0.42" in msg and "llama (test) * idle $0.20" in msg  # the largest first


def test_unpriced_items_block_a_budget(data):
    # the judge's size is neither in its name nor in the options; no price table for the API model
    p = planned(_cfg(data), None, options=OPTIONS.model_copy(update={"params_b": {}}))
    notes = "\n".join(p.notes)
    assert "set plan options params_b['judge']" in notes and "no price table" in notes
    assert p.wall_hours is None and {r.model for r in p.unpriced} == {"api", "llama", "judge"}
    with pytest.raises(RunError, match=r"budget_usd \$5.00 cannot be checked: 7 planned line item"):
        check_budget(p, 5.0)


def _store(tmp_path):
    store = RunStore(Location.from_url(str(tmp_path / "runs")), "pilot")
    store.write_json("manifest.json", {"run_id": "pilot"})
    hist = "halogen/historical_events"
    gens = [("g1", "api", "halogen/code", 30, 70), ("g2", "api", "halogen/code", 40, 90),
            ("a1", "api", hist, 20, 60), ("a2", "api", hist, 20, 60), ("h1", "llama", hist, 12, 150)]
    store.write_batch("k1", {
        "generations": pa.Table.from_pylist(
            [{"gen_id": g, "run_id": "pilot", "model": m, "task": t, "item_id": g, "sample_idx": 0, "text": "x",
              "input_tokens": i, "output_tokens": o, "cached": False} for g, m, t, i, o in gens],
            schema=records.GENERATIONS),
        # a1 asked the judge once; a2 and h1 abstained by phrase, no call
        "role_calls": pa.Table.from_pylist(
            [{"run_id": "pilot", "gen_id": "a1", "model": "api", "task": hist, "stage": "abstain", "role": "judge",
              "role_model": "judge", "calls": 1, "cached_calls": 0, "failed_calls": 0, "input_tokens": 300,
              "output_tokens": 4}], schema=records.ROLE_CALLS),
        "scores": pa.Table.from_pylist([{"gen_id": g, "model": m, "task": t} for g, m, t, _, _ in gens],
                                       schema=records.SCORES)})
    return store


def test_measured_stats_replace_estimates(data, tmp_path):
    stats = TokenStats.from_runs([_store(tmp_path).loc.url])
    hist = "halogen/historical_events"
    assert stats.get("halogen/code", "generate", "test", "api")[0].input_tokens_per_call == 35
    # a model not measured on a task gets the pooled rate: 1 judge call in 3 generations
    pooled, basis = stats.get(hist, "abstain", "judge", "new")
    assert (pooled.calls_per_generation, pooled.input_tokens_per_call, basis) == (1 / 3, 300, "measured:*")
    p = planned(_cfg(data), PRICES, stats, options=OPTIONS)
    rows = _rows(p)
    # api on code: its own mean 35 in / 80 out per call; llama on code: the same, pooled over models
    code = [rows[(m, "halogen/code", "generate")] for m in ("api", "llama")]
    assert [(r.input_tokens, r.output_tokens, r.basis) for r in code] == \
        [(70, 160, "measured"), (70, 160, "measured:*")]
    # history: api 20 in / 60 out, llama 12 / 150, each its own
    assert [(rows[(m, hist, "generate")].input_tokens, rows[(m, hist, "generate")].output_tokens)
            for m in ("api", "llama")] == [(40, 120), (24, 300)]
    # the judge: api 1 call per 2 generations (300 in / 4 out); llama measured 0 calls, not the pooled 1/3
    judge = rows[("judge", hist, "abstain")]
    assert (judge.generations, judge.calls, judge.input_tokens, judge.output_tokens, judge.basis) == \
        (4, 1, 300, 4, "measured")
    assert "measured sizes from 1 run(s)" in p.notes[-1]
    with pytest.raises(DataError, match="not a halluscope run folder"):
        TokenStats.from_runs([str(tmp_path / "runs" / "nope")])


class _Fixed:
    model_id = "api"

    def generate_batch(self, requests):
        return [Completion("print(1)", 5, 5) for _ in requests]


def test_generation_calls_in_the_cache_are_free(data, tmp_path):
    cfg = _cfg(data)
    cache = Location.from_url(str(tmp_path / "cache"))
    api = next(m for m in cfg.models if m.id == "api")
    CachedBackend(_Fixed(), cache, None, GENERATION_TEMPLATE, sampling_of(api).as_dict()).generate_batch(
        [GenerationRequest("halogen/code", "x", CODE_PROMPTS[0])])
    row = _rows(planned(cfg, PRICES, options=OPTIONS, cache=cache))[("api", "halogen/code", "generate")]
    # the 10-word prompt is cached: one call left, the 20-word one (26 tokens) and 50 output tokens
    assert (row.calls, row.cached_calls, row.input_tokens, row.output_tokens) == (1, 1, 26, 50)
    assert math.isclose(row.usd, (26 + 100) / 1e6) and row.basis == "mixed"


def test_a_resumed_run_plans_only_what_is_left(data):
    cfg = _cfg(data)
    items = get_task("halogen/historical_events").load_items(DataResolver(str(data), download=False)).items
    done = GenerationIds(pa.array([generation_id("halogen/historical_events", items[0].item_id, "llama")]))
    rows = _rows(planned(cfg, PRICES, options=OPTIONS, done=done))
    gen = rows[("llama", "halogen/historical_events", "generate")]
    assert (gen.generations, gen.calls, gen.input_tokens, gen.output_tokens) == (1, 1, 13, 100)
    # the judge sees 2 api generations and 1 llama generation: 2 x (T + 50 + 13) + (T + 100 + 13)
    judge = rows[("judge", "halogen/historical_events", "abstain")]
    assert (judge.calls, judge.input_tokens) == (3, round(3 * T_MEETING + 239))


def test_replayed_generations_cost_nothing(data, tmp_path):
    recorded = tmp_path / "rec.jsonl"
    text = " ".join(["They"] + ["never"] * 19)  # 20 words; the second item has no recorded response
    recorded.write_text(json.dumps({"prompt": _meeting(*MEETINGS[0]), "response": text}) + "\n")
    rec = {"id": "rec", "backend": "replay", "params": {"source": "file", "path": str(recorded)}}
    p = planned(_cfg(data, models=(rec, JUDGE), tasks=("halogen/historical_events",)), PRICES, options=OPTIONS)
    rows = _rows(p)
    gen = rows[("rec", "halogen/historical_events", "generate")]
    assert (gen.generations, gen.calls, gen.input_tokens, gen.usd, gen.basis) == (2, 0, 0, 0.0, "replay")
    judge = rows[("judge", "halogen/historical_events", "abstain")]
    # one call, on the recorded text: template + 26 + 13 tokens
    assert (judge.generations, judge.calls, judge.input_tokens) == (1, 1, round(T_MEETING + 26 + 13))


def test_summarization_judges_every_fact(data):
    ext = {"id": "ext", "role": "extractor", "backend": "openai",
           "params": {"base_url": "http://127.0.0.1:9/v1", "model": "gpt-ext", "sampling": {"max_tokens": 30}}}
    judge = {"id": "oj", "role": "judge", "backend": "openai",
             "params": {"base_url": "http://127.0.0.1:9/v1", "model": "gpt-judge", "sampling": {"max_tokens": 20}}}
    api = {**API, "params": {**API["params"], "sampling": {"max_tokens": 104}}}
    rows = _rows(planned(_cfg(data, models=(api, ext, judge), tasks=("halogen/summarization",)), PRICES,
                      options=OPTIONS))
    # the generation: 104 x 0.5 = 52 tokens = 40 words = 5 facts of 8 words
    e = rows[("ext", "halogen/summarization", "decompose")]
    t_facts = len(prompts.facts_prompt("").split()) * 1.3
    assert (e.calls, e.input_tokens, e.output_tokens) == (1, round(t_facts + 52), 30)  # 52 capped at max_tokens 30
    j = rows[("oj", "halogen/summarization", "verify")]
    t_ent = len(prompts.entailment_prompt("", "").split()) * 1.3
    # 5 calls: template + the 130-token prompt as premise + a fact of 8 x 1.3 tokens; 5-token answers
    assert (j.calls, j.input_tokens, j.output_tokens) == (5, round(5 * (t_ent + 130 + 10.4)), 25)
    assert math.isclose(j.usd, (j.input_tokens + 25) * 2.0 / 1e6)


def test_every_task_that_calls_a_role_model_has_an_estimate():
    for name in task_names():
        task = get_task(name)
        rules = task.cost_rules(FEWL_OPTIONS if name == "fewl/score" else None)
        assert bool(task.roles) == bool(rules), name
        assert {r.role for r in rules} == set(task.roles), name
        shape = Shape(P=10.0, G=100.0, evidence=50.0, o=PlanOptions())  # every template renders empty
        for r in rules:
            sizes = (r.calls(shape), r.input_tokens(shape), r.output_tokens(shape))
            assert all(math.isfinite(x) and x > 0 for x in sizes), (name, r.stage)


def test_a_task_with_roles_and_no_cost_rules_stops_the_plan(data, monkeypatch):
    monkeypatch.setattr(get_task("halogen/historical_events"), "cost_rules", lambda options=None: ())
    with pytest.raises(RunError, match="task 'halogen/historical_events' calls role models \\(judge\\) but "
                                       "declares no cost rules"):
        planned(_cfg(data), PRICES, options=OPTIONS)


@pytest.mark.parametrize("source, billions", [
    ("meta-llama/Llama-3.1-70B-Instruct", (70.0, 70.0, 2.0)),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", (46.7, 12.9, 2.0)),  # the table's experts, not 8 x 7
    ("mistralai/Mixtral-8x22B-Instruct-v0.1", (141.0, 39.0, 2.0)),
    ("meta-llama/Llama-3.1-405B-Instruct-FP8", (405.0, 405.0, 1.0)), ("HuggingFaceTB/SmolLM-135M", (0.135, 0.135, 2.0)),
    ("Qwen/Qwen2.5-0.5B-Instruct", (0.5, 0.5, 2.0)), ("Qwen/Qwen2.5-72B-Instruct-AWQ", (72.0, 72.0, 0.5))])
def test_model_size_from_the_name(source, billions):
    spec = parse_config({"tasks": ["halogen/code"], "models": [
        {"id": "m", "backend": "vllm", "params": {"model_source": source}}]}).models[0]
    size = model_size(spec, PlanOptions())
    assert isinstance(size, ModelSize) and (size.total_b, size.active_b, size.bytes_per_param) == billions


def _vllm(source, **params):
    return parse_config({"tasks": ["halogen/code"], "models": [
        {"id": "m", "backend": "vllm", "params": {"model_source": source, **params}}]}).models[0]


def test_an_unknown_mixture_of_experts_is_not_multiplied_out_but_sized_by_the_options():
    spec = _vllm("acme/Blend-16x3B-Instruct")
    why = model_size(spec, PlanOptions())
    assert isinstance(why, str) and "mixture of experts (16x3B)" in why and "active_params_b['m']" in why
    assert busy_seconds(spec, 1, 10, 10, PlanOptions()) == (None, why)
    sized = PlanOptions(params_b={"m": 30.0}, active_params_b={"m": 6.0})
    assert model_size(spec, sized) == ModelSize(30.0, 6.0, 2.0, "plan options, 16-bit, assumed")


def test_a_mixture_of_experts_computes_with_its_active_parameters_and_loads_all():
    """Mixtral-8x22B: 141B loaded, 39B per token. At 8B an H100 prefills 25,000 and decodes 5,000
    tokens/s (cluster/throughput.yaml); 8x22B on it: 25,000 x 8/39 and 5,000 x 8/39."""
    o = PlanOptions()
    spec = _vllm("mistralai/Mixtral-8x22B-Instruct-v0.1", accelerator_type="H100")
    seconds, _ = busy_seconds(spec, 100, 39_000, 7_800, o)
    assert seconds is not None and math.isclose(seconds, 39_000 / (25_000 * 8 / 39) + 7_800 / (5_000 * 8 / 39))
    assert math.isclose(seconds, 7.605 + 7.605)  # 39,000 x 39 / 200,000 and 7,800 x 39 / 40,000
    assert math.isclose(startup_seconds(spec, o), 60 + 2.5 * 141)  # vllm_s + 2.5 s per billion, all 141B


def test_fp8_weights_decode_and_load_at_their_bytes_and_prefill_at_the_16_bit_rate():
    """Llama-3.1-405B in FP8 reads 1 byte per weight where 16 bits read 2: decode twice as fast,
    load in half the time; prefill as in 16 bits. On H100 (25,000 / 5,000 tokens/s at 8B):
    prefill 25,000 x 8/405 = 493.8 tokens/s, decode 5,000 x 8/405 x 2 = 197.5 tokens/s."""
    o = PlanOptions()
    fp8 = _vllm("meta-llama/Llama-3.1-405B-Instruct-FP8", accelerator_type="H100", tensor_parallel_size=8)
    bf16 = _vllm("meta-llama/Llama-3.1-405B-Instruct", accelerator_type="H100", tensor_parallel_size=8)
    by_kwargs = _vllm("meta-llama/Llama-3.1-405B-Instruct", accelerator_type="H100", tensor_parallel_size=8,
                      engine_kwargs={"quantization": "fp8"})
    tin, tout = 40_500, 40_500
    fp8_s, _ = busy_seconds(fp8, 10, tin, tout, o)
    bf16_s, _ = busy_seconds(bf16, 10, tin, tout, o)
    assert fp8_s is not None and bf16_s is not None
    assert math.isclose(fp8_s, 40_500 * 405 / 200_000 + 40_500 * 405 / 80_000)  # 82.0125 + 205.03125
    assert math.isclose(bf16_s, 40_500 * 405 / 200_000 + 40_500 * 405 / 40_000)  # 82.0125 + 410.0625
    assert busy_seconds(by_kwargs, 10, tin, tout, o) == (fp8_s, None)
    assert math.isclose(startup_seconds(fp8, o), 60 + 2.5 * 405 / 2)  # 566.25 s against 1,072.5 in 16 bits
    assert math.isclose(startup_seconds(bf16, o), 60 + 2.5 * 405)
    size = model_size(by_kwargs, o)
    assert isinstance(size, ModelSize) and size.how == "its name, engine_kwargs quantization fp8"


@pytest.mark.parametrize("model, expected", [
    (LLAMA, ("H100", 2.0)),  # TP 2, one GPU per worker
    ({"id": "m", "backend": "vllm", "params": {"model_source": "x", "pipeline_parallel_size": 2,
                                               "serve": {"num_cpus": 3}}}, ("CPU", 7.0)),  # 2 workers, front end
    ({"id": "m", "backend": "hf", "params": {"model_source": "x", "serve": {"num_gpus": 1}}}, ("GPU", 1.0)),
    ({"id": "m", "backend": "scripted"}, ("CPU", 1.0))])
def test_placement(model, expected):
    spec = parse_config({"tasks": ["halogen/code"], "models": [model]}).models[0]
    assert placement(spec) == expected


def test_unpriced_items_make_the_total_unknown_not_zero(data):
    text = planned(_cfg(data), None, options=OPTIONS.model_copy(update={"params_b": {}})).table()
    assert "total: unknown, 7 line item(s) unpriced (priced items: $0.0000)" in text
    assert "total: $" not in text and "judge unpriced" in text
    assert "unpriced: api (test): no price table (costs.price_table)" in text


def test_a_replay_only_plan_checks_its_files_and_holds_no_served_model(data, tmp_path):
    recorded = tmp_path / "rec.jsonl"
    recorded.write_text(json.dumps({"prompt": CODE_PROMPTS[0], "response": "import os"}) + "\n")
    rec = {"id": "rec", "backend": "replay", "params": {"source": "file", "path": str(recorded)}}
    text = planned(_cfg(data, models=(rec,), tasks=("halogen/code",)), PRICES, options=OPTIONS).table()
    assert "total: $0.0000" in text and "served models held" not in text
    recorded.unlink()
    with pytest.raises(DataError, match=f"recorded generations file not found: {recorded}"):
        planned(_cfg(data, models=(rec,), tasks=("halogen/code",)), PRICES, options=OPTIONS)


# --- the throughput table (cluster/throughput.yaml) ------------------------------------------

def test_the_throughput_table_gives_every_priced_accelerator_a_figure():
    table = load_throughput(CHECKOUT / DEFAULT_THROUGHPUT_TABLE)
    prices = load_prices(str(CHECKOUT / "cluster" / "prices.yaml"))
    assert set(prices.gpu_hour_usd) <= set(table.throughput)
    assert PlanOptions().throughput == table.throughput


def test_the_throughput_table_is_found_from_any_directory_and_the_working_directorys_wins(data, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)  # no cluster/ here: the checkout this package runs from has it
    assert find_throughput_table() == CHECKOUT / DEFAULT_THROUGHPUT_TABLE
    # costs.price_table: null leaves dollars unknown, never the served models' hours
    p = planned(_cfg(data, costs={"price_table": None}), None, options=PlanOptions(params_b={"judge": 16}))
    assert p.wall_hours is not None and _rows(p)[("llama", "halogen/code", "generate")].resource_hours
    own = yaml.safe_load((CHECKOUT / DEFAULT_THROUGHPUT_TABLE).read_text())
    own["throughput"]["H100"]["decode_tokens_per_s"] = 1
    (tmp_path / "cluster").mkdir()
    (tmp_path / DEFAULT_THROUGHPUT_TABLE).write_text(yaml.safe_dump(own))  # as a job's checkout holds it
    assert PlanOptions().throughput["H100"].decode_tokens_per_s == 1


def test_without_a_throughput_table_only_a_served_model_stops_the_plan(data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(throughput, "CHECKOUT", tmp_path)
    assert PlanOptions().throughput == {}
    with pytest.raises(ConfigError, match="cluster/throughput.yaml .* run from the repository"):
        planned(_cfg(data), None, options=PlanOptions(**OPTIONS.model_dump(exclude={"table"})))
    text = planned(_cfg(data, models=(API,), tasks=("halogen/code",)), PRICES).table()  # no served model
    assert "total: $" in text and "throughput table" not in text  # nor a note on what does not apply


def test_a_bad_throughput_table_names_the_file_and_field(tmp_path):
    table = yaml.safe_load((CHECKOUT / DEFAULT_THROUGHPUT_TABLE).read_text())
    table["throughput"]["H100"]["prefill_tokens_per_s"] = 0
    bad = tmp_path / "throughput.yaml"
    bad.write_text(yaml.safe_dump(table))
    with pytest.raises(ConfigError, match=f"invalid throughput table {bad}: throughput.H100.prefill_tokens_per_s"):
        load_throughput(bad)
    with pytest.raises(ConfigError, match="throughput table not found"):
        load_throughput(tmp_path / "none.yaml")


@pytest.mark.parametrize(("field", "value"), [
    (("throughput", "H100", "prefill_tokens_per_s"), float("inf")),
    (("throughput", "H100", "decode_tokens_per_s"), 1e300),
    (("startup", "vllm_s"), float("nan")), (("startup", "vllm_load_s_per_b"), 1e9),
    (("reference_params_b",), float("inf")), (("experts", "mixtral-8x7b", "total_b"), float("inf"))])
def test_a_throughput_table_that_would_plan_a_run_for_nothing_is_refused(tmp_path, field, value):
    """A table is read as written: an infinite or absurd rate, or a start-up of no finite time,
    would put any run under any budget; each is refused naming its field."""
    table = yaml.safe_load((CHECKOUT / DEFAULT_THROUGHPUT_TABLE).read_text())
    *path, key = field
    node = table
    for k in path:
        node = node[k]
    node[key] = value
    bad = tmp_path / "throughput.yaml"
    bad.write_text(yaml.safe_dump(table))
    with pytest.raises(ConfigError, match=f"invalid throughput table {bad}: {'.'.join(field)}"):
        load_throughput(bad)


def test_a_model_is_planned_only_on_the_tasks_it_answers(data):
    """models[].tasks: the run never generates the other pairs, so the plan neither loads nor bills them."""
    only_code = {**API, "tasks": ["halogen/code"]}
    rows = _rows(planned(_cfg(data, models=(only_code, LLAMA, JUDGE)), PRICES, options=OPTIONS))
    assert ("api", "halogen/code", "generate") in rows
    assert not any(m == "api" and t == "halogen/historical_events" for m, t, _ in rows)
    assert ("llama", "halogen/historical_events", "generate") in rows


def test_the_notes_state_only_the_assumptions_that_apply(data):
    """An API-only plan says nothing of served models' start-up or GPU waves; one with served
    models says both what it assumes of them and of the API."""
    def assumptions(p) -> str:
        (note,) = [n for n in p.notes if n.startswith("estimates: ")]
        return note

    api_only = assumptions(planned(_cfg(data, models=(API,), tasks=("halogen/code",)), PRICES, options=OPTIONS))
    assert "served models" not in api_only and "waves" not in api_only and "API requests 10 output" in api_only
    mixed = assumptions(planned(_cfg(data), PRICES, options=OPTIONS))
    assert "served models: " in mixed and "in waves under the GPU budget" in mixed and "API requests" in mixed


# --- a measured table (halluscope calibrate --throughput) ---------------------------------------

def test_a_measured_row_plans_the_load_it_was_measured_on(data, tmp_path, capsys):
    """The table's row and start-up from an engine's own figures (the inverses of the estimate's
    rules): planned with them, a load takes what the engine took."""
    from halluscope.cli import main
    from halluscope.pipeline.engine_speed import EngineSpeed, with_measured_row, write_table

    cfg = _cfg(data, models=(LLAMA,), tasks=("halogen/code",), costs={"price_table": None})
    (llama,) = cfg.models  # 8B on 2 H100s
    # an engine that prefilled 12,000 tokens in 2 s and decoded 3,000 in 6 s after 1,200 prompt tokens
    speed = EngineSpeed("llama", deploy_s=95.0, calls=64, prefill_tokens=12_000, prefill_s=2.0,
                        decode_input_tokens=1_200, decode_output_tokens=3_000, decode_s=6.2)
    assert (speed.prefill_tokens_per_s, speed.decode_tokens_per_s) == (6000.0, 500.0)
    base = PlanOptions()
    table = with_measured_row(base.table_or_raise(), llama, speed, base, "2026-11-28")
    assert table.measured["H100"].model == "llama" and table.throughput["A100-80G"] == base.throughput["A100-80G"]
    measured = PlanOptions(table=table)
    assert measured.throughput["H100"] == Throughput(prefill_tokens_per_s=3000, decode_tokens_per_s=250)
    seconds, _ = busy_seconds(llama, 64, 1_200, 3_000, measured)  # GPU-seconds over the 2 GPUs it holds
    assert math.isclose(seconds / 2, 6.2) and math.isclose(startup_seconds(llama, measured), 95.0)
    # measured again, the row is the new measurement's
    slower = EngineSpeed("judge", 10.0, 64, 1_000, 1.0, 0, 100, 1.0)
    assert with_measured_row(table, llama, slower, measured, "2026-11-29").measured["H100"].model == "judge"

    path = tmp_path / "measured.yaml"
    write_table(table, path)
    assert path.read_text().startswith("# measured by halluscope calibrate --throughput: H100 on H100 (2026-11-28")
    assert load_throughput(path) == table
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"tasks": ["halogen/code"], "models": [LLAMA], "costs": {"price_table": None},
                                      "data": {"dir": str(data), "download": False}}))
    assert main(["plan", str(config), "--json"]) == 0
    assumed = json.loads(capsys.readouterr().out)
    assert main(["plan", str(config), "--json", "--throughput", str(path)]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["wall_hours"] != assumed["wall_hours"]
    assert math.isclose(planned["wall_hours"] * 3600, 95.0 + (39 / 6000 + 200 / 500))  # 2 prompts, 200 tokens
    assert any("H100 measured on H100 2026-11-28 (llama)" in n for n in planned["notes"])
    # a config that names the table: the plan and the run's own estimate (budget gate, waves) read it
    named = {**yaml.safe_load(config.read_text()), "costs": {"price_table": None, "throughput_table": str(path)}}
    config.write_text(yaml.safe_dump(named))
    assert main(["plan", str(config), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["wall_hours"] == planned["wall_hours"]
    assert ResolvedRun.of(parse_config(named)).plan_options.table == table
    with pytest.raises(ConfigError, match=f"throughput table not found: {tmp_path / 'none.yaml'}"):
        plan_options(parse_config(named), str(tmp_path / "none.yaml"))


def test_the_prefill_load_is_the_same_every_time_and_shares_no_prefix_with_another_calibrations():
    from halluscope.pipeline.engine_speed import prefill_prompts

    first = prefill_prompts(64, 200, "a1b2")
    assert first == prefill_prompts(64, 200, "a1b2") and len({p.split()[0] for p in first}) == 64
    assert all(len(p.split()) == 205 for p in first)  # the number, the words, the request
    again = prefill_prompts(64, 200, "c3d4")  # another calibration's: the same words, no prefix in common
    assert [p.split(maxsplit=1)[1] for p in again] == [p.split(maxsplit=1)[1] for p in first]
    assert not {p[:2] for p in again} & {p[:2] for p in first}


def test_a_scripted_engine_reads_its_prompts_and_produces_its_answers_in_one_queue():
    """A stand-in engine (``prefill_tokens_per_s``, ``tokens_per_s``) is busy for its prompts' tokens
    at one rate plus its answers' at the other, per replica, times the GPUs it holds."""
    spec = parse_config({"tasks": ["halogen/code"], "models": [{"id": "m", "backend": "scripted", "params": {
        "prefill_tokens_per_s": 500.0, "tokens_per_s": 20.0, "serve": {"num_gpus": 4}}}]}).models[0]
    assert busy_seconds(spec, 10, 5_000, 200, PlanOptions()) == ((5_000 / 500 + 200 / 20) * 4, None)


def test_a_calibration_keeps_the_slower_of_two_engines_on_one_resource(data, monkeypatch):
    """Two engines on H100s measured in one calibration: the slower row stays (a budget errs high),
    whichever is measured first; the deploys and loads are replaced by their figures here."""
    from halluscope.pipeline import engine_speed

    judge = {**JUDGE, "params": {**JUDGE["params"], "model_source": "org/Judge-8B"}}
    figures = {"llama": (4_000, 400), "judge": (6_000, 300)}  # prefill, decode tokens/s of each engine
    asked: dict[str, list[str]] = {}

    def measure(spec, prompts, http_port, calls=None):
        asked[spec.id] = prompts
        prefill, decode = figures[spec.id]
        return engine_speed.EngineSpeed(spec.id, 60.0, 8, prefill, 1.0, 0, decode, 1.0)

    monkeypatch.setattr(engine_speed, "measure", measure)
    monkeypatch.setattr(engine_speed, "init_ray", lambda spec: False)
    for order in ((LLAMA, judge), (judge, LLAMA)):
        cfg = _cfg(data, models=order, tasks=("halogen/code",), costs={"price_table": None})
        table, speeds = engine_speed.calibrate_speed(ResolvedRun.of(cfg))
        assert [s.model for s in speeds] == [m["id"] for m in order]
        assert table.measured["H100"].model == "judge" and table.measured["H100"].decode_tokens_per_s == 300
    assert asked["judge"] == asked["llama"] == CODE_PROMPTS  # a role is measured on the run's prompts


def test_calibrate_writes_its_table_into_a_new_folder_and_refuses_a_path_it_cannot_write_before_measuring(
        data, tmp_path, monkeypatch, capsys):
    from halluscope.cli import main
    from halluscope.pipeline import engine_speed

    measured: list[str] = []

    def calibrate_speed(run, calls=None):
        cfg = run.cfg
        measured.append(cfg.models[0].id)
        speed = engine_speed.EngineSpeed("llama", 60.0, 8, 4_000, 1.0, 0, 400, 1.0)
        return engine_speed.with_measured_row(PlanOptions().table_or_raise(), cfg.models[0], speed, PlanOptions(),
                                              "2026-11-29"), [speed]

    monkeypatch.setattr(engine_speed, "calibrate_speed", calibrate_speed)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"tasks": ["halogen/code"], "models": [LLAMA], "costs": {"price_table": None},
                                      "data": {"dir": str(data), "download": False}}))
    out = tmp_path / "runs-new" / "cpu.yaml"  # a folder a fresh checkout does not have
    assert main(["calibrate", str(config), "--throughput", str(out)]) == 0
    assert load_throughput(out).measured["H100"].model == "llama" and measured == ["llama"]
    capsys.readouterr()
    assert main(["calibrate", str(config), "--throughput", str(tmp_path)]) == 2  # a folder: refused, nothing measured
    assert f"--throughput {tmp_path}: not a file this process can write" in capsys.readouterr().err
    assert measured == ["llama"]


def _judge_on_service(data, base_url="http://127.0.0.1:9/v1", **costs):
    """A run whose judge a shared RayService serves (serve/judge-llama-3.1-70b.yaml on one p5)."""
    judge = {"id": "judge", "role": "judge", "backend": "openai",
             "params": {"base_url": base_url, "model": "llama-3.1-70b-instruct"}}
    return _cfg(data, models=(API, judge), tasks=("halogen/historical_events",),
                costs={"shared_services": [{"name": "svc", "gpus": 8, "resource": "H100", "models": ["judge"]}],
                       **costs},
                cluster={"nodes": [{"name": "p5", "count": 1, "gpus": 8, "accelerator": "H100"}],
                         "service": ["serve/judge-llama-3.1-70b.yaml"]})


def test_a_shared_services_time_comes_from_its_load_at_its_engines_rates(data):
    """The judge a shared RayService serves (serve/judge-llama-3.1-70b.yaml: 70B, TP4, one replica
    held): its calls' input and output tokens at the engine's prefill and decode rates, the table's
    8B figures scaled to 70B; the run waits on it; the service is billed for the run's wall time,
    the engine's busy hours and the rest held idle as lines of their own."""
    cfg = _judge_on_service(data)
    p = planned(cfg, PRICES, options=OPTIONS)
    rows = _rows(p)
    calls = rows[("judge", "halogen/historical_events", "abstain")]
    scale = 8 / 70  # the table's reference size over the engine's
    gpu_s = calls.input_tokens / (1000 * scale) + calls.output_tokens / (100 * scale)
    assert calls.resource == "H100" and math.isclose(calls.resource_hours * 3600, gpu_s)
    assert calls.usd == 0.0  # priced by the service's time
    engine_s = gpu_s / 4  # TP4, one replica
    api = rows[("api", "halogen/historical_events", "generate")]
    api_s = api.output_tokens / 10 / 4  # the model under test: output tokens / rate / at once
    generations = api.generations
    wall = max(api_s, engine_s) + engine_s * min(1.0, cfg.concurrency.batch_size / generations)
    assert math.isclose(p.wall_hours * 3600, wall)
    busy, idle = rows[("svc", "*", "shared")], rows[("svc", "*", "idle")]
    rate = 8 * 3.6  # 8 GPUs at $3.60 an hour
    assert math.isclose(busy.usd, rate * engine_s / 3600) and math.isclose(idle.usd, rate * (wall - engine_s) / 3600)
    assert "busy" in busy.note and "from their load" in busy.note and "idle" in idle.note
    assert math.isclose(busy.resource_hours + idle.resource_hours, 8 * wall / 3600)  # the service's GPU-hours
    # the ledger's busy line, from the calls the run made, by the same rule
    from halluscope.cost.ledger import CallTally
    from halluscope.pipeline.service_load import busy_by_service

    tally = CallTally(cfg.models)
    tally.acc[("judge", "halogen/historical_events", "abstain")].update(
        calls=calls.calls, input_tokens=calls.input_tokens, output_tokens=calls.output_tokens)
    assert busy_by_service(resolved(cfg, plan_options=OPTIONS), tally).keys() == {"svc"}
    assert math.isclose(busy_by_service(resolved(cfg, plan_options=OPTIONS), tally)["svc"], engine_s)


def test_a_served_models_role_calls_join_the_services_queue_when_it_is_given_back(data):
    """A served model under test is evaluated once its deployment is given back (generation is
    staged apart from evaluation): its calls reach the shared engine then, and the engine works
    them in the order models are released; an API model's stream in from the start (the last
    batch's come after its last answer: the tail)."""
    from halluscope.pipeline.service_load import ServiceLoad
    from halluscope.resolve.service_engines import service_engines

    cfg = _judge_on_service(data)
    load = ServiceLoad(service_engines(cfg))
    engine = load.engines["llama-3.1-70b-instruct"]
    scale = 8 / 70  # the table's 1,000 prompt tokens/s per GPU at 8B, on 4 GPUs of a 70B
    per_token = 1 / (1000 * scale) / 4
    load.add(engine, 3, 30_000, 0, OPTIONS, {"a": (10_000, 0), "b": (20_000, 0)})
    a, b = 10_000 * per_token, 20_000 * per_token  # 21.875 s and 43.75 s of the engine's time
    assert math.isclose(load.end_s({}), a + b)  # both stream in from the start
    assert math.isclose(load.end_s({"a": 5.0, "b": 100.0}), 100.0 + b)  # b's calls wait for b's release
    assert math.isclose(load.end_s({"a": 50.0, "b": 60.0}), 60.0 + b + a - 10.0)  # queued behind a's
    assert math.isclose(load.streamed_s({"b": 60.0}), a) and load.streamed_s({"a": 1.0, "b": 2.0}) == 0.0


def test_a_shared_services_engine_is_calibrated_through_its_endpoint_and_planned_at_what_was_measured(data):
    """``calibrate --throughput`` measures the judge a shared service runs (cluster.service: 70B
    TP4) where the run reaches it, over HTTP, and writes the row its resource plans with: the plan's
    engine seconds for a load are its tokens at the measured rates. Nothing was deployed, so the
    table's start-up is kept."""
    from tests.support.openai_server import OpenAIStubServer

    from halluscope.pipeline import engine_speed
    from halluscope.resolve.service_engines import service_engines

    with OpenAIStubServer(responder=lambda prompt: "no") as server:
        cfg = _judge_on_service(data, server.base_url, price_table=None)
        table, speeds = engine_speed.calibrate_speed(ResolvedRun.of(cfg), calls=4)
        prefill_calls = server.calls
    [speed] = speeds
    assert speed.model == "judge" and speed.deploy_s is None and speed.calls == 4
    # one call per client off the clock, then the two loads: 4 prompts to prefill, the run's 2 distinct
    # ones to decode (a repeat would be asked once, its tokens counted twice)
    assert prefill_calls == 2 + 4 + 2 and speed.decode_input_tokens == sum(len(_meeting(a, b).split()) for a, b in MEETINGS)
    measured = table.measured["H100"]
    assert measured.model == "judge" and measured.deploy_s is None and measured.units == 4
    assert table.startup == plan_options(cfg).table_or_raise().startup
    engine = service_engines(cfg)["llama-3.1-70b-instruct"].spec
    gpu_s, why = busy_seconds(engine, 1, 10_000, 100, PlanOptions(table=table))
    assert why is None and math.isclose(gpu_s / 4, 10_000 / speed.prefill_tokens_per_s + 100 / speed.decode_tokens_per_s)


def test_a_calibration_whose_calls_were_retried_records_nothing(data):
    """A load in which one call timed out or was refused and retried measured the wait, not the
    engine: the calibration stops and says so."""
    from tests.support.openai_server import FailPlan, OpenAIStubServer

    from halluscope.pipeline import engine_speed

    with OpenAIStubServer(responder=lambda prompt: "no", fail_plan=FailPlan(first_n=1, status=503,
                                                                           retry_after="0")) as server:
        cfg = _judge_on_service(data, server.base_url, price_table=None)
        with pytest.raises(RunError, match=r"calibrating 'judge': \d+ of \d+ calls were retried .* nothing was "
                                           r"recorded"):
            engine_speed.calibrate_speed(ResolvedRun.of(cfg), calls=4)


def test_the_plan_bills_cold_starts_the_pods_and_the_gpus_after_the_last_release(data):
    """costs.overheads as the k8s manifests set them: each served model's fresh node boots (300 s),
    pulls a 15 GB image at 0.25 GB/s (60 s) and downloads its 16-bit weights into its pod at
    0.5 GB/s, before it starts; the head (8 cores, 600 s past the end) and 16 CPU worker cores
    for the wall; the last wave's GPUs until the autoscaler removes their node (300 s)."""
    overheads = {"head_cpus": 8, "cpu_worker_cpus": 16, "node_boot_s": 300, "image_gb": 15, "pull_gb_per_s": 0.25,
                 "weights_gb_per_s": 0.5, "weights_cache": "per_pod", "scale_down_s": 300, "after_finish_s": 600}
    prices = PRICES.model_copy(update={"gpu_hour_usd": {"H100": 3.6, "CPU": 0.036}})  # $0.00001 a core-second
    before = planned(_cfg(data), prices, options=OPTIONS)
    p = planned(_cfg(data, costs={"overheads": overheads}), prices, options=OPTIONS)
    rows = _rows(p)
    llama_cold = 300 + 15 / 0.25 + 8 * 2 / 0.5  # 8B x 2 bytes: 392 s
    judge_cold = 300 + 15 / 0.25 + 16 * 2 / 0.5  # 16B: 424 s
    assert math.isclose(rows[("llama", "*", "cold_start")].resource_hours * 3600, 2 * llama_cold)  # TP2
    assert math.isclose(rows[("judge", "*", "cold_start")].resource_hours * 3600, 4 * judge_cold)  # TP4
    # the judge, held for the whole run, starts last: the wall waits its cold start
    assert math.isclose(p.wall_hours * 3600, before.wall_hours * 3600 + judge_cold)
    wall = p.wall_hours * 3600
    pods = rows[(HEAD, "*", "pods")]
    assert math.isclose(pods.resource_hours * 3600, 8 * 600 + (8 + 16) * wall)
    assert math.isclose(pods.usd, (8 * 600 + 24 * wall) * 0.00001)
    tail = rows[("*", "*", "after_release")]
    assert math.isclose(tail.resource_hours * 3600, 2 * 300) and math.isclose(tail.usd, 0.6)  # llama's 2 GPUs
    # a model's window grows by its cold start; its idle time does not: the cold start is a line of its own
    assert math.isclose(rows[("llama", "*", "idle")].resource_hours, _rows(before)[("llama", "*", "idle")].resource_hours)
    assert not p.unpriced


# --- role calls a twin task shares, and every reference model's --------------------------------

OPEN_JUDGE = {"id": "judge", "role": "judge", "backend": "openai",
              "params": {"base_url": "http://127.0.0.1:9/v1", "model": "gpt-judge", "sampling": {"max_tokens": 20}}}
EXTRACTOR = {"id": "ext", "role": "extractor", "backend": "openai",
             "params": {"base_url": "http://127.0.0.1:9/v1", "model": "gpt-ext", "sampling": {"max_tokens": 100}}}


def _calls(p, stage):
    return {(r.model, r.task): (r.calls, r.cached_calls) for r in p.rows if r.stage == stage}


@pytest.mark.parametrize("judge, cache, shared", [
    (OPEN_JUDGE, True, True),  # the twins' meeting prompts are the same: the call cache answers the second
    (OPEN_JUDGE, False, False),  # no call cache: each task asks its own
    ({**OPEN_JUDGE, "params": {**OPEN_JUDGE["params"], "structured_output": "json_schema"}}, True, False),
    (JUDGE, True, False)])  # a vLLM judge is sent the corrected rules' Yes/No format: another question
def test_a_twin_tasks_judge_calls_are_counted_once_where_the_call_cache_shares_them(data, judge, cache, shared):
    """halogen/historical_events and its @corrected twin ask the judge the same meeting prompt of each
    of the 2 generations (paper: no answer format, corrected: Yes/No): 2 calls, then 2 cached or 2 more."""
    cfg = _cfg(data, models=(API, judge), tasks=("halogen/historical_events", "halogen/historical_events@corrected"),
               cache={"enabled": cache})
    calls = _calls(planned(cfg, PRICES, options=OPTIONS), "abstain")
    assert calls[("judge", "halogen/historical_events")] == (2, 0)
    assert calls[("judge", "halogen/historical_events@corrected")] == ((0, 2) if shared else (2, 0))


def test_a_twin_shares_the_extractors_facts_and_the_judges_verdicts_it_is_asked_alike(data):
    """halogen/summarization and its twin: one facts extraction per generation (1), then one entailment
    call per fact: a generation of 100 x 0.5 = 50 tokens holds 50 / 1.3 / 8 = 4.8 facts, 5 calls. The
    twin asks the extractor alike (1 cached), and an endpoint judge alike (5 cached); a vLLM judge is
    sent the corrected Yes/No format, so its 5 calls are the twin's own."""
    tasks = ("halogen/summarization", "halogen/summarization@corrected")
    for judge, verified in ((OPEN_JUDGE, (0, 5)), (JUDGE, (5, 0))):
        p = planned(_cfg(data, models=(API, judge, EXTRACTOR), tasks=tasks), PRICES, options=OPTIONS)
        decompose, verify = _calls(p, "decompose"), _calls(p, "verify")
        assert decompose[("ext", tasks[0])] == (1, 0) and decompose[("ext", tasks[1])] == (0, 1)
        assert verify[("judge", tasks[0])] == (5, 0) and verify[("judge", tasks[1])] == verified


def test_rationalization_binary_twins_share_no_parse():
    """The paper rules parse with the authors' templates, the corrected with ours."""
    (paper,) = get_task("halogen/rationalization_binary").cost_rules()
    (corrected,) = get_task("halogen/rationalization_binary@corrected").cost_rules()
    assert paper.template != corrected.template


FEWL_OPTIONS = FewlOptions.model_validate({"dataset": {"name": "truthfulqa-gen", "source": "x"},
                                           "references": ["ref-a", "ref-b"], "generator": "iwco"})


def _reference(id_, model):
    return {"id": id_, "role": "reference", "backend": "openai",
            "params": {"base_url": "http://127.0.0.1:9/v1", "model": model, "sampling": {"max_tokens": 600}}}


def test_every_fewl_reference_model_is_planned_and_the_generator_apart(tmp_path):
    """Two questions; each asks ref-a and ref-b once for an answer (answer_tokens 10 out) with the
    reference prompt the item holds (P tokens in), and the generator once for 25 IW/CO pairs
    (2 x 25 x 8 x 1.3 = 520 tokens out, the IW/CO template and the question in)."""
    questions = ["Is the sky blue?", "What happens if you swallow gum?"]
    csv_path = tmp_path / "TruthfulQA.csv"
    csv_path.write_text("Question,Best Answer,Correct Answers,Incorrect Answers\n"
                        + "".join(f'"{q}",Yes,Yes; Indeed,No\n' for q in questions))
    cfg = parse_config({"tasks": ["fewl/score"], "models": [
        API, _reference("ref-a", "gpt-judge"), _reference("ref-b", "gpt-ext"), _reference("iwco", "gpt-judge")],
        "benchmarks": {"fewl": {"dataset": {"name": "truthfulqa-gen", "source": str(csv_path)},
                                "references": ["ref-a", "ref-b"], "generator": "iwco"}}})
    rows = _rows(planned(cfg, PRICES, options=OPTIONS))
    ref_prompts = [len(fewl_prompts.reference_prompt(q).split()) * 1.3 for q in questions]
    question_tokens = [len(q.split()) * 1.3 for q in questions]
    iw_co = len(fewl_prompts.iw_co_prompt("", 25).split()) * 1.3
    P = sum(ref_prompts) / 2  # the items' mean prompt
    for ref in ("ref-a", "ref-b"):
        r = rows[(ref, "fewl/score", "verify")]
        assert (r.calls, r.input_tokens, r.output_tokens) == (2, round(2 * P), 20)
    g = rows[("iwco", "fewl/score", "verify")]
    question = P - len(fewl_prompts.reference_prompt("").split()) * 1.3  # the question's part of the prompt
    assert math.isclose(question, sum(question_tokens) / 2)
    assert (g.calls, g.input_tokens, g.output_tokens) == (2, round(2 * (iw_co + question)), 1040)


def test_a_stage_of_no_calls_is_planned_at_zero(data, tmp_path):
    """A replayed model with no response to a task's items: no generation to judge, 0 facts, 0 calls."""
    recorded = tmp_path / "rec.jsonl"
    recorded.write_text(json.dumps({"prompt": CODE_PROMPTS[0], "response": "import os"}) + "\n")
    rec = {"id": "rec", "backend": "replay", "params": {"source": "file", "path": str(recorded)}}
    p = planned(_cfg(data, models=(rec, OPEN_JUDGE, EXTRACTOR), tasks=("halogen/summarization",)), PRICES,
             options=OPTIONS)
    assert _calls(p, "verify")[("judge", "halogen/summarization")] == (0, 0)
