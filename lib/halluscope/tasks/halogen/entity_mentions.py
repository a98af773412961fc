"""Find which members of a closed entity list (planets, US states, ...) a response names.

Lists of proper nouns are matched only where the response capitalises them (so the verb "may"
is not the month May), unless the response is written in lower case throughout. Each entity
counts once, in order of first mention.
"""

from __future__ import annotations

import re
from functools import lru_cache

# HALOGEN's list names whose members are common nouns, matched case-insensitively.
COMMON_NOUN_LISTS = frozenset({"colors in the rainbow", "elements in the periodic table"})


_WORD = re.compile(r"[^\W\d_]+")


def _key(words: list[str]) -> str:
    return " ".join(w.lower() for w in words)


@lru_cache(maxsize=256)
def _matcher(entities: tuple[str, ...]) -> tuple[dict[str, str], int]:
    """Word-sequence -> entity (``x-ray`` and ``X ray`` are the same words), and the longest name
    in words; built once per list."""
    by_words = {_key(_WORD.findall(e)): e for e in entities}
    by_words.pop("", None)
    return by_words, max((k.count(" ") + 1 for k in by_words), default=0)


def mentioned_entities(text: str, universe: list[str], list_name: str) -> list[str]:
    """Members of ``universe`` (lower-case names) that ``text`` names, in order of first mention.

    Longest match first at each word, so "North Korea" is not read as "Korea"."""
    if not universe or not text:
        return []
    by_words, longest = _matcher(tuple(universe))
    need_capital = list_name not in COMMON_NOUN_LISTS and text != text.lower()
    words = _WORD.findall(text)
    found: dict[str, None] = {}
    i = 0
    while i < len(words):
        for n in range(min(longest, len(words) - i), 0, -1):
            entity = by_words.get(_key(words[i:i + n]))
            if entity is not None and not (need_capital and not words[i][0].isupper()):
                found.setdefault(entity, None)
                i += n
                break
        else:
            i += 1
    return list(found)


def satisfies(entity: str, condition: str, letter: str) -> bool:
    """The letter condition of HALOGEN's list prompts, on the lower-cased name."""
    name, letter = entity.lower(), letter.lower()
    if condition.startswith("contain"):
        return letter in name
    if condition.startswith("start"):
        return name.startswith(letter)
    if condition.startswith("end"):
        return name.endswith(letter)
    raise ValueError(f"unknown condition {condition!r}")
