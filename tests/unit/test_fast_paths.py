"""The memos and fast paths of the HALOGEN rules and the role path give what the plain
computations give, on real rows of the authors' recorded pipeline, and their caches are bounded."""

from __future__ import annotations

import ast
import re
from collections import defaultdict

import pytest
from tests.conftest import SHARED_DATA

from halluscope.contract.completion import Completion
from halluscope.contract.replies import excerpt, parse_yes_no
from halluscope.contract.roles import RoleCall
from halluscope.contract.task import Item, Verdict
from halluscope.halogen import common, paper
from halluscope.halogen.biographies import Biographies
from halluscope.halogen.common import parse_list_field, read_csv_rows
from halluscope.halogen.grounded import summarization
from halluscope.halogen.llm_verified import _judged, judge_verdict
from halluscope.halogen.steps import FACT_VERDICT, read_rows, recorded_path, step_keys
from halluscope.pipeline.roles import RoleModels
from halluscope.sources import DataResolver

RESOLVER = DataResolver(download=False)
needs_data = pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")


def rows(domain: str, model: str) -> tuple[dict[str, str], ...]:
    return read_rows(RESOLVER.resolve(recorded_path(domain, model)))


# --- the binary rationalization gate ---------------------------------------------------------------

def whole_line_gate(text: str, category: str, rules: str) -> bool:
    """The gate as the authors apply it: every sentence of the first line tokenized."""
    line = text.split("\n")[0]
    if rules == "corrected":
        line = line.replace("/", " / ")
    tok = paper._word_tokenizer()
    words = [w.lower() for s in re.split(r"(?<=[.!?])\s+", line) for w in tok.tokenize(s)]
    gold = paper.GOLD[category]
    return gold in text.split("\n")[0].lower() and gold in words


@needs_data
def test_the_answer_gate_tokenizes_only_sentences_holding_the_answer_and_agrees():
    sample = [r for i, r in enumerate(rows("rationalization_binary", "llama_3_8b_chat")) if i % 3 == 0]
    crafted = ["Know this. No.", "Not so: no/yes", "Non't.", "YESN'T", "I can't say. \"No\" it is", "nothing; no-one",
               "Yes/no", "yes.No", "(no) really", "Cannot. Yes!", "''yes''", "`no`", "no_", "no5 5no", "«no»",
               "yes--no", "yes...no", "yes's", "x.no", "İno", "eyes, noon", "No‒yes", "gonna no", "'tis no"]
    cases = [(r["response"], r["category"]) for r in sample] + [(t, c) for t in crafted for c in ("primality", "graph")]
    for text, category in cases:
        for rules in paper.RULE_SETS:
            assert paper.gold_in_first_line(text, category, rules) == whole_line_gate(text, category, rules), \
                (text[:80], category, rules)
    assert paper._sentence_words.cache_info().maxsize is not None


# --- the refusal phrases -------------------------------------------------------------------------

@needs_data
def test_refusals_read_once_for_both_rule_sets_agree_with_the_phrase_lists():
    texts = [r["response"] for r in rows("biographies", "alpaca_7b")] + ["", "  \n", "Sorry", "I am sorrySorry"]
    for text in texts:
        for rules, phrases in (("paper", paper.PAPER_PHRASES), ("corrected", paper.CORRECTED_PHRASES)):
            assert paper.abstained(text, rules) == (not text.strip() or any(p in text for p in phrases))
    assert paper._refusals.cache_info().maxsize is not None


# --- list literals -------------------------------------------------------------------------------

EDGE_LITERALS = ["[]", "['']", "['a']", "['a', 'b']", "['a','b']", "['a' 'b']", "['a\\'s']", "['a\\nb']",
                 "[\"it's\", 'b']", "['a', ]", "[ 'a']", "['é', '日本']", "['a\tb']", "['[x]', ', ']"]


@needs_data
def test_plain_list_literals_read_as_python_reads_them():
    values = [v for r in rows("references", "gpt_4_0125_turbo")
              for v in (r.get("atomic_units", ""), r.get("hallucinated_atomic_units", ""))]
    values = [v.strip() for v in values if v and v.strip() not in ("", "nan", "None")] + EDGE_LITERALS
    plain = 0
    for v in values:
        assert paper.literal_list(v) == ast.literal_eval(v), v
        plain += paper.plain_str_list(v) is not None
    assert plain > len(values) // 2  # the fast path is the common one
    assert paper.plain_str_list("['a' 'b']") is None and paper.plain_str_list("['a\\'s']") is None


@needs_data
def test_list_fields_of_the_prompt_files_read_as_before():
    path = RESOLVER.resolve("halogen/prompts/prompts_falsepresupposition.csv.gz")
    for _, row, _ in read_csv_rows(path):
        for column in ("list", "list_condition"):
            assert parse_list_field(row[column], "t") == [str(x).strip().lower() for x in ast.literal_eval(row[column])]
    with pytest.raises(ValueError, match="not a list literal"):
        parse_list_field("['a'", "t")


# --- content keys of role calls ------------------------------------------------------------------

def plain_keys(task, step: str, text: str, item: Item, units: list[str]) -> tuple[str, ...]:
    joins = task.replay_keys({**item.fields, "prompt": item.prompt})
    return tuple(" ".join(k) for k in step_keys(task.response_dir, step, joins, text, units))


@needs_data
def test_role_call_keys_are_the_step_keys_and_twins_share_them():
    paper_task, corrected = summarization("paper"), summarization("corrected")
    items = paper_task.load_items(RESOLVER).items[:30]
    for n, item in enumerate(items):
        text, units = f"Response {n}:  the  source says so.", [f"fact {n}", "another  fact", ""]
        twin = Item(corrected.name, item.item_id, item.prompt, item.fields)
        for task, it in ((paper_task, item), (corrected, twin), (paper_task, item)):  # the last from the memos
            call = task.recorded_call("judge", FACT_VERDICT, ["p"] * 3, "t", text, it, units)
            assert call.keys == plain_keys(task, FACT_VERDICT, text, it, units)
    assert common.content_keys.cache_info().maxsize is not None


@needs_data
def test_an_item_with_other_fields_is_never_given_the_memoised_joins(monkeypatch):
    task = Biographies("paper")
    item = Item(task.name, "i", "Tell me a bio of Ada Lovelace.", {"name": "Ada Lovelace", "occurrence": 0})
    other = Item(task.name, "i", item.prompt, {"name": "Ada King", "occurrence": 1})
    first = task.recorded_call("judge", FACT_VERDICT, ["p"], "t", "text", item, ["u"])
    second = task.recorded_call("judge", FACT_VERDICT, ["p"], "t", "text", other, ["u"])
    assert first.keys != second.keys and second.keys == plain_keys(task, FACT_VERDICT, "text", other, ["u"])
    monkeypatch.setattr(common, "_MEMO_ITEMS", 3)
    for n in range(10):
        task.recorded_call("judge", FACT_VERDICT, ["p"], "t", "text", Item(task.name, str(n), f"q{n}", {}), ["u"])
        assert len(task._joins_memo) <= 3


# --- judge verdicts ------------------------------------------------------------------------------

def test_judge_verdicts_from_the_memo_are_the_plain_ones():
    answers = ["Yes", "No", "Yes.", "no, it is not", "I cannot determine that.", "", " ", "The premise says so. Yes.",
               "Not supported.", "x" * 500, "Yes"]
    for answer in answers:
        decided = parse_yes_no(answer)
        expected = (Verdict(None, f"unreadable judge answer: {excerpt(answer)!r}") if decided is None
                    else Verdict(decided, f"judge: {excerpt(answer, 200)}"))
        assert judge_verdict(Completion(answer)) == expected
    assert judge_verdict(Completion(None, error="HTTP 503")) == Verdict(None, "judge call failed: HTTP 503")
    assert _judged.cache_info().maxsize is not None


# --- the role path -------------------------------------------------------------------------------

class _Echo:
    model_id = "echo"

    def __init__(self) -> None:
        self.requests: list = []

    def generate_batch(self, requests):
        self.requests += requests
        return [Completion(f"re: {r.prompt}", 3, 1) for r in requests]


def test_rows_asking_the_same_share_one_call_and_replies_return_in_order():
    echo = _Echo()
    roles = RoleModels([], {}, None)
    roles._backends = {("judge", "t", None): echo}
    calls = {"a": (RoleCall("judge", ("p1", "p2"), "t", ("k1", "k2")), RoleCall("judge", (), "other")),
             "b": (RoleCall("judge", ("p2",), "t", ("k2",)),),
             "c": (RoleCall("judge", ("p2",), "t", ("k3",)),)}
    usage: dict = defaultdict(list)
    replies = roles.answer(calls, "verify", usage, {"a": "m", "b": "m", "c": "m"})
    assert [r.prompt for r in echo.requests] == ["p1", "p2", "p2"]  # "b" asks what "a" asked; no call for ()
    assert [c.text for c in replies["a"]] == ["re: p1", "re: p2"] and replies["b"][0].text == "re: p2"
    assert replies["b"][0].cached and not replies["a"][1].cached
    assert [(u["calls"], u["cached_calls"], u["input_tokens"]) for k in "abc" for u in usage[k]] \
        == [(2, 0, 6), (0, 1, 0), (1, 0, 3)]
