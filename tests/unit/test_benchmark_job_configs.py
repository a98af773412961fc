"""The RAGTruth and FEWL job configs load as run configs, and every model they call is a
route and model id the RayService serves; a config error names the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from halluscope.config.load import load_config
from halluscope.errors import ConfigError
from halluscope.fewl.options import FewlOptions
from halluscope.ragtruth.tasks import RagTruthOptions
from halluscope.runkit import parse_model

ROOT = Path(__file__).resolve().parents[2]


def served_routes() -> set[tuple[str, str]]:
    service = next(d for d in yaml.safe_load_all((ROOT / "k8s" / "service" / "rayservice.yaml").read_text())
                   if d and d.get("kind") == "RayService")
    apps = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"]
    return {(app["route_prefix"], llm["model_loading_config"]["model_id"])
            for app in apps for llm in app["args"]["llm_configs"]}


@pytest.mark.parametrize("name, load, models", [
    ("ragtruth-detect.yaml", load_config, lambda c: c.models),
    ("fewl-truthfulqa.yaml", load_config, lambda c: c.models),
])
def test_job_config_loads_and_reaches_the_rayservice(name, load, models):
    cfg = load(str(ROOT / "jobs" / "configs" / name))
    served = served_routes()
    for m in models(cfg):
        assert m.backend == "openai"
        route = "/" + m.params.base_url.split(":8000/", 1)[1].removesuffix("/v1")
        assert (route, m.params.model) in served, m.id


def rag(**changes) -> tuple:
    return RagTruthOptions, {"corpus": {"responses": "r", "sources": "s"}, **changes}


def fewl(**changes) -> tuple:
    return FewlOptions, {"dataset": {"name": "chale", "source": "x"}, "references": ["a"], "generator": "g",
                         **changes}


@pytest.mark.parametrize("spec, message", [
    (rag(corpus={"responses": "r", "sources": "s", "splits": ["dev"]}), "corpus.splits.0"),
    (rag(selection={"candidates": [["a", "a"]]}), "two or more distinct models"),
    (fewl(dataset={"name": "truthfulqa", "source": "x"}), "dataset.name"),
    (fewl(single_reference="b"), "single_reference 'b' is not a reference id (['a'])"),
    (fewl(params={"single_reference": "b"}), "params.single_reference 'b' is not a reference id"),
    (fewl(similarity={"kind": "cross_encoder"}), "cross_encoder: a path is needed"),
    (fewl(references=["a", "a"]), "references: duplicate model ids ['a', 'a']"),
])
def test_bad_configs_name_the_field(spec, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_model(*spec, "cfg.yaml")
