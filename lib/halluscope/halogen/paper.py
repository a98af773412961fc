"""HALOGEN's deterministic rules as its authors' scorers apply them, and our corrections.

The released numbers come from an LLM parse of each response (recorded per response) followed
by these rules. ``paper`` reproduces them, defects included; ``corrected`` fixes each defect
named below. Both read the same recorded parse, so every difference between the two is one of
the listed corrections (docs/architecture.md counts them per task).
"""

from __future__ import annotations

import ast
import re
import sys
from functools import lru_cache
from typing import Literal

from halluscope.imports import hidden

RuleSet = Literal["paper", "corrected"]
RULE_SETS: tuple[RuleSet, ...] = ("paper", "corrected")

_PHRASES = [
    "I could not find any information", "The search results do not provide", "There is no information",
    "There are no search results", "there are no provided search results", "not provided in the search results",
    "is not mentioned in the provided search results", "There seems to be a mistake in the question",
    "Not sources found", "No sources found", "Try a more general question", "Unfortunately,",
    "There doesn't seem to be", "There does not seem to be", "I do not", "I don't", "**No relevant", "I'm afraid",
    "I am afraid", "I apologize,", "I'm sorry", "I am sorry", "Sorry", "provide more", "I am not familiar with",
    "I'm not familiar with",
]
# The authors' list lacks a comma after "I am sorry", so Python joins it with "Sorry": neither
# phrase is matched on its own. The paper rule keeps the fused string.
PAPER_PHRASES = tuple(p for p in _PHRASES if p not in ("I am sorry", "Sorry")) + ("I am sorrySorry",)
CORRECTED_PHRASES = tuple(_PHRASES)
_SHARED_PHRASES = tuple(p for p in _PHRASES if p in PAPER_PHRASES)  # all but the sorry phrases


def abstained(text: str, rules: RuleSet) -> bool:
    """The shared refusal rule: an empty response, or one containing a phrase (case-sensitive)."""
    by_paper, by_corrected = _refusals(text)
    return by_paper if rules == "paper" else by_corrected


@lru_cache(maxsize=4096)
def _refusals(text: str) -> tuple[bool, bool]:
    """The refusal rule under the paper's phrases and under the corrected ones. Both rule sets
    read the same responses in one process, one task after its twin, so each text is searched
    once for the phrases they share; only the sorry phrases differ."""
    if not text.strip():
        return True, True
    shared = any(p in text for p in _SHARED_PHRASES)
    return (shared or "I am sorrySorry" in text,
            shared or "I am sorry" in text or "Sorry" in text)


# --- code: imports ------------------------------------------------------------------------------

_PAPER_IMPORT = re.compile(r"(?:^|\n)\s*import\s+(\w+)", re.IGNORECASE | re.MULTILINE)
_PAPER_FROM = re.compile(r"(?:^|\n)\s*from\s+(\w+)(?:\.\w+)?\s+import\s+\w+", re.IGNORECASE | re.MULTILINE)


def paper_imports(text: str) -> list[str]:
    """The first name after ``import``/``from`` at a line start, as the authors' regexes read it:
    ``import a, b`` yields only ``a``, ``from a.b.c import d`` nothing, ``from . import x``
    nothing. Sorted, as a set has no order."""
    return sorted({*_PAPER_IMPORT.findall(text), *_PAPER_FROM.findall(text)})


# Standard-library modules the authors' fallback (a docs.python.org/3/library/<name>.html page)
# does not find, so the paper counts an import of them as hallucinated: private modules and
# modules documented on another module's page.
_STDLIB_WITHOUT_PAGE = frozenset({
    "cProfile", "pstats", "ntpath", "posixpath", "genericpath", "nturl2path", "encodings", "sre_compile",
    "sre_constants", "sre_parse", "this", "antigravity", "opcode", "pydoc_data", "idlelib", "lib2to3",
    "turtledemo", "xxsubtype", "nt",
})
_PAGES_OF_PRIVATE = frozenset({"_thread", "__future__", "__main__"})


@lru_cache(maxsize=1)
def _stdlib() -> tuple[frozenset[str], frozenset[str]]:
    names = frozenset(sys.stdlib_module_names)
    documented = frozenset(n for n in names if n not in _STDLIB_WITHOUT_PAGE
                           and (not n.startswith("_") or n in _PAGES_OF_PRIVATE))
    return names, documented


def stdlib_without_page(name: str) -> bool:
    """A standard-library module the paper's docs-page fallback does not find."""
    names, documented = _stdlib()
    return name in names and name not in documented


def stdlib_module(name: str, rules: RuleSet) -> bool:
    """Paper: only modules with their own documentation page; corrected: every stdlib module."""
    names, documented = _stdlib()
    return name in (documented if rules == "paper" else names)


# --- rationalization (binary) -------------------------------------------------------------------

GOLD = {"primality": "yes", "senator": "no", "graph": "no"}


def yes_no_prefix(text: str) -> str | None:
    """'yes'/'no' when the response starts with it (the authors' answer atom)."""
    m = re.match(r"(yes|no)(?:,|\b)", text.strip().lower())
    return m.group(1) if m else None


@lru_cache(maxsize=1)
def _word_tokenizer():
    """NLTK's word tokenizer. Its package imports SciPy's statistics and scikit-learn for modules
    the tokenizer never uses, unless they are absent (it then keeps stand-ins for them)."""
    with hidden("scipy.stats", "sklearn"):
        from nltk.tokenize import NLTKWordTokenizer
    return NLTKWordTokenizer()


_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")


def _first_line_sentences(text: str, rules: RuleSet) -> list[str]:
    line = text.split("\n")[0]
    if rules == "corrected":
        line = line.replace("/", " / ")
    return _SENTENCE_BREAK.split(line)


def first_line_words(text: str, rules: RuleSet) -> tuple[str, ...]:
    """Lower-cased word tokens of the first line, as NLTK's word tokenizer gives them (sentence
    by sentence, so a sentence-final period comes off). Paper: "Yes/no" stays one token;
    corrected: a slash also separates words."""
    return tuple(w for sentence in _first_line_sentences(text, rules) for w in _sentence_words(sentence))


@lru_cache(maxsize=8192)
def _sentence_words(sentence: str) -> tuple[str, ...]:
    """Tokenized once for both rule sets (a sentence without a slash reads the same to each):
    NLTK's tokenizer is the costliest step of the binary rationalization rules."""
    return tuple(w.lower() for w in _word_tokenizer().tokenize(sentence))


# "yes" or "no" standing as a word (in any case), or before "n't": where NLTK's tokenizer can cut
# it out. It cuts at whitespace and around punctuation, before "n't", and inside a few
# contractions ("can|not", "gon|na", "'t|is") whose pieces are never "yes" or "no".
_ANSWER_WORD = {g: re.compile(rf"(?<!\w){g}(?!\w)|(?<!\w){g}(?=n't)", re.IGNORECASE) for g in set(GOLD.values())}


def gold_in_first_line(text: str, category: str, rules: RuleSet) -> bool:
    """The authors' answer gate: the right answer among the first line's words means no hallucination.

    Only sentences that hold the answer as a word are tokenized: the tokenizer inserts spaces
    and rewrites quote characters but never removes a character between two others, so a token
    that is the answer is a piece of its sentence, with a token boundary on either side."""
    gold = GOLD[category]
    if gold not in text.split("\n")[0].lower():
        return False
    word = _ANSWER_WORD[gold]
    return any(word.search(sentence) and gold in _sentence_words(sentence)
               for sentence in _first_line_sentences(text, rules))


def parsed_factors(parsed: str) -> list[int]:
    """Comma-separated integers of the parse, duplicates kept (3, 3, 7, 13)."""
    out = []
    for part in parsed.split(","):
        try:
            out.append(int(part.strip()))
        except ValueError:
            pass
    return out


_FLIGHT = re.compile(r"from city (\w) to city (\w)")


def flights(text: str) -> list[tuple[str, str]]:
    """(origin, destination) of every "from city X to city Y" in a parse or a prompt."""
    return _FLIGHT.findall(text)


def prompt_flights(prompt: str, rules: RuleSet) -> set[tuple[str, str]]:
    """Flights the prompt offers. Paper: also the question's own origin-destination pair (the
    same regex reads "goes from city F to city G?"); corrected: only the listed flights."""
    listed = set(re.findall(r"There is a flight from city (\w) to city (\w)", prompt))
    return set(flights(prompt)) if rules == "paper" else listed


_STATES = frozenset("""Alabama Alaska Arizona Arkansas California Colorado Connecticut Delaware Florida Georgia
Hawaii Idaho Illinois Indiana Iowa Kansas Kentucky Louisiana Maine Maryland Massachusetts Michigan Minnesota
Mississippi Missouri Montana Nebraska Nevada Ohio Oklahoma Oregon Pennsylvania Tennessee Texas Utah Vermont
Virginia Washington Wisconsin Wyoming""".split()) | {
    "New Hampshire", "New Jersey", "New Mexico", "New York", "North Carolina", "North Dakota", "Rhode Island",
    "South Carolina", "South Dakota", "West Virginia"}
_NOT_A_PERSON = frozenset("""University College Institute School Academy State States United America American Senate
Senator Senators Congress House Representatives Therefore The There This It Contextual Information Rationale
Explanation Response Context Instruction No Yes However Note Based In US U.S USA Democratic Republican Party Hall
Law Technology MIT Army Naval Navy Air Force Military Court Supreme Department Secretary Governor President""".split())
_TITLES = frozenset({"Senator", "Sen", "Mr", "Mrs", "Ms", "Dr", "Former", "Governor", "Rep", "Representative"})
_CAPITALISED_RUN = re.compile(r"(?:\b[A-Z][a-zA-Z'-]+|\b[A-Z]\.)(?:\s+(?:[A-Z]\.|[A-Z][a-zA-Z'-]+))+")


def person_names(parsed: str) -> list[str]:
    """People named in a parse, in order, without repeats or names inside longer ones.

    The authors ran spaCy's small English NER model (not installable offline); this reads runs
    of two or more capitalised words within a sentence, leaving out places, institutions and
    titles. On the recorded parses it agrees with theirs on whether any person is named for all
    but 7 of 5,000 senator responses (docs/architecture.md)."""
    found: list[str] = []
    for sentence in re.split(r"(?<=[a-z]{2}[.!?])\s+|\n", parsed):
        for m in _CAPITALISED_RUN.finditer(sentence):
            words = m.group(0).split()
            while words and words[0].strip(".") in _TITLES:
                words = words[1:]
            if len(words) < 2 or any(w.strip(".") in _NOT_A_PERSON for w in words):
                continue
            name = " ".join(words)
            if name not in _STATES and name not in found:
                found.append(name)
    return [n for n in found if not any(n != other and n in other for other in found)]


# --- list tasks (rationalization numerical, false presuppositions) -------------------------------

_COUNT_AND_LIST = re.compile(r"(\d+),\s*((?:\s*\b\w+\b\s*,?)+)\s*")


def count_and_entities(parsed: str) -> tuple[int | None, list[str]]:
    """The count and the entities of a numerical parse ("4, earth, mars"); (None, []) when the
    parse does not start with a number followed by a list."""
    m = _COUNT_AND_LIST.search(parsed)
    if not m:
        return None, []
    return int(m.group(1)), [e.strip() for e in m.group(2).strip().split(",")]


def first_number(text: str) -> int | None:
    """The first integer of the response's first line."""
    m = re.search(r"\d+", text.split("\n")[0])
    return int(m.group(0)) if m else None


def zero_answer(text: str) -> bool:
    """The authors' exception: a 0 in the first line is right when no member qualifies."""
    return "0" in re.findall(r"\d+", text.split("\n")[0])


def list_items(parsed: str, comma_split_strips: bool = False) -> list[str]:
    """The items of a false-presupposition parse: split at ", ", else at "; ", else the whole
    (stripped) parse. ``comma_split_strips``: the file of one released model was parsed with a
    plain split at "," and stripped items (a single item is then kept even when empty)."""
    if comma_split_strips:
        return [x.strip() for x in parsed.split(",")] if "," in parsed else [parsed.strip()]
    if ", " in parsed:
        return parsed.split(", ")
    if "; " in parsed:
        return parsed.split("; ")
    return [parsed.strip()] if parsed.strip() else []


# Parses that copy the extraction prompt's own worked example instead of reading the response.
FEW_SHOT_COPIES = frozenset({
    "mercury, mars, mimas, mab, miranda, metis, melpomene",
    "4, earth, mars, venus, neptune",
})


def copies_few_shot(parsed: str) -> bool:
    """A parse equal to a worked example (the parser sometimes echoes its "<Response>:" label)."""
    text = " ".join(parsed.lower().split()).removeprefix("<response>:").strip(" .")
    return text in FEW_SHOT_COPIES


# A list of single-quoted strings that hold no quote, backslash, line break, NUL or lone
# surrogate: each item is its text as written, so it is read without Python's parser.
_PLAIN_ITEM = r"'[^'\\\n\r\x00\ud800-\udfff]*'"
_PLAIN_LIST = re.compile(rf"\[(?:{_PLAIN_ITEM}(?:, {_PLAIN_ITEM})*)?\]")


def plain_str_list(value: str) -> list[str] | None:
    """The items of a list literal written as ``['a', 'b']`` (the form Python's ``repr`` gives
    most lists of strings), as ``ast.literal_eval`` reads them; None for any other text, which
    the caller parses. ``literal_eval`` costs the recorded references files most of their load."""
    if not _PLAIN_LIST.fullmatch(value):
        return None
    return value[2:-2].split("', '") if len(value) > 2 else []


def literal_list(value: str) -> list:
    """A Python list literal from a recorded column; [] for an empty cell."""
    value = (value or "").strip()
    if not value or value in ("nan", "None"):
        return []
    plain = plain_str_list(value)
    if plain is not None:
        return plain
    parsed = ast.literal_eval(value)
    if not isinstance(parsed, list):
        raise ValueError(f"expected a list literal, got {value[:60]!r}")
    return parsed


def recorded_units(value: str) -> list[str]:
    """Atomic units stored one per line as "| fact |" or "fact | True |", as the authors'
    scorers split them (at "|\\n", dropping "| " and empty pieces)."""
    return [x.replace("| ", "") for x in (value or "").split("|\n") if x]
