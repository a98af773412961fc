"""HALOGEN's section of a run config (``benchmarks.halogen``): the verifiers' switches and the
knowledge sources they read. Each changes results and is recorded in the manifest."""

from __future__ import annotations

from collections.abc import Set
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from halluscope.contract.benchmark import KnowledgeFile
from halluscope.knowledge.pypi import SNAPSHOT
from halluscope.knowledge.specs import TitleIndexSpec, WikiSpec
from halluscope.sources import PYPI_SIMPLE_INDEX

if TYPE_CHECKING:
    from halluscope.knowledge.base import Knowledge
    from halluscope.knowledge.pypi import PackageIndex

NAME = "halogen"


class HalogenOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    import_name_aliases: bool = Field(
        default=False,
        description="accept well-known import names of PyPI projects (cv2 -> opencv-python); "
                    "HALOGEN counts them as hallucinated, so the default keeps its rule")
    pypi_index: Annotated[str, KnowledgeFile(also=(PYPI_SIMPLE_INDEX,))] = Field(
        default=SNAPSHOT, description=f"data name, local path or URL of a one-name-per-line project list; "
                                      f"{PYPI_SIMPLE_INDEX}: today's live index")
    pypi_extra_names: Annotated[str | None, KnowledgeFile()] = Field(
        default=None, description="path or URL of a one-name-per-line file of PyPI project names accepted beside "
                                  "the snapshot (e.g. names PyPI had when the released numbers were made)")
    titles: TitleIndexSpec | None = Field(default=None, description="references@corrected: the title index")
    wiki: WikiSpec | None = Field(default=None, description="biographies@corrected: the article store")


# the engine's keys these options were before they became HALOGEN's own
MOVED = {"verifiers": f"benchmarks.{NAME}",
         **{f"verifiers.{k}": f"benchmarks.{NAME}.{k}"
            for k in ("import_name_aliases", "pypi_extra_names", "titles", "wiki")},
         "data.pypi_index": f"benchmarks.{NAME}.pypi_index"}


def options_of(kb: Knowledge) -> HalogenOptions:
    """The run's HALOGEN options, as the worker's knowledge holds them."""
    options = kb.options_for(NAME)
    assert isinstance(options, HalogenOptions)
    return options


def packages(kb: Knowledge) -> PackageIndex:
    """The PyPI snapshot (and the extra names) the code tasks check imports against."""
    o = options_of(kb)
    return kb.packages(o.pypi_index, o.pypi_extra_names)


def describe_knowledge(options: BaseModel, kb: Knowledge, needed: Set[str]) -> dict[str, Any]:
    """The manifest's entries of the sources HALOGEN's tasks of a run read: ``pypi`` (and
    ``pypi_extra_names``), ``titles``, ``wiki``; loaded here, so a bad one fails in the driver."""
    assert isinstance(options, HalogenOptions)
    out: dict[str, Any] = {}
    if "pypi" in needed:
        out = kb.package_provenance(options.pypi_index, options.pypi_extra_names)
        out["pypi"]["import_name_aliases"] = options.import_name_aliases
    if "titles" in needed and options.titles is not None:
        out["titles"] = kb.titles(options.titles).describe()
    if "wiki" in needed and options.wiki is not None:
        out["wiki"] = kb.wiki(options.wiki).describe()
    return out
