"""Prompts HALOGEN's LLM-verified tasks send to the extractor and the judge.

The paper gives only the gist of two of them; the wording here is ours. Each template has a
versioned id: it is recorded with every verdict and is part of the call-cache key, so changing
a template's words means a new id. Every template ends with the same layout convention
(``Passage:``/``References:`` for extraction, ``Premise:``/``Hypothesis:`` or
``Evidence:``/``Claim:`` for judging) that the scripted stand-in model reads.
"""

from __future__ import annotations

from halluscope.contract.roles import AnswerFormat

FACTS = "facts-v1"
TITLES = "titles-v1"
ENTAILMENT = "entailment-v1"
MEETING = "meeting-v1"
BIO_FACT = "bio-fact-v1"
PARSE_BINARY = "parse-binary-v1"
PARSE_NUMERICAL = "parse-numerical-v1"
PARSE_LIST = "parse-list-v1"
TITLE_FOUND = "title-found-v1"

# the judge's answer where the corrected rules read a leading yes or no (entailment, bio fact,
# meeting): a live endpoint that supports it is held to one of the two words
VERDICT = AnswerFormat(choices=("Yes", "No"), name="verdict")


def one_line(text: str) -> str:
    return " ".join(text.split())


def facts_prompt(passage: str) -> str:
    return ("Break the passage below into short, independent facts. Each fact must be understandable on "
            "its own, so use names instead of pronouns. Write one fact per line, starting with \"- \", "
            "and write nothing else.\n\n"
            f"Passage: {passage.strip()}\n"
            "Facts:")


def titles_prompt(response: str) -> str:
    return ("The text below is an answer that cites scientific or academic references. Copy the title of "
            "every reference it cites, exactly as written, one per line as \"Title: <title>;\". If it "
            "cites none, write \"No titles.\"\n\n"
            f"References: {response.strip()}")


def entailment_prompt(premise: str, hypothesis: str) -> str:
    return (f"Premise: {premise.strip()}\n\n"
            f"Hypothesis: {one_line(hypothesis)}\n\n"
            "Does the premise entail the hypothesis? Answer Yes or No.")


def meeting_prompt(response: str, first: str, second: str) -> str:
    return (f"Text: {response.strip()}\n\n"
            f"Question: does the text say that {first} and {second} met in person? Answer Yes if it "
            "describes or confirms such a meeting, No if it denies it or does not confirm it.")


def bio_fact_prompt(name: str, passages: list[str], fact: str) -> str:
    evidence = "\n\n".join(p.strip() for p in passages)
    return (f"Title: {name}\n"
            f"Evidence: {evidence}\n\n"
            f"Claim: {one_line(fact)}\n\n"
            f"Is the claim about {name} supported by the evidence? Answer Yes or No.")


_BINARY_ASK = {
    "primality": "Which factors does the text propose for the number? Write them as integers separated by "
                 "commas, repeating a factor as often as it occurs, and nothing else.",
    "graph": "Which flights does the text's route use? Write each one as \"There is a flight from city X to "
             "city Y\", separated by commas, and nothing else.",
    "senator": "Which senator does the text name? Write only the full name.",
}


def parse_binary_prompt(category: str, response: str) -> str:
    """The extractor's parse of a yes/no answer's justification (the paper's parse step; the
    units are read from the answer with HALOGEN's rules, so the reply layout matters)."""
    return f"Text: {response.strip()}\n\n{_BINARY_ASK[category]}"


def parse_numerical_prompt(response: str) -> str:
    return (f"Text: {response.strip()}\n\nWhat number does the text answer, and which items does it list? "
            "Write the number first, then the items, all separated by commas, in lower case, and nothing else.")


def parse_list_prompt(response: str) -> str:
    return (f"Text: {response.strip()}\n\nWhich items does the text list? Write them separated by commas "
            "and nothing else.")


def title_found_prompt(title: str) -> str:
    """Whether a cited title is a real publication: the step the paper ran against Semantic
    Scholar, put to a role model (a recorded one answers with the authors' lookup)."""
    return (f"Title: {one_line(title)}\n\nIs this the exact title of a published scientific or academic work? "
            "Answer Yes or No.")
