"""What a task asks the role models (judge, extractor, reference) of a run."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

RoleName = Literal["judge", "extractor", "reference"]

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI accepts as a response format's name


@dataclass(frozen=True)
class AnswerFormat:
    """The fixed form of a role model's answer, which an endpoint that supports it enforces while
    decoding: one of ``choices`` (a verdict word), or a JSON value matching ``json_schema``.

    The task still reads the answer with its tolerant parser, so a recorded answer, a backend that
    ignores formats and an endpoint without the support all stay readable. Part of the call-cache
    key where a backend sends it (a constrained answer differs from a free one)."""

    choices: tuple[str, ...] = ()
    json_schema: Mapping[str, Any] | None = field(default=None, hash=False)
    name: str = "answer"  # the schema's name where an endpoint asks for one

    def __post_init__(self) -> None:
        if bool(self.choices) == (self.json_schema is not None):
            raise ValueError("an answer format is either choices or a JSON schema, not both or neither")
        if any(not isinstance(c, str) or not c for c in self.choices) or len(set(self.choices)) != len(self.choices):
            raise ValueError(f"answer choices must be distinct non-empty strings, got {self.choices!r}")
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"answer format name {self.name!r}: letters, digits, _ and - only (at most 64)")

    @classmethod
    def json_object(cls, name: str, properties: Mapping[str, Mapping[str, Any]]) -> AnswerFormat:
        """A JSON object of exactly these properties, each required (the strict form OpenAI accepts)."""
        return cls(json_schema={"type": "object", "properties": {k: dict(v) for k, v in properties.items()},
                                "required": list(properties), "additionalProperties": False}, name=name)

    def key(self) -> dict[str, Any]:
        """What identifies the format in a call-cache key."""
        if self.choices:
            return {"choices": list(self.choices)}
        return {"json_schema": self.json_schema, "name": self.name}


@dataclass(frozen=True)
class RoleCall:
    """Prompts one row sends to a role model (the judge or the extractor) in one phase.

    The stage gathers the calls of every row of a batch and sends them together, so a batch's
    judge prompts are in flight at once; the replies come back to the same task method."""

    role: RoleName
    prompts: tuple[str, ...]
    template: str  # versioned id of the prompt template, part of the call-cache key
    keys: tuple[str, ...] = ()  # content key per prompt: what a recorded role model looks up
    model: str | None = None  # one of several models of the role (e.g. a reference); None: its only one
    answer_format: AnswerFormat | None = None  # the answer's fixed form, where the endpoint can enforce it


# What a phase's ``*_call`` returns: nothing, one call, or several (their replies come back in
# order, one list); several calls let a row ask each of several reference models.
Calls = RoleCall | tuple[RoleCall, ...] | None
