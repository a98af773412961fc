"""RAGTruth end to end on Ray: a corpus of the released schema (three tasks, two models, one
response with a broken label) read from S3, a scripted judge served by Ray Serve as the detector,
tables and metrics written to S3 and checked against hand computations; the call cache; resume;
and the RAG-generation benchmark with scripted models under test."""

from __future__ import annotations

import json

import boto3
import pyarrow.parquet as pq
import pytest

from halluscope.errors import DataError, RunError
from halluscope.ragtruth.run import RagTruthRunConfig, run_ragtruth
from halluscope.runkit import parse_model
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore
from tests.support.servers import s3_storage

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


def scripted(model_id: str, rules: list[dict], default: str) -> dict:
    return {"id": model_id, "role": "judge", "backend": "scripted",
            "params": {"rules": rules, "default": default, "serve": {"num_cpus": 0.25, "max_batch_prompts": 4}}}


JUDGE = scripted("judge", JUDGE_RULES, judge_list())


def write_jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def config(root: str, corpus: dict, **extra) -> RagTruthRunConfig:
    return parse_model(RagTruthRunConfig, {"storage": root, "corpus": corpus, "detector": JUDGE,
                                           "concurrency": {"batch_size": 2, "actors": 2, "actor_cpus": 0.25},
                                           **extra}, "test")


def test_detector_run_on_s3_matches_hand_counts_then_caches_and_resumes(ray_head, s3_endpoint, bucket):
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.put_object(Bucket=bucket, Key="data/ragtruth/response.jsonl", Body=write_jsonl(RESPONSES))
    s3.put_object(Bucket=bucket, Key="data/ragtruth/source_info.jsonl", Body=write_jsonl(SOURCES))
    storage = s3_storage(s3_endpoint, f"s3://{bucket}/runs")
    corpus = {"responses": f"s3://{bucket}/data/ragtruth/response.jsonl",
              "sources": f"s3://{bucket}/data/ragtruth/source_info.jsonl"}
    cfg = config(storage, corpus)

    first = run_ragtruth(cfg, run_id="detect")

    def doc(key: str):
        return json.loads(s3.get_object(Bucket=bucket, Key=f"runs/detect/{key}")["Body"].read())

    metrics = doc("metrics.json")
    assert metrics == first.metrics
    response = {(r["task"], r["model"]): r for r in metrics["response_level"]}
    span = {(r["task"], r["model"]): r for r in metrics["span_level"]}
    # r1 TN, r2 TP, r3 FP, r4 unreadable (an empty list: FN), r5 TP, r6 TN: P = R = 2/3
    o = response[("Overall", "*")]
    assert (o["tp"], o["fp"], o["fn"], o["tn"], o["n_responses"], o["unpredicted"], o["unreadable"]) == \
        (2, 1, 1, 2, 6, 0, 1)
    assert (o["precision"], o["recall"], o["f1"]) == (pytest.approx(2 / 3),) * 3
    # gold chars: "15 minutes" 10 + "has live music" 14 + "delivery" 8 + "50 million" 10 = 42; predicted:
    # r2 "15 minutes" + "add salt" = 18, r3 "free WiFi" = 9, r5 "cost 50 million dollars" 23 + unlocated
    # "a tunnel" 8 = 31; 58 in all, of which 20 gold chars are hit: P = 20/58, R = 20/42, F1 = 40/100
    s = span[("Overall", "*")]
    assert (s["gold_chars"], s["pred_chars"], s["tp_chars"], s["unlocated_spans"], s["unlocated_chars"]) == \
        (42, 58, 20, 1, 8)
    assert (s["precision"], s["recall"], s["f1"]) == \
        (pytest.approx(20 / 58), pytest.approx(20 / 42), pytest.approx(0.4))
    # per task and per model, from the same counts
    assert (response[("QA", "*")]["f1"], span[("QA", "*")]["precision"]) == (1.0, pytest.approx(10 / 18))
    d2t = response[("Data2txt", "*")]
    assert (d2t["fp"], d2t["fn"], d2t["unpredicted"], d2t["unreadable"]) == (1, 1, 0, 1)
    assert span[("Summary", "*")]["precision"] == pytest.approx(10 / 31)
    assert response[("Overall", A)]["precision"] == 0.5 and span[("Overall", A)]["precision"] == 10 / 40
    assert response[("Overall", B)]["f1"] == pytest.approx(2 / 3)
    assert span[("Overall", B)]["precision"] == pytest.approx(10 / 18)
    assert metrics["detector_problems"] == {"unlocated_span": 1, "unreadable": 1}
    assert metrics["costs"]["total"] == {"calls": 6, "cached_calls": 0, "failed_calls": 0,
                                         "input_tokens": metrics["costs"]["total"]["input_tokens"],
                                         "output_tokens": metrics["costs"]["total"]["output_tokens"]}

    # the per-response table on S3: three batches (batch_size 2, whole sources), committed
    store = RunStore(Location.from_url(storage["root"], cfg.storage), "detect")
    keys = store.part_keys("counts")
    assert len(keys) == 3 and store.part_keys("predictions") == keys
    preds = {}
    for key in keys:
        with store.loc.fs.open(store.loc.child("predictions", f"part-{key}.parquet").path, "rb") as f:
            preds.update({r["response_id"]: r for r in pq.read_table(f).to_pylist()})
    assert sorted(preds) == ["r1", "r2", "r3", "r4", "r5", "r6"]
    assert preds["r2"]["spans"] == [{"start": 18, "end": 28, "label": None}, {"start": 33, "end": 41, "label": None}]
    assert preds["r2"]["gold_spans"] == [{"start": 18, "end": 28, "label": "Evident Conflict"}]
    assert preds["r5"]["unlocated"] == ["a tunnel"] and preds["r5"]["n_spans"] == 2
    assert (preds["r4"]["predicted"], preds["r4"]["unreadable"], preds["r4"]["problem"], preds["r4"]["n_spans"]) == \
        (True, True, None, 0)
    assert preds["r4"]["problems"] == [{"reason": "unreadable", "detail": "I am not sure about this one."}]
    assert preds["r1"]["predicted"] and preds["r1"]["spans"] == [] and preds["r1"]["problem"] is None

    manifest = doc("manifest.json")
    assert manifest["status"] == "complete"
    assert manifest["excluded"] == {"invalid_labels": ["r7"], "quality": ["r8"]}
    assert manifest["corpus"]["excluded"] == {"invalid_labels": 1, "quality": 1}
    assert [(p["reason"], p["response_id"], p["line"]) for p in manifest["label_problems"]] == \
        [("text_mismatch", "r7", 7)]
    assert len(manifest["corpus"]["files"]["response.jsonl"]["sha256"]) == 64
    stats = {r["task"]: r for r in doc("stats.json")["table2_tasks"] if r["source"] == "*"}
    overall = stats["Overall"]
    assert (overall["n_responses"], overall["n_hallucinated"], overall["n_spans"]) == (6, 3, 4)
    # selection between model-a and model-b: on each source exactly one of the two responses has
    # gold spans; on s-qa and s-sum it has more detected spans, on s-d2t (r4, unreadable: none) fewer
    (sel,) = doc("selection.json")
    assert (sel["models"], sel["n_instances"], sel["skipped"]) == ([A, B], 3, {})
    assert sel["strategies"]["random"]["rate"] == 0.5
    assert sel["strategies"]["fewer_spans"]["valid"] == 3 and sel["strategies"]["fewer_spans"]["rate"] == 1 / 3
    assert sel["strategies"]["no_spans"]["valid"] == 3 and sel["strategies"]["no_spans"]["reduction"] == 1 / 3
    report = s3.get_object(Bucket=bucket, Key="runs/detect/report.md")["Body"].read().decode()
    assert "6 responses scored, 1 of them unreadable answers scored as empty lists; 0 without a prediction" in report
    # columns Data2txt, QA, Summary, Overall; Data2txt's one gold-positive response was missed: F1 is 0/0
    assert "| all models | 0.0 / 0.0 / n/a | 100.0 / 100.0 / 100.0 | 100.0 / 100.0 / 100.0 | 66.7 / 66.7 / 66.7 |" \
        in report
    assert response[("Data2txt", "*")]["undefined"] == ["f1"]

    # the same run id: nothing left to do, no Ray work
    again = run_ragtruth(cfg, run_id="detect")
    assert (again.processed, again.skipped) == (0, 6) and again.metrics["response_level"] == metrics["response_level"]
    # a new run id: every judge answer from the call cache, the same tables
    cached = run_ragtruth(cfg, run_id="detect-2")
    assert cached.metrics["costs"]["total"]["calls"] == 0 and cached.metrics["costs"]["total"]["cached_calls"] == 6
    assert cached.metrics["response_level"] == metrics["response_level"]
    assert cached.metrics["span_level"] == metrics["span_level"]
    # the same run id with another scoring rule is refused, not mixed
    with pytest.raises(RunError, match="different configuration"):
        run_ragtruth(config(storage, corpus, metrics={"unreadable": "exclude"}), run_id="detect")


def test_bad_corpus_line_fails_before_any_model_starts(tmp_path):
    broken = [*RESPONSES[:3], {k: v for k, v in RESPONSES[3].items() if k != "model"}]
    (tmp_path / "response.jsonl").write_bytes(write_jsonl(broken))
    (tmp_path / "source_info.jsonl").write_bytes(write_jsonl(SOURCES))
    cfg = config({"root": f"file://{tmp_path}/runs"}, {"responses": str(tmp_path / "response.jsonl"),
                                                       "sources": str(tmp_path / "source_info.jsonl")})
    with pytest.raises(DataError, match=r"response.jsonl:4: field 'model' is missing"):
        run_ragtruth(cfg, run_id="bad")
    assert not (tmp_path / "runs").exists()  # not even a manifest


GEN_X = {"id": "gen-x", "backend": "scripted", "params": {
    "rules": [{"pattern": "Briefly answer", "response": "Boil eggs for 20 minutes in the sea."},
              {"pattern": "objective overview", "response": "Cafe Uno serves pizza all night."},
              {"pattern": "Summarize", "response": "The mayor opened a bridge."}],
    "serve": {"num_cpus": 0.25}}}
GEN_Y = {"id": "gen-y", "backend": "scripted", "params": {
    "rules": [{"pattern": "Summarize", "response": "A bridge opened on Monday at noon."}],
    "default": "I do not know.", "serve": {"num_cpus": 0.25}}}


def test_rag_generation_rate_and_density(ray_head, tmp_path):
    folder = tmp_path / "ragtruth"
    folder.mkdir()
    (folder / "response.jsonl").write_bytes(write_jsonl(RESPONSES))
    (folder / "source_info.jsonl").write_bytes(write_jsonl(SOURCES))
    cfg = config({"root": f"file://{tmp_path}/runs"},
                 {"responses": str(folder / "response.jsonl"), "sources": str(folder / "source_info.jsonl")},
                 generate=[GEN_X, GEN_Y])
    result = run_ragtruth(cfg, run_id="rag")
    rows = {(r["model"], r["task"]): r for r in result.rag_metrics["rows"]}
    # gen-x: QA "Boil eggs for 20 minutes in the sea." (8 words, 1 span), Data2txt "Cafe Uno serves
    # pizza all night." (6 words, 2 spans), Summary "The mayor opened a bridge." (5 words, 0 spans)
    x = rows[("gen-x", "Overall")]
    assert (x["asked"], x["scored"], x["hallucinated"], x["spans"], x["words"]) == (3, 3, 2, 3, 19)
    assert x["hallucination_rate"] == pytest.approx(2 / 3) and x["density"] == pytest.approx(300 / 19)
    assert rows[("gen-x", "Data2txt")]["density"] == pytest.approx(200 / 6)
    # gen-y: "I do not know." twice (4 words each), "A bridge opened on Monday at noon." (7 words, 1 span)
    y = rows[("gen-y", "Overall")]
    assert (y["scored"], y["hallucinated"], y["spans"], y["words"]) == (3, 1, 1, 15)
    assert y["hallucination_rate"] == pytest.approx(1 / 3) and y["density"] == pytest.approx(100 / 15)
    assert rows[("gen-y", "QA")]["hallucination_rate"] == 0.0

    store = RunStore(Location.from_url(f"file://{tmp_path}/runs"), "rag")
    gens = {(r["model"], r["source_id"]): r for r in store.read_table("rag_generations").to_pylist()}
    assert len(gens) == 6
    g = gens[("gen-x", "s-d2t")]
    assert (g["response"], g["task"], g["n_spans"], g["error"]) == \
        ("Cafe Uno serves pizza all night.", "Data2txt", 2, None)
    assert g["spans"] == [{"start": 9, "end": 21, "label": None}, {"start": 22, "end": 31, "label": None}]
    calls = {(c["model"], c["stage"]): c["calls"] + c["cached_calls"] for c in result.metrics["costs"]["calls"]}
    assert calls == {("gen-x", "generate"): 3, ("gen-y", "generate"): 3, ("judge", "detect"): 6,
                     ("judge", "detect_generated"): 6}
    assert "## RAG generation, judged by judge" in result.report
    assert (store.loc.child("rag_metrics.json")).exists()
