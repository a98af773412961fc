"""What a scripted stand-in extractor answers to HALOGEN's prompts: facts, reference titles and
parses found by simple programs (registered as the benchmark's ``stand_in``).

A prompt following the extraction convention (see ``halluscope.halogen.prompts``) has a
line beginning ``Passage:`` (answered with the passage's sentences as ``- `` lines, up to a line
beginning ``Facts:``) or ``References:`` (answered with ``Title: <t>;`` lines for each APA-style
title after a ``(year).`` and each quoted title, else ``No titles.``).

A HALOGEN parse prompt (``prompts.parse_*_prompt``: ``Text: <response>``, a blank line, then the
template's question, recognised word for word) is answered in the layout the question asks for,
comma-separated, which the paper's rules read (``halluscope.halogen.paper``):

- primality: the integers of each product the text writes (``17 × 19``, ``3 x 5``, ``3 * 5``);
- graph: ``There is a flight from city X to city Y`` for each hop the text writes ``X to Y`` or
  ``X -> Y`` (single capital letters, not ``city X to city Y``, which restates the question);
- senator: the first person the text names (``paper.person_names``);
- numerical: the text's first integer, then its listed items in lower case;
- false presuppositions: its listed items.

The authors' own yes/no parse prompts, which the paper rules send (few-shot examples, then
``<Context>: <response> <Instruction>: <question> <Response>:``), are answered for the last
context by the subject of the question: factors, flights or the senator.

Listed items are the bulleted or numbered lines, else the parts between semicolons or, failing
those, commas. A parse that finds nothing is an empty answer. Good enough to drive the pipeline
with known answers; not a substitute for a real extractor.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

_PASSAGE = re.compile(r"^[ \t]*passage:(.*?)(?:^[ \t]*facts:|\Z)", re.IGNORECASE | re.MULTILINE | re.DOTALL)
_REFERENCES = re.compile(r"^[ \t]*references:(.*)\Z", re.IGNORECASE | re.MULTILINE | re.DOTALL)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"“'])")
_APA_TITLE = re.compile(r"\(\s*(?:\d{4}[a-z]?|n\.\s?d\.)[^)]{0,40}\)\.?\s*(.{8,300}?)[.?!](?=\s|$)")
_QUOTED_TITLE = re.compile(r"[“\"]([^”\"\n]{12,300}?)[,.]?[”\"]")
_TEXT = re.compile(r"\A\s*text:(.*)\Z", re.IGNORECASE | re.DOTALL)
_PRODUCT = re.compile(r"\d+(?:\s*[×x*]\s*\d+)+")
_HOP = re.compile(r"(?<!city )\b([A-Z]) (?:to|->) (?=([A-Z])\b)")  # "E to B -> I", not "city E to city C"
_AUTHORS = re.compile(r".*<Context>:(.*)<Instruction>:(.*)<Response>:\s*\Z", re.DOTALL)
_LISTED_LINE = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(.+?)\s*$", re.MULTILINE)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(" ".join(text.split())) if s.strip()]


def reference_titles(text: str) -> list[str]:
    found: dict[str, None] = {}
    for pattern in (_APA_TITLE, _QUOTED_TITLE):
        for m in pattern.finditer(text):
            found.setdefault(" ".join(m.group(1).split()), None)
    return list(found)


def listed(text: str) -> list[str]:
    """Items of a list answer: bulleted or numbered lines, else ";"-separated, else ","-separated parts."""
    items = _LISTED_LINE.findall(text)
    if not items:
        parts = text.split(";") if ";" in text else text.split(",")
        items = [p.strip() for p in parts if p.strip()]
    return [i.strip(" \t.:") for i in items]


def _factors(text: str) -> list[str]:
    return [n for m in _PRODUCT.finditer(text) for n in re.findall(r"\d+", m.group(0))]


def _flights(text: str) -> list[str]:
    return [f"There is a flight from city {a} to city {b}" for a, b in _HOP.findall(text)]


def _senator(text: str) -> list[str]:
    from halluscope.halogen.paper import person_names

    return person_names(text)[:1]


def _count_and_items(text: str) -> list[str]:
    count = re.search(r"\d+", text)
    items = [i.lower() for i in listed(text[count.end():] if count else text)]
    return [count.group(0), *items] if count else items


@lru_cache(maxsize=1)
def _parsers() -> dict[str, Callable[[str], list[str]]]:
    """Each parse template's question (the template rendered without a text) -> its parser."""
    from halluscope.halogen import prompts

    def question(prompt: str) -> str:
        return prompt.rpartition("\n\n")[2]

    return {question(prompts.parse_binary_prompt("primality", "")): _factors,
            question(prompts.parse_binary_prompt("graph", "")): _flights,
            question(prompts.parse_binary_prompt("senator", "")): _senator,
            question(prompts.parse_numerical_prompt("")): _count_and_items,
            question(prompts.parse_list_prompt("")): listed}


def _authors_parser(question: str) -> Callable[[str], list[str]] | None:
    subjects = {"factors": _factors, "flights": _flights, "senator": _senator}
    return next((parser for word, parser in subjects.items() if word in question), None)


def parse(prompt: str) -> str | None:
    """The answer to a HALOGEN parse prompt, ours or the authors', else None."""
    authors = _AUTHORS.match(prompt)
    if authors:
        text, parser = authors.group(1), _authors_parser(authors.group(2))
    else:
        body, _, asked = prompt.rpartition("\n\n")
        ours = _TEXT.match(body)
        if ours is None:
            return None
        text, parser = ours.group(1), _parsers().get(asked)
    return None if parser is None else ", ".join(parser(text))


def extract(prompt: str) -> str | None:
    """The extractor answer for a prompt that follows the convention, else None."""
    parsed = parse(prompt)
    if parsed is not None:
        return parsed
    m = _PASSAGE.search(prompt)
    if m:
        return "\n".join(f"- {s}" for s in sentences(m.group(1)))
    m = _REFERENCES.search(prompt)
    if m:
        titles = reference_titles(m.group(1))
        return "\n".join(f"Title: {t};" for t in titles) if titles else "No titles."
    return None
