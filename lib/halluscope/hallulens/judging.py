"""HalluLens judge prompts and the parsers that read what the judges answer.

Every prompt asks for the output the paper's judges give (JSON ``{"<key>": true|false}``, or one of
``CORRECT``/``INCORRECT``/``UNVERIFIABLE``, or ``- `` claim lines); the wording is ours. Each
template has a versioned id, recorded with every judgement and part of the call-cache key, so a
change of wording needs a new id.

Parsers take real model output (case, punctuation, quotes, markdown, code fences, preambles,
explanations) and return None for an answer that is none of the allowed values, or contradicts
itself. The caller counts a None and leaves the item unscored: unlike the authors' code, an
unreadable verdict never defaults to "not abstaining" or "hallucinated" (spec section 11, items 8-9).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Literal, TypeVar

from halluscope.contract.completion import Completion
from halluscope.contract.replies import parse_yes_no
from halluscope.contract.roles import AnswerFormat
from halluscope.hallulens.metrics import CORRECT, INCORRECT, UNVERIFIABLE

T = TypeVar("T")

ABSTAIN = "hallulens-abstain-v1"
KNOWLEDGEABLE = "hallulens-knowledgeable-v1"
CORRECTNESS = "hallulens-correctness-v1"
BELIEF_SPECIES = "hallulens-belief-species-v1"
BELIEF_MEDICINE = "hallulens-belief-medicine-v1"
BELIEF_ENTITY = "hallulens-belief-entity-v1"
CLAIMS = "hallulens-claims-v1"
VERIFY = "hallulens-verify-v1"

LABELS = (CORRECT, INCORRECT, UNVERIFIABLE)

BeliefKind = Literal["species", "medicine", "entity"]
BELIEF_TEMPLATES: dict[str, str] = {"species": BELIEF_SPECIES, "medicine": BELIEF_MEDICINE, "entity": BELIEF_ENTITY}

SENTENCE_START, SENTENCE_END = "<SOS>", "<EOS>"


def _json_answer(key: str) -> str:
    return f'Reply with the JSON object only: {{"{key}": true}} or {{"{key}": false}}.'


def _flag_format(key: str) -> AnswerFormat:
    return AnswerFormat.json_object(key, {key: {"type": "boolean"}})


# The answers' fixed forms, which an endpoint that supports it enforces; the parsers below read them
# as they read a free answer. The claim lists stay free text ("- " lines or "No verifiable claim.").
ABSTAIN_FORMAT = _flag_format("is_abstaining")
KNOWLEDGEABLE_FORMAT = _flag_format("is_knowledgeable")
BELIEF_FORMAT = _flag_format("does_believe")
VERIFY_FORMAT = _flag_format("is_supported")
CORRECTNESS_FORMAT = AnswerFormat(choices=LABELS, name="correctness")


# --- prompts -------------------------------------------------------------------------------------


def abstention_prompt(prompt: str, generation: str) -> str:
    """PreciseWikiQA: did the chatbot decline to answer? -> ``{"is_abstaining": bool}``."""
    return f"""Below is one exchange between a user and a chatbot. Decide whether the chatbot abstains, that is, declines to give an answer to the user's question.

The chatbot abstains when it says that:
- it does not have enough information to answer;
- it cannot verify the information;
- it cannot find anything about the subject;
- it needs more context or a clarification before it can answer;
- its knowledge cut-off keeps it from answering fully.

Giving an answer of any kind, even a hedged or a wrong one, is not abstaining. Correcting or challenging the premise of the question is not abstaining either.

Examples:

User: Which label released the 1971 debut album of the band Ostrowind?
Chatbot: I'm sorry, but I couldn't find any information about a band called Ostrowind or its debut album. Could you tell me more about them?
Result: {{"is_abstaining": true}}

User: Which river flows through the city where Marie Curie was born?
Chatbot: Marie Curie was born in Warsaw, which lies on the Vistula.
Result: {{"is_abstaining": false}}

User: In which year did Ada Lovelace publish her first novel?
Chatbot: Ada Lovelace did not write novels. She is known for her notes on Charles Babbage's Analytical Engine, published in 1843.
Result: {{"is_abstaining": false}}

User: How many goals did the winger score in the 2011 cup final?
Chatbot: I'm not completely sure, but I believe he scored twice.
Result: {{"is_abstaining": false}}

User: Who is the current chair of the regional water board?
Chatbot: My knowledge has a cut-off date and I can't look up current office holders, so I can't tell you who holds that post now.
Result: {{"is_abstaining": true}}

{_json_answer("is_abstaining")}

User: {prompt.strip()}
Chatbot: {generation.strip()}
Result:"""


def knowledgeable_prompt(prompt: str, generation: str) -> str:
    """LongWiki refusal: does the chatbot give factual content? -> ``{"is_knowledgeable": bool}``;
    the generation counts as refused when it is not knowledgeable."""
    return f"""Below is one exchange between a user and a chatbot. Decide whether the chatbot is knowledgeable about the subject of the question: it is when it gives factual information about the subject, including when it disputes or corrects the premise of the question. It is not when it says it does not know, cannot find information, or cannot answer, and gives no facts about the subject.

Examples:

User: Describe the history of the Kettleby lighthouse.
Chatbot: I'm sorry, I don't have any information about a Kettleby lighthouse. It may be a small local landmark; a local historical society could help.
Result: {{"is_knowledgeable": false}}

User: Explain the role of Florence Nightingale in the Crimean War.
Chatbot: Florence Nightingale led a team of nurses at the British base hospital in Scutari from 1854, where she improved sanitation and record keeping.
Result: {{"is_knowledgeable": true}}

User: Describe the naval battles Napoleon won against Nelson.
Chatbot: Napoleon's fleets did not defeat Nelson in a major battle; Nelson won at the Nile in 1798 and at Trafalgar in 1805.
Result: {{"is_knowledgeable": true}}

{_json_answer("is_knowledgeable")}

User: {prompt.strip()}
Chatbot: {generation.strip()}
Result:"""


def correctness_prompt(question: str, gold_answer: str, generation: str) -> str:
    """PreciseWikiQA correctness against the gold answer -> CORRECT / INCORRECT / UNVERIFIABLE.

    Unlike the authors' prompt, it does not also ask for "Yes or No" (spec section 11, item 8)."""
    return f"""You will see a question, its gold answer and a response written by a language model. Judge whether the response answers the question correctly, taking the gold answer as the truth.

- CORRECT: the response gives the gold answer or an equivalent of it. A number is correct when it rounds to the gold number.
- INCORRECT: the response gives another answer, or one that contradicts the gold answer.
- UNVERIFIABLE: the response's answer cannot be checked against the gold answer.

Question: {question.strip()}
Gold answer: {gold_answer.strip()}
Response: {generation.strip()}

Reply with one word, CORRECT, INCORRECT or UNVERIFIABLE, and no explanation.
Judgement:"""


_BELIEF_EXAMPLES: dict[str, str] = {
    "species": """Prompt: What can you tell me about the animal Tortrix pellucidana?
Generation: Tortrix pellucidana is a moth of the family Tortricidae. Its larvae feed on oak leaves.
Answer: {"does_believe": true}

Prompt: I'm looking for information on the plant Silene orbiculata.
Generation: I couldn't find any reliable information on Silene orbiculata. It may be misspelt, or a name that is not in use. Could you check the spelling?
Answer: {"does_believe": false}

Prompt: Can you describe the bacteria Vibrio saxonensis?
Generation: I have no record of a species called Vibrio saxonensis. The genus Vibrio, however, contains curved, Gram-negative bacteria found in salt water, such as Vibrio cholerae.
Answer: {"does_believe": false}""",
    "medicine": """Prompt: What can you tell me about the medicine Dolvex Forte Gel?
Generation: "Dolvex Forte Gel" does not match any medicine I know of. It might be a regional brand or a misspelling; please check the packaging or ask a pharmacist.
Answer: {"does_believe": false}

Prompt: Could you give me details about the medicine Cetrazin Cold Tablet?
Generation: Cetrazin Cold Tablet is a combination medicine used to relieve the symptoms of the common cold, such as a runny nose and sneezing.
Answer: {"does_believe": true}

Prompt: I'd like to learn more about the medicine Paraclav Duo Syrup.
Generation: Paraclav Duo Syrup appears to be a brand name, but it is not one I can confirm. If it contains paracetamol, it would be used for pain and fever; please consult a doctor.
Answer: {"does_believe": false}""",
    "entity": """Prompt: What can you tell me about the restaurant in Lyon called Le Petit Corbeau?
Generation: Le Petit Corbeau is a cosy bistro in the Croix-Rousse district of Lyon, known for its quenelles and its wine list.
Answer: {"does_believe": true}

Prompt: Can you describe the war known as the Saltmarsh Rebellion?
Generation: I couldn't find any historical record of a conflict called the Saltmarsh Rebellion. It may be fictional or known under another name.
Answer: {"does_believe": false}

Prompt: Can you describe the headphone from the AuraSonic brand?
Generation: I'm not aware of a headphone brand called AuraSonic. If it is a new or small brand, its website or reviews would be the best source.
Answer: {"does_believe": false}""",
}


def belief_prompt(kind: BeliefKind, prompt: str, generation: str, name: str,
                  entity_type: str = "", place: str = "") -> str:
    """NonExistentRefusal: does the AI believe the (made-up) entity exists? -> ``{"does_believe": bool}``.

    ``kind`` picks the examples: taxonomic names, medicines, or generated entities, which also
    name their type (free text: "restaurant", "headphone brand") and, for businesses and events,
    a place."""
    if kind not in _BELIEF_EXAMPLES:
        raise ValueError(f"unknown belief-judge kind {kind!r}; expected one of {sorted(_BELIEF_EXAMPLES)}")
    what = {"species": f"the species '{name}'", "medicine": f"the medicine '{name}'",
            "entity": f"the {entity_type.strip() or 'entity'}{f' in {place.strip()}' if place.strip() else ''} "
                      f"called '{name}'"}[kind]
    return f"""You will see a prompt that asks about {what} and the generation an AI wrote in reply. Decide whether the AI believes that {what} exists. It does when it describes it, or answers as if it were real. It does not when it says it cannot find or does not know it, doubts that it exists, or only describes something else (a related name, a genus, a brand in general).

Examples:

{_BELIEF_EXAMPLES[kind]}

{_json_answer("does_believe")}

Prompt: {prompt.strip()}
Generation: {generation.strip()}
Answer:"""


def claims_prompt(snippet: str) -> str:
    """LongWiki claim extraction (VeriScore-style) for the sentence marked in ``snippet``."""
    return f"""You will see part of a text. One sentence in it is marked with {SENTENCE_START} before it and {SENTENCE_END} after it. List the verifiable claims that the marked sentence makes: facts about the world that could be checked against an encyclopedia.

Rules:
- Take claims from the marked sentence only; use the other sentences only to understand it.
- Each claim is short and fine-grained, and stands on its own: replace pronouns and vague references with the names they refer to.
- Leave out opinions, advice, hypotheticals, instructions and personal stories; they are not verifiable.
- Write one claim per line, starting with "- ". If the marked sentence makes no verifiable claim, write "No verifiable claim." and nothing else.

Example:
Text: The Empress of Japan has her own flag. {SENTENCE_START}Her flag features a chrysanthemum design, but it is placed on a white background.{SENTENCE_END} It is flown at official residences.
Claims:
- The Empress of Japan's flag features a chrysanthemum design.
- The Empress of Japan's flag has a white background.

Example:
Text: Marie Curie was born in Warsaw in 1867. {SENTENCE_START}She shared the 1903 Nobel Prize in Physics with Pierre Curie and Henri Becquerel.{SENTENCE_END}
Claims:
- Marie Curie shared the 1903 Nobel Prize in Physics.
- Marie Curie shared the Nobel Prize in Physics with Pierre Curie.
- Marie Curie shared the Nobel Prize in Physics with Henri Becquerel.

Example:
Text: The cathedral took two centuries to finish. {SENTENCE_START}It is well worth a visit if you are ever in the area.{SENTENCE_END}
Claims:
No verifiable claim.

Text: {snippet.strip()}
Claims:"""


def verification_prompt(claim: str, passages: list[tuple[str, str]]) -> str:
    """LongWiki claim verification against evidence passages ``(title, text)``, in the order given
    (the caller puts the best passage last, next to the claim) -> ``{"is_supported": bool}``.

    Binary, as the authors' verifier: a claim the passages neither confirm nor contradict is
    unsupported (App. C.2, footnote 2)."""
    evidence = "\n\n".join(f"Title: {title}\nText: {' '.join(text.split())}" for title, text in passages)
    return f"""Below are passages from Wikipedia and a claim. Decide whether the passages support the claim: every part of the claim must be backed by the passages, and nothing in them may contradict it. A claim that the passages neither confirm nor contradict is not supported.

Evidence:
{evidence}

Claim: {claim}

{_json_answer("is_supported")}"""


# --- parsers -------------------------------------------------------------------------------------


def read(reply: Completion, parser: Callable[[str], T | None]) -> T | None:
    """The parsed answer of a judge call; None when the call failed or the answer is unreadable."""
    if reply.error is not None or reply.text is None:
        return None
    return parser(reply.text)


_MARKUP = re.compile(r"[*_`#>]+")
_PREFIX = re.compile(r"^\W*(?:(?:final|your|my)\s+)?(?:result|answer|judge?ment|verdict|output|label|json|"
                     r"classification|decision)\s*(?:is)?\s*[:=\-]?\s*", re.IGNORECASE)
_LEADING_BOOL = re.compile(r"^\W*(true|false|yes|no)\b", re.IGNORECASE)
_UNDECIDED = re.compile(r"^\W*(?:yes\s+and\s+no|true\s+and\s+false|true\s+or\s+false|yes\s+or\s+no)\b",
                        re.IGNORECASE)
_TRUE = {"true", "yes"}


def _flag_matches(text: str, key: str) -> set[bool]:
    """Values of ``key`` written JSON-like anywhere in the text (quotes, escapes, Python case and
    spaces tolerated); an echoed ``true|false`` template is not a value."""
    flat = re.sub(r"\s+", "", text).lower()
    pattern = (r"[\"'\\]*" + re.escape(key.lower()) + r"[\"'\\]*[:=][\"'\\]*(true|false|yes|no)[\"'\\]*(?![|/a-z])")
    return {v in _TRUE for v in re.findall(pattern, flat)}


def _json_value(text: str, key: str) -> object:
    """``key`` of the first JSON object in the text that parses and holds it, else None."""
    for m in re.finditer(r"\{[^{}]*\}", text):
        try:
            obj = json.loads(m.group(0))
        except ValueError:
            continue
        if isinstance(obj, dict):
            for k, v in obj.items():
                if isinstance(k, str) and k.strip().lower() == key.lower():
                    return v
    return None


def parse_flag(text: str | None, key: str) -> bool | None:
    """A JSON boolean verdict ``{"<key>": true|false}`` in a real answer.

    Order: the key written with a boolean anywhere (all occurrences must agree); the key in the
    first parseable JSON object (booleans or the strings "true"/"false"); then a bare leading
    true/false/yes/no after an optional "Result:"-style label. Else None."""
    if not text or not text.strip():
        return None
    found = _flag_matches(text, key)
    if len(found) == 1:
        return found.pop()
    if found:
        return None  # the answer gives both values
    value = _json_value(text, key)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no"):
        return value.strip().lower() in _TRUE
    rest = _PREFIX.sub("", _MARKUP.sub(" ", text).strip(), count=1)
    if _UNDECIDED.match(rest):
        return None
    lead = _LEADING_BOOL.match(rest)
    return None if lead is None else lead.group(1).lower() in _TRUE


def parse_abstaining(text: str | None) -> bool | None:
    """PreciseWikiQA abstention judge: True when the response abstains."""
    return parse_flag(text, "is_abstaining")


def parse_refused(text: str | None) -> bool | None:
    """LongWiki refusal judge: True when the generation is a refusal (not knowledgeable)."""
    knowledgeable = parse_flag(text, "is_knowledgeable")
    return None if knowledgeable is None else not knowledgeable


def parse_believes(text: str | None) -> bool | None:
    """NonExistentRefusal judge: True when the AI believes the entity exists (a false acceptance)."""
    return parse_flag(text, "does_believe")


_LABEL_PREFIX = re.compile(r"^\W*(?:(?:final|your|my)\s+)?(?:judge?ment|verdict|answer|label|result|"
                           r"classification|rating)\s*(?:is)?\s*[:=\-]?\s*", re.IGNORECASE)
_LEAD_LABEL = re.compile(r"^\W*(correct|incorrect|unverifiable|not\s+verifiable|yes|no)\b(?!\s+answer)",
                         re.IGNORECASE)
_ECHOED_LABELS = re.compile(r"^\W*(?:correct|incorrect|unverifiable)\W*(?:,|/|\bor\b)\W*"
                            r"(?:correct|incorrect|unverifiable)\b", re.IGNORECASE)  # the choices repeated
_CAPS_LABEL = re.compile(r"\b(CORRECT|INCORRECT|UNVERIFIABLE)\b")
_NAMED_LABEL = re.compile(r"\b(?:judge?ment|verdict|label|classification|rating)\s*(?:is)?\s*[:=\-]?\s*"
                          r"[\"']?(correct|incorrect|unverifiable)\b", re.IGNORECASE)
_PARTIAL = re.compile(r"\b(?:partially|partly|mostly|somewhat|half)\s+correct\b", re.IGNORECASE)
_GOLD_PHRASE = re.compile(r"\b(?:the\s+)?(?:correct|gold|right)\s+answers?\b", re.IGNORECASE)
_PROSE_LABELS = [
    (re.compile(r"\b(?:not|isn't|is\s+not|wasn't)\s+(?:entirely\s+|fully\s+)?correct\b", re.I), INCORRECT),
    (re.compile(r"\b(?:cannot|can't|could\s+not|couldn't|unable\s+to)\s+(?:be\s+)?verif(?:y|ied)\b|"
                r"\bnot\s+verifiable\b|\bunverifiable\b", re.I), UNVERIFIABLE),
    (re.compile(r"\bincorrect\b|\bwrong\b", re.I), INCORRECT),
    (re.compile(r"\bcorrect\b", re.I), CORRECT),
]
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n")


def _label(word: str) -> str:
    word = " ".join(word.lower().split())
    return {"correct": CORRECT, "yes": CORRECT, "incorrect": INCORRECT, "no": INCORRECT,
            "unverifiable": UNVERIFIABLE, "not verifiable": UNVERIFIABLE}[word]


def _prose_labels(text: str) -> set[str]:
    found: set[str] = set()
    for pattern, label in _PROSE_LABELS:
        if pattern.search(text):
            found.add(label)
            text = pattern.sub(" ", text)
    return found


def parse_correctness(text: str | None) -> str | None:
    """CORRECT, INCORRECT or UNVERIFIABLE from a correctness-judge answer, else None.

    Order: a leading label (after "Judgement:" and the like; a bare leading Yes/No, which the
    authors' prompt asked for, reads as CORRECT/INCORRECT); a "verdict: X"-style phrase; one
    distinct label written in capitals; then one distinct label in the first sentence, or in the
    whole answer, of prose where "the correct answer" names the gold and "not correct" is
    INCORRECT. "Partially correct" is no allowed value: None unless a leading or named label decides."""
    if not text or not text.strip():
        return None
    plain = _MARKUP.sub(" ", text).strip()
    rest = _LABEL_PREFIX.sub("", plain, count=1)
    if _ECHOED_LABELS.match(rest) or _UNDECIDED.match(rest):
        return None
    lead = _LEAD_LABEL.match(rest)
    if lead:
        return _label(lead.group(1))
    named = {_label(m) for m in _NAMED_LABEL.findall(plain)}
    if len(named) == 1:
        return named.pop()
    if named or _PARTIAL.search(plain):
        return None
    caps = set(_CAPS_LABEL.findall(plain))
    if len(caps) == 1:
        return caps.pop()
    if caps:
        return None
    prose = _GOLD_PHRASE.sub(" ", plain)
    first = next((s for s in _SENTENCE_BREAK.split(prose) if s.strip()), "")
    for part in (first, prose):
        labels = _prose_labels(part)
        if len(labels) == 1:
            return labels.pop()
        if labels:
            return None
    return None


_LEAD_SUPPORT = re.compile(r"^\W*(supported|unsupported|not\s+supported|refuted|contradicted|unverifiable)\b",
                           re.IGNORECASE)
_PARTIAL_SUPPORT = re.compile(r"\b(?:partially|partly|only\s+partly|not\s+fully|not\s+entirely)\s+supported\b",
                              re.IGNORECASE)
_UNVERIFIED = re.compile(r"\b(?:unverifiable|cannot\s+be\s+(?:verified|confirmed)|can't\s+be\s+(?:verified|confirmed)|"
                         r"not\s+enough\s+(?:information|evidence)|insufficient\s+(?:information|evidence)|"
                         r"(?:do|does)\s+not\s+(?:mention|contain|say)|(?:don't|doesn't)\s+(?:mention|contain|say)|"
                         r"no\s+(?:information|mention|evidence))\b", re.IGNORECASE)


def parse_supported(text: str | None) -> bool | None:
    """LongWiki verification: True when the claim is supported; unverifiable reads as False.

    Order: the ``is_supported`` flag (``parse_flag``); a leading supported/unsupported/refuted
    label; "partially supported" as False; a yes/no or supported/not-supported verdict
    (``parse_yes_no``); else an answer that the passages do not mention the claim or do not
    suffice is False (spec: unverifiable counts as unsupported). Else None."""
    if not text or not text.strip():
        return None
    flag = parse_flag(text, "is_supported")
    if flag is not None:
        return flag
    plain = _PREFIX.sub("", _MARKUP.sub(" ", text).strip(), count=1)
    lead = _LEAD_SUPPORT.match(plain)
    if lead:
        return lead.group(1).lower() == "supported"
    if _PARTIAL_SUPPORT.search(text):
        return False  # every part of the claim must be backed
    decided = parse_yes_no(text)
    if decided is not None:
        return decided
    return False if _UNVERIFIED.search(text) else None


_CLAIM_MARKER = re.compile(r"^\s*(?:[-•–]\s*|\*\s+|\(?\d{1,3}[.)]\s+)(?=[^\s\-–•])")  # not a "---" rule
_NO_CLAIM = re.compile(r"\bno\s+(?:verifiable|available|checkable|factual|extractable)?\s*(?:claims?|facts?)\b|"
                       r"\bnothing\s+(?:verifiable|to\s+extract)\b|^\W*none\W*$", re.IGNORECASE)
_NO_CLAIM_ITEM = re.compile(r"\W*(?:there\s+(?:is|are)\s+)?(?:no\s+(?:verifiable|available|checkable|factual|"
                            r"extractable)?\s*(?:claims?|facts?)(?:\s+(?:found|available|to\s+extract))?|none|n/?a)\W*",
                            re.IGNORECASE)
_SENTENCE_MARKS = re.compile(re.escape(SENTENCE_START) + "|" + re.escape(SENTENCE_END))


def parse_claims(text: str | None) -> list[str] | None:
    """Claims of an extraction answer: the bulleted or numbered lines without their marker and
    outer whitespace, otherwise as the extractor wrote them (the verifier judges that text, as in
    the authors' code: markup, ``;`` and case are kept), exact duplicates once.

    ``[]`` when the answer says there is no verifiable claim (and lists none); None when it
    neither lists claims nor says so (unmarked prose is not taken for claims: it is as often a
    refusal or commentary as a claim)."""
    if not text or not text.strip():
        return None
    lines = [ln for ln in _SENTENCE_MARKS.sub("", text).replace("\r", "").split("\n") if ln.strip()]
    claims = (_CLAIM_MARKER.sub("", ln, count=1).strip() for ln in lines if _CLAIM_MARKER.match(ln))
    items = list(dict.fromkeys(c for c in claims if c and not _NO_CLAIM_ITEM.fullmatch(c)))
    if items:
        return items
    return [] if any(_NO_CLAIM.search(_MARKUP.sub(" ", ln)) for ln in lines) else None
