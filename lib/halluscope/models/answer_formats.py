"""An answer format as each kind of endpoint takes it: OpenAI's ``response_format`` (json_schema)
and vLLM's ``structured_outputs`` extension of the OpenAI request (vLLM 0.32).

OpenAI's json_schema wants an object at the top, so a choice is sent there as an object of one
enum property, and ``chosen`` hands the parser the chosen string, as a free or a vLLM-constrained
answer gives it.
"""

from __future__ import annotations

import json
from typing import Any

from halluscope.contract.roles import AnswerFormat

CHOICE_KEY = "answer"  # the property a choice is written in under OpenAI's json_schema


def response_format(fmt: AnswerFormat) -> dict[str, Any]:
    """The ``response_format`` of an OpenAI chat request (strict: the answer matches exactly)."""
    if fmt.choices:
        schema: Any = {"type": "object", "properties": {CHOICE_KEY: {"type": "string", "enum": list(fmt.choices)}},
                       "required": [CHOICE_KEY], "additionalProperties": False}
    else:
        schema = fmt.json_schema
    return {"type": "json_schema", "json_schema": {"name": fmt.name, "strict": True, "schema": schema}}


def structured_outputs(fmt: AnswerFormat) -> dict[str, Any]:
    """vLLM's ``structured_outputs`` of a chat request. JSON comes without free whitespace between
    its tokens: a weak model otherwise spends its whole token budget on spaces after the "{"
    (measured with the tiny test Llama: 16 tokens of blanks, no answer)."""
    if fmt.choices:
        return {"choice": list(fmt.choices)}
    return {"json": fmt.json_schema, "disable_any_whitespace": True}


def chosen(text: str, fmt: AnswerFormat | None) -> str:
    """The chosen string of a choice answered as ``{"answer": "<choice>"}``; any other text as it came
    (the task's parser then reads it, as it reads an unconstrained answer)."""
    if fmt is None or not fmt.choices:
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    picked = value.get(CHOICE_KEY) if isinstance(value, dict) else None
    return picked if isinstance(picked, str) else text
