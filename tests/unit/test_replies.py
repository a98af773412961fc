"""Judge and extractor answers as real models write them, including malformed ones."""

import pytest

from halluscope.contract.replies import excerpt, parse_list, parse_yes_no

# (answer of a judge to an entailment, meeting or biography-fact question, expected verdict)
JUDGE_ANSWERS = [
    ("Yes", True),
    ("No", False),
    ("yes.", True),
    ("NO.", False),
    ("Yes, the premise states that Barker hosted the show.", True),
    ("No, the premise does not mention the year.", False),
    ("**Yes**", True),
    ("**No** - the article never says this.", False),
    ("Answer: Yes", True),
    ("Answer (Yes/No): No", False),
    ("  \n\nYes\n", True),
    ("True", True),
    ("False.", False),
    ("The hypothesis is correct.", True),
    ("The hypothesis is incorrect.", False),
    ("The hypothesis is not correct given the premise.", False),
    ("The claim is supported by the evidence.", True),
    ("The claim is not supported by the evidence.", False),
    ("Not supported.", False),
    ("The premise does not entail the hypothesis.", False),
    ("Entailed", True),
    ("Based on the passage, I would say yes: they met in 1850.", True),
    ("I'd answer no. There is no record of such a meeting.", False),
    ("The text describes the meeting as having happened. Yes.", True),
    ("The text says they never met, so the answer is no.", False),
    ("Yes and no.", None),
    ("Yes. No.", True),  # the first sentence decides
    ("", None),
    ("   ", None),
    (None, None),
    ("I cannot determine this from the premise.", None),
    ("It is unclear whether they met.", None),
    ("There is not enough information to decide.", None),
    ("The premise talks about a game show host.", None),
    ("Hypothesis: Barker is 91.", None),
    ("`yes`", True),
    ("- No", False),
    ("Yes, although the exact date (not supported) differs.", True),
]


@pytest.mark.parametrize("answer,expected", JUDGE_ANSWERS)
def test_judge_answers(answer, expected):
    assert parse_yes_no(answer) is expected


def test_judge_table_is_large():
    assert len(JUDGE_ANSWERS) >= 30


# (extractor answer, facts expected, number of lines dropped)
FACT_ANSWERS = [
    ("- Bob Barker hosted The Price Is Right.\n- Barker is 91.",
     ["Bob Barker hosted The Price Is Right.", "Barker is 91."], 0),
    ("Here are the independent facts:\n- Barker returned to the show.\n- He hosted for 35 years.",
     ["Barker returned to the show.", "He hosted for 35 years."], 1),
    ("Sure! Here are the facts from the passage:\n\n1. Barker returned.\n2. Carey is the host.",
     ["Barker returned.", "Carey is the host."], 1),
    ("1) Barker returned.\n2) Carey is the host.", ["Barker returned.", "Carey is the host."], 0),
    ("* Barker returned.\n* Carey is the host.", ["Barker returned.", "Carey is the host."], 0),
    ("• Barker returned.\n• Carey is the host.", ["Barker returned.", "Carey is the host."], 0),
    ("Fact 1: Barker returned.\nFact 2: Carey is the host.", ["Barker returned.", "Carey is the host."], 0),
    ("Barker returned.\nCarey is the host.", ["Barker returned.", "Carey is the host."], 0),
    ("- **Barker** returned.\n- \"Carey is the host.\"", ["Barker returned.", "Carey is the host."], 0),
    ("- Barker returned.\n- Barker returned.", ["Barker returned."], 1),
    ("- Barker returned.\nI hope this helps!\n- Carey is the host.", ["Barker returned.", "Carey is the host."], 1),
    ("Facts:\n- Barker returned.", ["Barker returned."], 1),
    ("", [], 0),
    ("None", [], 0),
    ("No facts.", [], 0),
    ("-\n- Barker returned.", ["Barker returned."], 1),
    ("1. Barker returned.\n\n\n2. Carey is the host.\n", ["Barker returned.", "Carey is the host."], 0),
    ("- Barker returned;\n- Carey is the host;", ["Barker returned", "Carey is the host"], 0),
    ("Barker returned; Carey is the host", ["Barker returned", "Carey is the host"], 0),
    ("   - Barker returned.   \n   - Carey is the host.", ["Barker returned.", "Carey is the host."], 0),
    ("- Iggy Azalea is a rapper.\n- Iggy Azalea was born in Sydney.\n- She moved to the US at 16.",
     ["Iggy Azalea is a rapper.", "Iggy Azalea was born in Sydney.", "She moved to the US at 16."], 0),
    ("Here is the breakdown:\n(1) Barker returned.\n(2) Carey is the host.", ["Barker returned.", "Carey is the host."], 1),
    ("1: Barker returned.\n2: Carey is the host.", ["Barker returned.", "Carey is the host."], 0),
    ("– Barker returned.\n– Carey is the host.", ["Barker returned.", "Carey is the host."], 0),
    ("a) Barker returned.\nb) Carey is the host.", ["Barker returned.", "Carey is the host."], 0),
    ("Title: Adverse effects of tolazamide;\nTitle: Tolazamide-induced pleurothotonus;",
     ["Adverse effects of tolazamide", "Tolazamide-induced pleurothotonus"], 0),
    ("Title: Adverse effects of tolazamide; Title: A case report",
     ["Adverse effects of tolazamide", "A case report"], 0),
    ("No titles.", [], 0),
    ("The passage contains the following facts:\nBarker returned.", ["Barker returned."], 1),
    ("- 'Barker returned.'", ["Barker returned."], 0),
    ("```\n- Barker returned.\n```", ["Barker returned."], 2),
    ("Facts:\n1. Barker returned.\n2. Carey is the host.\nLet me know if you need more!",
     ["Barker returned.", "Carey is the host."], 2),
]


@pytest.mark.parametrize("answer,facts,dropped", FACT_ANSWERS)
def test_extractor_answers(answer, facts, dropped):
    parsed = parse_list(answer)
    assert parsed.items == facts
    assert len(parsed.dropped) == dropped


def test_extractor_table_is_large():
    assert len(FACT_ANSWERS) >= 30


def test_explicit_none_is_told_apart_from_garbage():
    assert parse_list("No titles.").explicit_none
    assert not parse_list("").explicit_none
    assert not parse_list("Sure! Here you go:").explicit_none


def test_excerpt_is_one_line_and_bounded():
    assert excerpt("a\nb   c") == "a b c"
    assert len(excerpt("x" * 500, 50)) == 50
    assert excerpt(None) == ""


# (extractor answer to the reference-titles prompt, titles expected)
TITLE_ANSWERS = [
    ("Title: Adverse effects of tolazamide;\nTitle: A case report;", ["Adverse effects of tolazamide", "A case report"]),
    ("Title: Adverse effects of tolazamide; Title: A case report;", ["Adverse effects of tolazamide", "A case report"]),
    ("title: adverse effects of tolazamide;", ["adverse effects of tolazamide"]),
    ("TITLE: Adverse effects of tolazamide", ["Adverse effects of tolazamide"]),
    ("Here are the titles:\nTitle: Adverse effects of tolazamide;", ["Adverse effects of tolazamide"]),
    ("Sure! The cited titles are:\n\nTitle: The euro;\nTitle: Sweden and the euro;", ["The euro", "Sweden and the euro"]),
    ("1. Adverse effects of tolazamide\n2. A case report", ["Adverse effects of tolazamide", "A case report"]),
    ("- Adverse effects of tolazamide\n- A case report", ["Adverse effects of tolazamide", "A case report"]),
    ('Title: "Road traffic accidents in Saudi Arabia";', ["Road traffic accidents in Saudi Arabia"]),
    ("Title: “Confocal Fluorescence Microscopy”;", ["Confocal Fluorescence Microscopy"]),
    ("**Title:** The iron maiden: A medieval instrument of torture;", ["The iron maiden: A medieval instrument of torture"]),
    ("Title 1: The euro\nTitle 2: Sweden and the euro", ["The euro", "Sweden and the euro"]),
    ("No titles.", []),
    ("No titles", []),
    ("None", []),
    ("none.", []),
    ("No titles found.", []),
    ("The text cites no references.", []),
    ("The text does not cite any references.", []),
    ("There are no titles in the text.", []),
    ("N/A", []),
    ("Title: The euro;\nTitle: The euro;", ["The euro"]),
    ("Title: The euro;\n\nI hope this helps!", ["The euro"]),
    ("Title: Global status report on road safety 2018: supporting the right to safe roads and mobility;",
     ["Global status report on road safety 2018: supporting the right to safe roads and mobility"]),
    ("Title: The word \"wop\" and its history;", ['The word "wop" and its history']),
    ("Titles:\n- The euro\n- Sweden and the euro", ["The euro", "Sweden and the euro"]),
    ("Title: Kushi LH et al. American Cancer Society Guidance on Nutrition;",
     ["Kushi LH et al. American Cancer Society Guidance on Nutrition"]),
    ("  Title:   Spaced   out   title ;  ", ["Spaced out title"]),
    ("* Title: The euro\n* Title: Sweden and the euro", ["The euro", "Sweden and the euro"]),
    ("Title: A; Title: B; Title: C", ["A", "B", "C"]),
    ("The euro", ["The euro"]),
]


@pytest.mark.parametrize("answer,titles", TITLE_ANSWERS)
def test_title_extractor_answers(answer, titles):
    assert parse_list(answer).items == titles


def test_title_table_is_large():
    assert len(TITLE_ANSWERS) >= 30
