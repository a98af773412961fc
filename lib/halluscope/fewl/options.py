"""The ``benchmarks.fewl`` section of a run config: the dataset, the reference and IW/CO models
(ids of the run's role models), the similarity backend and FEWL's parameters."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from halluscope.fewl import prompts
from halluscope.fewl.datasets import LOADERS
from halluscope.fewl.score import FewlParams


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DatasetSpec(_Strict):
    name: Literal[tuple(LOADERS)]  # type: ignore[valid-type]
    source: str = Field(description="data name, path or URL of the released file")


class SimilaritySpec(_Strict):
    """FEWL's answer similarity; the question neighbour search always embeds with ``encoder``."""

    kind: Literal["embedding", "cross_encoder"] = "embedding"
    encoder: str | None = Field(default=None, description="sentence-transformers dir; None: packaged MiniLM")
    cross_encoder: str | None = Field(default=None, description="CrossEncoder dir (e.g. Vectara's HHEM)")
    symmetric: bool = True
    label: int | None = None

    @model_validator(mode="after")
    def _path_for_kind(self) -> SimilaritySpec:
        if (self.kind == "cross_encoder") != (self.cross_encoder is not None):
            raise ValueError("cross_encoder: a path is needed for kind cross_encoder, and only then")
        return self


class FewlOptions(_Strict):
    dataset: DatasetSpec
    references: list[str] = Field(min_length=1, description="ids of the run's reference models h_i")
    generator: str = Field(description="id of the model that writes the IW/CO pairs")
    generator_role: Literal["reference", "judge"] = Field(
        default="reference", description="the generator's role in the run (a reference model, or the judge)")
    similarity: SimilaritySpec = Field(default_factory=SimilaritySpec)
    params: FewlParams = Field(default_factory=FewlParams)
    single_reference: str | None = Field(default=None, description="reference id of the single-reference "
                                                                   "baselines; None: the first reference")
    limit: int | None = Field(default=None, gt=0, description="the first N questions only")

    @model_validator(mode="after")
    def _ids(self) -> FewlOptions:
        if len(set(self.references)) != len(self.references):
            raise ValueError(f"references: duplicate model ids {self.references}")
        for where, ref in (("single_reference", self.single_reference),
                           ("params.single_reference", self.params.single_reference)):
            if ref is not None and ref not in self.reference_ids():
                raise ValueError(f"{where} {ref!r} is not a reference id ({self.reference_ids()})")
        return self

    def reference_ids(self) -> list[str]:
        """One id per reference answer: a model's, or ``model#k`` per sample in 'multi' mode."""
        return [rid for r in self.references for rid in prompts.reference_ids(r, self.params.reference_samples)]

    def baseline_reference(self) -> str:
        return self.single_reference or self.reference_ids()[0]

    def role_models(self) -> list[tuple[str, str]]:
        """(role, model id) of every role model these options name."""
        return [*(("reference", r) for r in self.references), (self.generator_role, self.generator)]
