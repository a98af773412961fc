"""`halluscope plan`: what a run will cost before it starts, per (model, role, task, stage).

Rows mirror the cost ledger (cost/ledger.py), so a plan can be compared with what the run then
records: generation by each model under test, and the abstain/decompose/verify calls to the
judge and extractor (one row per role model, task and stage, summed over the models under test).

Sizes come from earlier runs when their tables are given (``TokenStats.measure``): calls per
generation and tokens per call, per model and task, else pooled over the models measured on the
task. What was not measured is estimated:

- prompt tokens: the actual items (limits applied), whitespace words x ``tokens_per_word``
  (1.3: English averages ~0.75 words per BPE token with the Llama-3 and OpenAI tokenizers);
- generation tokens: the model's ``max_tokens`` x ``fill_factor`` (0.5: HALOGEN's released
  responses of 14 models average 23-159 words per task, i.e. 30-210 tokens, and the longest
  model mean, 242 words, is 0.6 of the default 512 tokens); replayed generations: their texts;
- role calls per generation: the task's own ``cost_rules()`` (contract/cost_rules.py: which phase
  calls which role, once or per atom) with atoms = facts of ``words_per_fact`` words. They
  assume every generation responds and every fact finds evidence: an upper bound, which a
  budget wants; a pilot run's measured stats replace them.

Dollars: API models by their tokens (price table). Served models by resource-hours: busy time
from a throughput assumption per accelerator (``Throughput``; a scripted stand-in's own
``tokens_per_s`` and answers), and, as the ledger charges every deployment for as long as it is
held, an ``idle`` row per served model for the rest of its time on the cluster. The served models
under test are held from their deployment's start to the end of their generation, in the waves
``schedule.simulate`` gives under the run's GPU budget (the same rule the run follows); the roles
the run serves are held for the whole run (the schedule's makespan, or startup + the busiest
other model's time, whichever is longer).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Iterable

from pydantic import BaseModel, ConfigDict, Field

from halluscope.config import (HFModel, ModelSpec, OpenAIModel, RecordedModel, ReplayModel, RunConfig, ScriptedModel,
                               StorageSpec, VLLMModel, WikiSpec)
from halluscope.pipeline.schedule import Job, Schedule, budget as schedule_budget, job_of, scheduled, simulate
from halluscope.cost.ledger import api_name
from halluscope.cost.nodes import stranded_rows
from halluscope.cost.shared import service_rate, services_of
from halluscope.cost.prices import PriceTable
from halluscope.errors import DataError, RunError
from halluscope.models.cache import GENERATION_TEMPLATE, call_key, read_calls
from halluscope.models.registry import revision_of, sampling_of
from halluscope.models.replay import load_replay, replay_source
from halluscope.pipeline.workset import models_under_test, resolver_for, testset_locations
from halluscope.records import generation_id
from halluscope.serving.placement import placement
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore
from halluscope.task_registry import benchmark_of, get_task
from halluscope.contract.task import Item, Task
from halluscope.contract.cost_rules import Shape, SizeAssumptions, StageRule

POOLED = "*"  # TokenStats model key: every model measured on the task
REFERENCE_PARAMS_B = 8.0  # Throughput figures are for a dense model of this many billion parameters


class Throughput(BaseModel):
    """Saturated vLLM engine, per GPU (per core for CPU), for an 8B-parameter dense model in 16 bits;
    a model of P billion parameters gets 8 / P of it (time scales with the weights read and the
    FLOPs per token; tensor parallelism is taken as scaling linearly)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    prefill_tokens_per_s: float = Field(gt=0)
    decode_tokens_per_s: float = Field(gt=0)


# Anchored at H100: prefill is compute-bound, 989 dense BF16 TFLOP/s x 40% utilisation / (2 FLOP
# x 8e9 parameters) ~ 25,000 tokens/s; decode 5,000 tokens/s sits between published vLLM figures
# (~12,500 for Llama-3.1-8B on one H100 at high concurrency; 460 for 70B-FP8 on one H100, i.e.
# ~4,000 scaled to 8B) on the low side, so a budget errs high. Other GPUs scale prefill by dense
# BF16 TFLOP/s and decode by memory bandwidth (datasheets: A100-80G 312 / 2.04 TB/s, L40S 362 /
# 0.864, A10 125 / 0.6 against H100 SXM 989 / 3.35). CPU (per core) is a rough figure for the
# small models CPU serving is meant for. Every figure is an assumption: override per run.
DEFAULT_THROUGHPUT: dict[str, Throughput] = {
    "H100": Throughput(prefill_tokens_per_s=25_000, decode_tokens_per_s=5_000),
    "A100-80G": Throughput(prefill_tokens_per_s=7_900, decode_tokens_per_s=3_000),
    "L40S": Throughput(prefill_tokens_per_s=9_200, decode_tokens_per_s=1_300),
    "A10G": Throughput(prefill_tokens_per_s=3_200, decode_tokens_per_s=900),
    "CPU": Throughput(prefill_tokens_per_s=10, decode_tokens_per_s=2),
}


class PlanOptions(SizeAssumptions):
    """The estimate's assumptions; each is printed with the plan."""

    throughput: dict[str, Throughput] = Field(default_factory=lambda: dict(DEFAULT_THROUGHPUT))
    params_b: dict[str, float] = Field(default_factory=dict,
                                       description="model id -> billions of parameters, where the name "
                                                   "does not say (e.g. 'Llama-3.1-70B' does)")
    api_tokens_per_s: float = Field(50.0, gt=0, description="output tokens/s of one API request")
    startup_s: float | None = Field(
        None, ge=0, description="deployment start (pending, weights load, CUDA graphs) of every served model; "
                                "None: by backend and size (startup_seconds)")


# Serve's own part of a deployment's start (a replica process, its imports), measured for scripted
# replicas on 2 cores: 8 s alone, 24-63 s for six at once beside a run (bench/many_models.py)
SERVE_START_S = 20.0
VLLM_START_S = 60.0  # a vLLM engine's start besides its weights: CUDA graphs, KV cache, the API server
VLLM_LOAD_S_PER_B = 2.5  # weights load per billion parameters (~0.8 GB/s from a warm cache; 405B: ~17 min)


def startup_seconds(spec: ModelSpec, options: "PlanOptions") -> float:
    """How long a served model takes from its deployment to its first answer."""
    if options.startup_s is not None:
        return options.startup_s
    if isinstance(spec, ScriptedModel):
        return spec.params.load_s + SERVE_START_S
    if isinstance(spec, VLLMModel):
        size = params_billions(spec, options)
        return VLLM_START_S + VLLM_LOAD_S_PER_B * (size if size is not None else 120.0)
    return 60.0  # hf: small models on CPU or one GPU


# --- measured stats ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StageStats:
    """One stage's sizes per generation; token sizes are None when every call was cached."""

    calls_per_generation: float
    input_tokens_per_call: float | None
    output_tokens_per_call: float | None
    generations: int  # the sample they were measured on


@dataclass
class TokenStats:
    """Measured sizes by (task, stage, role, model under test); model ``*`` pools every model."""

    entries: dict[tuple[str, str, str, str], StageStats] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)

    def get(self, task: str, stage: str, role: str, model: str) -> tuple[StageStats, str] | None:
        """The model's own measurement, else the pooled one, with its basis label."""
        for key, basis in ((model, "measured"), (POOLED, "measured:*")):
            hit = self.entries.get((task, stage, role, key))
            if hit is not None:
                return hit, basis
        return None

    def stages(self, task: str) -> set[tuple[str, str]]:
        return {(s, r) for t, s, r, m in self.entries if t == task and s != "generate"}

    @classmethod
    def from_runs(cls, uris: Iterable[str], storage: StorageSpec | None = None) -> "TokenStats":
        """``measure`` over run folders named by URL (``<root>/<run_id>``)."""
        stores = []
        for uri in uris:
            root, run_id = uri.rstrip("/").rsplit("/", 1)
            store = RunStore(Location.from_url(root, storage), run_id)
            if not store.loc.child("manifest.json").exists():
                raise DataError(f"{uri} is not a halluscope run folder (no manifest.json)")
            stores.append(store)
        return cls.measure(stores)

    @classmethod
    def measure(cls, stores: Iterable[RunStore]) -> "TokenStats":
        """Sums over the committed rows of every store: generation tokens from ``generations``
        (rows with token counts), role calls per generation with text from ``role_calls``."""
        sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0] * 5)  # gens, calls, token calls, in, out
        texts: dict[tuple[str, str], int] = defaultdict(int)
        runs = []
        for store in stores:
            runs.append(store.loc.url)
            gens = store.read_table("generations", ["model", "task", "text", "error", "input_tokens", "output_tokens"])
            for r in gens.to_pylist():
                if r["text"] is None or r["error"] is not None:
                    continue
                for m in (r["model"], POOLED):
                    texts[(r["task"], m)] += 1
                    if r["input_tokens"] is not None and r["output_tokens"] is not None:
                        _add(sums[(r["task"], "generate", "test", m)], 1, 1, 1, r["input_tokens"], r["output_tokens"])
            for r in store.read_table("role_calls").to_pylist():
                for m in (r["model"], POOLED):
                    _add(sums[(r["task"], r["stage"], r["role"], m)], 0, r["calls"] + r["cached_calls"], r["calls"],
                         r["input_tokens"], r["output_tokens"])
        # a model with generations on a task but no call in a stage measured 0 calls there
        for task, stage, role in {k[:3] for k in sums if k[1] != "generate"}:
            for t, m in texts:
                if t == task:
                    sums.setdefault((task, stage, role, m), [0.0] * 5)
        entries = {}
        for key, (n, calls, token_calls, tin, tout) in sums.items():
            gens = n if key[1] == "generate" else texts[(key[0], key[3])]
            if gens:
                entries[key] = StageStats(calls / gens, tin / token_calls if token_calls else None,
                                          tout / token_calls if token_calls else None, int(gens))
        return cls(entries, runs)


def _add(acc: list[float], *values: float) -> None:
    for i, v in enumerate(values):
        acc[i] += v


# --- served models ----------------------------------------------------------------------------

_SIZE = re.compile(r"(?:(\d+)x)?(\d+(?:\.\d+)?)([bBmM])(?![a-zA-Z])")


def params_billions(spec: ModelSpec, options: PlanOptions) -> float | None:
    """From the options, else the last size in the model source or id ("70B", "8x7B" counts all
    experts, "135M"); None when neither says."""
    if spec.id in options.params_b:
        return options.params_b[spec.id]
    for name in (getattr(spec.params, "model_source", ""), spec.id):
        found = _SIZE.findall(name or "")
        if found:
            experts, size, unit = found[-1]
            return float(experts or 1) * float(size) / (1000.0 if unit in "mM" else 1.0)
    return None


def _busy_seconds(spec: ModelSpec, calls: int, tin: int, tout: int,
                  options: PlanOptions) -> tuple[float | None, str | None]:
    """Resource-seconds (GPU- or core-seconds) a served model's calls keep it busy, or why unknown.
    Scripted models take ``latency_s`` per prompt, ``capacity`` prompts at once per replica."""
    resource, units = placement(spec)
    if isinstance(spec, ScriptedModel):
        p = spec.params
        at_once = p.capacity or p.serve.max_ongoing_requests * p.serve.max_batch_prompts
        produce = tout / p.tokens_per_s if p.tokens_per_s else 0.0  # one replica's seconds for every token
        return (calls * p.latency_s / at_once + produce) * units, None
    rate = options.throughput.get(resource)
    if rate is None:
        return None, f"no throughput assumption for resource '{resource}' (plan options: throughput)"
    size = params_billions(spec, options)
    if size is None:
        return None, f"size of '{spec.id}' unknown: set plan options params_b['{spec.id}']"
    scale = REFERENCE_PARAMS_B / size
    return tin / (rate.prefill_tokens_per_s * scale) + tout / (rate.decode_tokens_per_s * scale), None


# --- the plan ---------------------------------------------------------------------------------


@dataclass
class PlanRow:
    model: str
    role: str
    task: str  # "*" for a deployment's idle row
    stage: str  # generate | abstain | decompose | verify | idle
    generations: int  # generations whose calls the row counts
    calls: int
    cached_calls: int
    input_tokens: int
    output_tokens: int
    resource: str | None  # served models: accelerator type or CPU
    resource_hours: float | None  # GPU-hours (core-hours for CPU); None when unknown
    usd: float | None  # None: could not be priced (see note)
    basis: str  # estimated | measured | measured:* | replay | cache | mixed
    note: str | None = None


@dataclass
class Plan:
    rows: list[PlanRow]
    wall_hours: float | None  # how long the served models are held; None when unknown
    notes: list[str]
    options: PlanOptions
    jobs: list[Job] = field(default_factory=list)  # the served models under test, with estimated times
    schedule: Schedule = field(default_factory=Schedule)  # their waves under the run's GPU budget
    budget: dict[str, float] | None = None

    @property
    def total_usd(self) -> float:
        """Sum of the priced rows; see ``unpriced`` for the rest."""
        return math.fsum(r.usd for r in self.rows if r.usd is not None)

    @property
    def unpriced(self) -> list[PlanRow]:
        return [r for r in self.rows if r.usd is None]

    def totals(self) -> dict:
        by_role: dict[str, dict] = {}
        for r in self.rows:
            t = by_role.setdefault(r.role, {"calls": 0, "input_tokens": 0, "output_tokens": 0, "usd": []})
            t["calls"] += r.calls
            t["input_tokens"] += r.input_tokens
            t["output_tokens"] += r.output_tokens
            t["usd"].append(r.usd or 0.0)
        for t in by_role.values():
            t["usd"] = math.fsum(t["usd"])
        hours: dict[str, list[float]] = defaultdict(list)
        for r in self.rows:
            if r.resource and r.resource_hours is not None:
                hours[r.resource].append(r.resource_hours)
        return {"usd": self.total_usd, "unpriced_rows": len(self.unpriced),
                "calls": sum(r.calls for r in self.rows), "cached_calls": sum(r.cached_calls for r in self.rows),
                "input_tokens": sum(r.input_tokens for r in self.rows),
                "output_tokens": sum(r.output_tokens for r in self.rows),
                "resource_hours": {k: math.fsum(v) for k, v in sorted(hours.items())}, "by_role": by_role}

    def schedule_dict(self) -> dict:
        out = self.schedule.as_dict()
        out["budget"] = self.budget
        out["lower_bound_s"] = self.schedule.lower_bound_s(self.budget) if self.budget else None
        usd = [r.usd for r in self.rows if r.model in {j.model for j in self.jobs} and r.resource]
        out["usd"] = None if any(u is None for u in usd) else math.fsum(u for u in usd if u is not None)
        return out

    def as_dict(self) -> dict:
        return {"rows": [asdict(r) for r in self.rows], "totals": self.totals(), "wall_hours": self.wall_hours,
                "schedule": self.schedule_dict(), "notes": list(self.notes),
                "options": self.options.model_dump(mode="json")}

    def schedule_lines(self) -> list[str]:
        """The served models under test: waves, each model's window, peak GPUs, makespan, GPU-hours."""
        if not self.jobs:
            return []
        s, d = self.schedule, self.schedule_dict()
        budget = ", ".join(f"{k} {v:g}" for k, v in (self.budget or {}).items() if math.isfinite(v)) or "none known"
        lines = ["", f"schedule of the served models under test (budget: {budget}):"]
        for i, wave in enumerate(s.waves()):
            lines.append(f"  wave {i + 1}: {', '.join(wave)}")
        for w in sorted(s.windows, key=lambda w: (w.start_s, w.model)):
            lines.append(f"  {w.model}: {w.units:g} {w.resource}, deploy {_clock(w.start_s)}, generate "
                         f"{_clock(w.ready_s)}-{_clock(w.end_s)}, released {_clock(w.end_s)}")
        bound = f" (lower bound {_clock(d['lower_bound_s'])})" if d["lower_bound_s"] is not None else ""
        usd = "unpriced" if d["usd"] is None else f"${d['usd']:,.2f}"
        lines.append(f"  peak GPUs {d['peak_gpus']:g}; makespan {_clock(s.makespan_s)}{bound}; GPU-hours busy "
                     f"{d['gpu_hours_busy']:,.3f} of {d['gpu_hours_held']:,.3f} held; {usd}")
        return lines + [f"  note: {n}" for n in s.notes]

    def table(self) -> str:
        head = ["model", "role", "task", "stage", "gens", "calls", "cached", "in tok", "out tok", "resource",
                "res-h", "USD", "basis"]
        body = [[r.model, r.role, r.task, r.stage, f"{r.generations:,}", f"{r.calls:,}", f"{r.cached_calls:,}",
                 f"{r.input_tokens:,}", f"{r.output_tokens:,}", r.resource or "-", _num(r.resource_hours, 3),
                 _num(r.usd, 4), r.basis] for r in self.rows]
        widths = [max(len(x) for x in col) for col in zip(head, *body)]
        lines = ["  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip() for line in [head, *body]]
        t = self.totals()
        unpriced_roles = {r.role for r in self.unpriced}
        roles = ", ".join(f"{role} " + ("unpriced" if role in unpriced_roles else f"${v['usd']:,.4f}")
                          for role, v in sorted(t["by_role"].items()))
        hours = ", ".join(f"{k} {v:,.3f} h" for k, v in t["resource_hours"].items()) or "none"
        # a sum over priced items alone would pass for the cost of the run
        usd = f"unknown, {len(self.unpriced)} line item(s) unpriced (priced items: ${t['usd']:,.4f})" \
            if self.unpriced else f"${t['usd']:,.4f}"
        held = f"; served models held {_num(self.wall_hours, 3)} h" if any(r.stage == "idle" for r in self.rows) \
            else ""
        lines += ["", f"total: {usd} ({roles}); {t['calls']:,} calls ({t['cached_calls']:,} cached), "
                      f"{t['input_tokens']:,} input / {t['output_tokens']:,} output tokens; resource-hours: {hours}"
                      f"{held}"]
        if self.unpriced:
            lines.append("unpriced: " + "; ".join(sorted({f"{r.model} ({r.role}): {r.note}" for r in self.unpriced})))
        lines += self.schedule_lines()
        lines += ["notes:", *(f"- {n}" for n in self.notes)]
        return "\n".join(lines)


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    m, sec = divmod(int(round(seconds)), 60)
    return f"{m // 60}:{m % 60:02d}:{sec:02d}" if m >= 60 else f"{m}:{sec:02d}"


def _num(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _count(x: float) -> int:
    """Expected counts rounded half up (Python's round() goes to even)."""
    return int(math.floor(x + 0.5))


@dataclass
class _Acc:
    generations: float = 0.0
    calls: float = 0.0
    cached: int = 0
    tin: float = 0.0
    tout: float = 0.0
    bases: set[str] = field(default_factory=set)


def _load_items(cfg: RunConfig) -> dict[tuple[str, str], list[Item]]:
    """Items per (task, model under test): a model's own test sets where the run lists them per
    model; a task's items are loaded once per distinct list of test sets."""
    limit, testsets = cfg.limits.max_items_per_task, testset_locations(cfg)
    loaded: dict[tuple[str, tuple[str, ...]], list[Item]] = {}
    out = {}
    for name in cfg.tasks:
        options = cfg.options_for(benchmark_of(name).name)
        for m in models_under_test(cfg):
            sets = testsets.get((name, m.id), ())
            key = (name, tuple(s.url for s in sets))
            if key not in loaded:
                items = get_task(name).load_items(resolver_for(cfg), sets, options).items
                loaded[key] = items[:limit] if limit else items
            out[(name, m.id)] = loaded[key]
    return out


def _cached_items(spec: ModelSpec, items: list[Item], cache: Location) -> set[str]:
    """Items whose generation call is in the call cache (same key as the Generate stage)."""

    keys = read_calls(cache, spec.id).entries.keys()  # the checked reader the Generate stage uses
    sampling = sampling_of(spec).as_dict()
    return {i.item_id for i in items
            if call_key(spec.id, revision_of(spec), GENERATION_TEMPLATE, i.prompt, sampling) in keys}


def _prompt_tokens(items: list[Item], o: PlanOptions) -> float:
    return math.fsum(len(i.prompt.split()) for i in items) * o.tokens_per_word


def plan(cfg: RunConfig, prices: PriceTable | None, stats: TokenStats | None = None, *,
         options: PlanOptions | None = None, cache: Location | None = None,
         done: frozenset[str] = frozenset()) -> Plan:
    """The estimate of a run: rows per (model, role, task, stage), idle rows of served models.

    ``stats``: measured sizes (``TokenStats.measure``) used before any estimate. ``cache``: the
    call cache; generation calls found there are counted as cached and cost nothing (role calls
    cannot be looked up: their prompts depend on the generations). ``done``: generation ids a
    resumed run already committed; they make no more calls."""
    o = options or PlanOptions()
    stats = stats or TokenStats()
    roles: dict[str, ModelSpec] = {m.role: m for m in cfg.models if m.role != "test"}
    wiki = cfg.verifiers.wiki
    top_k = wiki.top_k if wiki else WikiSpec.model_fields["top_k"].default
    passage_words = wiki.passage_words if wiki else WikiSpec.model_fields["passage_words"].default
    evidence = top_k * passage_words * o.tokens_per_word
    items = _load_items(cfg)
    acc: dict[tuple[str, str, str], _Acc] = defaultdict(_Acc)  # (model, task, stage)
    for task_name in cfg.tasks:
        task = get_task(task_name)
        rule_of: dict[tuple[str, str], StageRule] = {(r.stage, r.role): r for r in task.cost_rules()}
        if task.roles and not rule_of:
            raise RunError(f"plan: task '{task_name}' calls role models ({', '.join(task.roles)}) but declares "
                           "no cost rules (Task.cost_rules), so its role calls cannot be estimated")
        stages = [*rule_of, *sorted(stats.stages(task_name) - set(rule_of))]
        for m in models_under_test(cfg):
            todo = [i for i in items[(task_name, m.id)] if generation_id(task_name, i.item_id, m.id) not in done]
            with_text, P, G = _generate(acc[(m.id, task_name, "generate")], m, task, todo, bool(stages),
                                        stats, o, cache, cfg)
            shape = Shape(P, G, evidence, o)
            for stage, role in stages:
                _add_role_stage(acc, roles[role], task_name, stage, role, m.id, with_text, shape, stats,
                                rule_of.get((stage, role)))
    return _price(cfg, acc, prices, o, stats)


def _generate(a: _Acc, m: ModelSpec, task: Task, items: list[Item], judged: bool, stats: TokenStats,
              o: PlanOptions, cache: Location | None, cfg: RunConfig) -> tuple[int, float, float]:
    """Adds a model's generation of a task's items to ``a``; returns the generations role models
    will see and their sizes (prompt tokens P, generation tokens G). Replayed texts are read only
    when a role model will judge them (``judged``)."""

    a.generations += len(items)
    P = _prompt_tokens(items, o) / max(len(items), 1)
    if m.backend == "replay":
        a.bases.add("replay")
        replay_source(m, task, resolver_for(cfg))  # a missing or unreadable file fails the plan as it would the run
        texts = list(load_replay(m, task, items, resolver_for(cfg)).texts.values()) if judged else []
        G = math.fsum(len(t.split()) for t in texts) * o.tokens_per_word / max(len(texts), 1)
        return len(texts), P, G
    cached = _cached_items(m, items, cache) if cache is not None else set()
    todo = [i for i in items if i.item_id not in cached]
    if isinstance(m, ScriptedModel):  # a stand-in's answers, and so its tokens, are known
        from halluscope.serving.scripted import ScriptedResponder  # imports Ray Serve: only for such a model

        responder = ScriptedResponder(m.params)
        answers = [len(responder.answer(i.prompt).split()) for i in todo]
        a.calls += len(todo)
        a.cached += len(cached)
        a.tin += math.fsum(len(i.prompt.split()) for i in todo)
        a.tout += math.fsum(answers)
        a.bases.add("scripted")
        return len(items), P, math.fsum(answers) / max(len(answers), 1)
    s, basis = stats.get(task.name, "generate", "test", m.id) or (None, "estimated")
    # measured generations always have token sizes: only rows with token counts are measured
    if s is not None and s.input_tokens_per_call is not None and s.output_tokens_per_call is not None:
        P, G = s.input_tokens_per_call, s.output_tokens_per_call
        a.tin += len(todo) * P
        a.bases.add(basis)
    else:
        G = sampling_of(m).max_tokens * o.fill_factor
        a.tin += _prompt_tokens(todo, o)
        a.bases.add("estimated")
    a.calls += len(todo)
    a.cached += len(cached)
    a.tout += len(todo) * G
    if cached:
        a.bases.add("cache")
    return len(items), P, G


def _add_role_stage(acc: dict, spec: ModelSpec, task: str, stage: str, role: str, model: str, gens: int,
                    shape: Shape, stats: TokenStats, rule: StageRule | None) -> None:
    """Adds one stage's calls on one model's generations; measured sizes first, token sizes of
    an all-cached measurement from the rule."""
    cap = sampling_of(spec).max_tokens
    est_in = rule.input_tokens(shape) if rule else 0.0
    est_out = min(rule.output_tokens(shape), cap) if rule else 0.0
    measured = stats.get(task, stage, role, model)
    if measured is not None:
        s, basis = measured
        calls = s.calls_per_generation
        tin = est_in if s.input_tokens_per_call is None else s.input_tokens_per_call
        tout = est_out if s.output_tokens_per_call is None else s.output_tokens_per_call
    else:
        assert rule is not None, "a stage measured for no model is a stage of the task's rules"
        calls, tin, tout, basis = rule.calls(shape), est_in, est_out, "estimated"
    a = acc[(spec.id, task, stage)]
    a.generations += gens
    a.calls += gens * calls
    a.tin += gens * calls * tin
    a.tout += gens * calls * tout
    a.bases.add(basis)


def _price(cfg: RunConfig, acc: dict, prices: PriceTable | None, o: PlanOptions, stats: TokenStats) -> Plan:
    specs = {m.id: m for m in cfg.models}
    shared = {m: s.name for s in cfg.costs.shared_services for m in s.models}
    rows: list[PlanRow] = []
    notes: list[str] = []
    busy_wall: dict[str, float | None] = defaultdict(float)  # model -> seconds of work per held unit
    for (model, task, stage), a in acc.items():
        spec = specs[model]
        calls, tin, tout = _count(a.calls), _count(a.tin), _count(a.tout)
        basis = next(iter(a.bases)) if len(a.bases) == 1 else "mixed"
        row = PlanRow(model, spec.role, task, stage, _count(a.generations), calls, a.cached, tin, tout, None, None,
                      None, basis)
        if isinstance(spec, (ReplayModel, RecordedModel)):  # recorded answers cost nothing
            row.usd = 0.0
        elif isinstance(spec, OpenAIModel) and spec.id in shared:
            row.usd, row.note = 0.0, f"priced by the time of shared service '{shared[spec.id]}' (stage shared)"
            out_s = tout / o.api_tokens_per_s / spec.params.max_concurrency
            busy_wall[model] = (busy_wall[model] or 0.0) + out_s
        elif isinstance(spec, OpenAIModel):
            if prices is None:
                row.note = "no price table (costs.price_table)"
            else:
                row.usd = prices.tokens_usd(api_name(spec), tin, tout)
                if row.usd is None:
                    row.note = f"no price for API model '{api_name(spec)}' in the price table"
            out_s = tout / o.api_tokens_per_s / spec.params.max_concurrency
            busy_wall[model] = (busy_wall[model] or 0.0) + out_s
        else:
            row.resource, units = placement(spec)
            seconds, why = _busy_seconds(spec, calls, tin, tout, o)
            row.note = why
            if seconds is None:
                busy_wall[model] = None
            else:
                row.resource_hours = seconds / 3600
                busy = busy_wall[model]
                if busy is not None:
                    busy_wall[model] = busy + (seconds / (units * spec.params.serve.num_replicas) if units else 0.0)
                row.usd, row.note = _hours_usd(prices, row.resource, seconds, why)
        rows.append(row)
    served = [m for m in cfg.models if isinstance(m, (ScriptedModel, HFModel, VLLMModel))]  # Ray Serve hosts them
    jobs = [job_of(m, startup_seconds(m, o), busy_wall.get(m.id, 0.0)) for m in served if scheduled(m)]
    budget = schedule_budget(cfg, cfg.ray.num_gpus if cfg.ray.address is None else None,
                             cfg.cluster.cpus or (cfg.ray.num_cpus if cfg.ray.address is None else None))
    sched = simulate(jobs, budget)
    windows = {w.model: w for w in sched.windows}
    others = [s for m, s in busy_wall.items() if m not in windows]
    known = [s for s in others if s is not None]
    wall_s = None if len(known) < len(others) or not math.isfinite(sched.makespan_s) else \
        max(sched.makespan_s, max((startup_seconds(m, o) for m in served if not scheduled(m)), default=0.0)
            + max(known, default=0.0))
    for m in served:
        resource, units = placement(m)
        idle = PlanRow(m.id, m.role, "*", "idle", 0, 0, 0, 0, 0, resource, None, None, "estimated")
        window = windows.get(m.id)
        if window is not None and math.isfinite(window.end_s):
            held_s = window.held_s * units * m.params.serve.num_replicas
        elif wall_s is None:
            idle.note = "the run's wall time is unknown: a model's busy time could not be estimated"
            held_s = None
        else:
            held_s = wall_s * units * m.params.serve.num_replicas
        if held_s is not None:
            busy_s = math.fsum(r.resource_hours * 3600 for r in rows if r.model == m.id and r.resource_hours)
            idle_s = max(0.0, held_s - busy_s)
            idle.resource_hours = idle_s / 3600
            idle.usd, idle.note = _hours_usd(prices, resource, idle_s, None)
        rows.append(idle)
    rows += _shared_rows(cfg, prices, wall_s)
    held = [(w.start_s, w.end_s, w.resource, w.units) for w in sched.windows if math.isfinite(w.end_s)]
    held += [(0.0, wall_s, j.resource, j.units) for m in served if not scheduled(m) for j in [job_of(m)]] \
        if wall_s is not None else []
    rows += [PlanRow(r["model"], r["role"], "*", "nodes", 0, 0, 0, 0, 0, r["resource"], r["resource_seconds"] / 3600,
                     r["usd"], "estimated", r["note"]) for r in stranded_rows(held, prices)]
    rows.sort(key=lambda r: (r.role != "test", r.role, r.model, r.task == "*", r.task, _STAGE_ORDER.get(r.stage, 9)))
    notes += list(dict.fromkeys(f"{r.model}: {r.note}" for r in rows if r.note))
    notes.append(_assumptions(o, stats))
    return Plan(rows, None if wall_s is None else wall_s / 3600, notes, o, jobs, sched, budget)


_STAGE_ORDER = {"generate": 0, "abstain": 1, "decompose": 2, "verify": 3, "idle": 4, "shared": 5, "nodes": 6}


def _shared_rows(cfg: RunConfig, prices: PriceTable | None, wall_s: float | None) -> list[PlanRow]:
    """A row per shared service the run calls, at its full rate for the run's wall time: the run's
    share (split with the runs that overlap it, ``cost.shared``) is at most that."""
    out = []
    for s in services_of(cfg.costs.shared_services, cfg.models):
        rate, why = service_rate(s, prices)
        row = PlanRow(s.name, "service", "*", "shared", 0, 0, 0, 0, 0, None, None, None, "estimated", why)
        if wall_s is None:
            row.note = "the run's wall time is unknown: a model's busy time could not be estimated"
        elif rate is not None:
            row.usd = rate * wall_s / 3600
        out.append(row)
    return out


def _hours_usd(prices: PriceTable | None, resource: str, seconds: float,
               why: str | None) -> tuple[float | None, str | None]:
    if prices is None:
        return None, why or "no price table (costs.price_table)"
    usd = prices.hours_usd(resource, seconds)
    return usd, why if usd is not None else f"no price for resource '{resource}' in the price table"


def _assumptions(o: PlanOptions, stats: TokenStats) -> str:
    measured = f"measured sizes from {len(stats.runs)} run(s): {', '.join(stats.runs)}; " if stats.runs else ""
    return (f"{measured}estimates: {o.tokens_per_word} tokens/word, generations fill {o.fill_factor:.0%} of "
            f"max_tokens, {o.words_per_fact:g} words per fact, every generation responds (upper bound); "
            f"served models: throughput per GPU at {REFERENCE_PARAMS_B:g}B scaled by size, started in "
            f"{_startup_rule(o)}; models under test held from deployment to their last answer, in waves under "
            f"the GPU budget, roles for the whole run; API requests {o.api_tokens_per_s:g} output tokens/s")


def _startup_rule(o: PlanOptions) -> str:
    if o.startup_s is not None:
        return f"{o.startup_s:g} s"
    return (f"{VLLM_START_S:g} s + {VLLM_LOAD_S_PER_B:g} s per billion parameters (vllm), load_s + "
            f"{SERVE_START_S:g} s (scripted)")


def check_budget(plan: Plan, budget_usd: float) -> None:
    """Stop a run whose estimate exceeds the budget, or that cannot be checked against it because
    some line items have no price (price them, at 0 for a free endpoint, or drop the budget)."""
    def item(r: PlanRow) -> str:
        return f"{r.model} ({r.role}) {r.task} {r.stage} ${r.usd:,.2f}"

    if plan.unpriced:
        what = "; ".join(sorted({f"{r.model}: {r.note}" for r in plan.unpriced}))
        raise RunError(f"costs.budget_usd ${budget_usd:,.2f} cannot be checked: {len(plan.unpriced)} planned line "
                       f"item(s) have no price ({what}); priced items alone come to ${plan.total_usd:,.2f}. Price "
                       "them (cluster/prices.yaml, 0 for a free endpoint) or remove the budget")
    if plan.total_usd > budget_usd:
        top = sorted(plan.rows, key=lambda r: -(r.usd or 0.0))[:3]
        raise RunError(f"estimated cost ${plan.total_usd:,.2f} exceeds costs.budget_usd ${budget_usd:,.2f}; "
                       f"largest items: {'; '.join(map(item, top))}. `halluscope plan CONFIG` shows the whole "
                       "estimate")
