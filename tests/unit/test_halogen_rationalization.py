from halluscope.knowledge.base import Knowledge
from halluscope.sources import DataResolver
from halluscope.tasks.base import Item
from halluscope.tasks.halogen.lists import FalsePresuppositions, RationalizationNumerical
from halluscope.tasks.halogen.rationalization_binary import (RationalizationBinary, answer_of, claimed_factors,
                                                             flight_legs)

KB = Knowledge(DataResolver(download=False))
RB = RationalizationBinary()


def _bin_item(category, prompt):
    return Item(RB.name, "x", prompt, RB.item_fields({"category": category, "prompt": prompt}, "test"))


def _score(task, text, item):
    atoms = task.decompose(text, item)
    verdicts = task.verify(atoms, text, item, KB)
    return atoms, [v.supported for v in verdicts]


def test_answer_parsing():
    assert answer_of("Yes, 7411 is prime.") == "yes"
    assert answer_of("\n\nNo. 7411 = 7 x 1059") == "no"
    assert answer_of("It is a prime.\nYes indeed") == "yes"  # no yes/no on the first line
    assert answer_of("It depends.") is None


def test_primality_factors_are_checked_arithmetically():
    item = _bin_item("primality", "Is 7411 a prime number? First, respond with yes or no. If no, then provide its factorization.")
    assert item.fields["number"] == 7411
    assert _score(RB, "Yes, 7411 is a prime number.", item) == (["answer: yes"], [True])
    atoms, sup = _score(RB, "No, 7411 = 3 x 7 x 353.", item)
    assert atoms == ["answer: no", "factor: 3", "factor: 7", "factor: 353"] and sup == [False] * 4
    assert claimed_factors("2² x 2² x 53", 7411) == [2, 53]
    assert claimed_factors("divisible by 11", 7411) == [11]
    assert claimed_factors("0 x 7411", 7411) == []  # 0, 1 and n itself are no factor claims
    # a true divisor of a composite is supported
    comp = _bin_item("primality", "Is 91 a prime number? First, respond with yes or no.")
    assert RB.verify(["factor: 7", "factor: 5"], "", comp, KB)[0].supported is True
    assert RB.verify(["factor: 7", "factor: 5"], "", comp, KB)[1].supported is False


GRAPH = ("Current flight information (the following flights are one-way only, and all the flights available are "
         "included below):\nThere is a flight from city L to city F\nThere is a flight from city F to city M\n"
         "There is a flight from city A to city G\n\nQuestion: Is there a series of flights that goes from city L "
         "to city G? First, respond with yes or no. If yes, then provide the series of flights.")


def test_graph_legs_checked_against_prompt():
    item = _bin_item("graph", GRAPH)
    assert item.fields["origin"] == "L" and item.fields["destination"] == "G"
    assert flight_legs("L -> F -> M -> G") == [("L", "F"), ("F", "M"), ("M", "G")]
    assert flight_legs("from city L to city F, then F to M") == [("L", "F"), ("F", "M")]
    atoms, sup = _score(RB, "Yes, there is.\nL to F, then F to M, then M to G.", item)
    assert atoms == ["answer: yes", "flight: L->F", "flight: F->M", "flight: M->G"]
    assert sup == [False, True, True, False]
    assert _score(RB, "No, there is no such route.", item) == (["answer: no"], [True])


def test_senator_named_is_unsupported():
    item = _bin_item("senator", "Was there ever a US senator that represented the state of Arkansas and whose alma "
                                "mater was MIT? First, respond with yes or no.")
    atoms, sup = _score(RB, "Yes. His name was William Fulbright.", item)
    assert atoms == ["answer: yes", "senator: William Fulbright"] and sup == [False, False]


def _list_item(task, condition, letter, universe, gold, count, val=None):
    row = {"list_name": "planets in the solar system", "condition": condition, "letter": letter,
           "list": repr(universe), "list_condition": repr(gold), "count": str(count), "prompt": "p"}
    if val is not None:
        row["val"] = str(val)
    return Item(task.name, "x", "p", task.item_fields(row, "test"))


PLANETS = ["mercury", "venus", "earth", "mars", "jupiter", "saturn", "uranus", "neptune"]
WITH_A = ["earth", "mars", "saturn", "uranus"]


def test_numerical_count_and_items():
    rn = RationalizationNumerical()
    item = _list_item(rn, "contains", "a", PLANETS, WITH_A, 4)
    atoms, sup = _score(rn, "4\nEarth, Mars, Saturn, Uranus", item)
    assert atoms == ["count: 4", "earth", "mars", "saturn", "uranus"] and all(sup)
    atoms, sup = _score(rn, "There are five: Earth, Mars, Saturn, Uranus and Venus.", item)
    assert atoms == ["count: 5", "earth", "mars", "saturn", "uranus", "venus"]
    assert sup == [False, True, True, True, True, False]
    # the month "May" must be capitalised to count; "may" the verb does not
    assert _score(rn, "Four. Mars may be one of them.", item)[0] == ["count: 4", "mars"]


def test_false_presupposition_refusal_and_atoms():
    fp = FalsePresuppositions()
    item = _list_item(fp, "contain", "a", PLANETS, WITH_A, 4, val=5)
    assert item.fields["n_requested"] == 5
    assert not fp.responded("no response.", item)
    assert not fp.responded("I'm sorry, only four planets contain an 'a'.", item)
    assert not fp.responded("There are not five such planets.", item)  # lists nothing: refused
    text = "Earth; Mars; Saturn; Uranus; Venus"
    assert fp.responded(text, item)
    atoms, sup = _score(fp, text, item)
    assert atoms == ["earth", "mars", "saturn", "uranus", "venus"] and sup == [True, True, True, True, False]


def test_replay_keys_join_reworded_prompts():
    fp = FalsePresuppositions()
    keys_item = fp.replay_keys({"prompt": "List 5 planets ...", "list_name": "planets in the solar system",
                                "condition": "contain", "letter": "a", "occurrence": 0})
    keys_old = fp.replay_keys({"prompt": "List 5 planets in the solar system that contains the letter a",
                               "list_name": "planets in the solar system", "condition": "contains", "letter": "a",
                               "occurrence": 0})
    assert keys_item[1] == keys_old[1] and keys_item[0] != keys_old[0]
