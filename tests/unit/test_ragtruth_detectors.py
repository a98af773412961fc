"""RAGTruth detectors: judge prompts, tolerant reading of real judge answers, span location,
the span-model contract, and how unreadable answers reach the metrics."""

import pytest

from halluscope.contract.completion import Completion
from halluscope.errors import ConfigError, RunError
from halluscope.ragtruth.corpus import Label, Record, Source
from halluscope.ragtruth.detectors import PromptDetector, SpanModelDetector, SpanModelInput, SpanModelReply, TokenLabel
from halluscope.ragtruth.metrics import count
from halluscope.ragtruth.parse import read_hallucination_list
from halluscope.ragtruth.prompts import TEMPLATE_ID
from halluscope.ragtruth.spans import Prediction, Span, locate
from halluscope.ragtruth.taxonomy import LabelType, Quality, TaskType

EB = LabelType.EVIDENT_BASELESS
QA_RESPONSE = ("To boil eggs, place them in cold water and boil for 15 minutes. Add a pinch of salt to prevent "
               "cracking. Don't peel them hot.")
D2T_INFO = {"name": "Cafe Uno", "attributes": {"Music": None, "WiFi": "free"}, "review_info": []}


def record(rid, task, response, source_info, labels=()):
    src = Source(f"s-{rid}", task, "X", source_info, "generation prompt", 1)
    return Record(rid, src.source_id, "m", None, "test", Quality.GOOD, response, tuple(labels), tuple(labels), src, 1)


QA = record("qa", TaskType.QA, QA_RESPONSE, {"question": "how long to boil an egg",
                                              "passages": "passage 1:Boil eggs for 9 to 12 minutes."})

# (judge answer, status, strings expected at the located spans, unlocated strings, bad items)
JUDGE_ANSWERS = [
    ('{"hallucination list": ["15 minutes"]}', "list", ["15 minutes"], [], 0),
    ('```json\n{\n  "hallucination list": [\n    "Add a pinch of salt to prevent cracking."\n  ]\n}\n```',
     "list", ["Add a pinch of salt to prevent cracking."], [], 0),
    ('Sure! Here is my analysis.\n{"hallucination list": ["15 minutes"]}\nThe passages say 9 to 12 minutes.',
     "list", ["15 minutes"], [], 0),
    ("{'hallucination list': ['15 minutes', 'a pinch of salt']}", "list", ["15 minutes", "a pinch of salt"], [], 0),
    ('{"hallucination list": []}', "list", [], [], 0),
    ("No hallucinations.", "none_stated", [], [], 0),
    ("The answer does not contain any hallucinations.", "none_stated", [], [], 0),
    ("The answer is faithful to the passages. I found no hallucinated spans.", "none_stated", [], [], 0),
    ("None", "none_stated", [], [], 0),
    ('{"hallucination list": ["15 minutes", "Add a pinch of', "unreadable", [], [], 0),  # cut off
    ('The answer says "15 minutes" but the passages say 9 to 12.', "unreadable", [], [], 0),
    ("No hallucinations, but the cooking time may be off.", "unreadable", [], [], 0),
    ("I cannot determine this from the passages.", "unreadable", [], [], 0),
    ("", "unreadable", [], [], 0),
    ('{"hallucination list": ["15 minutes",]}', "list", ["15 minutes"], [], 0),
    ("{“hallucination list”: [“15 minutes”]}", "list", ["15 minutes"], [], 0),
    ('{"hallucination_list": ["15 minutes"]}', "list", ["15 minutes"], [], 0),
    ('{"Hallucination List": ["15 minutes"]}', "list", ["15 minutes"], [], 0),
    ('{"result": {"hallucination list": ["15 minutes"]}}', "list", ["15 minutes"], [], 0),
    ('{"hallucination list": "15 minutes"}', "list", ["15 minutes"], [], 0),
    ('{"hallucination list": null}', "list", [], [], 0),
    ("{'hallucination list': None}", "list", [], [], 0),
    ('["15 minutes"]', "list", ["15 minutes"], [], 0),
    ("Output: []", "list", [], [], 0),
    ('{"hallucination list": ["add a pinch  of SALT"]}', "list", ["Add a pinch of salt"], [], 0),  # normalised
    ('{"hallucination list": ["Don’t peel them hot"]}', "list", ["Don't peel them hot"], [], 0),  # typographic quote
    ('{"hallucination list": ["boil for 20 minutes"]}', "list", [], ["boil for 20 minutes"], 0),
    ('{"hallucination list": ["", {"span": "15 minutes", "type": "conflict"}, null]}', "list", ["15 minutes"], [], 2),
    ('{"analysis": "the time is wrong"}\n{"hallucination list": ["15 minutes"]}', "list", ["15 minutes"], [], 0),
    ('{"hallucination list": ["15 minutes"]} {"hallucination list": []}', "list", ["15 minutes"], [], 0),
    ('Step {1}: compare. Final: {"hallucination list": ["cold water"]}', "list", ["cold water"], [], 0),
    (' [/INST] {"hallucination list": ["15 minutes", "15 minutes"]}', "list", ["15 minutes", "15 minutes"], [], 0),
    ('```\n{"hallucination list": ["Don\'t peel them hot."]}\n```\nExplanation: not in the passages.', "list",
     ["Don't peel them hot."], [], 0),
]


@pytest.mark.parametrize("answer,status,located,unlocated,n_bad", JUDGE_ANSWERS)
def test_judge_answers(answer, status, located, unlocated, n_bad):
    parsed = read_hallucination_list(answer)
    assert parsed.status == status
    assert len(parsed.bad_items) == n_bad
    out = PromptDetector().parse([QA], [Completion(answer)])
    if status == "unreadable":  # an empty list, flagged (spec 5.1); or no prediction when asked
        assert out.predictions == {"qa": Prediction(unreadable=True)} and out.unpredicted() == []
        assert out.problem_counts() == {"unreadable": 1}
        left_out = PromptDetector(unreadable="exclude").parse([QA], [Completion(answer)])
        assert left_out.predictions == {} and left_out.unpredicted() == ["qa"]
        return
    prediction = out.predictions["qa"]
    assert [QA_RESPONSE[s.start:s.end] for s in prediction.spans] == located
    assert list(prediction.unlocated) == unlocated
    assert prediction.positive == bool(located or unlocated)


def test_locate_follows_reading_order_then_falls_back():
    text = "boil the water, then boil the eggs"
    spans, missing = locate(["boil", "boil", "boil", "BOIL THE  eggs", "fry"], text)
    # 1st and 2nd "boil" take successive occurrences; the 3rd finds none after the cursor and takes
    # the first anywhere; the normalised search then finds "boil the eggs" after that match
    assert spans == [Span(0, 4), Span(21, 25), Span(0, 4), Span(21, 34)]
    assert missing == ["fry"]


def test_prompts_per_task():
    d2t = record("d2t", TaskType.DATA2TXT, "Cafe Uno has no music.", D2T_INFO)
    summ = record("sum", TaskType.SUMMARY, "A storm hit.", "A storm hit the coast on Friday.")
    qa_p, d2t_p, sum_p = PromptDetector().prompts([QA, d2t, summ])
    for p in (qa_p, d2t_p, sum_p):
        assert '"hallucination list"' in p and "conflict" in p and "baseless" in p
    assert "how long to boil an egg" in qa_p and "passage 1:Boil eggs" in qa_p and QA_RESPONSE in qa_p
    assert '"Music": null' in d2t_p and "null (or None) means the value is unknown" in d2t_p
    assert "unknown" not in qa_p and "A storm hit the coast on Friday." in sum_p
    assert PromptDetector.template_id == TEMPLATE_ID


class FakeJudge:
    model_id = "fake-judge"

    def __init__(self, answers):
        self.answers = answers
        self.requests = []

    def generate_batch(self, requests):
        self.requests.extend(requests)
        return [Completion(a) if a is not None else Completion(None, error="HTTP 500") for a in self.answers]


def test_prompt_detector_problems_and_metrics():
    gold = Label(52, 62, "15 minutes", LabelType.EVIDENT_CONFLICT)
    qa = record("a", TaskType.QA, QA_RESPONSE, QA.source.source_info, [gold])
    others = [record(x, TaskType.QA, QA_RESPONSE, QA.source.source_info, [gold]) for x in "bcd"]
    records = [qa, *others]
    judge = FakeJudge(['{"hallucination list": ["15 minutes", "boil for 20 minutes", ""]}', None,
                       "I am not sure.", '{"hallucination list": []}'])
    out = PromptDetector(judge).predict(records)
    assert [r.item_id for r in judge.requests] == ["a", "b", "c", "d"] and judge.requests[0].task == "ragtruth/QA"
    assert out.problem_counts() == {"bad_item": 1, "unlocated_span": 1, "call_error": 1, "unreadable": 1}
    assert sorted(out.predictions) == ["a", "c", "d"] and out.unpredicted() == ["b"]
    total = sum(count(records, out.predictions).values())
    # a: TP, 10 gold chars hit, 10 + 19 unlocated predicted chars; c (unreadable: an empty list) and
    # d: FN; b: the call failed, unpredicted, not scored
    assert (total.n_responses, total.unpredicted, total.unreadable, total.tp, total.fn, total.tp_chars,
            total.pred_chars, total.gold_chars) == (3, 1, 1, 1, 2, 10, 29, 30)
    # the option that leaves unreadable answers out, as before
    left_out = PromptDetector(FakeJudge(judge.answers), unreadable="exclude").predict(records)
    assert sorted(left_out.predictions) == ["a", "d"] and left_out.unpredicted() == ["b", "c"]
    total = sum(count(records, left_out.predictions).values())
    assert (total.n_responses, total.unpredicted, total.unreadable, total.fn, total.gold_chars) == (2, 2, 0, 1, 20)
    with pytest.raises(ConfigError, match="needs a judge backend"):
        PromptDetector().predict(records)
    with pytest.raises(RunError, match="1 replies for 4 records"):
        PromptDetector().parse(records, [Completion("[]")])


def test_span_model_detector_contract():
    r1 = record("t1", TaskType.SUMMARY, "Gaza Strip is occupied by Israel today.", "article")
    r2 = record("t2", TaskType.SUMMARY, "Short.", "article")
    r3 = record("t3", TaskType.SUMMARY, "Another one.", "article")
    r4 = record("t4", TaskType.SUMMARY, "Bad offsets.", "article")
    r5 = record("t5", TaskType.SUMMARY, "Nothing given.", "article")
    seen: list[list[SpanModelInput]] = []

    def backend(batch):
        seen.append(list(batch))
        replies = []
        for item in batch:
            if item.response_id == "t1":  # tokens: "Gaza" "Strip" hallucinated, joined over the space
                replies.append(SpanModelReply(tokens=[
                    TokenLabel(0, 4, True, EB),
                    TokenLabel(5, 10, True, EB),
                    TokenLabel(11, 13, False), TokenLabel(33, 38, True)]))
            elif item.response_id == "t2":
                replies.append(SpanModelReply(spans=[(0, 5, "Subtle Conflict")]))
            elif item.response_id == "t3":
                replies.append(SpanModelReply(error="CUDA out of memory"))
            elif item.response_id == "t4":
                replies.append(SpanModelReply(spans=[(3, 99)]))
            else:
                replies.append(SpanModelReply())
        return replies

    out = SpanModelDetector(backend, batch_size=2).predict([r1, r2, r3, r4, r5])
    assert [len(b) for b in seen] == [2, 2, 1] and seen[0][0].context == "article"
    assert out.predictions["t1"] == Prediction((Span(0, 10, LabelType.EVIDENT_BASELESS), Span(33, 38, None)))
    assert out.predictions["t2"] == Prediction((Span(0, 5, LabelType.SUBTLE_CONFLICT),))
    assert out.problem_counts() == {"backend_error": 1, "bad_reply": 2}
    assert sorted(out.unpredicted()) == ["t3", "t4", "t5"]

    def flaky(batch):
        if any(i.response_id == "t2" for i in batch):
            raise TimeoutError("replica did not answer")
        return [SpanModelReply(spans=()) for _ in batch]

    out = SpanModelDetector(flaky, batch_size=2).predict([r1, r2, r3])
    assert out.predictions == {"t3": Prediction()}
    assert [(p.response_id, p.reason) for p in out.problems] == [("t1", "backend_error"), ("t2", "backend_error")]
    assert "TimeoutError: replica did not answer" in out.problems[0].detail
    with pytest.raises(ConfigError):
        SpanModelDetector(flaky, batch_size=0)

