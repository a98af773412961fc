"""`halluscope plan`: what a run will cost before it starts, per (model, role, task, stage).

Rows mirror the cost ledger (cost/ledger.py), so a plan can be compared with what the run then
records: generation by each model under test, and the abstain/decompose/verify calls to the
judge and extractor (one row per role model, task and stage, summed over the models under test).

Sizes come from earlier runs when their tables are given (``token_stats.TokenStats``): calls per
generation and tokens per call, per model and task, else pooled over the models measured on the
task. What was not measured is estimated:

- prompt tokens: the actual items (limits applied), whitespace words x ``tokens_per_word``
  (1.3: English averages ~0.75 words per BPE token with the Llama-3 and OpenAI tokenizers);
- generation tokens: the model's ``max_tokens`` x ``fill_factor`` (0.5: HALOGEN's released
  responses of 14 models average 23-159 words per task, i.e. 30-210 tokens, and the longest
  model mean, 242 words, is 0.6 of the default 512 tokens); replayed generations: their texts;
- role calls per generation: the task's own ``cost_rules()`` (contract/cost_rules.py: which phase
  calls which role model, once or per atom) with atoms = facts of ``words_per_fact`` words. They
  assume every generation responds and every fact finds evidence: an upper bound, which a
  budget wants; a pilot run's measured stats replace them. With the run's call cache on, a role
  call an earlier task put to the same generation (a rule set's twin: same template, same answer
  format where the role model is sent it) is counted as cached.

Dollars: API models by their tokens (price table). Served models by resource-hours: busy time
from a throughput assumption per accelerator (cluster/throughput.yaml, ``serving.throughput``;
a scripted stand-in's own ``tokens_per_s`` and answers), and, as the ledger charges every
deployment for as long as it is held, an ``idle`` row per served model for the rest of its time
on the cluster. The served models under test are held from their deployment's start to the end
of their generation, in the waves ``schedule.simulate`` gives under the run's GPU budget (the
same rule the run follows); the roles the run serves are held for the whole run (the schedule's
makespan, or startup + the busiest other model's time, whichever is longer).

This module accumulates and prices. The items come from the run's own loader
(``resolve.items.ItemSource``), so both read the same items; cached generation calls from the call
cache's one reader (``models.cache.read_calls``), as the Generate stage sees them; measured sizes
from ``token_stats``; the rows and their rendering are ``plan_view``'s.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from halluscope.config.schema import ModelSpec, Overheads, ServedModel
from halluscope.contract.cost_rules import Shape, StageRule
from halluscope.contract.task import Item, Task
from halluscope.cost.ledger import IN_PROCESS, NO_PRICE_TABLE, service_tokens_usd
from halluscope.cost.nodes import Interval, stranded_rows
from halluscope.cost.overheads import HEAD, after_release_s, cold_start_s, pods_cpus
from halluscope.cost.prices import PriceTable
from halluscope.errors import RunError
from halluscope.knowledge.specs import evidence_words
from halluscope.models.registry import cached_prompts, constrains_answers, predicted, sampling_of
from halluscope.models.replay import load_replay, replay_source
from halluscope.pipeline.plan_view import Plan, PlanRow, detectable
from halluscope.pipeline.schedule import Schedule, Window, simulate
from halluscope.pipeline.service_load import ServiceLoad, service_rows
from halluscope.pipeline.token_stats import TokenStats
from halluscope.records import GenerationIds, generation_id
from halluscope.resolve.cluster import budget as schedule_budget
from halluscope.resolve.cluster import job_of, scheduled
from halluscope.resolve.run import ResolvedRun
from halluscope.resolve.service_engines import check_service_load, service_engines
from halluscope.runkit import is_served
from halluscope.serving.served import busy_seconds, placement, served_part, startup_seconds
from halluscope.serving.throughput import (
    ModelSize,
    PlanOptions,
    model_size,
    served_assumptions,
    size_assumption,
)
from halluscope.sources import DataResolver
from halluscope.storage.fs import Location
from halluscope.task_registry import benchmark_of, get_task


@dataclass
class _Acc:
    generations: float = 0.0
    calls: float = 0.0
    cached: float = 0.0
    tin: float = 0.0
    tout: float = 0.0
    bases: set[str] = field(default_factory=set)
    # role calls: the share of tin and tout each model under test's generations ask (the service's
    # queue takes a served model's once its deployment is given back)
    by_subject: dict[str, list[float]] = field(default_factory=lambda: defaultdict(lambda: [0.0, 0.0]))


def _count(x: float) -> int:
    """Expected counts rounded half up (Python's round() goes to even)."""
    return int(math.floor(x + 0.5))


def _cached_items(spec: ModelSpec, items: list[Item], cache: Location) -> set[str]:
    """Items whose generation call is in the call cache (same key as the Generate stage)."""
    hits = cached_prompts(spec, cache, {i.prompt for i in items})
    return {i.item_id for i in items if i.prompt in hits}


def _prompt_tokens(items: list[Item], o: PlanOptions) -> float:
    return math.fsum(len(i.prompt.split()) for i in items) * o.tokens_per_word


def plan(run: ResolvedRun, stats: TokenStats | None = None, *, done: GenerationIds | None = None) -> Plan:
    """The estimate of a run: rows per (model, role, task, stage), idle rows of served models,
    priced by ``run.prices`` over ``run.plan_options``.

    ``stats``: measured sizes (``TokenStats.measure``) used before any estimate. ``run.cache``: the
    call cache; generation calls found there are counted as cached and cost nothing (role calls
    cannot be looked up: their prompts depend on the generations). ``done``: generation ids a
    resumed run already committed; they make no more calls. The items are the run's item source's,
    whose sources the run's plan then reads without loading them again."""
    cfg, cache, items = run.cfg, run.cache, run.items
    check_service_load(cfg)
    o = run.plan_options
    stats = stats or TokenStats()
    done = done if done is not None else GenerationIds()
    roles: dict[str, ModelSpec] = {m.role: m for m in cfg.models if m.role != "test"}
    # evidence per fact: the passages retrieved from the article store the task's benchmark names
    evidence = {t: evidence_words(run.options_for(benchmark_of(t).name)) * o.tokens_per_word for t in cfg.tasks}
    acc: dict[tuple[str, str, str], _Acc] = defaultdict(_Acc)  # (model, task, stage)
    evaluated: dict[str, int] = defaultdict(int)  # task -> items a model under test is evaluated on
    # model -> prompts a served model under test is asked by earlier tasks: its generation task
    # asks each once (pipeline/generation.py), so a twin task's share no call
    asked: dict[str, set[str]] = defaultdict(set)
    # (role model, template, answer format, model under test) -> item prompts whose generation an
    # earlier task put those prompts to: the call cache answers a twin task's from them (none without
    # a cache; a twin's items are its base's, ids apart)
    role_asked: dict[tuple, set[str]] | None = defaultdict(set) if cfg.cache.enabled else None
    specs = run.specs
    for task_name in cfg.tasks:
        task = get_task(task_name)
        rules = task.cost_rules(run.options_for(benchmark_of(task_name).name))
        if task.roles and not rules:
            raise RunError(f"plan: task '{task_name}' calls role models ({', '.join(task.roles)}) but declares "
                           "no cost rules (Task.cost_rules), so its role calls cannot be estimated")
        unruled = sorted(stats.stages(task_name) - {(r.stage, r.role) for r in rules})  # measured only
        for m in run.tested:
            if task_name not in cfg.tasks_of(m):  # models[].tasks: the run never makes this pair
                continue
            listed = items.items(task_name, m.id)
            evaluated[task_name] = max(evaluated[task_name], len(listed))
            new = done.unseen([generation_id(task_name, i.item_id, m.id) for i in listed])
            todo = [i for i, n in zip(listed, new) if n]
            judged, P, G = _generate(acc[(m.id, task_name, "generate")], m, task, todo, bool(rules or unruled),
                                     stats, o, cache, run.resolver, asked[m.id] if scheduled(m) else None)
            shape = Shape(P, G, evidence[task_name], o)
            for rule in rules:
                spec = specs[rule.model] if rule.model is not None else roles[rule.role]
                # a measured (stage, role) covers all its models: each rule gets its estimated share
                peers = [r.calls(shape) for r in rules if (r.stage, r.role) == (rule.stage, rule.role)]
                share = rule.calls(shape) / math.fsum(peers) if math.fsum(peers) > 0 else 1 / len(peers)
                shared = _asked_before(role_asked, spec, rule, m.id, judged)
                _add_role_stage(acc, spec, task_name, rule.stage, rule.role, m.id, len(judged), shared, shape, stats,
                                rule, share)
            for stage, role in unruled:
                _add_role_stage(acc, roles[role], task_name, stage, role, m.id, len(judged), 0, shape, stats, None)
    priced = _price(run, acc, stats)
    priced.detectable = detectable(evaluated, stats.spreads)
    return priced


def _generate(a: _Acc, m: ModelSpec, task: Task, items: list[Item], judged: bool, stats: TokenStats,
              o: PlanOptions, cache: Location | None, resolver: DataResolver,
              asked: set[str] | None = None) -> tuple[list[Item], float, float]:
    """Adds a model's generation of a task's items to ``a``; returns the items whose generations
    role models will see and their sizes (prompt tokens P, generation tokens G). Replayed texts are read only
    when a role model will judge them (``judged``). ``asked``: prompts the model was asked by the
    run's earlier tasks, whose answers these items share (counted as cached); this task's are added."""

    a.generations += len(items)
    P = _prompt_tokens(items, o) / max(len(items), 1)
    if m.replayed:
        a.bases.add("replay")
        replay_source(m, task, resolver)  # a missing or unreadable file fails the plan as it would the run
        by_item = load_replay(m, task, items, resolver).texts if judged else {}
        G = math.fsum(len(t.split()) for t in by_item.values()) * o.tokens_per_word / max(len(by_item), 1)
        return [i for i in items if i.item_id in by_item], P, G
    cached = _cached_items(m, items, cache) if cache is not None else set()
    if asked is not None:
        cached |= {i.item_id for i in items if i.prompt in asked}
        asked.update(i.prompt for i in items)
    todo = [i for i in items if i.item_id not in cached]
    predict = predicted(m)
    if predict is not None:  # a stand-in's answers, and so its tokens, are known
        answers = [len(predict(i.prompt).split()) for i in todo]
        a.calls += len(todo)
        a.cached += len(cached)
        a.tin += math.fsum(len(i.prompt.split()) for i in todo)
        a.tout += math.fsum(answers)
        a.bases.add("predicted")
        return items, P, math.fsum(answers) / max(len(answers), 1)
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
    return items, P, G


def _asked_before(role_asked: dict[tuple, set[str]] | None, spec: ModelSpec, rule: StageRule,
                  model: str, items: list[Item]) -> int:
    """How many of ``items``' generations by ``model`` an earlier task put this rule's prompts to
    (counted as cached); adds them all. None when the run has no call cache (``role_asked`` None),
    the rule names no template or the role model answers from a record (not cached)."""
    if role_asked is None or rule.template is None or spec.billing == "free":
        return 0
    seen = role_asked[(spec.id, rule.template, rule.answer_format if constrains_answers(spec) else None, model)]
    before = sum(i.prompt in seen for i in items)
    seen.update(i.prompt for i in items)
    return before


def _add_role_stage(acc: dict, spec: ModelSpec, task: str, stage: str, role: str, model: str, gens: int,
                    shared: int, shape: Shape, stats: TokenStats, rule: StageRule | None, share: float = 1.0) -> None:
    """Adds one stage's calls on one model's generations, ``shared`` of them asked by an earlier
    task (cached); measured sizes first (``share`` of them: the rule's part of its role's calls),
    token sizes of an all-cached measurement from the rule."""
    cap = sampling_of(spec).max_tokens
    est_in = rule.input_tokens(shape) if rule else 0.0
    est_out = min(rule.output_tokens(shape), cap) if rule else 0.0
    measured = stats.get(task, stage, role, model)
    if measured is not None:
        s, basis = measured
        calls = s.calls_per_generation * share
        tin = est_in if s.input_tokens_per_call is None else s.input_tokens_per_call
        tout = est_out if s.output_tokens_per_call is None else s.output_tokens_per_call
    else:
        assert rule is not None, "a stage measured for no model is a stage of the task's rules"
        calls, tin, tout, basis = rule.calls(shape), est_in, est_out, "estimated"
    a = acc[(spec.id, task, stage)]
    a.generations += gens
    a.calls += (gens - shared) * calls
    a.cached += shared * calls
    a.tin += (gens - shared) * calls * tin
    a.tout += (gens - shared) * calls * tout
    a.bases.add(basis)
    part = a.by_subject[model]
    part[0] += (gens - shared) * calls * tin
    part[1] += (gens - shared) * calls * tout


def _price(run: ResolvedRun, acc: dict, stats: TokenStats) -> Plan:
    cfg, prices, o, specs = run.cfg, run.prices, run.plan_options, run.specs
    shared = {m: s.name for s in cfg.costs.shared_services for m in s.models}
    busy_wall: dict[str, float | None] = defaultdict(float)  # model -> seconds of work per held unit
    service = ServiceLoad(service_engines(cfg))
    rows = [_priced(specs[model], task, stage, a, prices, o, shared, busy_wall, service)
            for (model, task, stage), a in acc.items()]
    served = [m for m in cfg.models if is_served(m)]  # Ray Serve hosts them
    oh = cfg.costs.overheads
    cold = {m.id: cold_start_s(oh, size.total_b * size.bytes_per_param if isinstance(size, ModelSize) else 0.0,
                               m.replicas)
            for m in served if served_part(m).sized_by_table for size in [model_size(m, o)]}
    start = {m.id: startup_seconds(m, o) + cold.get(m.id, 0.0) for m in served}
    jobs = [job_of(m, start[m.id], busy_wall.get(m.id, 0.0)) for m in served if scheduled(m)]
    budget = schedule_budget(cfg, cfg.ray.num_gpus if cfg.ray.address is None else None,
                             cfg.cluster.cpus or (cfg.ray.num_cpus if cfg.ray.address is None else None))
    # a model under test with no call left (its rows done, or every answer in the call cache) is
    # not deployed: its job stays in the plan for the run, out of the schedule and the bill
    calls: dict[str, float] = defaultdict(float)
    for (model, _, stage), a in acc.items():
        if stage == "generate":
            calls[model] += a.calls
    sched = simulate([j for j in jobs if calls[j.model] > 0], budget, run.layout())
    windows = {w.model: w for w in sched.windows}
    others = [s for m, s in busy_wall.items() if m not in windows]
    known = [s for s in others if s is not None]
    # a served model under test is evaluated once its deployment is given back: its calls join the
    # service's queue then; the others' stream in as they generate (their last batch: the tail)
    released = {m: w.end_s for m, w in windows.items()}
    service_end = service.end_s(released)
    wall_s = None if len(known) < len(others) or service_end is None or not math.isfinite(sched.makespan_s) else \
        max(sched.makespan_s, max((start[m.id] for m in served if not scheduled(m)), default=0.0)
            + max(known, default=0.0), service_end)
    if wall_s is not None:  # the last batch's evaluation comes after the last generation
        roles_s = max([service.streamed_s(released),
                       *(s or 0.0 for m, s in busy_wall.items() if specs[m].role != "test")])
        generated = sum(a.generations for (_, _, stage), a in acc.items() if stage == "generate")
        wall_s += roles_s * min(1.0, cfg.concurrency.batch_size / max(generated, 1))
    deployed = [m for m in served if not scheduled(m) or m.id in windows]
    rows += [_cold_start(m, cold[m.id], prices) for m in deployed if cold.get(m.id)]
    rows += [_idle(m, windows.get(m.id), wall_s, rows, prices) for m in deployed]
    rows += service_rows(run, wall_s, service)
    rows += _pod_rows(oh, wall_s, sched, prices)
    held = [Interval(w.start_s, w.end_s, w.resource, w.units, w.model) for w in sched.windows
            if math.isfinite(w.end_s)]
    held += [Interval(0.0, wall_s, j.resource, j.units, m.id) for m in served if not scheduled(m)
             for j in [job_of(m)]] if wall_s is not None else []
    rows += [PlanRow(r["model"], r["role"], "*", "nodes", 0, 0, 0, 0, 0, r["resource"], r["resource_seconds"] / 3600,
                     r["usd"], "estimated", r["note"]) for r in stranded_rows(held, prices)]
    rows.sort(key=lambda r: (r.role != "test", r.role, r.model, r.task == "*", r.task, _STAGE_ORDER.get(r.stage, 9)))
    notes = list(dict.fromkeys(f"{r.model}: {r.note}" for r in rows if r.note))
    notes.append(_assumptions(cfg.models, o, stats))
    return Plan(rows, None if wall_s is None else wall_s / 3600, notes, o, jobs, sched, budget)


def _priced(spec: ModelSpec, task: str, stage: str, a: _Acc, prices: PriceTable | None, o: PlanOptions,
            shared: dict[str, str], busy_wall: dict[str, float | None], service: ServiceLoad) -> PlanRow:
    """The row of one (model, task, stage)'s calls, priced; adds the seconds they keep the model
    busy to ``busy_wall`` (None once a model's time is unknown), or, for a model a shared
    service's engine serves, to that engine's load (``service``)."""
    model = spec.id
    calls, tin, tout = _count(a.calls), _count(a.tin), _count(a.tout)
    basis = next(iter(a.bases)) if len(a.bases) == 1 else "mixed"
    row = PlanRow(model, spec.role, task, stage, _count(a.generations), calls, _count(a.cached), tin, tout, None, None,
                  None, basis)
    if spec.billing == "free":  # recorded answers cost nothing
        row.usd = 0.0
    elif spec.billing == "in_process":
        row.usd, row.note = 0.0, IN_PROCESS
    elif spec.billing == "tokens":
        if spec.id in shared:
            row.usd, row.note = service_tokens_usd(spec, prices, shared[spec.id], tin, tout)
        elif prices is None:
            row.note = NO_PRICE_TABLE
        else:
            row.usd = prices.tokens_usd(spec.api_model, tin, tout)
            if row.usd is None:
                row.note = f"no price for API model '{spec.api_model}' in the price table"
        engine = service.engines.get(spec.api_model) if spec.id in shared else None
        if engine is None:
            out_s = tout / o.api_tokens_per_s / spec.api_concurrency
            busy_wall[model] = (busy_wall[model] or 0.0) + out_s
        else:  # its input and output tokens at the service engine's prefill and decode rates
            row.resource = engine.hold.accelerator
            seconds, why = service.add(engine, calls, tin, tout, o, a.by_subject)
            row.resource_hours = None if seconds is None else seconds / 3600
            row.note = why or row.note
    else:
        served = cast(ServedModel, spec)
        row.resource, units = placement(served)
        seconds, why = busy_seconds(served, calls, tin, tout, o)
        row.note = why
        if seconds is None:
            busy_wall[model] = None
        else:
            row.resource_hours = seconds / 3600
            busy = busy_wall[model]
            if busy is not None:
                busy_wall[model] = busy + (seconds / (units * served.replicas) if units else 0.0)
            row.usd, row.note = _hours_usd(prices, row.resource, seconds, why)
    return row


def _idle(m: ServedModel, window: Window | None, wall_s: float | None, rows: list[PlanRow],
          prices: PriceTable | None) -> PlanRow:
    """A served model's held time beyond its calls' busy time: its window in the waves, or the
    run's wall time for a model held throughout."""
    resource, units = placement(m)
    idle = PlanRow(m.id, m.role, "*", "idle", 0, 0, 0, 0, 0, resource, None, None, "estimated")
    if window is not None and math.isfinite(window.end_s):
        held_s: float | None = window.held_s * units * m.replicas
    elif wall_s is None:
        idle.note = "the run's wall time is unknown: a model's busy time could not be estimated"
        held_s = None
    else:
        held_s = wall_s * units * m.replicas
    if held_s is not None:
        busy_s = math.fsum(r.resource_hours * 3600 for r in rows if r.model == m.id and r.resource_hours)
        idle_s = max(0.0, held_s - busy_s)
        idle.resource_hours = idle_s / 3600
        idle.usd, idle.note = _hours_usd(prices, resource, idle_s, None)
    return idle


_STAGE_ORDER = {"generate": 0, "abstain": 1, "decompose": 2, "verify": 3, "cold_start": 4, "idle": 5, "shared": 6,
                "nodes": 7, "pods": 8, "after_release": 9}


def _cold_start(m: ServedModel, seconds: float, prices: PriceTable | None) -> PlanRow:
    """A deployment's GPUs held while its fresh node boots, pulls the image and downloads the
    weights (``costs.overheads``): part of its window, carved out of its idle time."""
    resource, units = placement(m)
    row = PlanRow(m.id, m.role, "*", "cold_start", 0, 0, 0, 0, 0, resource,
                  seconds * units * m.replicas / 3600, None, "estimated")
    row.usd, row.note = _hours_usd(prices, resource, cast(float, row.resource_hours) * 3600, None)
    return row


def _pod_rows(oh: Overheads, wall_s: float | None, sched: Schedule, prices: PriceTable | None) -> list[PlanRow]:
    """The head and CPU worker pods for the wall (the head until ``after_finish_s`` past it), and
    the last wave's GPUs still billed after their release (``costs.overheads``)."""
    rows = []
    pods_s = oh.head_cpus * oh.after_finish_s + pods_cpus(oh) * (wall_s or 0.0)
    if pods_s:
        row = PlanRow(HEAD, "cluster", "*", "pods", 0, 0, 0, 0, 0, "CPU", pods_s / 3600, None, "estimated")
        row.usd, row.note = _hours_usd(prices, "CPU", pods_s, None)
        if wall_s is None:
            row.usd, row.note = None, "the run's wall time is unknown: a model's busy time could not be estimated"
        rows.append(row)
    last = max((w.wave for w in sched.windows), default=None)
    tail: dict[str, float] = defaultdict(float)
    for w in sched.windows:
        if w.wave == last:
            tail[w.resource] += w.units * after_release_s(oh)
    for resource, gpu_s in sorted(tail.items()):
        if gpu_s:
            row = PlanRow("*", "cluster", "*", "after_release", 0, 0, 0, 0, 0, resource, gpu_s / 3600, None,
                          "estimated")
            row.usd, row.note = _hours_usd(prices, resource, gpu_s, None)
            row.note = row.note or "the last wave's GPUs until the autoscaler or the cluster's deletion removes them"
            rows.append(row)
    return rows


def _hours_usd(prices: PriceTable | None, resource: str, seconds: float,
               why: str | None) -> tuple[float | None, str | None]:
    if prices is None:
        return None, why or NO_PRICE_TABLE
    usd = prices.hours_usd(resource, seconds)
    return usd, why if usd is not None else f"no price for resource '{resource}' in the price table"


def _assumptions(models: Sequence[ModelSpec], o: PlanOptions, stats: TokenStats) -> str:
    """The estimate's assumptions that apply to this run: served models' and APIs' only when it has some."""
    measured = f"measured sizes from {len(stats.runs)} run(s): {', '.join(stats.runs)}; " if stats.runs else ""
    parts = [f"{measured}estimates: {o.tokens_per_word} tokens/word, generations fill {o.fill_factor:.0%} of "
             f"max_tokens, {o.words_per_fact:g} words per fact, every generation responds (upper bound)"]
    if any(is_served(m) for m in models):
        parts.append(f"served models: {served_assumptions(o)}; models under test held from deployment to their "
                     "last answer, in waves under the GPU budget, roles for the whole run")
        sized = [size_assumption(m, o) for m in models if is_served(m) and served_part(m).sized_by_table]
        if sized:
            parts.append(f"sizes: {', '.join(sized)}")
    if any(not m.replayed and not is_served(m) for m in models):
        parts.append(f"API requests {o.api_tokens_per_s:g} output tokens/s")
    return "; ".join(parts)


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
