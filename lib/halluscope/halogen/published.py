"""The numbers HALOGEN's authors released for their recorded responses, for side-by-side reports."""

from __future__ import annotations

import json
from importlib import resources

_DATA = json.loads(resources.files(__package__).joinpath("published_results.json").read_text())
SOURCE: str = _DATA["source"]

# our task name -> the name of the authors' results file
_RESULT_FILES = {
    "halogen/code": "code",
    "halogen/rationalization_binary": "rationalization_binary",
    "halogen/rationalization_numerical": "rationalization_numerical",
    "halogen/false_presuppositions": "false_presupposition",
    "halogen/references": "references",
    "halogen/summarization": "summarization",
    "halogen/simplification": "simplification",
    "halogen/biographies": "biographies",
    "halogen/historical_events": "historical",
}


# the authors' results files name three models otherwise than their response files
_MODEL_ALIASES = {"gpt_4_turbo_0125": "gpt_4_0125_turbo"}


def _model_key(name: str) -> str:
    return _MODEL_ALIASES.get(name, name).lower()


_RESULTS = {task: {_model_key(m): v for m, v in models.items()} for task, models in _DATA["results"].items()}


def published(model: str, task: str) -> dict | None:
    """{hallucination_score, response_ratio, utility_score} or None; ``task`` in either rule set."""
    key = _RESULT_FILES.get(task.split("@")[0])
    return _RESULTS.get(key, {}).get(_model_key(model)) if key else None
