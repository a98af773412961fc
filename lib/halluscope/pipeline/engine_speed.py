"""How fast each served engine of a run config is on the cluster it runs on, written as a
throughput table (``halluscope calibrate --throughput FILE``) that ``halluscope plan --throughput
FILE`` plans with, in place of cluster/throughput.yaml's assumptions.

Each model whose time the table sizes is deployed on its own, as a run deploys it (the deploy is
timed: the table's start-up figure), answers one call off the clock (the client finds its
replica), then two short loads, each sent the way a run sends its calls, as many at once as the
deployment takes, so that the engine batches as it will in the run:

- prefill: distinct prompts of ``PREFILL_WORDS`` made-up words, one output token each: the
  engine's prompt tokens per second;
- decode: the run's own first prompts for the model, with its own sampling but at most
  ``DECODE_TOKENS`` per answer: its output tokens per second, once the prefill of those prompts
  (at the rate just measured) is taken out. This is the rule the estimate applies (a call's time
  is its prompt at the prefill rate plus its answer at the decode rate), so the plan reproduces
  the load it was measured on.

Both loads keep the run's concurrency, not its length: an engine's speed depends on how many
sequences it batches, far less on how long each runs.

The engine's figures become the table's row for its resource by the estimate's own scaling
(``serving.served.measured_throughput``); the table's other rows and figures are kept. Where
two models of one calibration share a resource the slower row is kept, so a budget errs high. The model is
removed before the next is deployed: its resources are free again as its measurement ends.
"""

from __future__ import annotations

import datetime
import os
import platform
import random
import secrets
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml

from halluscope.config.schema import ModelSpec, SamplingSpec, ServedModel
from halluscope.errors import ConfigError, RunError
from halluscope.models.base import GenerationRequest
from halluscope.models.model import Model
from halluscope.models.provider import RemoteProvider
from halluscope.models.registry import Context, provider, sampling_of
from halluscope.resolve.run import ResolvedRun
from halluscope.resolve.service_engines import service_engines
from halluscope.runkit import init_ray, is_served, served
from halluscope.serving.served import measured_throughput, placement, served_part
from halluscope.serving.throughput import Measured, PlanOptions, ThroughputTable, known_size

PREFILL_WORDS = 200
DECODE_TOKENS = 32
TEMPLATE = "engine-speed"  # the requests' task name
M = TypeVar("M", bound=ModelSpec)
_WORDS = ("river stone lantern orchard copper violin harbor meadow glacier compass falcon ember quarry "
          "tapestry beacon thistle canyon ledger saffron pebble cobalt willow anchor prairie marble "
          "citadel juniper lagoon sparrow timber velvet summit").split()


@dataclass(frozen=True)
class EngineSpeed:
    """One engine's measurement: its deploy and its two loads."""

    model: str
    deploy_s: float | None  # None: an engine already up (a shared service's)
    calls: int
    prefill_tokens: int
    prefill_s: float
    decode_input_tokens: int
    decode_output_tokens: int
    decode_s: float

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prefill_tokens / self.prefill_s

    @property
    def decode_tokens_per_s(self) -> float:
        """Output tokens over the decode load's time less its prompts' prefill (at least a
        twentieth of its time: a load whose prompts took all of it measured no decode)."""
        generating = self.decode_s - self.decode_input_tokens / self.prefill_tokens_per_s
        return self.decode_output_tokens / max(generating, self.decode_s / 20)

    def as_dict(self) -> dict:
        """The measurement and the two rates it gives, for JSON."""
        return {**asdict(self), "prefill_tokens_per_s": self.prefill_tokens_per_s,
                "decode_tokens_per_s": self.decode_tokens_per_s}


def prefill_prompts(calls: int, words: int, salt: str) -> list[str]:
    """Distinct prompts (a seeded draw, so every calibration sends the same load), each unlike the
    others from its first word, so that no engine answers one from another's cached prefix; and,
    by ``salt`` (a calibration's own), unlike an earlier calibration's: an engine measured again
    (a long-lived service, the judge's deployment) answered those from its prefix cache, at 8,000
    prompt tokens/s where it prefills 700."""
    rng = random.Random(0)
    return [f"{salt}-{k}: " + " ".join(rng.choice(_WORDS) for _ in range(words)) + "\nRepeat the first word."
            for k in range(calls)]


def _at_once(model: Model) -> int:
    """The prompts the run's client of the deployment keeps in flight: its provider's own limits."""
    limits = cast(RemoteProvider, model.provider).limits
    return limits.calls_in_flight * limits.prompts_per_call


def with_max_tokens(spec: M, max_tokens: int) -> M:
    """The model's config answering at most ``max_tokens`` (sampling is the client's: the same deployment)."""
    sampling: SamplingSpec = getattr(spec.params, "sampling", SamplingSpec())
    params = spec.params.model_copy(update={"sampling": sampling.model_copy(update={"max_tokens": max_tokens})})
    return cast(M, spec.model_copy(update={"params": params}))


def _timed(model: Model, prompts: Sequence[str]) -> tuple[float, int, int]:
    """Seconds, prompt tokens and output tokens of the prompts sent at once."""
    requests = [GenerationRequest(TEMPLATE, str(k), p) for k, p in enumerate(prompts)]
    t0 = time.perf_counter()
    done = model.generate_batch(requests)
    seconds = time.perf_counter() - t0
    failed = [c.error for c in done if c.error or c.input_tokens is None or c.output_tokens is None]
    if failed:
        raise RunError(f"calibrating '{model.model_id}': {len(failed)} of {len(done)} calls failed or counted no "
                       f"tokens (first: {failed[0]})")
    retried = sum(c.attempts > 1 for c in done)
    if retried:  # a timed-out or refused call's wait is not the engine's speed (32 prompt tokens/s was recorded)
        raise RunError(f"calibrating '{model.model_id}': {retried} of {len(done)} calls were retried (a timeout or "
                       "a refusal), so the load's time is not the engine's; nothing was recorded: measure again "
                       "on a quieter cluster, or with fewer --calls")
    return seconds, sum(c.input_tokens or 0 for c in done), sum(c.output_tokens or 0 for c in done)


def measure(spec: ServedModel, prompts: Sequence[str], calls: int | None = None) -> EngineSpeed:
    """One model deployed, measured and removed. ``prompts``: the run's prompts for it, in order.
    Serve is started before the clock, as a run starts it before its first deploy: the deploy
    timed is the window a run's schedule records for the model."""
    from halluscope.serving.app import start_serve

    start_serve()
    t0 = time.perf_counter()
    with served([spec], scope="calibrate") as (endpoints, _):
        return measure_deployed(spec, endpoints[spec.id], prompts, time.perf_counter() - t0, calls)


def measure_deployed(spec: ModelSpec, endpoint: Any, prompts: Sequence[str], deploy_s: float | None,
                     calls: int | None = None) -> EngineSpeed:
    """The two loads, sent to ``spec``'s deployment at ``endpoint`` (which took ``deploy_s``), or
    to the endpoint its own config names (``endpoint`` None: a shared service's)."""
    prefilling, decoding = (Model(provider(with_max_tokens(spec, k), Context(endpoint)))
                            for k in (1, min(DECODE_TOKENS, sampling_of(spec).max_tokens)))
    n = min(calls or _at_once(decoding), _at_once(decoding))
    # distinct prompts only: a client asks equal prompts once, so a repeat would count its answer's
    # tokens again for no time of the engine's (a run of 2 items measured twice its decode rate)
    own = list(dict.fromkeys(prompts))[:n]
    if not own:
        raise ConfigError(f"calibrating '{spec.id}': the run gives it no prompt to measure its decode on")
    length = getattr(spec.params, "max_model_len", None)
    words = min(PREFILL_WORDS, length // 3) if length else PREFILL_WORDS
    for model in (prefilling, decoding):  # off the clock: each client finds the replica
        _timed(model, ["Say yes."])
    prefill_s, prefill_tokens, _ = _timed(prefilling, prefill_prompts(n, words, secrets.token_hex(4)))
    decode_s, tin, tout = _timed(decoding, own)
    return EngineSpeed(spec.id, deploy_s, n, prefill_tokens, prefill_s, tin, tout, decode_s)


def hardware(resource: str) -> str:
    """What a row was measured on: the accelerator Ray names, or this node's processor and cores."""
    if resource != "CPU":
        return resource
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


def calibrate_speed(run: ResolvedRun, calls: int | None = None) -> tuple[ThroughputTable, list[EngineSpeed]]:
    """The table with each engine's measured row (and start-up), and the measurements: the engines
    the run serves, each deployed here, and the shared services' engines (``cluster.service``),
    already up, reached as the run reaches them (their start-up is not measured). The table
    measured into is the one the config names, else the checkout's: its other rows are kept."""
    cfg, o = run.cfg, run.plan_options
    table = o.table_or_raise()
    specs = [m for m in cfg.models if is_served(m) and served_part(m).sized_by_table]
    callers = {m.api_model: m for m in cfg.models if m.billing == "tokens"}
    engines = [(e.spec, callers[name]) for name, e in service_engines(cfg).items()]
    if not specs and not engines:
        raise ConfigError("calibrate --throughput: the config serves no model whose speed the throughput table "
                          "gives (backend hf or vllm), and no shared service's engine (cluster.service) serves "
                          "one of its models")
    items, tested = run.items, run.tested

    def prompts(spec: ModelSpec) -> list[str]:
        # a role model is measured on the prompts of the first model under test (their length, not their
        # words, is what the load needs)
        asker = spec if spec.role == "test" else next(iter(tested), spec)
        return [i.prompt for t in cfg.tasks_of(asker) for i in items.items(t, asker.id)]

    if specs:
        init_ray(cfg.ray)
    speeds, today, measured = [], datetime.date.today().isoformat(), set()
    for sized, speed in [*((s, measure(s, prompts(s), calls)) for s in specs),
                         *((e, measure_deployed(c, None, prompts(c), None, calls)) for e, c in engines)]:
        speeds.append(speed)
        resource = placement(sized)[0]
        # a resource this calibration measured already keeps the slower of its rows: a budget errs high
        if resource not in measured or speed.decode_tokens_per_s < table.measured[resource].decode_tokens_per_s:
            table = with_measured_row(table, sized, speed, o.model_copy(update={"table": table}), today)
        measured.add(resource)
    return table, speeds


def with_measured_row(table: ThroughputTable, spec: ServedModel, speed: EngineSpeed, o: PlanOptions,
                      today: str) -> ThroughputTable:
    """``table`` with ``speed`` as its row for the resource ``spec`` holds, and its start-up where
    the measurement deployed the engine."""
    resource, units = placement(spec)
    row = measured_throughput(spec, o, speed.prefill_tokens_per_s, speed.decode_tokens_per_s)
    measured = Measured(model=speed.model, params_b=known_size(spec, o).active_b, units=units,
                        replicas=spec.replicas, hardware=hardware(resource), date=today,
                        calls=speed.calls, prefill_tokens_per_s=round(speed.prefill_tokens_per_s, 2),
                        decode_tokens_per_s=round(speed.decode_tokens_per_s, 2),
                        deploy_s=None if speed.deploy_s is None else round(speed.deploy_s, 1))
    startup = table.startup if speed.deploy_s is None else served_part(spec).measured_startup(spec, o, speed.deploy_s)
    return table.model_copy(update={"throughput": {**table.throughput, resource: row}, "startup": startup,
                                    "measured": {**table.measured, resource: measured}})


def table_path(path: str | Path) -> Path:
    """Where ``calibrate --throughput`` will write, its folder made and checked before minutes of
    deploys and loads are spent on a measurement that could not be kept."""
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--throughput {path}: cannot make its folder ({err.strerror})") from err
    if out.is_dir() or not os.access(out.parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise ConfigError(f"--throughput {path}: not a file this process can write")
    return out


def write_table(table: ThroughputTable, path: str | Path) -> None:
    """The table as YAML, with a first line that says it was measured."""
    dated = ", ".join(f"{r} on {m.hardware} ({m.date}, {m.model})" for r, m in table.measured.items())
    body = yaml.safe_dump(table.model_dump(mode="json"), sort_keys=False)
    Path(path).write_text(f"# measured by halluscope calibrate --throughput: {dated}\n{body}")
