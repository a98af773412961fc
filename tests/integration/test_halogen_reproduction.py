"""HALOGEN's released numbers, reproduced: the pipeline's stage functions (in one process, as
the benchmark's loop baseline runs them) score two released models in all nine domains with the
paper rules, every LLM step answered by the recorded role models, and their H and R are
compared with the authors' released results."""

from __future__ import annotations

import pytest
from tests.conftest import SHARED_DATA

from halluscope.config.load import parse_config
from halluscope.halogen import metrics as halogen_metrics
from halluscope.halogen.published import published
from halluscope.pipeline import stages, workset
from halluscope.records import GenerationIds
from halluscope.resolve.run import ResolvedRun
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

pytestmark = pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")

DOMAINS = ["code", "references", "summarization", "simplification", "biographies", "historical_events",
           "false_presuppositions", "rationalization_binary", "rationalization_numerical"]
# Llama-2-70B: its biographies prompts quote the name and its false-presupposition file has its own
# split; GPT-4: its references results file names the model otherwise
MODELS = ["llama_2_70b_chat", "gpt_4_0125_turbo"]
STEPS = {"steps": "halluscope.halogen.recorded:replies"}
# The code verifier reads a 2026 PyPI snapshot that lacks names PyPI had in 2024 (PIL first of
# all): these two models' code H are 0.0065 and 0.0012 above the released ones. Every other
# (domain, model) pair here is exact to the released file's rounding.
TOLERANCE = {"halogen/code": 0.01}
# GPT-4's historical-events file repeats 4 prompts (1,504 rows): the released R divides by 1,504,
# ours by the 1,500 items (3/1500 against 3/1504)
R_TOLERANCE = 1e-5


def _config():
    return parse_config({
        "tasks": [f"halogen/{d}" for d in DOMAINS],
        "models": [{"id": m, "backend": "replay", "params": {"source": "recorded"}} for m in MODELS] + [
            {"id": "recorded-extractor", "role": "extractor", "backend": "recorded", "params": STEPS},
            {"id": "recorded-judge", "role": "judge", "backend": "recorded", "params": STEPS}],
    }, "test")


def test_paper_rules_reproduce_the_released_numbers(tmp_path):
    cfg = _config()
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "repro")
    run = ResolvedRun.of(cfg)
    work = workset.list_work(run, store)
    ctx = workset.Expansion(store, run.items, run.tested)
    evaluate = stages.Evaluate(run.knowledge, cfg.models, {}, None, store, cfg.concurrency.batch_size, ctx.item)
    for batch in workset.expand_unit(work.units, ctx, GenerationIds()):
        list(evaluate(batch))
    metrics = halogen_metrics.task_metrics(store.read_table("scores"))
    assert len(metrics) == len(DOMAINS) * len(MODELS)
    calls = store.read_table("role_calls").to_pylist()
    assert sum(c["calls"] for c in calls) > 20_000 and all(c["input_tokens"] == 0 for c in calls)
    assert sum(c["failed_calls"] for c in calls) == 0  # every call found its record
    for m in metrics:
        released = published(m["model"], m["task"])
        assert m["n_errors"] == 0, m
        tolerance = TOLERANCE.get(m["task"], 1e-6)
        assert abs(m["hallucination_score"] - released["hallucination_score"]) <= tolerance, m
        assert abs(m["response_ratio"] - released["response_ratio"]) <= R_TOLERANCE, m
