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


def _variants(entity: str) -> list[str]:
    base = entity.strip().lower()
    out = {base, base.replace("-", " "), base.replace("-", "")}
    return sorted(out, key=len, reverse=True)


@lru_cache(maxsize=256)
def _pattern(entities: tuple[str, ...]) -> re.Pattern[str]:
    alts = sorted({v for e in entities for v in _variants(e)}, key=len, reverse=True)
    return re.compile(r"(?<![A-Za-z])(" + "|".join(re.escape(a) for a in alts) + r")(?![A-Za-z])",
                      re.IGNORECASE)


def mentioned_entities(text: str, universe: list[str], list_name: str) -> list[str]:
    """Members of ``universe`` (lower-case names) that ``text`` names, in order of first mention."""
    if not universe or not text:
        return []
    variant_to_entity = {v: e for e in universe for v in _variants(e)}
    need_capital = list_name not in COMMON_NOUN_LISTS and text != text.lower()
    found: dict[str, None] = {}
    for m in _pattern(tuple(universe)).finditer(text):
        surface = m.group(1)
        if need_capital and not surface[0].isupper():
            continue
        entity = variant_to_entity.get(surface.lower())
        if entity is not None:
            found.setdefault(entity, None)
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
