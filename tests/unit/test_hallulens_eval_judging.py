"""HalluLens judge prompts and parsers: tables of answers as real judges write them, malformed ones included."""

import pytest

from halluscope.contract.completion import Completion
from halluscope.hallulens import judging
from halluscope.hallulens.judging import CORRECT, INCORRECT, UNVERIFIABLE

# (abstention-judge answer, is the response abstaining?)
ABSTENTION_ANSWERS = [
    ('{"is_abstaining": true}', True),
    ('{"is_abstaining":false}', False),
    ('{"is_abstaining": True}', True),  # Python-style boolean
    ('```json\n{\n  "is_abstaining": false\n}\n```', False),
    ('Result: {"is_abstaining": true}', True),
    ('{"is_abstaining": true}\n\nThe chatbot says it could not find any information.', True),
    ('The chatbot answers 1951, so it is not abstaining.\n{"is_abstaining": false}', False),
    ("{'is_abstaining': False}", False),
    ('{"is_abstaining": "true"}', True),
    ('{\\"is_abstaining\\": false}', False),  # escaped quotes
    ("true", True),
    ("False.", False),
    ("Result: false", False),
    ('**{"is_abstaining": true}**', True),
    ("Sure! Here is my judgement:\n\n{\"is_abstaining\": false}", False),
    ('{"is_abstaining": false, "reason": "The chatbot corrects the premise."}', False),
    ('Result:\n```\n{"is_abstaining":true}\n```', True),
    ("is_abstaining: true", True),
    ('  {"is_abstaining" : false }  ', False),
    ("Yes, the chatbot abstains: it says it has no information.", True),
    ("No. The chatbot answers the question.", False),
    # malformed
    ("", None),
    (None, None),
    ("I cannot determine whether the chatbot abstains.", None),
    ('{"is_abstaining": true|false}', None),  # the template echoed
    ('{"is_abstaining": true} or {"is_abstaining": false}', None),  # both values
    ('{"is_abstaining": maybe}', None),
    ('{"abstaining": true}', None),  # another key
    ("Yes and no.", None),
    ('{"is_abstaining": truelfalse}', None),
]


@pytest.mark.parametrize("answer,expected", ABSTENTION_ANSWERS)
def test_abstention_answers(answer, expected):
    assert judging.parse_abstaining(answer) is expected


# (LongWiki refusal-judge answer, is the generation refused?) -- refused means not knowledgeable
REFUSAL_ANSWERS = [
    ('{"is_knowledgeable": true}', False),
    ('{"is_knowledgeable": false}', True),
    ('{"is_knowledgeable":False}', True),
    ('```json\n{"is_knowledgeable": true}\n```', False),
    ('Result: {"is_knowledgeable": true}', False),
    ('The chatbot gives several facts about the cyclone.\n{"is_knowledgeable": true}', False),
    ('{"is_knowledgeable": false}\nThe chatbot says it has no information about the lighthouse.', True),
    ("{'is_knowledgeable': True}", False),
    ('{"is_knowledgeable": "false"}', True),
    ("true", False),
    ("False", True),
    ("Result: true.", False),
    ("**false**", True),
    ('Here is the result: {"is_knowledgeable" : true }', False),
    ('{"is_knowledgeable": true, "explanation": "It disputes the premise with facts."}', False),
    ("is_knowledgeable = false", True),
    # malformed
    ("", None),
    ("   \n", None),
    ("The chatbot is somewhat knowledgeable.", None),
    ('{"is_knowledgeable": true|false}', None),
    ('{"is_knowledgeable": null}', None),
    ('{"is_abstaining": true}', None),  # the PreciseWikiQA key, not this judge's
]


@pytest.mark.parametrize("answer,expected", REFUSAL_ANSWERS)
def test_refusal_answers(answer, expected):
    assert judging.parse_refused(answer) is expected


# (NonExistentRefusal judge answer, does the AI believe the entity exists?)
BELIEF_ANSWERS = [
    ('{"does_believe": true}', True),
    ('{"does_believe": false}', False),
    ('Answer: {"does_believe": true}', True),
    ('{"does_believe":false}', False),
    ('{ "does_believe" : True }', True),
    ("```\n{\"does_believe\": false}\n```", False),
    ('The AI describes the moth as real.\n\n{"does_believe": true}', True),
    ('{"does_believe": false}\n\nExplanation: the AI says it cannot find the species.', False),
    ("{'does_believe': 'false'}", False),
    ('{"does_believe": "True"}', True),
    ("true", True),
    ("false.", False),
    ("Answer: false", False),
    ("No, the AI does not believe it exists.", False),
    ("Yes - it describes its habitat.", True),
    ('**Answer:** {"does_believe": true}', True),
    ('{"does_believe": false, "reason": "only the genus is described"}', False),
    ('Sure.\n{"does_believe": true}', True),
    # malformed
    ("", None),
    (None, None),
    ("It is hard to say whether the AI believes it.", None),
    ('{"does_believe": true|false}', None),
    ('{"does_believe": true}\n{"does_believe": false}', None),
    ('{"believes": true}', None),
]


@pytest.mark.parametrize("answer,expected", BELIEF_ANSWERS)
def test_belief_answers(answer, expected):
    assert judging.parse_believes(answer) is expected


# (correctness-judge answer, label)
CORRECTNESS_ANSWERS = [
    ("CORRECT", CORRECT),
    ("CORRECT.", CORRECT),  # the authors' exact match would read this as hallucinated
    ('"INCORRECT"', INCORRECT),
    ("**UNVERIFIABLE**", UNVERIFIABLE),
    ("correct", CORRECT),
    ("Incorrect.", INCORRECT),
    ("INCORRECT\n\nThe response gives 1952, but the gold answer is 1951.", INCORRECT),
    ("The response is CORRECT.", CORRECT),
    ("Based on the correct answer provided, the response is INCORRECT.", INCORRECT),
    ("YOUR JUDGEMENT: CORRECT", CORRECT),
    ("Judgement: Unverifiable", UNVERIFIABLE),
    ("Yes", CORRECT),  # the authors' prompt also asked for Yes/No
    ("No.", INCORRECT),
    ("The response matches the correct answer, so it is correct.", CORRECT),
    ("The response is not correct; the correct answer is Matthew Ridgway.", INCORRECT),
    ("The response names Omar Bradley, while the correct answer is Matthew Ridgway. Therefore the "
     "response is incorrect.", INCORRECT),
    ("UNVERIFIABLE - the response does not commit to an answer.", UNVERIFIABLE),
    ("The answer cannot be verified from the response.", UNVERIFIABLE),
    ('{"judgement": "INCORRECT"}', INCORRECT),
    ("Correct answer: 1951. Response: 1951. CORRECT", CORRECT),
    ("- CORRECT", CORRECT),
    ("Correct! The response identifies Ridgway.", CORRECT),
    ("The response is wrong.", INCORRECT),
    ("The response is partially correct, so my verdict is INCORRECT.", INCORRECT),
    ("`CORRECT`", CORRECT),
    # malformed
    ("CORRECT, INCORRECT or UNVERIFIABLE", None),  # the choices echoed
    ("PARTIALLY CORRECT", None),
    ("The response is partially correct.", None),
    ("", None),
    (None, None),
    ("I'm not sure.", None),
    ("The response does not answer the question.", None),
    ("Yes and no.", None),
    ("It is correct in part but the year is wrong.", None),
]


@pytest.mark.parametrize("answer,expected", CORRECTNESS_ANSWERS)
def test_correctness_answers(answer, expected):
    assert judging.parse_correctness(answer) == expected


# (verifier answer, is the claim supported?) -- unverifiable counts as unsupported
VERIFICATION_ANSWERS = [
    ('{"is_supported": true}', True),
    ('{"is_supported": false}', False),
    ("Supported", True),
    ("Not supported.", False),
    ("Unsupported", False),
    ("**Supported**: the second passage states the date.", True),
    ("The claim is supported by passage 2.", True),
    ("The passages do not mention his birth year.", False),
    ("There is not enough information in the passages to verify the claim.", False),
    ("Unverifiable", False),
    ("Refuted: the passage gives 1867.", False),
    ("Yes", True),  # what the scripted stand-in judge answers
    ("No", False),
    ('```json\n{"is_supported": false}\n```', False),
    ("The claim is partially supported.", False),
    ('Result: {"is_supported": true}\nExplanation: passage 1 says so.', True),
    ("The evidence contradicts the claim.", False),
    ('{"is_supported": false} The passages describe a different person.', False),
    ("{'is_supported': True}", True),
    # malformed
    ("", None),
    ("Hmm.", None),
    ('{"is_supported": true|false}', None),
    ("It is unclear.", None),
    (None, None),
]


@pytest.mark.parametrize("answer,expected", VERIFICATION_ANSWERS)
def test_verification_answers(answer, expected):
    assert judging.parse_supported(answer) is expected


# (extractor answer, claims; None: unreadable)
CLAIM_ANSWERS = [
    ("- The flag has a white background.\n- The flag features a chrysanthemum.",
     ["The flag has a white background.", "The flag features a chrysanthemum."]),
    ("No verifiable claim.", []),
    ("No verifiable claims", []),
    ("Here are the claims:\n- Curie was born in Warsaw.\n- Curie was born in 1867.",
     ["Curie was born in Warsaw.", "Curie was born in 1867."]),
    ("1. Curie was born in Warsaw.\n2. Curie was born in 1867.",
     ["Curie was born in Warsaw.", "Curie was born in 1867."]),
    ("* Bejisa was a cyclone.\n* Bejisa struck Réunion.", ["Bejisa was a cyclone.", "Bejisa struck Réunion."]),
    ("- Bejisa struck Réunion.\n- Bejisa struck Réunion.", ["Bejisa struck Réunion."]),
    ("**Claims:**\n- Bejisa struck Réunion in 2014.", ["Bejisa struck Réunion in 2014."]),
    ("- No verifiable claim.", []),
    ("The marked sentence contains no verifiable claims.", []),
    ("- The treaty made no claims on Alsace.", ["The treaty made no claims on Alsace."]),
    ("<SOS>- Nelson won at Trafalgar.<EOS>", ["Nelson won at Trafalgar."]),
    ("Claims:\n- Nelson won at Trafalgar.\n\nNote: the rest of the sentence is an opinion.",
     ["Nelson won at Trafalgar."]),
    ("- **Marie Curie** was born in Warsaw.", ["**Marie Curie** was born in Warsaw."]),
    ("---\n- Nelson died in 1805.\n---", ["Nelson died in 1805."]),
    ("None", []),
    ("- Nelson was an admiral;\n- Nelson was British;", ["Nelson was an admiral;", "Nelson was British;"]),
    ("• Nelson lost an arm.\n• Nelson lost the sight of one eye.",
     ["Nelson lost an arm.", "Nelson lost the sight of one eye."]),
    ("Claims:\nNo verifiable claim.", []),
    ("(1) Nelson was born in 1758.\n(2) Nelson was born in Norfolk.",
     ["Nelson was born in 1758.", "Nelson was born in Norfolk."]),
    # claims reach the verifier as written: ";" inside a claim, markup characters, case
    ("- Nelson won at the Nile in 1798; he won at Trafalgar in 1805.",
     ["Nelson won at the Nile in 1798; he won at Trafalgar in 1805."]),
    ("- C# was designed by Anders Hejlsberg.\n- PEP 8 names functions in snake_case.\n"
     "- The `print` function writes to sys.stdout.\n- > 50% of the votes went to Labour.",
     ["C# was designed by Anders Hejlsberg.", "PEP 8 names functions in snake_case.",
      "The `print` function writes to sys.stdout.", "> 50% of the votes went to Labour."]),
    ("- The US dollar is used in Ecuador.\n- The US Dollar is used in Ecuador.\n- The US dollar is used in Ecuador.",
     ["The US dollar is used in Ecuador.", "The US Dollar is used in Ecuador."]),
    ('- "Thriller" is an album by Michael Jackson.', ['"Thriller" is an album by Michael Jackson.']),
    # malformed
    ("", None),
    (None, None),
    ("I'm sorry, I can't help with that.", None),
    ("The flag has a white background.", None),  # unmarked prose is not taken for claims
    ("Claims:", None),
]


@pytest.mark.parametrize("answer,expected", CLAIM_ANSWERS)
def test_claim_answers(answer, expected):
    assert judging.parse_claims(answer) == expected


def test_tables_hold_at_least_20_answers_each():
    for table in (ABSTENTION_ANSWERS, REFUSAL_ANSWERS, BELIEF_ANSWERS, CORRECTNESS_ANSWERS,
                  VERIFICATION_ANSWERS, CLAIM_ANSWERS):
        assert len(table) >= 20


def test_read_counts_a_failed_call_as_unreadable():
    assert judging.read(Completion(text=None, error="HTTP 503"), judging.parse_abstaining) is None
    assert judging.read(Completion(text='{"is_abstaining": true}', error="timeout"), judging.parse_abstaining) is None
    assert judging.read(Completion(text='{"is_abstaining": true}'), judging.parse_abstaining) is True


def test_template_ids_are_distinct_and_versioned():
    ids = [judging.ABSTAIN, judging.KNOWLEDGEABLE, judging.CORRECTNESS, judging.BELIEF_SPECIES,
           judging.BELIEF_MEDICINE, judging.BELIEF_ENTITY, judging.CLAIMS, judging.VERIFY]
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("hallulens-") and i.rsplit("-", 1)[1].startswith("v") for i in ids)
    assert set(judging.BELIEF_TEMPLATES.values()) == {judging.BELIEF_SPECIES, judging.BELIEF_MEDICINE,
                                                     judging.BELIEF_ENTITY}


def test_prompts_carry_their_inputs_last_and_name_the_output():
    p = judging.abstention_prompt("Who relieved MacArthur?", "  I don't know.  ")
    assert p.endswith("User: Who relieved MacArthur?\nChatbot: I don't know.\nResult:")
    assert '{"is_abstaining": true}' in p
    p = judging.knowledgeable_prompt("Describe Cyclone Bejisa.", "Bejisa hit Réunion.")
    assert p.endswith("Chatbot: Bejisa hit Réunion.\nResult:") and "is_knowledgeable" in p
    p = judging.correctness_prompt("Who relieved MacArthur?", "Matthew Ridgway", "Ridgway.")
    assert "Gold answer: Matthew Ridgway\nResponse: Ridgway." in p
    assert "Yes or No" not in p  # the authors' contradictory last line is not repeated


@pytest.mark.parametrize("kind,subject", [("species", "the species 'Penapis lusitanica'"),
                                          ("medicine", "the medicine 'Penapis lusitanica'"),
                                          ("entity", "the restaurant in Lyon called 'Penapis lusitanica'")])
def test_belief_prompt_names_the_entity(kind, subject):
    p = judging.belief_prompt(kind, "Tell me about it.", "It is a beetle.", "Penapis lusitanica",
                              entity_type="restaurant", place="Lyon")
    assert subject in p and p.endswith("Prompt: Tell me about it.\nGeneration: It is a beetle.\nAnswer:")


def test_belief_prompt_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match="unknown belief-judge kind 'fungus'"):
        judging.belief_prompt("fungus", "p", "g", "n")


def test_claims_and_verification_prompts():
    p = judging.claims_prompt("Before. <SOS>Target sentence.<EOS> After.")
    assert p.endswith("Text: Before. <SOS>Target sentence.<EOS> After.\nClaims:")
    p = judging.verification_prompt("Bejisa struck Réunion; C# and snake_case stay.",
                                    [("Réunion", "An island."), ("Cyclone Bejisa", "A cyclone\n in 2014.")])
    assert ("Title: Réunion\nText: An island.\n\nTitle: Cyclone Bejisa\nText: A cyclone in 2014.\n\n"
            "Claim: Bejisa struck Réunion; C# and snake_case stay.\n") in p  # the claim exactly as extracted
    assert '{"is_supported": false}' in p
    # the layout the scripted stand-in judge reads: an "Evidence:" line, then a "Claim:" line
    assert "\nEvidence:\n" in p and "\nClaim: " in p
