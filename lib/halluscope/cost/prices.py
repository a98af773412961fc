"""The price table (cluster/prices.yaml): GPU $/hour by accelerator, node $/hour by node type,
API $/M tokens by model.

Two ways a cloud bills accelerators, chosen per accelerator under ``accelerators``:

- ``billing: gpu`` (the default, and what an accelerator not listed there gets): every GPU-second
  costs ``gpu_hour_usd[accelerator] / 3600``; ``hours_usd`` prices GPU-seconds this way.
- ``billing: node``: whole nodes of ``gpus_per_node`` GPUs are billed (an 8-GPU p5.48xlarge costs
  the same with 4 GPUs busy as with 8); ``nodes_usd`` rounds a GPU count up to whole nodes and
  prices them at ``node_hour_usd[node]``.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from halluscope.errors import ConfigError


class TokenPrice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: float = Field(ge=0)
    output: float = Field(ge=0)


class Billing(BaseModel):
    """How one accelerator type is billed."""

    model_config = ConfigDict(extra="forbid")
    billing: Literal["gpu", "node"] = "gpu"
    gpus_per_node: int = Field(gt=0, description="GPUs of this type in one node")
    node: str | None = Field(default=None, description="node type, a key of node_hour_usd; needed for billing: node")


class PriceTable(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int = 1
    currency: str = "USD"
    as_of: str
    source: str
    gpu_hour_usd: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description="by accelerator; 'CPU' per core-hour")
    node_hour_usd: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description="by node (instance) type, e.g. p5.48xlarge")
    accelerators: dict[str, Billing] = Field(
        default_factory=dict, description="by accelerator: billed per GPU or per whole node")
    api_usd_per_million_tokens: dict[str, TokenPrice] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _nodes_have_prices(self) -> PriceTable:
        for name, b in self.accelerators.items():
            if b.billing == "node" and b.node not in self.node_hour_usd:
                raise ValueError(f"accelerators.{name}: billing: node needs `node`, a key of node_hour_usd "
                                 f"(got {b.node!r})")
        return self

    def tokens_usd(self, model: str, input_tokens: int, output_tokens: int) -> float | None:
        price = self.api_usd_per_million_tokens.get(model)
        if price is None:
            return None
        return (input_tokens * price.input + output_tokens * price.output) / 1e6

    def hours_usd(self, resource: str, seconds: float) -> float | None:
        """GPU-seconds (CPU core-seconds for "CPU") at the per-GPU rate; None without one."""
        rate = self.gpu_hour_usd.get(resource)
        return None if rate is None else seconds / 3600 * rate

    def gpus_per_node(self, resource: str) -> int | None:
        b = self.accelerators.get(resource)
        return None if b is None else b.gpus_per_node

    def nodes_usd(self, resource: str, gpu_count: float, seconds: float) -> float | None:
        """``gpu_count`` GPUs of ``resource`` held for ``seconds``, as the cloud bills them.

        Billed per node: ceil(gpu_count / gpus_per_node) * node_hour_usd[node] * seconds / 3600.
        Billed per GPU (or not listed under ``accelerators``): gpu_count * seconds GPU-seconds at
        ``hours_usd``. None when the table has no price for it."""
        if gpu_count < 0 or seconds < 0:
            raise ValueError(f"gpu_count and seconds must be >= 0, got {gpu_count}, {seconds}")
        b = self.accelerators.get(resource)
        if b is None or b.billing == "gpu":
            return self.hours_usd(resource, gpu_count * seconds)
        assert b.node is not None  # checked when the table was read
        return math.ceil(gpu_count / b.gpus_per_node) * self.node_hour_usd[b.node] * seconds / 3600


def load_prices(uri: str) -> PriceTable:
    import fsspec

    from halluscope.storage.fs import Location

    try:
        text = Location(*fsspec.core.url_to_fs(uri)).read_bytes().decode()  # within the storage deadline
    except FileNotFoundError:
        raise ConfigError(f"costs.price_table: price table not found: {uri}") from None
    return read_table(text, PriceTable, f"price table {uri}")


M = TypeVar("M", bound=BaseModel)


def read_table(text: str, model: type[M], what: str) -> M:
    """A YAML table of assumptions (prices, throughput) validated by ``model``; errors name the
    table and each field."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{what} is not valid YAML: {err}") from None
    try:
        return model.model_validate(data)
    except ValidationError as err:
        fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ConfigError(f"invalid {what}: {fields}") from None
