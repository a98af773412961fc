"""Answer formats of judge and extractor calls: what each ``structured_output`` mode puts in the
request body (against the local OpenAI stub), the call-cache key with and without a format, and
which tasks attach one."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from tests.support.models import openai_model
from tests.support.openai_server import OpenAIStubServer

from halluscope.config.load import parse_config
from halluscope.config.schema import OpenAIModel, OpenAIParams
from halluscope.contract.completion import Completion
from halluscope.contract.roles import AnswerFormat, Calls, RoleCall
from halluscope.contract.task import Item
from halluscope.hallulens import judging
from halluscope.halogen import prompts as halogen_prompts
from halluscope.halogen.tasks import TASKS as HALOGEN_TASKS
from halluscope.models.base import GenerationRequest, SamplingParams
from halluscope.models.cache import CachedBackend, call_key
from halluscope.models.model import Model
from halluscope.models.openai_http import OpenAIProvider
from halluscope.pipeline.roles import RoleModels
from halluscope.ragtruth.prompts import ANSWER_FORMAT as RAGTRUTH_FORMAT
from halluscope.storage.fs import Location

YES_NO = AnswerFormat(choices=("Yes", "No"), name="verdict")
FLAG = AnswerFormat.json_object("is_abstaining", {"is_abstaining": {"type": "boolean"}})
SAMPLING = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 512, "stop": []}


def _backend(server: OpenAIStubServer, mode: str) -> Model:
    return openai_model(model_id="judge", base_url=server.base_url, structured_output=mode, max_retries=0,
                        sampling=SamplingParams())


def _ask(mode: str, fmt: AnswerFormat | None, answer: str = "Yes") -> tuple[dict, Completion]:
    with OpenAIStubServer(responder=lambda prompt: answer) as server:
        [done] = _backend(server, mode).generate_batch([GenerationRequest("t", "i", "Did they meet?",
                                                                          answer_format=fmt)])
    [body] = server.bodies
    return body, done


# --- the contract ---------------------------------------------------------------------------------


def test_a_format_is_a_choice_or_a_schema():
    with pytest.raises(ValueError, match="either choices or a JSON schema"):
        AnswerFormat()
    with pytest.raises(ValueError, match="either choices or a JSON schema"):
        AnswerFormat(choices=("Yes",), json_schema={"type": "object"})
    with pytest.raises(ValueError, match="distinct"):
        AnswerFormat(choices=("Yes", "Yes"))
    with pytest.raises(ValueError, match="letters, digits"):
        AnswerFormat(choices=("Yes", "No"), name="a verdict")
    assert FLAG.json_schema == {"type": "object", "properties": {"is_abstaining": {"type": "boolean"}},
                                "required": ["is_abstaining"], "additionalProperties": False}
    assert len({YES_NO, AnswerFormat(choices=("Yes", "No"), name="verdict"), FLAG}) == 2  # hashable, by value


# --- what each mode sends -----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [YES_NO, FLAG, None])
def test_off_sends_nothing_extra(fmt):
    body, done = _ask("off", fmt)
    assert set(body) == {"model", "messages", "temperature", "top_p", "max_tokens"}
    assert done.text == "Yes"


@pytest.mark.parametrize("mode", ["json_schema", "vllm"])
def test_a_request_without_a_format_sends_nothing_extra(mode):
    body, _ = _ask(mode, None)
    assert set(body) == {"model", "messages", "temperature", "top_p", "max_tokens"}


def test_json_schema_sends_a_choice_as_an_enum_and_hands_the_parser_the_chosen_string():
    body, done = _ask("json_schema", YES_NO, answer='{"answer": "No"}')
    assert body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "verdict", "strict": True,
        "schema": {"type": "object", "properties": {"answer": {"type": "string", "enum": ["Yes", "No"]}},
                   "required": ["answer"], "additionalProperties": False}}}
    assert "structured_outputs" not in body
    assert done.error is None and done.text == "No"


def test_json_schema_keeps_an_answer_that_is_not_the_wrapped_choice():
    """A server that ignored the format: the parser gets the text as it came."""
    _, done = _ask("json_schema", YES_NO, answer="No, they never met.")
    assert done.text == "No, they never met."


def test_json_schema_sends_a_schema_as_is_and_leaves_the_json_answer_alone():
    body, done = _ask("json_schema", FLAG, answer='{"is_abstaining": true}')
    assert body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "is_abstaining", "strict": True, "schema": FLAG.json_schema}}
    assert done.text == '{"is_abstaining": true}'
    assert judging.parse_abstaining(done.text) is True


def test_vllm_sends_structured_outputs_at_the_top_of_the_body():
    body, done = _ask("vllm", YES_NO)
    assert body["structured_outputs"] == {"choice": ["Yes", "No"]}
    assert "response_format" not in body and done.text == "Yes"
    body, _ = _ask("vllm", FLAG)
    assert body["structured_outputs"] == {"json": FLAG.json_schema, "disable_any_whitespace": True}


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="structured_output"):
        OpenAIProvider(model_id="j", base_url="http://127.0.0.1:1/v1", structured_output="grammar")  # type: ignore[arg-type]


# --- the call cache -----------------------------------------------------------------------------


def test_a_key_without_a_format_is_the_key_of_before():
    """Pinned digests of the key formula before answer formats existed: existing caches stay valid."""
    prompt = "Text: x\n\nQuestion: did they meet?"
    assert call_key("judge-model", "rev1", "meeting-v1", prompt, SAMPLING) == \
        "0bf7345c0bafa5b6c402525e6435108f4efe8e2a366f164fe27f32b12db6839a"
    assert call_key("judge-model", "rev1", "meeting-v1", prompt, SAMPLING, None) == \
        "0bf7345c0bafa5b6c402525e6435108f4efe8e2a366f164fe27f32b12db6839a"
    assert call_key("gpt-x", None, "raw-prompt-v1", "Écris un poème",
                    {"temperature": 0.7, "top_p": 0.9, "max_tokens": 64, "stop": ["\n\n"]}) == \
        "d67c6d627cc121dd5234197e1fa814788200bca6dc8ac6d2b12cc95c35db8eca"


def test_a_format_is_part_of_the_key():
    args = ("judge-model", "rev1", "meeting-v1", "Did they meet?", SAMPLING)
    keys = {call_key(*args), call_key(*args, YES_NO), call_key(*args, AnswerFormat(choices=("No", "Yes"))),
            call_key(*args, FLAG)}
    assert len(keys) == 4
    assert call_key(*args, YES_NO) == call_key(*args, AnswerFormat(choices=("Yes", "No"), name="verdict"))
    body = json.dumps([*args, {"choices": ["Yes", "No"]}], sort_keys=True, ensure_ascii=False)
    assert call_key(*args, YES_NO) == hashlib.sha256(body.encode()).hexdigest()


class _Fake:
    model_id = "judge"

    def __init__(self, constrains: bool) -> None:
        self.constrains_answers = constrains
        self.calls = 0

    def generate_batch(self, requests):
        self.calls += len(requests)
        return [Completion("Yes", 1, 1) for _ in requests]


def test_the_cache_keys_a_format_only_where_the_backend_sends_it(tmp_path):
    """An endpoint left at "off" answers as before: its formatted calls hit the answers cached
    without a format; one that constrains keys them apart."""
    cache = Location.from_url(f"file://{tmp_path}")
    plain = [GenerationRequest("t", "i", "Did they meet?")]
    formatted = [GenerationRequest("t", "i", "Did they meet?", answer_format=YES_NO)]
    first = _Fake(constrains=False)
    CachedBackend(first, cache, None, "meeting-v1", SAMPLING).generate_batch(plain)
    off = _Fake(constrains=False)
    assert CachedBackend(off, cache, None, "meeting-v1", SAMPLING).generate_batch(formatted)[0].cached
    on = _Fake(constrains=True)
    CachedBackend(on, cache, None, "meeting-v1", SAMPLING).generate_batch(formatted)
    again = _Fake(constrains=True)
    assert CachedBackend(again, cache, None, "meeting-v1", SAMPLING).generate_batch(formatted)[0].cached
    assert (first.calls, off.calls, on.calls, again.calls) == (1, 0, 1, 0)


# --- from a task's role call to the request body ------------------------------------------------


def test_role_models_pass_a_calls_format_to_the_endpoint(tmp_path):
    with OpenAIStubServer(responder=lambda prompt: '{"answer": "Yes"}') as server:
        judge = OpenAIModel(id="judge", role="judge", backend="openai",
                            params=OpenAIParams(base_url=server.base_url, structured_output="json_schema"))
        roles = RoleModels([judge], {}, Location.from_url(f"file://{tmp_path}"))
        calls = {"g1": [RoleCall("judge", ("Did they meet?",), "meeting-v1", answer_format=YES_NO)],
                 "g2": [RoleCall("judge", ("Did they meet?",), "meeting-v1")]}
        usage: dict[str, list[dict]] = {"g1": [], "g2": []}
        replies = roles.answer(calls, "abstain", usage)
    assert [r.text for r in replies["g1"] + replies["g2"]] == ["Yes", '{"answer": "Yes"}']
    with_format, without = sorted(server.bodies, key=lambda b: "response_format" in b, reverse=True)
    assert with_format["response_format"]["json_schema"]["schema"]["properties"]["answer"]["enum"] == ["Yes", "No"]
    assert "response_format" not in without  # the same prompt without a format is another call


def test_structured_output_is_off_by_default_and_an_off_endpoint_keeps_its_fingerprint():
    def cfg(**params):
        return parse_config({"tasks": ["halogen/code"], "models": [
            {"id": "a", "backend": "replay"},
            {"id": "j", "role": "judge", "backend": "openai", "params": {"base_url": "http://h/v1", **params}}]})

    off = cfg()
    assert off.models[1].params.structured_output == "off"
    keep = off.model_dump(mode="json", include={"models", "tasks", "testsets", "limits"})
    del keep["models"][1]["params"]["structured_output"]
    assert off.fingerprint() == hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]
    assert cfg(structured_output="off").fingerprint() == off.fingerprint() != cfg(structured_output="vllm").fingerprint()


# --- which tasks attach a format ----------------------------------------------------------------


def _halogen(name: str):
    return next(t for t in HALOGEN_TASKS if t.name == name)


def _format(calls: Calls) -> AnswerFormat | None:
    """The answer format of a phase's one call."""
    assert isinstance(calls, RoleCall)
    return calls.answer_format


NO_KB: Any = None  # the calls below read no knowledge


def test_corrected_halogen_verdicts_are_yes_or_no_and_the_paper_rules_stay_free():
    item = Item("halogen/historical_events", "i", "Tell me about the meeting of A and B.",
                {"name1": "A", "name2": "B", "birth1": "1", "death1": "2", "birth2": "3", "death2": "4",
                 "occurrence": 0})
    text = "They met in Paris."
    assert _format(_halogen("halogen/historical_events@corrected").abstain_call(text, item)) == halogen_prompts.VERDICT
    assert _format(_halogen("halogen/historical_events").abstain_call(text, item)) is None
    for name in ("halogen/summarization", "halogen/simplification"):
        source = Item(name, "i", "Summarise: text", {"source": "The source.", "occurrence": 0})
        corrected = _halogen(f"{name}@corrected").verify_call(["a fact"], "out", source, NO_KB)
        assert _format(corrected) == halogen_prompts.VERDICT
        assert _format(_halogen(name).verify_call(["a fact"], "out", source, NO_KB)) is None
    # extractions (facts, titles, parses) are lists or the authors' layouts: free text in both rule sets
    assert _format(_halogen("halogen/summarization@corrected").decompose_call("out", source)) is None


def test_hallulens_and_ragtruth_judges_attach_their_forms():
    from halluscope.hallulens.tasks import TASKS

    tasks = {t.name: t for t in TASKS}
    item = Item("hallulens/precise_wikiqa", "i", "Q?", {"answer": "A", "name": "Zorblax", "bin": "x"})
    assert _format(tasks["hallulens/precise_wikiqa"].abstain_call("A.", item)) == judging.ABSTAIN_FORMAT
    correctness = _format(tasks["hallulens/precise_wikiqa"].verify_call(["A."], "A.", item, NO_KB))
    assert correctness is not None and correctness.choices == ("CORRECT", "INCORRECT", "UNVERIFIABLE")
    assert _format(tasks["hallulens/longwiki"].abstain_call("A.", item)) == judging.KNOWLEDGEABLE_FORMAT
    assert _format(tasks["hallulens/nonexistent_mixed"].abstain_call("A.", item)) == judging.BELIEF_FORMAT
    assert judging.VERIFY_FORMAT.json_schema == {"type": "object", "properties": {"is_supported": {"type": "boolean"}},
                                                 "required": ["is_supported"], "additionalProperties": False}
    assert RAGTRUTH_FORMAT.json_schema is not None and RAGTRUTH_FORMAT.json_schema["properties"] == {
        "hallucination list": {"type": "array", "items": {"type": "string"}}}
