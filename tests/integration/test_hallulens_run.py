"""HalluLens end to end on small sources of the real formats: test sets built by the test-set job
(a scripted generator served by Ray Serve) and by the library, then a run of all three tasks with a
scripted model under test, judge and extractor answered in process (the run goes in the driver: its
subject is HalluLens' rules, not Ray); everything on the S3 API server."""

from __future__ import annotations

import json

import pytest
from tests.conftest import IN_DRIVER
from tests.support.hallulens_sources import EDGES, FakeGenerator, pages_and_scores, write_tables, write_wiki_sources
from tests.support.servers import s3_storage

from halluscope.config.load import parse_config
from halluscope.hallulens.build import TestSetJob, run_job, summary, uri
from halluscope.hallulens.generation import LongWikiConfig, PreciseWikiQAConfig, build_wiki_testset
from halluscope.hallulens.nonexistent import MixedEntitiesConfig, build_mixed_testset
from halluscope.hallulens.sources import load_goodwiki, load_harmonic_centrality, load_itis, load_medicines
from halluscope.pipeline.runner import run
from halluscope.resolve.run import ResolvedRun
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore
from halluscope.storage.spec import StorageSpec

pytestmark = pytest.mark.slow

SERVE = {"num_cpus": 0.25, "max_batch_prompts": 16}


def test_testset_job_serves_its_generator_and_reuses_built_sets(ray_head, s3_endpoint, bucket, tmp_path):
    goodwiki, titles, scores = write_wiki_sources(tmp_path)
    generator = {"id": "gen", "backend": "scripted", "params": {"serve": SERVE, "rules": [
        {"pattern": r"(?s)Reference:\n.*The code of Page 1-", "response": "unanswerable"},
        {"pattern": "quiz questions", "response": "What is the code of the page?"},
        {"pattern": "Can the question below", "response": "K1"}]}}
    job = TestSetJob.model_validate({
        "storage": s3_storage(s3_endpoint, f"s3://{bucket}/runs"), "task": "precise_wikiqa", "seeds": [0, 1],
        "params": {"per_bin": 1, "min_words": 20, "max_words": 60, "bin_edges": EDGES},
        "sources": {"goodwiki": [str(goodwiki)], "wikirank_titles": str(titles), "wikirank_scores": str(scores)},
        "generators": [generator]})
    first = run_job(job)
    assert len({ts.testset_id for ts in first}) == 2  # two seeds, two trials
    for ts in first:
        assert uri(ts, job).startswith(f"s3://{bucket}/runs/testsets/precise_wikiqa/")
        bin1 = ts.report["bins"]["1"]  # every bin-1 page is unanswerable: bounded attempts, then reported
        assert bin1["made"] == 0 and bin1["rejected"]["unanswerable"] == bin1["attempts"] > 0 and bin1["stopped"]
        assert not ts.report["complete"] and ts.items and "INCOMPLETE: 1 bin(s) short" in summary(ts)
    again = run_job(job)
    assert [ts.testset_id for ts in again] == [ts.testset_id for ts in first] and all(ts.reused for ts in again)


def _testsets(tmp_path, root: Location) -> dict[str, list[str]]:
    goodwiki, titles, scores = write_wiki_sources(tmp_path)
    pages, h = load_goodwiki(str(goodwiki)), load_harmonic_centrality(str(titles), str(scores))
    hierarchy, longnames, medicines = write_tables(tmp_path)
    small = {"min_words": 20, "max_words": 60, "bin_edges": EDGES}
    pwqa = [build_wiki_testset(root, PreciseWikiQAConfig(per_bin=1, seed=s, **small), pages, h, FakeGenerator())
            for s in (0, 1)]
    longwiki = build_wiki_testset(root, LongWikiConfig(per_bin=1, seed=5, **small), pages, h, FakeGenerator())
    mixed = build_mixed_testset(root, MixedEntitiesConfig(seed=3, per_domain=3, domains=["animal", "medicine"]),
                                load_itis(str(hierarchy), str(longnames)), load_medicines(str(medicines)))
    base = root.url
    return {"hallulens/precise_wikiqa": [f"{base}/precise_wikiqa/{t.testset_id}" for t in pwqa],
            "hallulens/longwiki": [f"{base}/longwiki/{longwiki.testset_id}"],
            "hallulens/nonexistent_mixed": [f"{base}/mixed_entities/{mixed.testset_id}"]}


def _models() -> list[dict]:
    tested = {"id": "tested", "backend": "scripted", "params": {"in_process": True, "default": "I don't know.", "rules": [
        {"pattern": "code of Page 1-", "response": "I don't know."},
        {"pattern": r"^What is the code of", "response": "It is K."},
        {"pattern": r"^Describe the code of", "response": "The code is kept in a stone archive near the river. "
                                                          "Scholars visited it every spring."},
        {"pattern": "Lynx", "response": "I have never heard of that animal."},
        {"pattern": ".", "response": "It is a well-known name with a long history."}]}}
    judge = {"id": "judge", "role": "judge", "backend": "scripted", "params": {
        "in_process": True, "support_on_overlap": 0.6, "rules": [
            {"pattern": r"(?s)is_abstaining.*Chatbot: I don't know\.\nResult:", "response": '{"is_abstaining": true}'},
            {"pattern": "is_abstaining", "response": '{"is_abstaining": false}'},
            {"pattern": r"Gold answer: K10[0-4]\d", "response": "CORRECT"},
            {"pattern": "Judgement:", "response": "INCORRECT"},
            {"pattern": "is_knowledgeable", "response": '{"is_knowledgeable": true}'},
            {"pattern": r"(?s)does_believe.*Generation: I have never heard", "response": '{"does_believe": false}'},
            {"pattern": "does_believe", "response": '{"does_believe": true}'}]}}
    extractor = {"id": "extractor", "role": "extractor", "backend": "scripted", "params": {
        "in_process": True, "rules": [{"pattern": r"Claims:\s*$", "response":
                                   "- The code is kept in a stone archive near the river.\n- The moon is made of cheese."}]}}
    # answers like the tested model; its id names a Gemma model, whose medicine FAR the paper sets to 0
    gemma = {**tested, "id": "gemma-2-9b-it"}
    return [tested, gemma, judge, extractor]


def test_three_tasks_end_to_end(in_driver, s3_endpoint, bucket, tmp_path):
    storage = s3_storage(s3_endpoint, f"s3://{bucket}/runs")
    spec = StorageSpec(**storage)
    testsets = _testsets(tmp_path, Location.from_url(f"s3://{bucket}/testsets", spec))
    rows, _ = pages_and_scores()
    with open(tmp_path / "articles.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps({"title": r["title"], "text": r["markdown"]}) + "\n")
    cfg = parse_config({"storage": storage, "tasks": list(testsets), "testsets": testsets,
                        "models": _models(), "costs": {"price_table": None},
                        "benchmarks": {"hallulens": {"wiki": {"articles": str(tmp_path / "articles.jsonl")}}}})
    result = run(ResolvedRun.of(cfg), run_id="lens", progress=False)
    store = RunStore(Location.from_url(storage["root"], spec), "lens")
    assert store.read_json("manifest.json")["execution"] == IN_DRIVER
    scores = store.read_table("scores").to_pylist()
    assert len(scores) == result.processed and all(s["error"] is None for s in scores)
    for table in ("generations", "atoms", "verdicts", "scores", "role_calls"):
        assert store.read_table(table).num_rows, table
    records = {r["task"]: r for r in result.metrics if r.get("benchmark") == "hallulens" and r["model"] == "tested"}

    # PreciseWikiQA, expected from the rules: Page 1-* questions are refused; gold answers of
    # pages 1000-1049 (bins 0-4) are judged correct, the others incorrect
    pw = records["hallulens/precise_wikiqa"]
    assert pw["n_trials"] == 2
    items = [json.loads(r["fields"]) | {"prompt": r["prompt"]}
             for r in store.read_items("hallulens/precise_wikiqa").to_pylist()]
    for trial in (0, 1):
        mine = [i for i in items if i["trial"] == trial]
        refused = [i for i in mine if "code of Page 1-" in i["prompt"]]
        answered = [i for i in mine if i not in refused]
        correct = [i for i in answered if int(i["bin"]) <= 4]
        got = next(t for t in pw["trials"] if t["trial"] == trial)
        assert got["false_refusal_rate"] == pytest.approx(len(refused) / len(mine))
        assert got["hallucination_rate"] == pytest.approx(1 - len(correct) / len(answered))
        assert got["correct_rate"] == pytest.approx(len(correct) / len(mine))
    frr = [t["false_refusal_rate"] for t in pw["trials"]]
    assert pw["summary"]["false_refusal_rate"]["mean"] == pytest.approx(sum(frr) / 2)

    # LongWiki: two claims per answer, the archive claim supported by the page, the moon not
    lw = records["hallulens/longwiki"]["trials"][0]
    assert lw["false_refusal_rate"] == 0 and lw["precision"] == pytest.approx(0.5)
    assert lw["recall_at_k"] == pytest.approx(1 / 32)

    # NonExistentRefusal (mixed): names with Lynx are refused, the rest accepted as real
    names = [json.loads(r["fields"])["name"] for r in store.read_items("hallulens/nonexistent_mixed").to_pylist()]
    far = records["hallulens/nonexistent"]["trials"][0]["subtasks"]["mixed"]["false_acceptance_rate"]
    assert far == pytest.approx(sum("Lynx" not in n for n in names) / len(names))
    assert "overrides" not in records["hallulens/nonexistent"]
    # the same answers from a Gemma model: its medicine rate is set to 0, the judge's rate kept beside it
    gemma = next(r for r in result.metrics if r["model"] == "gemma-2-9b-it" and r["task"] == "hallulens/nonexistent")
    (override,) = gemma["overrides"]
    assert (override["task"], override["domain"], override["value"], override["measured"]) == \
        ("hallulens/nonexistent_mixed", "medicine", 0.0, 1.0)  # every medicine name was accepted
    mixed = gemma["trials"][0]["subtasks"]["mixed"]
    assert mixed["measured_false_acceptance_rate"] == pytest.approx(far)
    animal = mixed["by_domain"]["animal"]
    assert mixed["false_acceptance_rate"] == pytest.approx(animal["n_accepted"] / mixed["n_scored"])
    written = next(r for r in store.read_json("metrics.json")
                   if r["model"] == "gemma-2-9b-it" and r["task"] == "hallulens/nonexistent")
    assert written["overrides"] == gemma["overrides"]
    board = store.loc.child("leaderboard.md").read_bytes().decode()
    assert "## HalluLens" in board and "| tested |" in board
    assert "- gemma-2-9b-it: hallulens/nonexistent_mixed medicine false acceptance rate set to 0.0" in board
