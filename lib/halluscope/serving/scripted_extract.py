"""The scripted stand-in's extractor mode: facts and reference titles found by simple programs.

A prompt following the extraction convention (see ``halluscope.tasks.halogen.prompts``) has a
line beginning ``Passage:`` (answered with the passage's sentences as ``- `` lines, up to a line
beginning ``Facts:``) or ``References:`` (answered with ``Title: <t>;`` lines for each APA-style
title after a ``(year).`` and each quoted title, else ``No titles.``). Good enough to drive the
pipeline with known answers; not a substitute for a real extractor.
"""

from __future__ import annotations

import re

_PASSAGE = re.compile(r"^[ \t]*passage:(.*?)(?:^[ \t]*facts:|\Z)", re.IGNORECASE | re.MULTILINE | re.DOTALL)
_REFERENCES = re.compile(r"^[ \t]*references:(.*)\Z", re.IGNORECASE | re.MULTILINE | re.DOTALL)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"“'])")
_APA_TITLE = re.compile(r"\(\s*(?:\d{4}[a-z]?|n\.\s?d\.)[^)]{0,40}\)\.?\s*(.{8,300}?)[.?!](?=\s|$)")
_QUOTED_TITLE = re.compile(r"[“\"]([^”\"\n]{12,300}?)[,.]?[”\"]")


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(" ".join(text.split())) if s.strip()]


def reference_titles(text: str) -> list[str]:
    found: dict[str, None] = {}
    for pattern in (_APA_TITLE, _QUOTED_TITLE):
        for m in pattern.finditer(text):
            found.setdefault(" ".join(m.group(1).split()), None)
    return list(found)


def extract(prompt: str) -> str | None:
    """The extractor answer for a prompt that follows the convention, else None."""
    m = _PASSAGE.search(prompt)
    if m:
        return "\n".join(f"- {s}" for s in sentences(m.group(1)))
    m = _REFERENCES.search(prompt)
    if m:
        titles = reference_titles(m.group(1))
        return "\n".join(f"Title: {t};" for t in titles) if titles else "No titles."
    return None
