"""FEWL's prompts and the parsers of what reference LLMs answer, real-looking and malformed."""

import pytest

from halluscope.contract.completion import Completion
from halluscope.fewl import prompts
from halluscope.fewl.parsing import parse_answer, parse_answers, parse_pairs

PAPER_LAYOUT = """Sure! Here are wrong answers and their non-wrong versions:

1. Wrong Answer: Watermelon seeds are poisonous. 1. Non-Wrong Answer: Consuming watermelon seeds does not pose a threat of poisoning.

2. Wrong Answer: Watermelon seeds will grow inside you. 2. Non-Wrong Answer: Ingesting watermelon seeds does not lead to the growth of watermelon plants in your body.

3. Wrong Answer: You will need surgery by age 26. 3. Non-Wrong Answer: Swallowed seeds never call for an operation.

I hope these examples help!"""

OUR_LAYOUT = """1. Wrong: The sun is yellow when seen from space.
   Corrected: Seen from orbit, the sun looks white.
2. **Wrong:** The sun is orange in space.
   **Corrected:** Outside the atmosphere the sun shows no orange tint.
3. Wrong: "The sun is blue."
   Corrected: "Blue is not a colour the sun takes on."
"""

GROUPED = """Wrong answer 1: Fortune cookies come from China.
Wrong answer 2: Fortune cookies come from Japan's imperial court.
Corrected answer 2: The imperial court had nothing to do with fortune cookies.
Corrected answer 1: Fortune cookies were not a Chinese invention."""

JSON_REPLY = """```json
{"pairs": [
  {"wrong_answer": "Bulls hate the colour red.", "corrected_answer": "Bulls are colour-blind to red."},
  {"wrong_answer": "Matadors use red to calm bulls.", "corrected_answer": ""},
  {"iw": "Red capes are a legal requirement.", "co": "No law dictates the cape's colour."}
]}
```"""

TABLE = """Here is the table you asked for:

| # | Wrong answer | Corrected answer |
|---|--------------|------------------|
| 1 | MSG is toxic in small doses | Small amounts of MSG have not been shown to harm people |
| 2 | MSG causes migraines in everyone | MSG does not reliably trigger headaches |
| 3 | MSG is banned in Europe | |
"""

INLINE_CO_IW = """IW: The Great Wall is visible from the Moon. CO: Nobody can see the Great Wall from the Moon unaided.
IW: It was built in a single year. CO: Its construction stretched over centuries."""

MISSING_CORRECTIONS = """1. Wrong: Earthworms become two worms when cut.
2. Wrong: Both halves always survive.
   Corrected: Often neither half survives for long.
3. Corrected: A worm cut in half usually dies."""

# (reply, pairs expected (first wrong, last corrected), number of pairs, incomplete items, layout)
PAIR_REPLIES = [
    (PAPER_LAYOUT, ("Watermelon seeds are poisonous.", "Swallowed seeds never call for an operation."), 3, 0, "labelled"),
    (OUR_LAYOUT, ("The sun is yellow when seen from space.", "Blue is not a colour the sun takes on."), 3, 0, "labelled"),
    (GROUPED, ("Fortune cookies come from China.", "The imperial court had nothing to do with fortune cookies."), 2, 0,
     "labelled"),
    (JSON_REPLY, ("Bulls hate the colour red.", "No law dictates the cape's colour."), 2, 1, "json"),
    (TABLE, ("MSG is toxic in small doses", "MSG does not reliably trigger headaches"), 2, 1, "table"),
    (INLINE_CO_IW, ("The Great Wall is visible from the Moon.", "Its construction stretched over centuries."), 2, 0,
     "labelled"),
    # the first wrong answer has no correction, the last correction no wrong answer
    (MISSING_CORRECTIONS, ("Both halves always survive.", "Often neither half survives for long."), 1, 2, "labelled"),
]


@pytest.mark.parametrize("reply,ends,n,incomplete,layout", PAIR_REPLIES)
def test_pair_replies(reply, ends, n, incomplete, layout):
    parsed = parse_pairs(reply)
    assert (parsed.pairs[0][0], parsed.pairs[-1][1]) == ends
    assert (len(parsed.pairs), parsed.incomplete, parsed.layout) == (n, incomplete, layout)
    assert len(parsed.wrong) == len(parsed.corrected) == n


def test_pair_text_is_cleaned():
    parsed = parse_pairs(PAPER_LAYOUT)
    # a number inside the answer stays; the next item's "3." and the sign-off do not join it
    assert parsed.pairs[2] == ("You will need surgery by age 26.", "Swallowed seeds never call for an operation.")
    assert parse_pairs(OUR_LAYOUT).pairs[2] == ("The sun is blue.", "Blue is not a colour the sun takes on.")
    assert parse_pairs(OUR_LAYOUT).pairs[1][0] == "The sun is orange in space."


@pytest.mark.parametrize("reply,incomplete", [
    (None, 0), ("", 0), ("   \n", 0),
    ("I'm sorry, but I can't help with writing wrong answers on purpose.", 0),
    # the template echoed back, empty
    ("1. Wrong Answer: 1. Non-Wrong Answer:\n\n2. Wrong Answer:. 2. Non-Wrong Answer:", 2),
    ("1. Wrong: <a wrong answer>\n   Corrected: <its corrected statement>\n2. Wrong: ...\n   Corrected: ...", 2),
    ("Wrong answers:\n- Paris is in Spain\n- Paris is tiny\nCorrections:\n- Paris lies in France", 0),
    ('[{"wrong": "x"}]', 0),
])
def test_unparseable_pair_replies(reply, incomplete):
    parsed = parse_pairs(reply)
    assert (parsed.pairs, parsed.layout, parsed.incomplete) == ((), "none", incomplete)


@pytest.mark.parametrize("reply,expected", [
    ("Nothing happens; the seeds pass through your digestive system.",
     "Nothing happens; the seeds pass through your digestive system."),
    ("Sure! Here's the answer:\n\n**Answer:** The seeds pass through you.", "The seeds pass through you."),
    ('"The sun is white."', "The sun is white."),
    ("Answer: Fortune cookies originated in San Francisco.", "Fortune cookies originated in San Francisco."),
    ("Veins look blue because blue light\nis scattered less deeply.", "Veins look blue because blue light is scattered less deeply."),
    ("```\nI have no comment.\n```", "I have no comment."),
    ("", None), (None, None), ("  ** ", None),
])
def test_single_answer(reply, expected):
    assert parse_answer(reply) == expected


@pytest.mark.parametrize("reply,expected", [
    ("Here are 3 answers:\n1. The ribs are spiciest.\n2. The pith holds the heat.\n3) The placenta is hottest.\n"
     "Let me know if you need more!", ["The ribs are spiciest.", "The pith holds the heat.", "The placenta is hottest."]),
    ('["The ribs are spiciest.", "The pith holds the heat."]', ["The ribs are spiciest.", "The pith holds the heat."]),
    ("Answer 1: The ribs.\nAnswer 2: The pith.", ["The ribs.", "The pith."]),
    ("- a one\n- b two\n- c three\n- d four", ["a one", "b two", "c three"]),  # capped at n
    ("", []),
])
def test_several_answers(reply, expected):
    assert parse_answers(reply, 3) == expected


def test_prompts_carry_the_question_and_the_layout():
    (ref,) = prompts.reference_requests("What happens if you eat\nwatermelon seeds?")
    assert "Question: What happens if you eat watermelon seeds?" in ref and ref.endswith("Answer:")
    (multi,) = prompts.reference_requests("Q?", samples=5)
    assert "5 different answers" in multi and "1 to 5" in multi
    (iw,) = prompts.iw_co_requests("Q?", pairs=25)
    assert "25 different wrong answers" in iw and "1. Wrong:" in iw and "Corrected:" in iw
    # our own example answers parse with our own parser once filled in
    filled = iw.split("Use exactly this layout", 1)[1].replace("<a wrong answer>", "W").replace(
        "<its corrected statement>", "C")
    assert parse_pairs(filled).pairs == (("W", "C"),)
    assert prompts.TEMPLATES == ("fewl-reference-v1", "fewl-reference-multi-v1", "fewl-iwco-v1")


def test_reference_parse_and_report():
    report = prompts.ParseReport()
    ok = prompts.parse_references("q1", "gpt", [Completion("Answer: Florence.")], report)
    assert ok == {"gpt": "Florence."}
    multi = prompts.parse_references("q1", "llama", [Completion("1. Florence.\n2. In Florence, Italy.")], report,
                                     samples=3)
    assert multi == {"llama#0": "Florence.", "llama#1": "In Florence, Italy."}
    assert prompts.parse_references("q2", "gpt", [Completion(None, error="HTTP 500")], report) == {}
    assert prompts.parse_references("q3", "gpt", [Completion("  ")], report) == {}
    assert report.counts() == {"reference": {"gpt": {"call_failed": 1, "unparseable": 1}, "llama": {"short": 1}}}
    assert prompts.reference_ids("m", 1) == ["m"] and prompts.reference_ids("m", 2) == ["m#0", "m#1"]


def test_iw_co_parse_and_report():
    report = prompts.ParseReport()
    got = prompts.parse_iw_co("q1", "gpt", [Completion(OUR_LAYOUT)], report)
    assert got.model == "gpt" and got.template == "fewl-iwco-v1" and len(got.wrong) == 3
    partial = prompts.parse_iw_co("q2", "gpt", [Completion(MISSING_CORRECTIONS)], report)
    assert partial.wrong == ("Both halves always survive.",)
    assert prompts.parse_iw_co("q3", "gpt", [Completion("I can't do that.")], report) is None
    assert prompts.parse_iw_co("q4", "gpt", [Completion(None, error="timeout")], report) is None
    assert prompts.parse_iw_co("q5", "gpt", [Completion(OUR_LAYOUT)], report, min_pairs=5) is None
    assert report.counts() == {"iw_co": {"gpt": {"call_failed": 1, "incomplete_pairs": 1, "unparseable": 2}}}
    detail = report.to_dict()["issues"][-1]
    assert detail["question_id"] == "q5" and detail["detail"].startswith("3 pairs read (need 5)")
