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


def published(model: str, task: str) -> dict | None:
    """{hallucination_score, response_ratio, utility_score} or None."""
    key = _RESULT_FILES.get(task)
    return _DATA["results"].get(key, {}).get(model) if key else None
