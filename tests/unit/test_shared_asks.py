"""Requests that ask a model the same share one call: a rule set's twin tasks ask the same prompts,
and a second generation would double the bill and score another sample of the same question.
The plan counts the shared ones as the run does, as cached."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from tests.conftest import SHARED_DATA
from tests.support.resolved import planned

from halluscope.config.load import parse_config
from halluscope.contract.completion import Completion
from halluscope.contract.roles import AnswerFormat
from halluscope.models.base import GenerationRequest
from halluscope.models.model import Model
from halluscope.models.provider import CallLimits, RemoteProvider, Retry


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
