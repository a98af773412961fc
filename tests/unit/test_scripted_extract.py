"""The scripted extractor's answers to HALOGEN's parse prompts, read back by the tasks' own rules:
the stand-in drives the parse stage with units a test can predict."""

import pytest

from halluscope.contract.completion import Completion
from halluscope.contract.task import Item
from halluscope.halogen.stand_in import extract
from halluscope.task_registry import get_task

# the layout of the authors' own parse prompts, which the paper rules send: a worked example first
AUTHORS_FACTORS = ["<Context>: 7411 is not a prime number. It can be factorized as 3 × 3 × 7 × 13.  <Instruction>:  "
                   "What are the factors proposed in the above text? Just list them separated by commas. \n\n "
                   "<Response>: 3, 3, 7, 13 \n\n <Context>: ",
                   " <Instruction>: What are the factors proposed in the above text? Just list them separated by "
                   "commas. \n\n <Response>: "]
NUMERICAL = {"list_name": "planets", "condition": "contains", "letter": "a", "count": 6,
             "universe": ["earth", "mars"], "gold": ["earth", "mars"]}


@pytest.mark.parametrize("task, fields, response, units", [
    ("halogen/rationalization_binary", {"category": "primality", "gold": "yes", "number": 7411},
     "No.\n\nThe factorization of 7411 is 17 × 19 × 23.", ["no", "17", "19", "23"]),
    ("halogen/rationalization_binary", {"category": "primality", "gold": "yes", "number": 221,
                                        "parse_template": AUTHORS_FACTORS},
     "No, 221 = 13 x 17.", ["no", "13", "17"]),
    ("halogen/rationalization_binary@corrected", {"category": "graph", "gold": "no", "offered": ["B->I"]},
     "Yes.\n\nThe flights from city E to city C:\n- E to B\n- B to I -> C", ["yes", "E->B", "B->I", "I->C"]),
    ("halogen/rationalization_binary@corrected", {"category": "senator", "gold": "no"},
     "Yes. The senator who represented Alaska was Ted Stevens.", ["yes", "Ted Stevens"]),
    ("halogen/rationalization_binary", {"category": "primality", "gold": "yes", "number": 7}, "Yes, it is.", []),
    ("halogen/rationalization_numerical", NUMERICAL, "6\n\n1. Earth\n2. Mars\n3. Pluto.",
     ["count: 6", "earth", "mars", "pluto"]),
    ("halogen/rationalization_numerical@corrected", NUMERICAL, "There are 2: Earth, Mars.",
     ["count: 2", "earth", "mars"]),
    ("halogen/false_presuppositions", {**NUMERICAL, "n_requested": 7}, "Mars; Saturn; Earth.",
     ["Mars", "Saturn", "Earth"]),
])
def test_parse_answers_are_read_by_the_rules(task, fields, response, units):
    t = get_task(task)
    item = Item(task, "i", "a prompt", {**fields, "occurrence": 0})
    (prompt,) = t.decompose_call(response, item).prompts
    assert t.decompose(response, item, [Completion(extract(prompt))]) == units


def test_other_prompts_keep_their_answers():
    assert extract("Text: Ada met Pele.\n\nQuestion: did they meet?") is None  # a judge's question
    assert extract("Passage: A is B. C is D.\nFacts:") == "- A is B.\n- C is D."
