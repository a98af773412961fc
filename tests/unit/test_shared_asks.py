"""Requests that ask a model the same share one call: a rule set's twin tasks ask the same prompts,
and a second generation would double the bill and score another sample of the same question.
The plan counts the shared ones as the run does, as cached."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from tests.conftest import SHARED_DATA
from tests.support.resolved import planned

from halluscope.config.load import parse_config
from halluscope.config.schema import ScriptedModel
from halluscope.contract.completion import Completion
from halluscope.contract.roles import AnswerFormat, RoleCall
from halluscope.models.base import GenerationRequest
from halluscope.models.model import Model
from halluscope.models.provider import CallLimits, RemoteProvider, Retry
from halluscope.models.usage import Usage
from halluscope.pipeline.roles import RoleModels


class Echo(RemoteProvider):
    """Answers each prompt with itself and counts the prompts it was sent."""

    def __init__(self) -> None:
        self.model_id = "echo"
        self.limits = CallLimits(prompts_per_call=2, max_retries=0)
        self.sent: list[str] = []

    async def call(self, requests: Sequence[GenerationRequest]) -> list[Completion | Retry]:
        self.sent += [r.prompt for r in requests]
        return [Completion(r.prompt.upper(), 3, 1) for r in requests]


def test_equal_requests_of_a_batch_are_sent_once_and_share_the_answer():
    provider = Echo()
    yes_no = AnswerFormat(choices=("Yes", "No"))
    asks = [GenerationRequest("t", "1", "a"), GenerationRequest("t@twin", "1", "a"), GenerationRequest("t", "2", "b"),
            GenerationRequest("t", "3", "a", answer_format=yes_no)]
    out = Model(provider).generate_batch(asks)
    assert sorted(provider.sent) == ["a", "a", "b"]  # the constrained ask is another question
    assert [c.text for c in out] == ["A", "A", "B", "A"]
    assert [(c.attempts, c.cached) for c in out] == [(1, False), (0, True), (1, False), (1, False)]
    assert (out[1].input_tokens, out[1].output_tokens) == (3, 1)


class Failing(Echo):
    async def call(self, requests: Sequence[GenerationRequest]) -> list[Completion | Retry]:
        self.sent += [r.prompt for r in requests]
        return [Completion(None, error="bad request") for _ in requests]


def test_a_failed_answer_shared_stays_a_failure_and_costs_one_call():
    out = Model(Failing()).generate_batch([GenerationRequest("t", "1", "a"), GenerationRequest("t@twin", "1", "a")])
    assert [(c.error, c.cached) for c in out] == [("bad request", False), ("bad request", True)]
    assert (Usage().add(out).calls, Usage().add(out).cached_calls, Usage().add(out).failed_calls) == (1, 1, 1)


def test_role_calls_of_a_batch_asking_the_same_share_one_call_by_the_same_rule():
    """The verifying actors' role calls follow the model's rule, whatever answers them: rows asking
    the judge the same question (FEWL's neighbour questions) pay for one call, the others count a
    cache hit."""
    judge = ScriptedModel.model_validate({"id": "judge", "role": "judge", "backend": "scripted",
                                          "params": {"rules": [{"pattern": "q", "response": "Q"}], "default": "P",
                                                     "in_process": True}})
    usage: dict[str, list[dict]] = {"r1": [], "r2": []}
    replies = RoleModels([judge], {}, cache=None).answer(
        {"r1": [RoleCall("judge", ("q", "p"), "t")], "r2": [RoleCall("judge", ("q",), "t")]}, "verify", usage)
    assert [[c.text for c in replies[k]] for k in ("r1", "r2")] == [["Q", "P"], ["Q"]]
    assert [(u[0]["calls"], u[0]["cached_calls"]) for u in (usage["r1"], usage["r2"])] == [(2, 0), (0, 1)]


@pytest.mark.skipif(not SHARED_DATA.exists(), reason="reads HALOGEN's prompts: needs ../shared/data")
def test_the_plan_counts_a_served_models_twin_prompts_once(tmp_path):
    raw = {"storage": {"root": f"file://{tmp_path}"}, "tasks": ["halogen/code", "halogen/code@corrected"],
           "limits": {"max_items_per_task": 5}, "costs": {"price_table": None}, "cache": {"enabled": False},
           "models": [{"id": "served", "backend": "scripted", "params": {"default": "import numpy"}},
                      {"id": "api", "backend": "scripted", "params": {"default": "import numpy", "in_process": True}}]}
    rows = {(r.model, r.task): (r.calls, r.cached_calls) for r in planned(parse_config(raw), None).rows if r.stage == "generate"}
    assert rows[("served", "halogen/code")] == (5, 0)
    assert rows[("served", "halogen/code@corrected")] == (0, 5)  # generated once, by its generation task
    # a model answered in the actors' batches shares only through the call cache: counted twice
    assert rows[("api", "halogen/code")] == rows[("api", "halogen/code@corrected")] == (5, 0)
