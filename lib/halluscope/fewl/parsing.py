"""Reading what reference LLMs write: IW/CO pair lists and plain answers, as models really write them.

Asked for "1. Wrong: ... / Corrected: ..." a model may answer with the paper's "Wrong Answer: ...
Non-Wrong Answer: ..." layout, with bold labels, with both on one line, with all wrong answers
first and the corrections after (matched by number), as JSON, or as a markdown table, wrapped in
preambles and sign-offs. The parsers read all of these and say how many items they had to drop,
so an unreadable output is counted, never scored as if it were an answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from halluscope.contract.replies import parse_list

_FENCE = re.compile(r"```[a-zA-Z]*\n?")
_MARKUP = re.compile(r"\*\*|__|`")
_WRONG_KINDS = ("wrong", "incorrect", "iw", "false", "intentionally wrong")
# The label of a pair item, with an optional number before ("3. Wrong:") or after ("Wrong 3:",
# "Wrong answer #3:", "Wrong (3):"). Non-wrong labels come first so "Non-Wrong" is not read as "Wrong".
_LABEL = re.compile(
    r"(?<![\w-])(?:\(?(?P<pre>\d{1,3})[.)]\s*)?[*_]*\s*"
    r"(?P<kind>non[-\s]?wrong|not[-\s]wrong|corrected|correction|correct|right|co|"
    r"intentionally\s+wrong|wrong|incorrect|iw|false)"
    r"(?:\s+(?:answer|version|statement|response))?"
    r"\s*(?:\#?\s*(?P<post>\d{1,3})|\((?P<paren>\d{1,3})\))?\s*[*_]*\s*[:：]",
    re.IGNORECASE)
_PLACEHOLDER = re.compile(r"^(?:<[^>]*>|\[[^\]]*\]|\.{2,}|…|n/?a|-+)$", re.IGNORECASE)
_TRAILING = " \t|;-–—*_\"'“”"
_WRONG_KEY = re.compile(r"^(?:iw|wrong|incorrect|false|intentionally)", re.IGNORECASE)
_CO_KEY = re.compile(r"^(?:co|corrected|correction|non|not|right|correct)", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedPairs:
    """Wrong answers with their corrected versions, in order; ``incomplete`` counts items that had
    no partner or no text (a wrong answer without its correction, an echoed empty template line)."""

    pairs: tuple[tuple[str, str], ...]
    incomplete: int
    layout: str  # json | labelled | table | none

    @property
    def wrong(self) -> tuple[str, ...]:
        return tuple(w for w, _ in self.pairs)

    @property
    def corrected(self) -> tuple[str, ...]:
        return tuple(c for _, c in self.pairs)


def _clean(text: str) -> str:
    text = _MARKUP.sub("", text).strip().strip(_TRAILING).strip()
    text = " ".join(text.split())
    return "" if _PLACEHOLDER.match(text) else text


def _is_wrong(kind: str) -> bool:
    return " ".join(kind.lower().split()) in _WRONG_KINDS


def _json_pairs(text: str) -> ParsedPairs | None:
    start = min((i for i in (text.find("["), text.find("{")) if i >= 0), default=-1)
    if start < 0:
        return None
    end = max(text.rfind("]"), text.rfind("}"))
    try:
        doc = json.loads(text[start:end + 1])
    except ValueError:
        return None
    if isinstance(doc, dict):  # {"pairs": [...]} or any one list-valued field
        lists = [v for v in doc.values() if isinstance(v, list)]
        doc = lists[0] if len(lists) == 1 else None
    if not isinstance(doc, list):
        return None
    pairs, incomplete = [], 0
    for item in doc:
        wrong = corrected = ""
        if isinstance(item, dict):
            for key, value in item.items():
                if not isinstance(value, str):
                    continue
                if _CO_KEY.match(key) and not _WRONG_KEY.match(key):
                    corrected = corrected or _clean(value)
                elif _WRONG_KEY.match(key):
                    wrong = wrong or _clean(value)
        elif isinstance(item, list) and len(item) == 2 and all(isinstance(v, str) for v in item):
            wrong, corrected = _clean(item[0]), _clean(item[1])
        if wrong and corrected:
            pairs.append((wrong, corrected))
        else:
            incomplete += 1
    if not pairs:
        return None
    return ParsedPairs(tuple(pairs), incomplete, "json")


def _segments(text: str) -> list[tuple[bool, int | None, str]]:
    """(is_wrong, number, text) for every label; an item's text ends at the next label or the end
    of its line, so sign-offs and commentary on later lines never join an answer."""
    found = list(_LABEL.finditer(text))
    out = []
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        body = text[m.end():end].lstrip()
        body = body.split("\n", 1)[0]
        num = m.group("pre") or m.group("post") or m.group("paren")
        out.append((_is_wrong(m.group("kind")), int(num) if num else None, _clean(body)))
    return out


def _labelled_pairs(text: str) -> ParsedPairs | None:
    segs = _segments(text)
    if not segs:
        return None
    pairs: list[tuple[str, str]] = []
    incomplete = 0
    numbered = [(w, n, t) for w, n, t in segs if n is not None]
    wrong_nums = [n for w, n, _ in numbered if w]
    if len(numbered) == len(segs) and len(set(wrong_nums)) == len(wrong_nums):
        # every item numbered: match by number (covers "all wrong answers, then all corrections")
        wrong = {n: t for w, n, t in numbered if w}
        corrected: dict[int, str] = {}
        for w, n, t in numbered:
            if not w:
                if n in corrected or n not in wrong:
                    incomplete += 1
                else:
                    corrected[n] = t
        for n, w_text in wrong.items():
            c_text = corrected.get(n, "")
            if w_text and c_text:
                pairs.append((w_text, c_text))
            else:
                incomplete += 1
    else:  # sequential: a wrong answer, then its correction
        pending: str | None = None
        for is_wrong, _, t in segs:
            if is_wrong:
                if pending is not None:
                    incomplete += 1
                pending = t
            elif pending is None:
                incomplete += 1
            else:
                if pending and t:
                    pairs.append((pending, t))
                else:
                    incomplete += 1
                pending = None
        incomplete += pending is not None
    return ParsedPairs(tuple(pairs), incomplete, "labelled")


def _table_pairs(text: str) -> ParsedPairs | None:
    """A markdown table whose header names a wrong and a corrected column."""
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in text.splitlines() if ln.count("|") >= 2]
    if len(rows) < 2:
        return None
    header = [c.lower() for c in rows[0]]
    w_col = next((i for i, c in enumerate(header) if _WRONG_KEY.match(_clean(c)) or c.startswith("wrong")), None)
    c_col = next((i for i, c in enumerate(header) if i != w_col and _CO_KEY.match(_clean(c))), None)
    if w_col is None or c_col is None:
        return None
    pairs, incomplete = [], 0
    for row in rows[1:]:
        if all(set(c) <= set("-: ") for c in row):  # the |---|---| rule
            continue
        if len(row) <= max(w_col, c_col):
            incomplete += 1
            continue
        wrong, corrected = _clean(row[w_col]), _clean(row[c_col])
        if wrong and corrected:
            pairs.append((wrong, corrected))
        else:
            incomplete += 1
    return ParsedPairs(tuple(pairs), incomplete, "table") if pairs else None


def parse_pairs(text: str | None) -> ParsedPairs:
    """IW/CO pairs from a model's answer; ``pairs`` is empty when nothing could be read."""
    if not text or not text.strip():
        return ParsedPairs((), 0, "none")
    text = _FENCE.sub("", text.replace("\r", ""))
    for reader in (_json_pairs, _table_pairs, _labelled_pairs):
        parsed = reader(text)
        if parsed is not None and parsed.pairs:
            return parsed
    labelled = _labelled_pairs(text)
    return ParsedPairs((), labelled.incomplete if labelled else 0, "none")


_ANSWER_LABEL = re.compile(r"^\s*(?:final\s+)?answer\s*(?:\d{1,2})?\s*[:.)-]\s*", re.IGNORECASE)
_PREAMBLE = re.compile(r"^(?:sure|certainly|okay|ok|of course|here(?:'s| is| are)|great question)\b.*[:!.]$",
                       re.IGNORECASE)
_QUOTES = "\"'“”‘’"


def parse_answer(text: str | None) -> str | None:
    """A reference's single answer without preamble, ``Answer:`` label, markdown or quotes; None if empty."""
    if not text:
        return None
    lines = [ln.strip() for ln in _FENCE.sub("", text.replace("\r", "")).split("\n") if ln.strip()]
    while len(lines) > 1 and (_PREAMBLE.match(lines[0]) or lines[0].endswith(":")):
        lines = lines[1:]
    answer = _ANSWER_LABEL.sub("", _MARKUP.sub("", " ".join(lines)))
    answer = " ".join(answer.split()).strip(_QUOTES + " ")
    return answer or None


def parse_answers(text: str | None, n: int) -> list[str]:
    """Up to ``n`` answers from a numbered, bulleted or JSON list (preamble and sign-off dropped)."""
    if not text or not text.strip():
        return []
    text = _FENCE.sub("", text.replace("\r", "")).strip()
    if text.startswith("["):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, list) and all(isinstance(v, str) for v in doc):
            return [a for a in (parse_answer(v) for v in doc) if a][:n]
    # "Answer 2: ..." is a numbered item too
    text = re.sub(r"(?im)^\s*[*_]*answer\s*(\d{1,2})[*_]*\s*[:.)-]", r"\1.", text)
    return [a for a in (parse_answer(item) for item in parse_list(text).items) if a][:n]
