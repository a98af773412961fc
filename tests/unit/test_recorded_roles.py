"""A recorded role model: answers on record by content key, through the same role path, ledger
and cost rules as a live judge; a call without a record is counted, never guessed."""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pytest
from tests.conftest import SHARED_DATA
from tests.support.totals import tally

from halluscope.config.load import parse_config
from halluscope.contract.task import Item
from halluscope.cost.ledger import ledger
from halluscope.halogen.historical_events import HistoricalEvents
from halluscope.halogen.steps import read_rows, recorded_path
from halluscope.models.base import GenerationRequest
from halluscope.models.recorded import NO_RECORD, RecordedProvider, load_provider
from halluscope.pipeline.roles import RoleModels
from halluscope.records import GENERATIONS, ROLE_CALLS
from halluscope.sources import DataResolver

RESOLVER = DataResolver(download=False)
STEPS = "halluscope.halogen.recorded:replies"


def _notes_provider(resolver, subject):
    return {"k1": "plain", "k2": ("noted", {"list_split": "x"})}


def test_answers_by_key_alternatives_and_notes_and_counts_a_missing_record(monkeypatch):
    from halluscope.models import recorded

    ref = f"{__name__}:_notes_provider"
    monkeypatch.setattr(recorded, "recorded_steps", lambda: {ref: _notes_provider})  # as if a benchmark declared it
    backend = RecordedProvider("rec", ref, RESOLVER)
    done = backend.answer([GenerationRequest("t", "i", "p", "nope k1", "m"),
                                   GenerationRequest("t", "i", "p", "k2", "m"),
                                   GenerationRequest("t", "i", "p", "k3", "m")])
    assert [c.text for c in done] == ["plain", "noted", None]
    assert done[1].extra == {"recorded": True, "list_split": "x"} and done[0].input_tokens == 0
    assert done[2].error == NO_RECORD and done[2].attempts == 0


def test_only_recorded_steps_a_benchmark_declares_are_loaded():
    """A config is data: naming any other module:function imports nothing."""
    with pytest.raises(ValueError, match=r"recorded steps 'os:system' are not declared by a registered benchmark "
                                         r"\(declared: halluscope.halogen.recorded:replies\)"):
        load_provider("os:system")
    assert load_provider(STEPS).__name__ == "replies"


def test_a_config_naming_other_code_is_refused_when_read():
    from halluscope.config.load import parse_config
    from halluscope.errors import ConfigError

    with pytest.raises(ConfigError, match=r"models.1 \('judge'\): params.steps os:system is not declared"):
        parse_config({"tasks": ["halogen/code"], "models": [
            {"id": "m", "backend": "replay"},
            {"id": "judge", "role": "judge", "backend": "recorded", "params": {"steps": "os:system"}}]})


def _config():
    return parse_config({"tasks": ["halogen/historical_events"], "models": [
        {"id": "gpt_4_0125_turbo", "backend": "replay", "params": {"source": "recorded"}},
        {"id": "rec-judge", "role": "judge", "backend": "recorded", "params": {"steps": STEPS}}]}, "test")


@pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")
def test_recorded_judge_answers_a_real_row_through_the_role_path_at_no_cost():
    cfg = _config()
    task = HistoricalEvents("paper")
    rows = read_rows(RESOLVER.resolve(recorded_path("historical_events", "gpt_4_0125_turbo")))
    r = next(r for r in rows if task.abstain_call(r["response"], _item(task, r)) is not None)
    roles = RoleModels(cfg.models, {}, None, RESOLVER)
    usage: dict = defaultdict(list)
    calls = {"g1": (task.abstain_call(r["response"], _item(task, r)),),
             "g2": (task.abstain_call("An invented response.", _item(task, r)),)}
    replies = roles.answer(calls, "abstain", usage, {"g1": "gpt_4_0125_turbo", "g2": "gpt_4_0125_turbo"})
    assert replies["g1"][0].text == r["verified_response"]
    assert replies["g2"][0].error == NO_RECORD  # no record for it: counted as failed, never answered
    assert [(u["calls"], u["failed_calls"], u["input_tokens"]) for k in ("g1", "g2") for u in usage[k]] \
        == [(1, 0, 0), (1, 1, 0)]
    table = pa.Table.from_pylist([{"run_id": "r", "gen_id": k, "model": "gpt_4_0125_turbo", "task": task.name,
                                   **u} for k in ("g1", "g2") for u in usage[k]], schema=ROLE_CALLS)
    costs = ledger(tally(cfg.models, GENERATIONS.empty_table(), table), cfg.models, [], None).to_pylist()
    assert [(c["model"], c["stage"], c["calls"], c["failed_calls"], c["usd"]) for c in costs] \
        == [("rec-judge", "abstain", 2, 1, 0.0)]


def _item(task, r):
    return Item(task.name, "x", r["prompt"], task.item_fields(r, "test") | {"occurrence": 0})


def test_a_recorded_model_cannot_be_under_test():
    with pytest.raises(Exception, match="judge or extractor, not under test"):
        parse_config({"tasks": ["halogen/code"], "models": [
            {"id": "rec", "backend": "recorded", "params": {"steps": STEPS}}]}, "test")
