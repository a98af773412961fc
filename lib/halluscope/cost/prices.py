"""The price table (cluster/prices.yaml): GPU $/hour by accelerator, API $/M tokens by model."""

from __future__ import annotations

from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from halluscope.errors import ConfigError


class TokenPrice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: float = Field(ge=0)
    output: float = Field(ge=0)


class PriceTable(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int = 1
    currency: str = "USD"
    as_of: str
    source: str
    gpu_hour_usd: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description="by accelerator; 'CPU' per core-hour")
    api_usd_per_million_tokens: dict[str, TokenPrice] = Field(default_factory=dict)

    def tokens_usd(self, model: str, input_tokens: int, output_tokens: int) -> float | None:
        price = self.api_usd_per_million_tokens.get(model)
        if price is None:
            return None
        return (input_tokens * price.input + output_tokens * price.output) / 1e6

    def hours_usd(self, resource: str, seconds: float) -> float | None:
        rate = self.gpu_hour_usd.get(resource)
        return None if rate is None else seconds / 3600 * rate


def load_prices(uri: str) -> PriceTable:
    import fsspec

    try:
        with fsspec.open(uri, "r") as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"costs.price_table: price table not found: {uri}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"price table {uri} is not valid YAML: {err}") from None
    try:
        return PriceTable.model_validate(data)
    except ValidationError as err:
        fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ConfigError(f"invalid price table {uri}: {fields}") from None
