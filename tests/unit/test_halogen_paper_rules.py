"""HALOGEN's paper and corrected rules, each on real rows of the authors' recorded pipeline.

Every case reads a row of ``halogen/recorded/`` (the response and the recorded LLM parse) and
runs the task's own phases on it, with the recorded parse as the extractor's reply."""

from __future__ import annotations

import pytest
from tests.conftest import SHARED_DATA

from halluscope.contract.completion import Completion
from halluscope.contract.task import Item
from halluscope.halogen import paper
from halluscope.halogen.code import CodePackages
from halluscope.halogen.historical_events import HistoricalEvents
from halluscope.halogen.lists import FalsePresuppositions, RationalizationNumerical
from halluscope.halogen.rationalization_binary import RationalizationBinary
from halluscope.halogen.recorded import QUIRKS
from halluscope.halogen.steps import read_rows, recorded_path
from halluscope.knowledge.base import Knowledge
from halluscope.sources import DataResolver

pytestmark = pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")

RESOLVER = DataResolver(download=False)
KB = Knowledge(RESOLVER)


def row(domain: str, model: str, index: int) -> dict[str, str]:
    return read_rows(RESOLVER.resolve(recorded_path(domain, model)))[index]


def item_of(task, r: dict[str, str]) -> Item:
    fields = task.item_fields({**r, "prompt": r["prompt"]}, "test")
    return Item(task.name, "x", r["prompt"], fields)


def recorded(text: str, notes: dict | None = None) -> Completion:
    return Completion(text, extra={"recorded": True, **(notes or {})})


def run(task, r: dict[str, str], notes: dict | None = None) -> tuple[bool, list[str], list[bool | None]]:
    """R(y), D(y) and V as the pipeline runs them, the recorded parse as the extractor's reply."""
    item, text = item_of(task, r), r["response"]
    responded = task.responded(text, item)
    if not responded:
        return False, [], []
    atoms = task.decompose(text, item, [recorded(r["parsed_response"], notes)]) \
        if "parsed_response" in r else task.decompose(text, item)
    return True, atoms, [v.supported for v in task.verify(atoms, text, item, KB)]


def f(verdicts: list[bool | None]) -> float:
    return verdicts.count(False) / len(verdicts) if verdicts else 0.0


# --- the shared refusal rule -------------------------------------------------------------------

def test_fused_phrases_abstain_only_under_corrected_rules():
    text = row("biographies", "alpaca_7b", 515)["response"]
    assert text.lstrip().startswith("I am sorry, but I cannot understand")
    assert not paper.abstained(text, "paper")  # "I am sorry" + "Sorry" fused into one phrase
    assert paper.abstained(text, "corrected")


# --- code ----------------------------------------------------------------------------------------

def test_paper_import_regexes_read_the_first_name_only():
    text = row("code", "redpajama_incite_7b_chat", 107)["response"]
    assert any(line.startswith("import re,") for line in text.splitlines())
    assert paper.paper_imports(text) == ["re"]
    assert set(CodePackages("corrected").decompose(text, None)) > {"re"}  # every name of the statement


def test_a_stdlib_module_without_a_page_is_hallucinated_in_the_paper_only():
    r = row("code", "gpt_4_0125_turbo", 196)
    assert "import cProfile" in r["response"]
    for rules, supported in (("paper", False), ("corrected", True)):
        task = CodePackages(rules)
        atoms = task.decompose(r["response"], None)
        verdicts = dict(zip(atoms, (v.supported for v in task.verify(atoms, r["response"], None, KB))))
        assert verdicts["cProfile"] is supported


# --- rationalization (binary) ------------------------------------------------------------------

def test_slash_joined_answer_is_one_token_in_the_paper():
    r = row("rationalization_binary", "llama_3_8b_chat", 0)
    assert r["response"].split("\n")[0].strip() == "Yes/n"
    assert "yes/n" in paper.first_line_words(r["response"], "paper")
    assert "yes" in paper.first_line_words(r["response"], "corrected")


def test_the_questions_own_route_counts_as_offered_in_the_paper():
    r = row("rationalization_binary", "gpt_3.5_turbo_0125", 1250)
    assert r["category"] == "graph"
    paper_task, corrected = RationalizationBinary("paper"), RationalizationBinary("corrected")
    responded, atoms, verdicts = run(paper_task, r)
    assert responded and "K->I" in atoms
    assert verdicts[atoms.index("K->I")] is True  # "goes from city K to city I?" read as a flight
    _, atoms_c, verdicts_c = run(corrected, r)
    assert verdicts_c[atoms_c.index("K->I")] is False
    assert f(verdicts_c) > f(verdicts)


def test_primality_parse_copying_the_example_is_dropped_by_corrected_rules():
    r = row("rationalization_binary", "gpt_3.5_turbo_0125", 3)
    assert r["response"].strip() == "No." and r["parsed_response"].strip() == "3, 3, 7, 13"
    assert run(RationalizationBinary("paper"), r)[1] == ["no", "3", "3", "7", "13"]
    assert run(RationalizationBinary("corrected"), r)[1] == ["no"]
    assert f(run(RationalizationBinary("corrected"), r)[2]) == 1.0  # the wrong answer stays wrong


def test_right_answer_on_the_first_line_scores_no_hallucination():
    rows = read_rows(RESOLVER.resolve(recorded_path("rationalization_binary", "gpt_4_0125_turbo")))
    r = next(x for x in rows if x["category"] == "senator" and x["response"].lower().startswith("no"))
    assert run(RationalizationBinary("paper"), r) == (True, [], [])


def test_person_names_in_senator_parses():
    assert paper.person_names(" The senator name proposed in the above text is John Smith. ") == ["John Smith"]
    assert paper.person_names("The senator names proposed are Senator Elizabeth Warren and Senator Ed Markey.") \
        == ["Elizabeth Warren", "Ed Markey"]
    assert paper.person_names("There has never been a senator from New Jersey who attended Johns Hopkins "
                              "University. Therefore no name is given.") == []


# --- rationalization (numerical) ---------------------------------------------------------------

def test_zero_count_in_the_first_line_is_right_when_nothing_qualifies():
    r = row("rationalization_numerical", "gpt_4_0125_turbo", 16)
    assert r["count"] == "0" and r["response"].startswith("0")
    assert run(RationalizationNumerical("paper"), r) == (True, [], [])


def test_numerical_parse_copying_the_example_keeps_only_the_responses_count_when_corrected():
    r = row("rationalization_numerical", "alpaca_7b", 4)
    assert paper.copies_few_shot(r["parsed_response"])
    _, atoms, _ = run(RationalizationNumerical("paper"), r)
    assert atoms == ["count: 4", "earth", "mars", "venus", "neptune"]
    _, atoms_c, _ = run(RationalizationNumerical("corrected"), r)
    assert atoms_c == [f"count: {paper.first_number(r['response'])}"]


def test_numerical_units_are_the_count_then_the_items_each_distinct_unit_counted_once():
    count, entities = paper.count_and_entities(" <Response>: 2, mercury, earth")
    assert (count, entities) == (2, ["mercury", "earth"])
    assert paper.count_and_entities("no list here") == (None, [])


# --- false presuppositions -----------------------------------------------------------------------

def test_repeated_items_count_once_in_the_set_difference():
    r = row("numerical_falsepresupposition", "llama_3_70b_chat", 9)
    assert r["parsed_response"].strip().startswith("Jupiter, Jupiter")
    responded, atoms, verdicts = run(FalsePresuppositions("paper"), r)
    assert responded and len(atoms) == 7
    assert verdicts.count(False) <= 1


def test_semicolon_lists_and_single_items_are_split_as_the_authors_did():
    r = row("numerical_falsepresupposition", "llama_3_70b_chat", 220)
    atoms = paper.list_items(r["parsed_response"])
    assert atoms[0] == " Calum" and "Whitem" in atoms
    assert paper.list_items(" Venusassistant\n\n ") == ["Venusassistant"]
    assert paper.list_items(" \n\n ") == []


def test_fp_parse_copying_the_example_is_read_from_the_response_when_corrected():
    r = row("numerical_falsepresupposition", "llama_3_70b_chat", 12)
    assert paper.copies_few_shot(r["parsed_response"])
    _, atoms, _ = run(FalsePresuppositions("paper"), r)
    assert "Mimas" in atoms
    _, atoms_c, _ = run(FalsePresuppositions("corrected"), r)
    assert atoms_c == ["Mercury", "Mars", "assistant"] or atoms_c[:2] == ["Mercury", "Mars"]


def test_the_llama_2_70b_file_quirk_splits_at_commas_and_counts_repeats():
    notes = QUIRKS[("numerical_falsepresupposition", "llama_2_70b_chat")]
    r = row("numerical_falsepresupposition", "llama_2_70b_chat", 88)
    assert "Kettner" in r["parsed_response"]
    _, atoms, verdicts = run(FalsePresuppositions("paper"), r, notes)
    assert "Kettner #2" in atoms  # the second mention is a unit of its own
    assert verdicts[atoms.index("Kettner #2")] is False
    _, plain, plain_verdicts = run(FalsePresuppositions("paper"), r)
    assert verdicts.count(False) > plain_verdicts.count(False)


def test_corrected_name_forms_match_the_gold_list():
    task = FalsePresuppositions("corrected")
    verdicts = task._verdicts(["The Bahamas.", "Bahamas"], {"bahamas"}, "starts with 'b'")
    assert [v.supported for v in verdicts] == [True, True]
    verdicts = FalsePresuppositions("paper")._verdicts(["The Bahamas."], {"bahamas"}, "starts with 'b'")
    assert [v.supported for v in verdicts] == [False]


# --- historical events ---------------------------------------------------------------------------

@pytest.mark.parametrize("answer, paper_responded, corrected_responded", [
    ("  No.", False, False), ("  Yes.", True, True),
    (" Not mentioned.", False, None),  # corrected: unreadable, the row fails and is counted
    (" Yes, although it is not clear", False, True),  # "no" inside "not": the paper reads a denial
])
def test_meeting_answers(answer, paper_responded, corrected_responded):
    r = row("historical_events", "gpt_4_0125_turbo", 1)
    item = item_of(HistoricalEvents("paper"), r)
    assert HistoricalEvents("paper").responded("Some text.", item, [Completion(answer)]) is paper_responded
    corrected = HistoricalEvents("corrected")
    if corrected_responded is None:
        with pytest.raises(ValueError, match="unreadable judge answer"):
            corrected.responded("Some text.", item, [Completion(answer)])
    else:
        assert corrected.responded("Some text.", item, [Completion(answer)]) is corrected_responded


def test_recorded_units_split_as_the_authors_scorer_split_them():
    r = row("summarization", "gpt_4_0125_turbo", 1)
    units = paper.recorded_units(r["atomic_units"])
    assert len(units) == r["atomic_units"].count("|\n") + 1
    assert paper.recorded_units("") == []


def test_a_live_extractor_is_sent_the_authors_parse_prompt():
    task = RationalizationBinary("paper")
    items = {i.prompt: i for i in task.load_items(RESOLVER).items}
    r = row("rationalization_binary", "gpt_4_0125_turbo", 1)
    call = task.decompose_call(r["response"], items[r["prompt"].strip()])
    assert call.prompts == (r["extract_atomic_unit_prompt"],)  # as recorded for this very response
    corrected = RationalizationBinary("corrected")
    item = next(i for i in corrected.load_items(RESOLVER).items if i.prompt == r["prompt"].strip())
    assert "parse_template" not in item.fields
