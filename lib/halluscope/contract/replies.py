"""Reading what judges and extractors answer: real model output, not the format we asked for.

Models add preambles ("Sure! Here are the facts:"), markdown, numbering, quotes and
explanations. These parsers accept those variations and say what they could not read, so a
malformed answer becomes an unverified verdict or a row error, never a silent "supported".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from halluscope.contract.completion import Completion

_MARKUP = re.compile(r"[*_`#>]+")
_ECHOED_CHOICES = re.compile(r"\(?\b(?:yes|true)\s*/\s*(?:no|false)\b\)?")  # "Answer (Yes/No): No"
_NEGATED = re.compile(r"\b(?:not|isn't|is not|does not|doesn't|cannot be)\s+"
                      r"(supported|entailed|correct|true|confirmed|entail|support|confirm)\b")
_VERDICT = re.compile(r"\b(yes|no|true|false|correct|incorrect|supported|unsupported|entailed|"
                      r"not_entailed|entails|contradicted|contradicts|neg)\b")
_POSITIVE = {"yes", "true", "correct", "supported", "entailed", "entails"}
_LEADING = re.compile(r"^\W*(?:(?:final )?answer\W*)?(yes|no|true|false)\b")
_UNDECIDED = re.compile(r"\b(yes and no|unknown|unclear|cannot (?:be )?determined?|can't tell|not enough information|"
                        r"insufficient information|neither|undetermined)\b")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")


def _normalise(text: str) -> str:
    text = _ECHOED_CHOICES.sub(" ", _MARKUP.sub(" ", text.lower()))
    return _NEGATED.sub(" neg ", text)


def _decide(text: str) -> bool | None:
    words = {w for w in _VERDICT.findall(text)}
    if not words:
        return None
    positive = bool(words & _POSITIVE)
    negative = bool(words - _POSITIVE)
    return positive if positive != negative else None


def parse_yes_no(text: str | None) -> bool | None:
    """True for yes, False for no, None when the answer is missing, hedged or contradictory.

    A leading verdict word decides ("Yes, although ..."); else the first sentence, when it
    holds one kind of verdict word ("The premise says ... so no."); else the whole answer must
    hold one kind. Negated verdicts ("not supported",
    "does not entail") count as no; "unknown", "cannot be determined" decide nothing."""
    if not text or not text.strip():
        return None
    norm = _normalise(text)
    lead = _LEADING.match(norm)
    if lead and not _UNDECIDED.match(norm.strip(" .!\n")):
        return lead.group(1) in _POSITIVE
    first = next((s for s in _SENTENCE_END.split(norm) if s.strip()), "")
    decided = _decide(first)
    if decided is not None:
        return decided
    return None if _UNDECIDED.search(norm) else _decide(norm)


@dataclass
class ParsedList:
    """Items read from a list answer, and the lines that were not items (kept for the record)."""

    items: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    explicit_none: bool = False  # the model said there is nothing to list


_ITEM_MARKER = re.compile(r"^\s*(?:[-*•–·]|\(?\d{1,3}[.):]|\(?[a-z][.)]\s|(?:fact|title)\s*\d*\s*[:.-])\s*",
                          re.IGNORECASE)
_TITLE_LABEL = re.compile(r"^\s*title\s*\d*\s*[:.-]", re.IGNORECASE)  # "- Title: X" after a bullet
_PREAMBLE = re.compile(r"^(?:sure|certainly|okay|ok|of course|here (?:are|is)|the (?:independent |atomic )?"
                       r"facts|below|facts|titles|references)\b.*", re.IGNORECASE)
_NONE = re.compile(r"^\W*(?:(?:no (?:titles?|facts?|references?)(?: (?:found|cited|given))?)|none|nothing|n/a|"
                   r"no response)\W*$|\b(?:cites|contains|has|are) no (?:titles?|references?|facts?)\b|"
                   r"\bdoes not (?:cite|contain|mention) any (?:titles?|references?)\b", re.IGNORECASE)
_BOLD = re.compile(r"\*\*|__")
_QUOTES = "\"'“”‘’`"


def _clean_item(line: str) -> str:
    item = _ITEM_MARKER.sub("", line, count=1)
    item = _ITEM_MARKER.sub("", item, count=1) if _TITLE_LABEL.match(item) else item
    item = _MARKUP.sub("", item).strip()
    item = item.strip(_QUOTES + " ").rstrip(";").strip().strip(_QUOTES)
    return " ".join(item.split())


def parse_list(text: str | None, min_words: int = 1) -> ParsedList:
    """Items of a one-per-line answer (bullets, numbers, ``Fact 1:``, ``Title:`` or bare lines).

    When some lines carry item markers, unmarked lines are preamble or commentary and are
    dropped; when none do, every line that is not a preamble is an item. Lines ending in a
    colon are headings. Duplicates are kept once; items under ``min_words`` words are dropped."""
    out = ParsedList()
    if not text or not text.strip():
        return out
    lines = [_BOLD.sub("", ln).strip() for ln in text.replace("\r", "").split("\n") if ln.strip()]
    if len(lines) == 1 and ";" in lines[0]:
        lines = [p.strip() for p in lines[0].split(";") if p.strip()]
    if all(_NONE.search(ln) for ln in lines):
        out.explicit_none = True
        return out
    marked = [bool(_ITEM_MARKER.match(ln)) for ln in lines]
    seen: set[str] = set()
    for line, is_item in zip(lines, marked):
        heading = line.rstrip().endswith(":") and not _ITEM_MARKER.match(line)
        if heading or (any(marked) and not is_item) or (not any(marked) and _PREAMBLE.match(line)
                                                        and line.rstrip().endswith((":", "!"))):
            out.dropped.append(line)
            continue
        item = _clean_item(line)
        if len(item.split()) < min_words or item.lower() in seen:
            out.dropped.append(line)
            continue
        seen.add(item.lower())
        out.items.append(item)
    return out


def excerpt(text: str | None, limit: int = 160) -> str:
    """A one-line excerpt of a model answer for evidence and error messages."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def reply_text(reply: Completion, role: str) -> str:
    """A role model's answer, or an error naming the role when the call failed."""
    if reply.error is not None or reply.text is None:
        raise RuntimeError(f"{role} call failed: {reply.error or 'no text'}")
    return reply.text
