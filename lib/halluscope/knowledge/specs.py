"""How a benchmark's options name a knowledge source: a title index, an article store. A
benchmark puts these in its own options; ``Knowledge`` loads each once per worker and spec."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from halluscope.contract.benchmark import KnowledgeFile


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TitleIndexSpec(_Strict):
    """The scholarly index cited titles are looked up in."""

    source: Literal["offline", "semantic_scholar"] = "offline"
    dump: Annotated[str | None, KnowledgeFile()] = Field(
        default=None, description="offline: path or URL of a title dump "
                                  "(one title per line, .gz, or Parquet with a 'title' column)")
    fuzzy_threshold: float | None = Field(default=None, gt=0, le=1,
                                          description="None: exact match after normalisation")
    base_url: str = "https://api.semanticscholar.org/graph/v1"
    api_key_env: str = "S2_API_KEY"
    rate_limit_per_s: float = Field(default=1.0, gt=0)

    @model_validator(mode="after")
    def _dump_for_offline(self) -> TitleIndexSpec:
        if self.source == "offline" and not self.dump:
            raise ValueError("dump: an offline title index needs a title dump")
        return self


class WikiSpec(_Strict):
    """Wikipedia articles that facts are checked against, by dense retrieval of their passages."""

    articles: Annotated[str, KnowledgeFile()] = Field(
        description="path or URL: FActScore SQLite db, JSONL or Parquet of {title, text}")
    encoder: Annotated[str | None, KnowledgeFile()] = Field(
        default=None, description="sentence-transformers model dir; None: the packaged all-MiniLM-L6-v2")
    passage_words: int = Field(default=256, gt=0)
    top_k: int = Field(default=5, gt=0)


def evidence_words(options: BaseModel) -> int:
    """Words of retrieved evidence per fact (top_k passages of passage_words) under the first
    ``WikiSpec`` an options model sets, or under WikiSpec's defaults: what the cost estimate
    sizes a verification prompt by."""
    spec = next((v for v in vars(options).values() if isinstance(v, WikiSpec)), None)
    fields = WikiSpec.model_fields
    top_k = spec.top_k if spec else fields["top_k"].default
    passage_words = spec.passage_words if spec else fields["passage_words"].default
    return int(top_k * passage_words)
