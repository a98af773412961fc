"""RAGTruth's closed vocabularies: task types, response quality flags and the span taxonomy.

The released data spells label types as "Evident Conflict", "Subtle Conflict", "Evident Baseless
Info" and "Subtle Baseless Info". Anything else (including the annotation tool's "HIGH/LOW
baseless info" wording) is outside the taxonomy and is reported by the loader, not guessed at.
"""

from __future__ import annotations

from enum import Enum


class TaskType(str, Enum):
    QA = "QA"
    DATA2TXT = "Data2txt"
    SUMMARY = "Summary"


class Quality(str, Enum):
    GOOD = "good"
    INCORRECT_REFUSAL = "incorrect_refusal"
    TRUNCATED = "truncated"


class LabelType(str, Enum):
    EVIDENT_CONFLICT = "Evident Conflict"
    SUBTLE_CONFLICT = "Subtle Conflict"
    EVIDENT_BASELESS = "Evident Baseless Info"
    SUBTLE_BASELESS = "Subtle Baseless Info"

    @property
    def superclass(self) -> str:
        """The paper's two super-classes: "conflict" or "baseless"."""
        return "conflict" if self in (LabelType.EVIDENT_CONFLICT, LabelType.SUBTLE_CONFLICT) else "baseless"


LABEL_TYPES: tuple[LabelType, ...] = tuple(LabelType)
_BY_KEY = {t.value.lower(): t for t in LabelType}


def parse_label_type(raw: object) -> LabelType | None:
    """A taxonomy member for a label string (case and spacing ignored), else None."""
    if isinstance(raw, LabelType):
        return raw
    if not isinstance(raw, str):
        return None
    return _BY_KEY.get(" ".join(raw.split()).lower())
