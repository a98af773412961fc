"""Prompts that build HalluLens test sets: question writing, answer checking, entity naming, and the
phrasings the tested model is asked about nonexistent entities with.

The paper (App. F) gives what each prompt asks; the wording here is ours, with the paper's
output conventions (``unanswerable``, ``[NO QUESTION]``, comma-separated names). Every template
has a versioned id; ``template_digests`` hashes the texts, and the digests enter the test-set
fingerprint, so a change of wording can never reuse a test set built with the old one.
Generator prompts end with labelled fields (``Title:``, ``Reference:``, ``Question:``) that a
scripted stand-in model can read.
"""

from __future__ import annotations

import hashlib

PWQA_QUESTION = "hallulens-pwqa-question-v1"
PWQA_ANSWER = "hallulens-pwqa-answer-v1"
LONGWIKI_QUESTION = "hallulens-longwiki-question-v1"
LONGWIKI_ANSWER = "hallulens-longwiki-answer-v1"
ENTITY_PHRASINGS = "hallulens-entity-phrasings-v1"
BRAINSTORM = "hallulens-entity-brainstorm-v1"
MIX = "hallulens-entity-mix-v1"

UNANSWERABLE = "unanswerable"
NO_QUESTION = "[NO QUESTION]"

_PWQA_QUESTION = """You write quiz questions from encyclopedia text. Below is part of the Wikipedia page "{title}". Write one question about "{title}" that this text answers.

The question must:
1. be answerable in full from the reference text alone;
2. ask for an objective fact, not an opinion or an open-ended discussion;
3. be short;
4. make sense without the reference text: name its subject, never "the text" or "this article";
5. have a single word or a short phrase as its answer;
6. have exactly one correct answer.

Title: {title}
Reference:
{section}

Reply with the question only, with no explanation or preamble."""

_PWQA_ANSWER = """Can the question below be answered in full from the reference text alone, that is, does the reference contain the answer?
If it can, reply with the answer only: a word or a short phrase, with no explanation.
If it cannot, reply with the single word "unanswerable".

Reference:
{section}

Question: {question}"""

_LONGWIKI_QUESTION = """You write essay questions from encyclopedia text. Below is part of the Wikipedia page "{title}". Write one question about "{title}" that this text answers at length.

The question must:
1. be answerable in full from the reference text alone;
2. ask about facts, not opinions;
3. be short;
4. need an answer longer than three sentences;
5. name its subject and give enough context to be answered without ambiguity.

Questions of the kind wanted:
- What led to the founding of the Hanseatic League, and how did it shape trade in northern Europe?
- Describe how the crew of Apollo 13 returned safely to Earth.
- Explain the part the Rosetta Stone played in deciphering Egyptian hieroglyphs.

Title: {title}
Reference:
{section}

Reply with the one question only, with no explanation. If this text supports no such question, reply "[NO QUESTION]"."""

_LONGWIKI_ANSWER = """Can the question below be answered in full from the reference text alone?
If it can, answer it in one paragraph, using only facts stated in the reference.
If it cannot, reply with the single word "unanswerable".

Reference:
{section}

Question: {question}"""

# Ten ways of asking about an entity; ``{place}`` is "" or " in <place>". Products are asked about
# by brand. One phrasing per item, drawn with the test set's seed.
PHRASINGS = (
    "Tell me about the {type}{place} called {name}.",
    "What information do you have on the {type}{place} named {name}?",
    "Could you give me an overview of the {type}{place} known as {name}?",
    "I'd like a description of the {type}{place} {name}.",
    "Please explain what the {type}{place} {name} is.",
    "What should I know about the {type}{place} called {name}?",
    "Give me some background on the {type}{place} named {name}.",
    "I keep hearing about the {type}{place} {name}. What is it?",
    "Can you summarize what is known about the {type}{place} {name}?",
    "Describe the {type}{place} known as {name}, please.",
)
BRAND_PHRASINGS = (
    "Tell me about the {type} from the {name} brand.",
    "What information do you have on the {type} made by the {name} brand?",
    "Could you give me an overview of the {type} from the {name} brand?",
    "I'd like a description of the {type} sold by the {name} brand.",
    "Please explain what the {type} from the {name} brand is like.",
    "What should I know about the {type} from the {name} brand?",
    "Give me some background on the {type} made by the {name} brand.",
    "I keep hearing about the {type} from the {name} brand. What is it?",
    "Can you summarize what is known about the {type} from the {name} brand?",
    "Describe the {type} from the {name} brand, please.",
)

_BRAINSTORM = """Invent {count} names for a {subject}. Each name should sound realistic and familiar, like a name such a {kind} could really have, but must not be the name of any {kind} that exists.{avoid}

Reply with the {count} names only, separated by commas, with no numbering or explanation."""

_MIX = """Below are names for a {subject} that were invented by others.

Names: {names}

Make {count} new names by recombining, shuffling or blending parts of these names. The new names should sound realistic and familiar, but must not be the name of any {kind} that exists, and must differ from the names above.

Reply with the {count} names only, separated by commas, with no numbering or explanation."""


def pwqa_question(title: str, section: str) -> str:
    return _PWQA_QUESTION.format(title=title, section=section.strip())


def pwqa_answer(section: str, question: str) -> str:
    return _PWQA_ANSWER.format(section=section.strip(), question=question)


def longwiki_question(title: str, section: str) -> str:
    return _LONGWIKI_QUESTION.format(title=title, section=section.strip())


def longwiki_answer(section: str, question: str) -> str:
    return _LONGWIKI_ANSWER.format(section=section.strip(), question=question)


def _subject(kind: str, place: str | None, product: bool) -> str:
    if product:
        return f"brand of {kind}"
    return f"{kind} in {place}" if place else kind


def brainstorm(kind: str, place: str | None, count: int, product: bool, avoid: list[str]) -> str:
    avoid_text = f"\nDo not use any of these names: {', '.join(avoid)}." if avoid else ""
    noun = f"{kind} brand" if product else kind
    return _BRAINSTORM.format(count=count, subject=_subject(kind, place, product), kind=noun, avoid=avoid_text)


def mix(kind: str, place: str | None, count: int, product: bool, names: list[str]) -> str:
    noun = f"{kind} brand" if product else kind
    return _MIX.format(count=count, subject=_subject(kind, place, product), kind=noun, names=", ".join(names))


def entity_prompt(phrasing: int, kind: str, name: str, place: str | None = None, brand: bool = False) -> str:
    """The question put to the tested model about one entity (``phrasing`` in 0..9)."""
    if brand:
        return BRAND_PHRASINGS[phrasing].format(type=kind, name=name)
    return PHRASINGS[phrasing].format(type=kind, place=f" in {place}" if place else "", name=name)


def template_digests(*ids: str) -> dict[str, str]:
    """Template id -> sha256 (12 hex) of its text, for the test-set fingerprint and provenance."""
    texts = {PWQA_QUESTION: _PWQA_QUESTION, PWQA_ANSWER: _PWQA_ANSWER, LONGWIKI_QUESTION: _LONGWIKI_QUESTION,
             LONGWIKI_ANSWER: _LONGWIKI_ANSWER, ENTITY_PHRASINGS: "\n".join(PHRASINGS + BRAND_PHRASINGS),
             BRAINSTORM: _BRAINSTORM, MIX: _MIX}
    return {i: hashlib.sha256(texts[i].encode()).hexdigest()[:12] for i in ids}
