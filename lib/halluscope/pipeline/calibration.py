"""A live judge's agreement with a benchmark's reference judge, before its verdicts are used.

A benchmark that ships its released models' responses and the recorded output of its own
pipeline's LLM steps (``Benchmark.recorded_models``, ``recorded_steps``) gives a reference: for
the run's tasks that ask the judge, two small runs score the same responses of every released
model (the first ``items_per_model`` items of each task, so each model is a stratum of equal
size), with the reference extractor in both, so both judge the same units: one with the
reference judge, one with the run's. Their decisions are compared unit by unit
(``agreement.py``): a fact's verdict where the task's verify stage asks the judge, whether the
response answered where its abstain stage does. The two runs are ordinary stored runs with ids
derived from their configs, so a second calibration of the same judge reads them back.

The run's extractor is not measured: its units would differ from the reference's, and comparing
unit lists needs a matching rule of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from halluscope.config.load import parse_config
from halluscope.config.schema import CalibrationSpec
from halluscope.contract.benchmark import Benchmark
from halluscope.contract.metrics import AGREEMENT, COSTS_TOTAL, Estimate, MetricRecord
from halluscope.errors import ConfigError
from halluscope.pipeline.agreement import METHOD, Agreement, agreement
from halluscope.pipeline.runner import run
from halluscope.resolve.run import ResolvedRun
from halluscope.storage.run import RunStore
from halluscope.task_registry import benchmark_of, get_task

# the task's stage that asks the judge -> the decision compared there
DECISIONS = {"verify": "supported", "abstain": "responded"}


@dataclass(frozen=True)
class Pair:
    """The two runs of one benchmark's calibration."""

    reference: ResolvedRun
    judged: ResolvedRun
    tasks: tuple[str, ...]
    judge: str
    reference_judge: str


def _judged_stages(task: str) -> list[str]:
    """The stages at which ``task`` asks the judge for a decision this module compares."""
    return list(dict.fromkeys(r.stage for r in get_task(task).cost_rules()
                              if r.role == "judge" and r.stage in DECISIONS))


def _pairs(run: ResolvedRun, spec: CalibrationSpec) -> list[Pair]:
    """One pair of runs per benchmark of the run's with a recorded reference, each of its
    sub-configs resolved here."""
    cfg = run.cfg
    judge = next((m for m in cfg.models if m.role == "judge"), None)
    if judge is None:
        raise ConfigError("calibration: the run has no judge to calibrate")
    by_bench: dict[str, tuple[Benchmark, list[str]]] = {}
    for task in cfg.tasks:
        bench = benchmark_of(task)
        if bench.recorded_steps is not None and bench.recorded_models and _judged_stages(task):
            by_bench.setdefault(bench.name, (bench, []))[1].append(task)
    if not by_bench:
        raise ConfigError("calibration: none of the run's tasks asks the judge and has a benchmark's recorded "
                          f"reference (tasks: {', '.join(cfg.tasks)})")
    # the run's settings (storage, data, cache, costs, Ray, ...), its own work left out; a judge that
    # fails calls disagrees, and its run still ends
    base = cfg.model_dump(mode="json", exclude={"run_id", "models", "tasks", "testsets", "limits",
                                                "max_error_fraction", "calibration"})
    base |= {"limits": {"max_items_per_task": spec.items_per_model}, "max_error_fraction": 1.0}
    out = []
    for bench, tasks in by_bench.values():
        steps = f"{bench.recorded_steps.__module__}:{bench.recorded_steps.__qualname__}"  # type: ignore[union-attr]
        ref = {role: {"id": f"{bench.name}-recorded-{role}", "role": role, "backend": "recorded",
                      "params": {"steps": steps}} for role in ("extractor", "judge")}
        released = [{"id": m, "backend": "replay", "params": {"source": "recorded"}} for m in bench.recorded_models]
        judged = judge.model_dump(mode="json", exclude_none=True)
        sub = {**base, "tasks": tasks}
        out.append(Pair(ResolvedRun.of(parse_config({**sub, "models": [*released, ref["extractor"], ref["judge"]]},
                                                     "calibration")),
                        ResolvedRun.of(parse_config({**sub, "models": [*released, ref["extractor"], judged]},
                                                     "calibration")),
                        tuple(tasks), judge.id, str(ref["judge"]["id"])))
    return out


def _stored(sub: ResolvedRun, progress: bool) -> tuple[RunStore, float | None]:
    """Runs (or reads back) one calibration run, under an id its config decides; its store and cost."""
    result = run(sub, run_id=f"calibration-{sub.fingerprint[:12]}", progress=progress)
    usd = next(r.get("usd") for r in result.metrics if r["task"] == COSTS_TOTAL)
    return RunStore(sub.root, result.run_id), usd


def calibrate(resolved: ResolvedRun, spec: CalibrationSpec | None = None,
              progress: bool = False) -> list[MetricRecord]:
    """The judge's agreement records, one per task and decision (``contract.metrics.AGREEMENT``)."""
    spec = spec or resolved.cfg.calibration or CalibrationSpec()
    records = []
    for pair in _pairs(resolved, spec):
        reference, _ = _stored(pair.reference, progress)
        judged, usd = _stored(pair.judged, progress)
        for task in pair.tasks:
            for stage in _judged_stages(task):
                found = agreement(_decisions(reference, judged, task, stage), spec.bootstrap_resamples, spec.seed)
                if found is not None:
                    records.append(_record(task, DECISIONS[stage], found, pair, spec, (reference, judged), usd))
    return records


def _decisions(reference: RunStore, judged: RunStore, task: str, stage: str) -> list[tuple[str, bool | None,
                                                                                          bool | None]]:
    """(response, the reference's decision, the judge's) per unit the reference judge decided at
    ``stage``: a verdict per fact (verify), or whether a response the judge was asked about
    answered (abstain). A unit the judge's run left undecided (its row failed) is None."""
    only: list[tuple[str, str, object]] = [("task", "==", task)]
    if stage == "verify":
        cols = ["atom_id", "gen_id", "supported"]
        ref = reference.read_table("verdicts", cols, only).to_pylist()
        theirs = {r["atom_id"]: r["supported"] for r in judged.read_table("verdicts", cols, only).to_pylist()}
        return [(r["gen_id"], r["supported"], theirs.get(r["atom_id"])) for r in ref if r["supported"] is not None]
    calls = reference.read_table("role_calls", ["gen_id", "stage", "role", "calls", "cached_calls"], only)
    asked = {r["gen_id"] for r in calls.to_pylist()
             if r["stage"] == stage and r["role"] == "judge" and r["calls"] + r["cached_calls"] > 0}
    cols = ["gen_id", "responded", "error"]
    theirs = {r["gen_id"]: None if r["error"] else r["responded"]
              for r in judged.read_table("scores", cols, only).to_pylist()}
    return [(r["gen_id"], r["responded"], theirs.get(r["gen_id"]))
            for r in reference.read_table("scores", cols, only).to_pylist()
            if r["gen_id"] in asked and not r["error"]]


def _record(task: str, decision: str, a: Agreement, pair: Pair, spec: CalibrationSpec,
            stores: Sequence[RunStore], usd: float | None) -> MetricRecord:
    return MetricRecord(pair.judge, task, None, {
        "table": AGREEMENT, "aggregate": True, "decision": decision, "reference": pair.reference_judge,
        "decisions": a.decisions, "responses": a.responses,
        "accuracy": Estimate(a.accuracy, a.accuracy_se, METHOD, _pair(a.accuracy_ci95)),
        "kappa": Estimate(a.kappa, a.kappa_se, METHOD, _pair(a.kappa_ci95)),
        "confusion": a.confusion, "min_kappa": spec.min_kappa, "below_threshold": a.kappa < spec.min_kappa,
        "items_per_model": spec.items_per_model, "runs": [s.run_id for s in stores],
        "usd": usd})  # what the judged run cost (its costs.parquet; the reference's answers are recorded)


def _pair(ci: list[float] | None) -> tuple[float, float] | None:
    return None if ci is None else (ci[0], ci[1])
