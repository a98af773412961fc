"""What a task asks the role models (judge, extractor, reference) of a run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

RoleName = Literal["judge", "extractor", "reference"]


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


# What a phase's ``*_call`` returns: nothing, one call, or several (their replies come back in
# order, one list); several calls let a row ask each of several reference models.
Calls = RoleCall | tuple[RoleCall, ...] | None
