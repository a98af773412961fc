"""How long a served model takes, as the estimate assumes it: the throughput table
(cluster/throughput.yaml), the estimate's options over it (``PlanOptions``), and what they give
one model: its size (``model_size``: parameters loaded, parameters computed per token, bytes per
parameter) and how its rates scale with it (``size_scales``). Each served backend's rules over
them (its deployment's start, the resource-seconds its calls keep it busy) are its served part's
(``serving/served.py``).

The table is data beside the price table and is found the way the default price table is:
relative to the working directory (a job's, and the cluster image's, is the checkout); then in
the checkout this package runs from, so that `halluscope plan` of an editable install works
from any directory. Unlike the price table it has no "off": the schedule, the wall time and
every served model's hours come from it, so a served model's time stops the estimate with the
places looked in when the table is not found, rather than turning them all into unknowns or
falling back on a copy in code that would drift from the file. Plans without served models do
not need it.

``halluscope calibrate --throughput FILE`` writes a table measured on the cluster it runs on
(pipeline/engine_speed.py): its rows come from the inverses of the served parts' rules
(``served.measured_throughput``, ``ServedPart.measured_startup``) and say what they were measured on
(``Measured``); ``halluscope plan --throughput FILE`` plans with it (``PlanOptions.table``)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from halluscope.config.schema import ModelSpec, ServedModel
from halluscope.contract.cost_rules import SizeAssumptions
from halluscope.cost.prices import read_table
from halluscope.errors import ConfigError

DEFAULT_THROUGHPUT_TABLE = "cluster/throughput.yaml"  # relative to the working directory, as DEFAULT_PRICE_TABLE
CHECKOUT = Path(__file__).resolve().parents[3]  # the repository this module runs from (editable install)
MAX_TOKENS_PER_S = 1e6  # per GPU or core: ~40x an H100's prefill of an 8B model
MAX_PARAMS_B = 1e5  # a model size past 100 trillion parameters is a typo, and it scales every rate
MAX_STARTUP_S = 86400.0  # a deployment that takes a day to start is a typo (the RayJob's deadline)


class Throughput(BaseModel):
    """A saturated vLLM engine, tokens/s per GPU (per core for CPU), for a dense model of the
    table's ``reference_params_b`` in 16 bits; a model of P billion parameters active per token
    gets reference_params_b / P of its prefill, and of its decode also 2 / its bytes per parameter
    (``served.busy_seconds``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    # bounded: a table is read as it is written, and an infinite or absurd rate would plan any run at $0
    prefill_tokens_per_s: float = Field(gt=0, le=MAX_TOKENS_PER_S)
    decode_tokens_per_s: float = Field(gt=0, le=MAX_TOKENS_PER_S)


class Startup(BaseModel):
    """Seconds from a deployment's request to its first answer, by backend."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    serve_s: float = Field(ge=0, le=MAX_STARTUP_S,
                           description="Serve's own part (a replica process, its imports); scripted: + load_s")
    vllm_s: float = Field(ge=0, le=MAX_STARTUP_S, description="a vLLM engine's start besides its weights")
    vllm_load_s_per_b: float = Field(ge=0, le=MAX_STARTUP_S,
                                     description="weights load per billion 16-bit parameters")
    vllm_unknown_params_b: float = Field(gt=0, description="the size a vLLM model of unknown size loads as")
    hf_s: float = Field(ge=0, le=MAX_STARTUP_S, description="an hf deployment")


class Measured(BaseModel):
    """What a measured row of the table came from (``halluscope calibrate --throughput``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    model: str
    params_b: float = Field(gt=0, description="the size its figures were scaled from (active per token)")
    units: float = Field(gt=0, description="resource units the engine held (per replica)")
    replicas: int = Field(ge=1)
    hardware: str
    date: str
    calls: int = Field(ge=1, description="calls of each load, all sent at once")
    prefill_tokens_per_s: float = Field(gt=0, description="the engine's own, unscaled")
    decode_tokens_per_s: float = Field(gt=0, description="the engine's own, unscaled")
    deploy_s: float | None = Field(default=None, ge=0, description="None: an engine already up (a shared service's)")


class Experts(BaseModel):
    """A mixture of experts' sizes, which its "NxMB" name does not give: its experts share the
    attention layers, and each token runs through only some of them."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    total_b: float = Field(gt=0, le=MAX_PARAMS_B, description="billions of parameters loaded and held")
    active_b: float = Field(gt=0, le=MAX_PARAMS_B, description="billions of parameters each token is computed with")

    @model_validator(mode="after")
    def _active_within_total(self) -> Experts:
        if self.active_b > self.total_b:
            raise ValueError(f"active_b {self.active_b} exceeds total_b {self.total_b}")
        return self


class ThroughputTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    schema_version: Literal[1] = 1
    reference_params_b: float = Field(gt=0, le=MAX_PARAMS_B,
                                      description="the dense model size the throughput figures are for")
    throughput: dict[str, Throughput] = Field(description="by Ray accelerator name; 'CPU' per core")
    startup: Startup
    experts: dict[str, Experts] = Field(default_factory=dict, description="known mixtures of experts by the "
                                                                          "family and size their names hold "
                                                                          "(e.g. 'mixtral-8x7b')")
    measured: dict[str, Measured] = Field(default_factory=dict, description="by resource: the rows measured, "
                                                                            "not assumed")


def load_throughput(path: str | Path) -> ThroughputTable:
    """The table at ``path``, validated; errors name the file and the field."""
    p = Path(path)
    try:
        return _read(str(p), p.stat().st_mtime_ns)
    except FileNotFoundError:
        raise ConfigError(f"throughput table not found: {path}") from None


@functools.lru_cache(maxsize=8)
def _read(path: str, mtime_ns: int) -> ThroughputTable:
    """Parsed once per version of the file (the estimate asks for it per model)."""
    return read_table(Path(path).read_text(), ThroughputTable, f"throughput table {path}")


def find_throughput_table() -> Path | None:
    """cluster/throughput.yaml in the working directory, else in the checkout this module runs from."""
    for root in (Path.cwd(), CHECKOUT):
        path = root / DEFAULT_THROUGHPUT_TABLE
        if path.is_file():
            return path
    return None


def throughput_table() -> ThroughputTable:
    path = find_throughput_table()
    if path is None:
        raise ConfigError(f"{DEFAULT_THROUGHPUT_TABLE} (the estimate's throughput and start-up assumptions) is in "
                          f"neither the working directory ({Path.cwd()}) nor the checkout halluscope runs from "
                          f"({CHECKOUT}): run from the repository")
    return load_throughput(path)


def _found_table() -> ThroughputTable | None:
    """The table found (``find_throughput_table``); None without one (a served model's time then stops the plan)."""
    path = find_throughput_table()
    return load_throughput(path) if path is not None else None


class PlanOptions(SizeAssumptions):
    """The estimate's assumptions; each is printed with the plan."""

    table: ThroughputTable | None = Field(default_factory=_found_table,
                                          description="start-up and scaling; default: cluster/throughput.yaml")
    throughput: dict[str, Throughput] = Field(default_factory=dict,
                                              description="by accelerator; default: the table's")
    params_b: dict[str, float] = Field(default_factory=dict,
                                       description="model id -> billions of parameters, where the name "
                                                   "does not say (e.g. 'Llama-3.1-70B' does)")
    active_params_b: dict[str, float] = Field(default_factory=dict,
                                              description="model id -> billions of parameters each token is "
                                                          "computed with (a mixture of experts'); default: all")
    api_tokens_per_s: float = Field(50.0, gt=0, description="output tokens/s of one API request")
    startup_s: float | None = Field(
        None, ge=0, description="deployment start (pending, weights load, CUDA graphs) of every served model; "
                                "None: by backend and size (served.startup_seconds)")

    @model_validator(mode="before")
    @classmethod
    def _table_throughput(cls, data: Any) -> Any:
        """Throughput not given is the table's."""
        if isinstance(data, dict) and "throughput" not in data:
            table = data["table"] if "table" in data else _found_table()
            data = {**data, "table": table, "throughput": dict(table.throughput) if table is not None else {}}
        return data

    def startup_table(self) -> Startup:
        return self.table_or_raise().startup

    def reference_params_b(self) -> float:
        return self.table_or_raise().reference_params_b

    def table_or_raise(self) -> ThroughputTable:
        """The table, or the error that names where it was looked for."""
        return self.table if self.table is not None else throughput_table()


_SIZE = re.compile(r"(?:(\d+)x)?(\d+(?:\.\d+)?)([bBmM])(?![a-zA-Z])")
# bytes per parameter by the quantization or dtype a model's name or engine_kwargs name; 16 bits otherwise
_BYTES = {"fp8": 1.0, "int8": 1.0, "w8a8": 1.0, "awq": 0.5, "int4": 0.5, "w4a16": 0.5,
          "float32": 4.0, "fp32": 4.0}


@dataclass(frozen=True)
class ModelSize:
    """What a served model's time scales with: ``total_b`` billions of parameters loaded (its start),
    ``active_b`` of them computed with per token (its calls), each ``bytes_per_param`` bytes;
    ``how`` says where the figures came from, for the plan's notes."""

    total_b: float
    active_b: float
    bytes_per_param: float
    how: str


def _name_size(name: str, table: ThroughputTable | None) -> tuple[float, float] | str | None:
    """(total, active) billions from a model name; a reason when the name gives an "NxMB" mixture
    of experts the table does not know (its experts share layers: N x M overstates it)."""
    found = _SIZE.findall(name)
    if not found:
        return None
    experts, size, unit = found[-1]
    if experts:
        key = re.sub(r"[_\s]", "-", name.lower())
        known = next((e for family, e in (table.experts if table else {}).items() if family in key), None)
        if known is None:
            return f"'{name}' names a mixture of experts ({experts}x{size}{unit}) whose total and active sizes " \
                   "the throughput table's experts do not give"
        return known.total_b, known.active_b
    billions = float(size) / (1000.0 if unit in "mM" else 1.0)
    return billions, billions


def _bytes_per_param(spec: ModelSpec) -> tuple[float, str]:
    """Bytes per weight from engine_kwargs (quantization, then dtype), else the model source's
    name (e.g. '-FP8'), else 16 bits; with where that was read."""
    kwargs = getattr(spec.params, "engine_kwargs", None) or {}
    for key in ("quantization", "dtype"):
        value = str(kwargs.get(key) or "").lower()
        if value in _BYTES:
            return _BYTES[value], f"engine_kwargs {key} {value}"
    words = set(re.split(r"[^a-z0-9]+", str(getattr(spec.params, "model_source", "") or spec.id).lower()))
    named = next((w for w in _BYTES if w in words), None)
    return (_BYTES[named], f"{named} in its name") if named else (2.0, "16-bit, assumed")


def model_size(spec: ModelSpec, options: PlanOptions) -> ModelSize | str:
    """Its sizes from the options (params_b, active_params_b), else the last size in the model
    source or id ("70B", "135M"; "8x7B" from the table's experts), or why they are unknown."""
    bytes_per_param, dtype = _bytes_per_param(spec)
    if spec.id in options.params_b:
        total = options.params_b[spec.id]
        active = options.active_params_b.get(spec.id, total)
        return ModelSize(total, active, bytes_per_param, f"plan options, {dtype}")
    for name in (getattr(spec.params, "model_source", ""), spec.id):
        sized = _name_size(str(name or ""), options.table)
        if isinstance(sized, str):
            return f"{sized}: set plan options params_b['{spec.id}'] and active_params_b['{spec.id}']"
        if sized is not None:
            return ModelSize(sized[0], options.active_params_b.get(spec.id, sized[1]), bytes_per_param,
                             f"its name, {dtype}")
    return f"size of '{spec.id}' unknown: set plan options params_b['{spec.id}']"


def known_size(spec: ServedModel, options: PlanOptions) -> ModelSize:
    """Its sizes; a ConfigError saying what to set when they are unknown."""
    size = model_size(spec, options)
    if isinstance(size, str):
        raise ConfigError(size)
    return size


def size_assumption(spec: ModelSpec, options: PlanOptions) -> str:
    """A served model's sizes as the plan takes them, in words, for the plan's notes."""
    size = model_size(spec, options)
    if isinstance(size, str):
        return f"{spec.id} size unknown"
    active = f" ({size.active_b:g}B active per token)" if size.active_b != size.total_b else ""
    return f"{spec.id} {size.total_b:g}B{active} at {size.bytes_per_param:g} bytes/parameter ({size.how})"


def served_assumptions(options: PlanOptions) -> str:
    """What a served model's time is estimated from, in words, for the plan's notes."""
    table = options.table
    if table is None:
        return f"no throughput table ({DEFAULT_THROUGHPUT_TABLE} not found)"
    start = table.startup
    started = f"{options.startup_s:.4g} s" if options.startup_s is not None else \
        (f"{start.vllm_s:.4g} s + {start.vllm_load_s_per_b:.4g} s per billion 16-bit parameters (vllm), load_s + "
         f"{start.serve_s:.4g} s (scripted)")
    measured = "".join(f"; {r} measured on {m.hardware} {m.date} ({m.model})" for r, m in table.measured.items())
    return (f"throughput per GPU at {table.reference_params_b:g}B in 16 bits scaled by the parameters active per "
            f"token (decode also by bytes per parameter), started in {started}{measured}")


def size_scales(size: ModelSize, options: PlanOptions) -> tuple[float, float]:
    """What a model's prefill and decode rates are of the table's (16 bits at reference_params_b).
    Both scale with the parameters computed per token; decode, bound by the weights it reads each
    step, also with their bytes (FP8 decodes twice as fast as 16 bits). Prefill is compute-bound
    and taken at the 16-bit rate whatever the weights' bytes: H100's FP8 tensor cores peak at twice
    its BF16 rate, but the gain vLLM's FP8 kernels reach in prefill is not documented, and the
    slower figure keeps a budget high."""
    ref = options.reference_params_b() / size.active_b
    return ref, ref * 2.0 / size.bytes_per_param
