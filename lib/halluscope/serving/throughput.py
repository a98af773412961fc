"""How long a served model takes, as the estimate assumes it: the throughput table
(cluster/throughput.yaml), the estimate's options over it (``PlanOptions``), and what they give
one model: its size (``params_billions``), its deployment's start (``startup_seconds``) and the
resource-seconds its calls keep it busy (``busy_seconds``).

The table is data beside the price table and is found the way the default price table is:
relative to the working directory (a job's, and the cluster image's, is the checkout); then in
the checkout this package runs from, so that `halluscope plan` of an editable install works
from any directory. Unlike the price table it has no "off": the schedule, the wall time and
every served model's hours come from it, so a served model's time stops the estimate with the
places looked in when the table is not found, rather than turning them all into unknowns or
falling back on a copy in code that would drift from the file. Plans without served models do
not need it."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from halluscope.config.schema import ModelSpec, ScriptedModel, VLLMModel
from halluscope.contract.cost_rules import SizeAssumptions
from halluscope.cost.prices import read_table
from halluscope.errors import ConfigError
from halluscope.serving.placement import placement

DEFAULT_THROUGHPUT_TABLE = "cluster/throughput.yaml"  # relative to the working directory, as DEFAULT_PRICE_TABLE
CHECKOUT = Path(__file__).resolve().parents[3]  # the repository this module runs from (editable install)


class Throughput(BaseModel):
    """A saturated vLLM engine, tokens/s per GPU (per core for CPU), for a dense model of the
    table's ``reference_params_b`` in 16 bits; a model of P billion parameters gets
    reference_params_b / P of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    prefill_tokens_per_s: float = Field(gt=0)
    decode_tokens_per_s: float = Field(gt=0)


class Startup(BaseModel):
    """Seconds from a deployment's request to its first answer, by backend."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    serve_s: float = Field(ge=0, description="Serve's own part (a replica process, its imports); scripted: + load_s")
    vllm_s: float = Field(ge=0, description="a vLLM engine's start besides its weights")
    vllm_load_s_per_b: float = Field(ge=0, description="weights load per billion parameters")
    vllm_unknown_params_b: float = Field(gt=0, description="the size a vLLM model of unknown size loads as")
    hf_s: float = Field(ge=0, description="an hf deployment")


class ThroughputTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1] = 1
    reference_params_b: float = Field(gt=0, description="the dense model size the throughput figures are for")
    throughput: dict[str, Throughput] = Field(description="by Ray accelerator name; 'CPU' per core")
    startup: Startup


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


def _table_throughput() -> dict[str, Throughput]:
    """The table's figures; none without a table (a served model's time then stops the plan)."""
    return dict(throughput_table().throughput) if find_throughput_table() is not None else {}


class PlanOptions(SizeAssumptions):
    """The estimate's assumptions; each is printed with the plan."""

    throughput: dict[str, Throughput] = Field(default_factory=_table_throughput,
                                              description="by accelerator; default: cluster/throughput.yaml")
    params_b: dict[str, float] = Field(default_factory=dict,
                                       description="model id -> billions of parameters, where the name "
                                                   "does not say (e.g. 'Llama-3.1-70B' does)")
    api_tokens_per_s: float = Field(50.0, gt=0, description="output tokens/s of one API request")
    startup_s: float | None = Field(
        None, ge=0, description="deployment start (pending, weights load, CUDA graphs) of every served model; "
                                "None: by backend and size (startup_seconds)")


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


def startup_seconds(spec: ModelSpec, options: PlanOptions) -> float:
    """How long a served model takes from its deployment to its first answer."""
    if options.startup_s is not None:
        return options.startup_s
    start = throughput_table().startup
    if isinstance(spec, ScriptedModel):
        return spec.params.load_s + start.serve_s
    if isinstance(spec, VLLMModel):
        size = params_billions(spec, options)
        return start.vllm_s + start.vllm_load_s_per_b * (size if size is not None else start.vllm_unknown_params_b)
    return start.hf_s


def served_assumptions(options: PlanOptions) -> str:
    """What a served model's time is estimated from, in words, for the plan's notes."""
    if find_throughput_table() is None:
        return f"no throughput table ({DEFAULT_THROUGHPUT_TABLE} not found)"
    table = throughput_table()
    start = table.startup
    started = f"{options.startup_s:g} s" if options.startup_s is not None else \
        (f"{start.vllm_s:g} s + {start.vllm_load_s_per_b:g} s per billion parameters (vllm), load_s + "
         f"{start.serve_s:g} s (scripted)")
    return f"throughput per GPU at {table.reference_params_b:g}B scaled by size, started in {started}"


def busy_seconds(spec: ModelSpec, calls: int, tin: int, tout: int,
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
    scale = throughput_table().reference_params_b / size
    return tin / (rate.prefill_tokens_per_s * scale) + tout / (rate.decode_tokens_per_s * scale), None
