"""Reading the ``"hallucination list"`` out of what a judge model actually writes.

Judges wrap the JSON in code fences, add preambles and explanations after it, use Python
quoting (single quotes, ``None``, trailing commas) or typographic quotes, rename the key
slightly, nest the object, or answer in words. The first object (in a fenced block, else
anywhere) carrying the key wins, as the spec asks. A bare JSON list is accepted when it is the
whole answer. An answer with no list that plainly states there is no hallucination (and has no
"but"/"however"/"except" and no quoted phrase that could be a span) is an empty list. Anything
else - including JSON cut off by the token limit - is ``unreadable``: the caller reports and counts
it, and by default scores it as an empty list (spec §5.1; ``detectors.PromptDetector``), never as
a list this parser guessed. Entries that carry no text (empty strings, null, objects without a
text field) are returned in ``bad_items``, not as spans.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.S)
_KEYS = {"hallucination list", "hallucinations list", "hallucination lists", "hallucinations",
         "hallucination", "hallucination spans", "hallucinated spans", "list of hallucinations"}
_ITEM_KEYS = ("span", "text", "hallucination", "hallucinated span", "hallucination span", "quote", "content")
_EMPTY_WORDS = {"", "none", "n/a", "null", "[]", "no hallucination", "no hallucinations"}
_LABEL = re.compile(r"^\s*(?:output|answer|response|hallucination list)\s*:\s*", re.I)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_CURLY = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'"})
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n")
_NONE_STATED = re.compile(
    r"\bno\s+(?:\w+\s+){0,2}hallucinat|\b(?:not|n't|never)\s+(?:\w+\s+){0,3}hallucinat|"
    r"\bfree\s+(?:of|from)\s+(?:any\s+)?hallucinat|\bhallucination[- ]free\b|^\W*none\W*$", re.I)
_HEDGE = re.compile(r"\b(?:but|however|except|although|though)\b", re.I)
_QUOTED = re.compile(r'"[^"]+"|“[^”]+”')


@dataclass(frozen=True)
class JudgeAnswer:
    status: Literal["list", "none_stated", "unreadable"]
    items: tuple[str, ...] = ()
    bad_items: tuple[str, ...] = ()

    @property
    def readable(self) -> bool:
        return self.status != "unreadable"


def _norm_key(key: object) -> str:
    return " ".join(re.sub(r"[_\-]+", " ", str(key)).lower().split())


def _balanced_end(text: str, i: int) -> int | None:
    """End (exclusive) of the bracketed value opening at ``text[i]``, quotes respected."""
    stack: list[str] = []
    quote: str | None = None
    escaped = False
    for j in range(i, len(text)):
        c = text[j]
        if quote:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]":
            if not stack or stack.pop() != c:
                return None
            if not stack:
                return j + 1
    return None


def _load(snippet: str) -> Any:
    """A JSON or Python literal, read as leniently as is safe; raises ValueError when it is neither."""
    attempts = (lambda s: json.loads(s), lambda s: json.loads(_TRAILING_COMMA.sub(r"\1", s)),
                ast.literal_eval, lambda s: json.loads(s.translate(_CURLY)))
    for attempt in attempts:
        try:
            return attempt(snippet)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    raise ValueError("not a JSON or Python literal")


def _values(body: str, opener: str):
    """Every literal in ``body`` that opens with ``opener``, outermost and leftmost first."""
    for i, c in enumerate(body):
        if c != opener:
            continue
        end = _balanced_end(body, i)
        if end is None:
            continue
        try:
            yield _load(body[i:end])
        except ValueError:
            continue


def _find_list(value: Any) -> tuple[bool, Any]:
    """(found, list value) for the first matching key in a (possibly nested) dict."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if _norm_key(key) in _KEYS:
                return True, inner
        for inner in value.values():
            found, got = _find_list(inner)
            if found:
                return True, got
    return False, None


def _entries(value: Any) -> tuple[list[str], list[str]] | None:
    if value is None:
        return [], []
    if isinstance(value, str):
        return ([] if value.strip().lower() in _EMPTY_WORDS else [value]), []
    if not isinstance(value, (list, tuple)):
        return None
    items: list[str] = []
    bad: list[str] = []
    for entry in value:
        if isinstance(entry, dict):
            entry = next((entry[k] for k in entry if _norm_key(k) in _ITEM_KEYS and isinstance(entry[k], str)), entry)
        if isinstance(entry, (int, float)) and not isinstance(entry, bool):
            entry = str(entry)
        if isinstance(entry, str) and entry.strip():
            items.append(entry)
        else:
            bad.append(repr(entry)[:80])
    return items, bad


def read_hallucination_list(text: str | None) -> JudgeAnswer:
    if not text or not text.strip():
        return JudgeAnswer("unreadable")
    bodies = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for body in bodies:
        for value in _values(body, "{"):
            found, inner = _find_list(value)
            if found:
                entries = _entries(inner)
                if entries is not None:
                    return JudgeAnswer("list", tuple(entries[0]), tuple(entries[1]))
    for body in bodies:
        bare = _LABEL.sub("", body.strip(), count=1).strip()
        if bare.startswith("[") and _balanced_end(bare, 0) == len(bare):
            try:
                entries = _entries(_load(bare))
            except ValueError:
                entries = None
            if entries is not None:
                return JudgeAnswer("list", tuple(entries[0]), tuple(entries[1]))
    sentences = _SENTENCE.split(text.strip())
    if any(_NONE_STATED.search(s) for s in sentences) and not _HEDGE.search(text) and not _QUOTED.search(text):
        return JudgeAnswer("none_stated")
    return JudgeAnswer("unreadable")
