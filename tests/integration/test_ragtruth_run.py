"""RAGTruth end to end through the engine: a corpus of the released schema (three tasks, two models,
one response with a broken label, one truncated) read from S3, a detector behind an OpenAI-compatible
endpoint as the model under test of ragtruth/detect, metrics checked against hand computations, its
priced tokens in costs.parquet; resume and the call cache; a bad corpus line failing before any model
starts; and ragtruth/generate with scripted models under test and a scripted judge."""

from __future__ import annotations

import json
import math
import re

import boto3
import pytest
import yaml
from tests.conftest import IN_DRIVER
from tests.support.openai_server import OpenAIStubServer
from tests.support.servers import s3_storage

from halluscope.config.load import parse_config
from halluscope.errors import DataError, RunError
from halluscope.pipeline.runner import run
from halluscope.resolve.run import ResolvedRun
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

pytestmark = pytest.mark.slow

A, B = "model-a", "model-b"
QA_INFO = {"question": "how long to boil an egg", "passages": "passage 1:Boil eggs for 9 to 12 minutes.\n\n"}
D2T_INFO = {"name": "Cafe Uno", "city": "Reno", "attributes": {"WiFi": "free", "Music": None},
            "review_info": [{"review_stars": 4.0, "review_date": "2021-01-01 10:00:00", "review_text": "Nice."}]}
ARTICLE = "The mayor opened a new bridge on Monday. It cost 5 million dollars and took two years to build."
SOURCES = [
    {"source_id": "s-qa", "task_type": "QA", "source": "MARCO", "source_info": QA_INFO,
     "prompt": "Briefly answer the following question:\nhow long to boil an egg\noutput:"},
    {"source_id": "s-d2t", "task_type": "Data2txt", "source": "Yelp", "source_info": D2T_INFO,
     "prompt": "Instruction:\nWrite an objective overview about the following local business.\nOverview:"},
    {"source_id": "s-sum", "task_type": "Summary", "source": "CNN/DM", "source_info": ARTICLE,
     "prompt": "Summarize the following news within 20 words:\n" + ARTICLE + "\noutput:"},
]
R2 = "Boil the eggs for 15 minutes and add salt."
R4 = "Cafe Uno in Reno has live music and offers delivery."
R5 = "The mayor opened a bridge that cost 50 million dollars."


def lab(response: str, text: str, label_type: str, **flags) -> dict:
    start = response.index(text)
    return {"start": start, "end": start + len(text), "text": text, "meta": "note", "label_type": label_type,
            **flags}


def resp(rid: str, sid: str, model: str, response: str, labels=(), split="test", quality="good") -> dict:
    return {"id": rid, "source_id": sid, "model": model, "temperature": 0.7, "labels": list(labels),
            "split": split, "quality": quality, "response": response}


RESPONSES = [
    resp("r1", "s-qa", A, "Boil eggs for 9 to 12 minutes."),
    resp("r2", "s-qa", B, R2, [lab(R2, "15 minutes", "Evident Conflict")]),
    resp("r3", "s-d2t", A, "Cafe Uno in Reno offers free WiFi and takeout."),
    resp("r4", "s-d2t", B, R4, [lab(R4, "has live music", "Evident Baseless Info", due_to_null=True),
                               lab(R4, "delivery", "Evident Baseless Info")]),
    resp("r5", "s-sum", A, R5, [lab(R5, "50 million", "Subtle Conflict")]),
    resp("r6", "s-sum", B, "The mayor opened a new bridge on Monday."),
    # its label's text does not match its offsets: held out, named in the manifest
    resp("r7", "s-qa", "model-c", "Eggs take an hour.", [{"start": 11, "end": 18, "text": "a day", "meta": "",
                                                           "label_type": "Evident Conflict"}]),
    # cut off: the test split keeps good responses only, as the authors' test files
    resp("r8", "s-sum", "model-c", "The mayor opened a", quality="truncated"),
]


def judge_list(*spans: str) -> str:
    return json.dumps({"hallucination list": list(spans)})


# the judge's answers, found by a phrase of the response it is asked about
JUDGE_RULES = [
    {"pattern": "Boil the eggs for 15 minutes",
     "response": "```json\n" + judge_list("15 minutes", "add salt") + "\n```"},
    {"pattern": "offers free WiFi", "response": judge_list("free WiFi")},
    {"pattern": "has live music", "response": "I am not sure about this one."},  # unreadable: an empty list
    {"pattern": "bridge that cost 50 million", "response": judge_list("cost 50 million dollars", "a tunnel")},
    # answers of the models under test (RAG generation)
    {"pattern": "in the sea", "response": judge_list("in the sea")},
    {"pattern": "serves pizza all night", "response": judge_list("serves pizza", "all night")},
    {"pattern": "on Monday at noon", "response": judge_list("at noon")},
]


def answer(rules: list[dict], default: str):
    """The first rule whose pattern is found in the prompt answers it, as the scripted backend does."""
    def respond(prompt: str) -> str:
        return next((r["response"] for r in rules if re.search(r["pattern"], prompt)), default)
    return respond


def write_jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def detect_config(storage: dict, corpus: dict, detector: dict, prices: str | None, **options) -> dict:
    return {"storage": storage, "models": [detector], "tasks": ["ragtruth/detect"],
            "benchmarks": {"ragtruth": {"corpus": corpus, **options}},
            "costs": {"price_table": prices}, "concurrency": {"batch_size": 2}}


def by(records: list[dict], table: str, *keys: str) -> dict:
    return {tuple(r[k] for k in keys): r for r in records if r.get("benchmark") == "ragtruth" and
            r.get("table") == table}


def write_prices(path) -> str:
    path.write_text(yaml.safe_dump({"as_of": "2026-01-01", "source": "test prices",
                                    "api_usd_per_million_tokens": {"detector-model": {"input": 3.0, "output": 15.0}}}))
    return str(path)


def test_detector_run_on_s3_matches_hand_counts_then_prices_caches_and_resumes(in_driver, s3_endpoint, bucket,
                                                                                tmp_path):
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.put_object(Bucket=bucket, Key="data/ragtruth/response.jsonl", Body=write_jsonl(RESPONSES))
    s3.put_object(Bucket=bucket, Key="data/ragtruth/source_info.jsonl", Body=write_jsonl(SOURCES))
    storage = s3_storage(s3_endpoint, f"s3://{bucket}/runs")
    corpus = {"responses": f"s3://{bucket}/data/ragtruth/response.jsonl",
              "sources": f"s3://{bucket}/data/ragtruth/source_info.jsonl", "storage": storage}
    prices = write_prices(tmp_path / "prices.yaml")
    with OpenAIStubServer(responder=answer(JUDGE_RULES, judge_list())) as server:
        detector = {"id": "detector", "backend": "openai",
                    "params": {"base_url": server.base_url, "model": "detector-model"}}
        cfg = parse_config(detect_config(storage, corpus, detector, prices))
        first = run(ResolvedRun.of(cfg), run_id="detect", progress=False)
        assert server.calls == 6 and first.processed == 6

        def doc(key: str):
            return json.loads(s3.get_object(Bucket=bucket, Key=f"runs/detect/{key}")["Body"].read())

        metrics = doc("metrics.json")
        assert metrics == json.loads(json.dumps(first.metrics))
        det = by(metrics, "detection", "task_type", "generator")
        assert {r["model"] for r in det.values()} == {"detector"}
        # r1 TN, r2 TP, r3 FP, r4 unreadable (an empty list: FN), r5 TP, r6 TN: P = R = 2/3
        o = det[("Overall", "*")]
        assert (o["tp"], o["fp"], o["fn"], o["tn"], o["n_responses"], o["unpredicted"], o["unreadable"]) == \
            (2, 1, 1, 2, 6, 0, 1)
        assert (o["response_precision"], o["response_recall"], o["response_f1"]) == (pytest.approx(2 / 3),) * 3
        # gold chars: "15 minutes" 10 + "has live music" 14 + "delivery" 8 + "50 million" 10 = 42; predicted:
        # r2 "15 minutes" + "add salt" = 18, r3 "free WiFi" = 9, r5 "cost 50 million dollars" 23 + unlocated
        # "a tunnel" 8 = 31; 58 in all, of which 20 gold chars are hit: P = 20/58, R = 20/42, F1 = 40/100
        assert (o["gold_chars"], o["pred_chars"], o["tp_chars"], o["unlocated_spans"], o["unlocated_chars"]) == \
            (42, 58, 20, 1, 8)
        assert (o["span_precision"], o["span_recall"], o["span_f1"]) == \
            (pytest.approx(20 / 58), pytest.approx(20 / 42), pytest.approx(0.4))
        # per task and per response model, from the same counts
        assert (det[("QA", "*")]["response_f1"], det[("QA", "*")]["span_precision"]) == (1.0, pytest.approx(10 / 18))
        d2t = det[("Data2txt", "*")]
        assert (d2t["fp"], d2t["fn"], d2t["unpredicted"], d2t["unreadable"]) == (1, 1, 0, 1)
        assert [u for u in d2t["undefined"] if u.startswith("response_")] == ["response_f1"]
        assert det[("Summary", "*")]["span_precision"] == pytest.approx(10 / 31)
        assert det[("Overall", A)]["response_precision"] == 0.5 and det[("Overall", A)]["span_precision"] == 10 / 40
        assert det[("Overall", B)]["response_f1"] == pytest.approx(2 / 3)
        assert det[("Overall", B)]["span_precision"] == pytest.approx(10 / 18)
        assert by(metrics, "detector_problems", "model")[("detector",)]["problems"] == \
            {"unlocated_span": 1, "unreadable": 1}

        # the engine's rows: predicted spans are the atoms, checked against the gold spans
        store = RunStore(Location.from_url(storage["root"], cfg.storage), "detect")
        scores = {r["item_id"]: r for r in store.read_table("scores").to_pylist()}
        assert sorted(scores) == ["r1", "r2", "r3", "r4", "r5", "r6"]
        assert scores["r2"]["atoms"] == ["15 minutes", "add salt"] and scores["r2"]["unsupported_atoms"] == ["add salt"]
        assert scores["r5"]["atoms"] == ["cost 50 million dollars", "a tunnel"]
        assert scores["r5"]["unsupported_atoms"] == ["a tunnel"]
        assert scores["r3"]["unsupported_atoms"] == ["free WiFi"] and scores["r1"]["atoms"] == []
        assert scores["r4"]["responded"] is False  # an unreadable answer lists nothing
        r2 = [(v["supported"], v["evidence"]) for v in store.read_table("verdicts").to_pylist()
              if v["gen_id"] == scores["r2"]["gen_id"]]
        assert r2 == [(True, "characters 18-28: 10 in gold spans"), (False, "characters 33-41: 0 in gold spans")]

        manifest = doc("manifest.json")
        assert manifest["status"] == "complete" and manifest["execution"] == IN_DRIVER  # its subject is RAGTruth
        assert len(manifest["data_sources"]["ragtruth/response.jsonl"]) == 64
        (corpus_doc,) = [r for r in metrics if r.get("table") == "corpus"]
        assert corpus_doc["held_out"] == {"invalid_labels": ["r7"], "quality": ["r8"]}
        assert corpus_doc["excluded"] == {"invalid_labels": 1, "quality": 1}
        assert [(p["reason"], p["response_id"], p["line"]) for p in corpus_doc["invalid_labels"]] == \
            [("text_mismatch", "r7", 7)]
        stats = by(metrics, "corpus_tasks", "task_type", "source")
        overall = stats[("Overall", "*")]
        assert (overall["n_responses"], overall["n_hallucinated"], overall["n_spans"]) == (6, 3, 4)
        # selection between model-a and model-b: on each source exactly one of the two responses has
        # gold spans; on s-qa and s-sum it has more detected spans, on s-d2t (r4, unreadable: none) fewer
        (sel,) = [r for r in metrics if r.get("table") == "selection"]
        assert (sel["models"], sel["n_instances"], sel["skipped"]) == ([A, B], 3, {})
        assert sel["strategies"]["random"]["rate"] == 0.5
        assert sel["strategies"]["fewer_spans"]["valid"] == 3 and sel["strategies"]["fewer_spans"]["rate"] == 1 / 3
        assert sel["strategies"]["no_spans"]["valid"] == 3 and sel["strategies"]["no_spans"]["reduction"] == 1 / 3

        board = s3.get_object(Bucket=bucket, Key="runs/detect/leaderboard.md")["Body"].read().decode()
        assert "6 responses scored, 1 of them unreadable answers scored as empty lists; 0 without a prediction" \
            in board
        # columns Data2txt, QA, Summary, Overall; Data2txt's one gold-positive response was missed: F1 is 0/0;
        # F1's bootstrap error where a cell has two sources or more (Overall)
        assert re.search(r"\| all models \| 0\.0 / 0\.0 / n/a \| 100\.0 / 100\.0 / 100\.0 \| 100\.0 / 100\.0 / 100\.0 \| "
                         r"66\.7 / 66\.7 / 66\.7 ± \d+\.\d \|", board), board
        html = s3.get_object(Bucket=bucket, Key="runs/detect/report.html")["Body"].read().decode()
        assert "RAGTruth detector detector, response level" in html and "RAGTruth corpus (Table 2)" in html

        # the detector's tokens, priced by the run's price table
        costs = {(c["model"], c["stage"]): c for c in store.read_table_file("costs.parquet").to_pylist()}
        gen = costs[("detector", "generate")]
        assert (gen["calls"], gen["cached_calls"], gen["failed_calls"]) == (6, 0, 0)
        assert gen["usd"] == pytest.approx((3.0 * gen["input_tokens"] + 15.0 * gen["output_tokens"]) / 1e6)
        assert gen["usd"] > 0

        # the same run id: nothing left to do
        again = run(ResolvedRun.of(cfg), run_id="detect", progress=False)
        assert (again.processed, again.skipped) == (0, 6) and server.calls == 6
        assert by(again.metrics, "detection", "task_type", "generator") == by(first.metrics, "detection", "task_type",
                                                                               "generator")
        # a new run id: every detector answer from the call cache, the same tables
        cached = run(ResolvedRun.of(cfg), run_id="detect-2", progress=False)
        assert server.calls == 6
        cached_costs = {(c["model"], c["stage"]): c for c in RunStore(Location.from_url(storage["root"], cfg.storage),
                                                                      "detect-2").read_table_file("costs.parquet")
                        .to_pylist()}
        assert (cached_costs[("detector", "generate")]["calls"], cached_costs[("detector", "generate")]["cached_calls"]) \
            == (0, 6)
        assert by(cached.metrics, "detection", "task_type", "generator") == by(first.metrics, "detection", "task_type",
                                                                                "generator")
        # the same run id with another scoring rule is refused, not mixed
        with pytest.raises(RunError, match="different configuration"):
            run(ResolvedRun.of(parse_config(detect_config(storage, corpus, detector, prices, metrics={"unreadable": "exclude"}))),
                run_id="detect", progress=False)


def test_bad_corpus_line_fails_before_any_model_starts(tmp_path):
    broken = [*RESPONSES[:3], {k: v for k, v in RESPONSES[3].items() if k != "model"}]
    (tmp_path / "response.jsonl").write_bytes(write_jsonl(broken))
    (tmp_path / "source_info.jsonl").write_bytes(write_jsonl(SOURCES))
    detector = {"id": "detector", "backend": "openai", "params": {"base_url": "http://127.0.0.1:9/v1"}}
    cfg = parse_config(detect_config({"root": f"file://{tmp_path}/runs"},
                                     {"responses": str(tmp_path / "response.jsonl"),
                                      "sources": str(tmp_path / "source_info.jsonl")}, detector, None))
    with pytest.raises(DataError, match=r"response.jsonl:4: field 'model' is missing"):
        run(ResolvedRun.of(cfg), run_id="bad", progress=False)
    assert not (tmp_path / "runs").exists()  # not even a manifest


JUDGE = {"id": "judge", "role": "judge", "backend": "scripted",
         "params": {"rules": JUDGE_RULES, "default": judge_list(), "in_process": True}}


GEN_X = {"id": "gen-x", "backend": "scripted", "params": {
    "rules": [{"pattern": "Briefly answer", "response": "Boil eggs for 20 minutes in the sea."},
              {"pattern": "objective overview", "response": "Cafe Uno serves pizza all night."},
              {"pattern": "Summarize", "response": "The mayor opened a bridge."}],
    "in_process": True}}
GEN_Y = {"id": "gen-y", "backend": "scripted", "params": {
    "rules": [{"pattern": "Summarize", "response": "A bridge opened on Monday at noon."}],
    "default": "I do not know.", "in_process": True}}


def test_rag_generation_rate_and_density(in_driver, tmp_path):
    folder = tmp_path / "ragtruth"
    folder.mkdir()
    (folder / "response.jsonl").write_bytes(write_jsonl(RESPONSES))
    (folder / "source_info.jsonl").write_bytes(write_jsonl(SOURCES))
    cfg = parse_config({
        "storage": {"root": f"file://{tmp_path}/runs"}, "models": [GEN_X, GEN_Y, JUDGE],
        "tasks": ["ragtruth/generate"], "costs": {"price_table": None},
        "benchmarks": {"ragtruth": {"corpus": {"responses": str(folder / "response.jsonl"),
                                               "sources": str(folder / "source_info.jsonl")}}}})
    result = run(ResolvedRun.of(cfg), run_id="rag", progress=False)
    rows = by(result.metrics, "generation", "model", "task_type")
    # gen-x: QA "Boil eggs for 20 minutes in the sea." (8 words, 1 span), Data2txt "Cafe Uno serves
    # pizza all night." (6 words, 2 spans), Summary "The mayor opened a bridge." (5 words, 0 spans)
    x = rows[("gen-x", "Overall")]
    assert (x["asked"], x["scored"], x["hallucinated"], x["spans"], x["words"]) == (3, 3, 2, 3, 19)
    assert x["hallucination_rate"] == pytest.approx(2 / 3) and x["density"] == pytest.approx(300 / 19)
    # the rate's error is a share's over its three answers; the density's the delta method's over
    # answers of 8, 6 and 5 words with 1, 2 and 0 spans
    assert x["stderr"]["hallucination_rate"] == pytest.approx(math.sqrt(2 / 3 * 1 / 3 / 2))
    d = 300 / 19
    assert x["stderr"]["density"] == pytest.approx(
        math.sqrt(3 / 2 * sum((100 * s - d * w) ** 2 for s, w in ((1, 8), (2, 6), (0, 5)))) / 19)
    assert x["ci95"]["density"][0] < d < x["ci95"]["density"][1] and set(x["method"]) == {"hallucination_rate",
                                                                                         "density"}
    assert rows[("gen-x", "Data2txt")]["density"] == pytest.approx(200 / 6)
    # gen-y: "I do not know." twice (4 words each), "A bridge opened on Monday at noon." (7 words, 1 span)
    y = rows[("gen-y", "Overall")]
    assert (y["scored"], y["hallucinated"], y["spans"], y["words"]) == (3, 1, 1, 15)
    assert y["hallucination_rate"] == pytest.approx(1 / 3) and y["density"] == pytest.approx(100 / 15)
    assert rows[("gen-y", "QA")]["hallucination_rate"] == 0.0

    store = RunStore(Location.from_url(f"file://{tmp_path}/runs"), "rag")
    assert store.read_json("manifest.json")["execution"] == IN_DRIVER  # its subject is RAGTruth, not Ray
    scores = {(r["model"], r["item_id"]): r for r in store.read_table("scores").to_pylist()}
    assert len(scores) == 6
    g = scores[("gen-x", "s-d2t")]
    assert (g["atoms"], g["n_unsupported"], g["error"]) == (["serves pizza", "all night"], 2, None)
    gens = {(r["model"], r["item_id"]): r for r in store.read_table("generations").to_pylist()}
    assert gens[("gen-x", "s-d2t")]["text"] == "Cafe Uno serves pizza all night."
    costs = {(c["model"], c["stage"]): c["calls"] + c["cached_calls"]
             for c in store.read_table_file("costs.parquet").to_pylist() if c["stage"] != "serve"}
    assert costs == {("gen-x", "generate"): 3, ("gen-y", "generate"): 3, ("judge", "decompose"): 6}
    assert "RAGTruth RAG generation, judged by the run's judge" in result.leaderboard
