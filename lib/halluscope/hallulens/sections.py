"""Cutting a GoodWiki page into the sections questions are written from, and counting sentences.

HalluLens measures sections in the generator's tokens (PreciseWikiQA 200-500, LongWiki 500-750).
Here they are measured in whitespace-separated words, so a test set does not depend on which
tokenizer happens to be installed and is the same for every generator; the defaults convert the
paper's token bounds at 0.75 English words per Llama-3 token (200 -> 150, 500 -> 375, 750 -> 562).

The cut follows the HalluLens code: split at markdown headings; split a chunk longer than the
maximum into sentence-packed segments; merge a chunk shorter than the minimum into the one
before it; drop the last section when there are more than two (usually references or a list).
A section is usable when it has at least the minimum number of words; a page with none is
counted by the caller, never silently passed over.
"""

from __future__ import annotations

import re

from halluscope.knowledge.passages import split_passages

PWQA_MIN_WORDS, PWQA_MAX_WORDS = 150, 375
LONGWIKI_MIN_WORDS, LONGWIKI_MAX_WORDS = 375, 562

_HEADING = re.compile(r"^#{1,6}\s+\S", re.MULTILINE)
# A sentence ends at . ! or ? (optionally followed by a closing quote or bracket), then space and
# a capital, digit or opening quote; abbreviations and initials do not end one.
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])[\"'”’)\]]?\s+(?=[\"'“‘(\[]?[A-Z0-9À-Þ])")
_ABBREVIATIONS = frozenset("""mr mrs ms dr prof st jr sr vs etc no nos vol ch fig gen col lt sgt capt cmdr
adm gov sen rep rev hon mt ft co corp inc ltd bros jan feb mar apr jun jul aug sep sept oct nov dec
approx ca cf e.g i.e a.m p.m u.s u.k u.n""".split())


def words(text: str) -> int:
    return len(text.split())


def split_sections(document: str, min_words: int, max_words: int) -> list[str]:
    """The page's sections in order, before the usability filter (see the module docstring)."""
    if not 0 < min_words <= max_words:
        raise ValueError(f"need 0 < min_words <= max_words, got {min_words}, {max_words}")
    starts = [m.start() for m in _HEADING.finditer(document)]
    bounds = [0, *[s for s in starts if s > 0], len(document)]
    chunks = [document[a:b].strip() for a, b in zip(bounds, bounds[1:])]
    pieces: list[str] = []
    for chunk in chunks:
        heading = bool(_HEADING.match(chunk))
        body = chunk.partition("\n")[2] if heading else chunk
        if not body.split():
            continue  # a heading with nothing under it (GoodWiki drops tables and infoboxes)
        pieces.extend(split_passages(chunk, max_words) if words(chunk) > max_words else [chunk])
    sections: list[str] = []
    for piece in pieces:
        if sections and words(piece) < min_words:
            sections[-1] = f"{sections[-1]}\n\n{piece}"
        else:
            sections.append(piece)
    if len(sections) > 2:
        sections.pop()
    return sections


def split_sentences(text: str) -> list[str]:
    """Sentences of a plain-text answer; "Dr. Smith", "U.S. Army" and "J. R. R. Tolkien" stay whole."""
    sentences: list[str] = []
    start = 0
    for match in _SENTENCE_BREAK.finditer(text):
        before = text[start:match.start()].rstrip()
        last = before.rsplit(None, 1)[-1] if before.split() else ""
        token = last.rstrip(".!?\"'”’)]").lower()
        if last.endswith(".") and (token in _ABBREVIATIONS or re.fullmatch(r"(?:[a-z]\.)*[a-z]", token)):
            continue  # an abbreviation or an initial, not the end of a sentence
        sentences.append(text[start:match.end()].strip())
        start = match.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return [s for s in sentences if s]


def count_sentences(text: str) -> int:
    return len(split_sentences(text))
