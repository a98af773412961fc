"""HalluLens' section of a run config (``benchmarks.hallulens``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from halluscope.knowledge.specs import WikiSpec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FarOverride(_Strict):
    """A HalluLens NonExistentRefusal domain whose false acceptance rate is set by hand for some
    models; the measured rate stays in metrics.json beside it."""

    model_contains: str = Field(min_length=1, description="applies to model ids containing this (any case)")
    subtask: Literal["mixed", "generated"] = "mixed"
    domain: str = Field(min_length=1, description="e.g. medicine, animal, restaurant")
    value: float = Field(ge=0, le=1)


class HalluLensOptions(_Strict):
    """The article store LongWiki verifies claims against, and how HalluLens metrics are reported
    (``far_overrides`` does not affect rows, so a finished run's metrics can be recomputed with
    others)."""

    wiki: WikiSpec | None = Field(default=None, description="LongWiki: the article store its claims are "
                                                            "verified against (the test sets' articles)")

    far_overrides: list[FarOverride] = Field(
        default_factory=lambda: [FarOverride(model_contains="gemma", domain="medicine", value=0.0)],
        description="the paper sets Gemma's medicine false acceptance rate to 0 (Gemma refuses every medicine "
                    "question; App. C.3.1); [] reports every rate as measured")
