"""All nine HALOGEN domains by both rule sets (18 tasks), the released responses of all 14 models,
a scripted judge and extractor answered in process, small knowledge sources built here: the
domains' rules are the subject, so the run goes in the driver (Ray, Serve and the pipeline's
actors are tested in test_pipeline.py, test_serving.py, test_faults.py). Results go to local
storage: this run writes about 250 committed parts, which moto's S3 server, sharing the test
process's CPU, takes ~40 s to store and read back; runs on the S3 API are tested apart
(tests/integration/test_pipeline.py, test_four_benchmarks.py, test_faults.py)."""

from __future__ import annotations

import csv
import gzip
import json

import pytest
from tests.conftest import IN_DRIVER, SHARED_DATA

from halluscope.config.load import parse_config
from halluscope.halogen.common import RELEASED
from halluscope.halogen.stand_in import reference_titles
from halluscope.knowledge.titles import normalize_title
from halluscope.pipeline.runner import run
from halluscope.resolve.run import ResolvedRun
from halluscope.storage.fs import Location
from halluscope.storage.names import INDEX_CACHE
from halluscope.storage.run import RunStore
from halluscope.task_registry import task_names

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")]

LIMIT = 6
MODELS = RELEASED["models"]
TASKS = [t for t in task_names() if t.startswith("halogen/")]
PARSED = [t for t in TASKS if t.split("@")[0] in ("halogen/rationalization_binary", "halogen/rationalization_numerical",
                                                  "halogen/false_presuppositions")]
RESPONSES = SHARED_DATA / "halogen" / "responses"


def _rows(path):
    with gzip.open(path, "rt", newline="") as f:
        return list(csv.DictReader(f))


def _title_dump(path):
    """Every other title the stand-in extractor finds in the first responses: half exist."""
    titles = []
    for model in MODELS:
        for row in _rows(RESPONSES / "references" / RELEASED["responses"]["references"][model])[:LIMIT]:
            titles += reference_titles(row["response"])
    real = sorted(set(titles))[::2]
    path.write_text("\n".join(real) + "\n\x00broken line\n")
    return {normalize_title(t) for t in real}


def _articles(path):
    """Stand-in articles: GPT-4's bio of each of the first people, except the last (no article)."""
    rows = _rows(RESPONSES / "biographies" / RELEASED["responses"]["biographies"]["gpt_4_0125_turbo"])[:LIMIT]
    people = [r["prompt"].removeprefix("Tell me a bio of ").strip() for r in rows]
    with open(path, "w") as f:
        for person, row in zip(people[:-1], rows):
            f.write(json.dumps({"title": person, "text": row["response"]}) + "\n")
    return people


def _config(root, titles, articles) -> dict:
    return {
        "storage": {"root": root},
        "tasks": TASKS,
        "limits": {"max_items_per_task": LIMIT},
        "concurrency": {"batch_size": 128},
        "costs": {"price_table": None},
        "benchmarks": {"halogen": {"titles": {"dump": str(titles)},
                                   "wiki": {"articles": str(articles), "top_k": 3}}},
        "models": [{"id": m, "backend": "replay"} for m in MODELS] + [
            {"id": "judge", "role": "judge", "backend": "scripted",
             "params": {"support_on_overlap": 0.6, "default": "Yes",
                        "rules": [{"pattern": r"(?is)^Text:.*(never met|no record|did not meet|no evidence)",
                                   "response": "No, the text says they did not meet."}],
                        "in_process": True}},
            {"id": "extractor", "role": "extractor", "backend": "scripted",
             "params": {"extract": True, "in_process": True}},
        ],
    }


def test_every_domain_with_scripted_judge_and_extractor(in_driver, tmp_path):
    real_titles = _title_dump(tmp_path / "titles.txt")
    people = _articles(tmp_path / "articles.jsonl")
    root = str(tmp_path / "runs")
    cfg = parse_config(_config(root, tmp_path / "titles.txt", tmp_path / "articles.jsonl"))
    result = run(ResolvedRun.of(cfg), run_id="all", progress=False)
    store = RunStore(Location.from_url(root, cfg.storage), "all")
    scores = store.read_table("scores").to_pylist()
    assert len(TASKS) == 18 and len(scores) == len(MODELS) * 18 * LIMIT == result.processed

    per_task = {(m["model"], m["task"]): m for m in result.metrics if not m.get("aggregate")}
    assert len(per_task) == len(MODELS) * 18
    # summarization was released for 4 models only: the others' rows are counted as missing
    with_summaries = set(RELEASED["responses"]["summarization"])
    for model in MODELS:
        for task in ("halogen/summarization", "halogen/summarization@corrected"):
            m = per_task[(model, task)]
            assert (m["n_items"], m["n_errors"], m["n_missing"]) == \
                ((LIMIT, 0, 0) if model in with_summaries else (0, 0, LIMIT))

    # historical events: a responded response is one hallucinated unit, U = 1 - R
    for model in MODELS:
        for task in ("halogen/historical_events", "halogen/historical_events@corrected"):
            m = per_task[(model, task)]
            assert m["hallucination_score"] in (None, 1.0)
            assert m["utility_score"] == pytest.approx(1 - m["response_ratio"])

    # the scripted extractor's parses are read by the rules: no row fails, and units come of them
    assert all(per_task[(model, task)]["n_errors"] == 0 for model in MODELS for task in PARSED)
    assert all(any(s["n_atoms"] for s in scores if s["task"] == task) for task in PARSED)

    verdicts = store.read_table("verdicts").to_pylist()
    atoms = {a["atom_id"]: a["atom"] for a in store.read_table("atoms").to_pylist()}
    # corrected references look each title up in the title index; the paper's put it to the judge
    refs = [v for v in verdicts if v["task"] == "halogen/references@corrected"]
    wrong = [(atoms[v["atom_id"]], v["supported"], v["evidence"]) for v in refs
             if v["supported"] != (normalize_title(atoms[v["atom_id"]]) in real_titles)]
    assert refs and not wrong
    judged = [v for v in verdicts if v["task"] == "halogen/references"]
    assert judged and all(v["supported"] and v["evidence"].startswith("judge:") for v in judged)  # its default Yes
    # a references response that cites no title has abstained (utility 1)
    refs_scores = [s for s in scores if s["task"].startswith("halogen/references") and s["error"] is None]
    assert all((s["n_atoms"] == 0) <= (s["responded"] is False) for s in refs_scores)

    # biographies (both rule sets, given the article store): the person without an article leaves
    # every fact unverified; GPT-4's facts are its own article's sentences, so the overlap judge
    # supports them all
    bios = {s["gen_id"]: s for s in scores if s["task"].startswith("halogen/biographies") and s["error"] is None}
    no_article = [s for s in bios.values() if s["prompt"].endswith(people[-1]) and s["n_atoms"]]
    assert no_article and all(s["n_unverified"] == s["n_atoms"] for s in no_article)
    gpt4 = [s for s in bios.values() if s["model"] == "gpt_4_0125_turbo" and s["n_atoms"]
            and not s["prompt"].endswith(people[-1])]
    assert gpt4 and all(s["f"] == 0.0 for s in gpt4)

    # judge and extractor calls are accounted per stage and role
    costs = store.read_table_file("costs.parquet").to_pylist()
    stages = {(c["model"], c["stage"]) for c in costs if c["calls"]}
    assert {("extractor", "decompose"), ("judge", "verify"), ("judge", "abstain")} <= stages

    manifest = store.read_json("manifest.json")
    assert manifest["execution"] == IN_DRIVER
    assert manifest["knowledge"]["titles"]["skipped_lines"] == 1
    assert manifest["knowledge"]["wiki"]["passages"] > 0
    board = store.loc.child("leaderboard.md").read_bytes().decode()
    assert "paper Table 2 layout" in board and "paper Table 3 layout" in board
    assert any((tmp_path / "runs" / INDEX_CACHE).iterdir()), "the passage index was not persisted to storage"
