"""RAGTruth corpus loading (local, gzip, HTTP, S3), label validation, manifest, statistics."""

import gzip
import hashlib
import http.server
import json
import threading

import pytest

from halluscope.errors import DataError
from halluscope.ragtruth.corpus import CorpusOptions, LabelFilter, load_corpus, load_corpus_dir
from halluscope.ragtruth.stats import count_stats, merge_stats, model_table, task_table
from halluscope.ragtruth.taxonomy import LabelType, Quality, TaskType

GPT, LLAMA = "gpt-4-0613", "llama-2-7b-chat"

QA_INFO = {"question": "how long to boil an egg",
           "passages": "passage 1:Boil eggs for 9 to 12 minutes.\n\npassage 2:Cool them in ice water.\n\n"}
D2T_INFO = {"name": "Cafe Uno", "city": "Reno",
            "attributes": {"WiFi": "free", "Music": None, "RestaurantsTakeOut": True},
            "review_info": [{"review_stars": 4.0, "review_date": "2021-01-01 10:00:00",
                             "review_text": "Great coffee."}]}
CNN_TEXT = "The mayor opened a new bridge on Monday. It cost 5 million dollars and took two years to build."
NEWS_TEXT = "A storm hit the coast on Friday. Schools were closed and power was cut to 3,000 homes."

SOURCES = [
    {"source_id": "s1", "task_type": "QA", "source": "MARCO", "source_info": QA_INFO,
     "prompt": "Briefly answer the following question:\nhow long to boil an egg\n...\noutput:"},
    {"source_id": "s2", "task_type": "Data2txt", "source": "Yelp", "source_info": D2T_INFO,
     "prompt": "Instruction:\nWrite an objective overview ...\nOverview:"},
    {"source_id": "s3", "task_type": "Summary", "source": "CNN/DM", "source_info": CNN_TEXT,
     "prompt": "Summarize the following news within 20 words:\n...\noutput:"},
    {"source_id": "s4", "task_type": "Summary", "source": "Recent News", "source_info": NEWS_TEXT,
     "prompt": "Summarize the following news within 18 words:\n...\noutput:"},
    {"source_id": "s5", "task_type": "QA", "source": "MARCO", "source_info": QA_INFO, "prompt": "p"},
]


def lab(response, text, label_type, **extra):
    """A label of the released schema whose offsets are found in the response."""
    start = response.index(text)
    return {"start": start, "end": start + len(text), "text": text, "meta": "annotator note",
            "label_type": label_type, **extra}


def resp(rid, sid, model, response, labels=(), split="train", quality="good"):
    return {"id": rid, "source_id": sid, "model": model, "temperature": 0.7, "labels": list(labels),
            "split": split, "quality": quality, "response": response}


R2 = "Boil the eggs for 15 minutes and add salt."
R4 = "Cafe Uno in Reno has no music and offers delivery.\u2028Great coffee."  # U+2028 inside a JSON string
R5 = "The mayor opened a bridge that cost 50 million dollars."
R8 = "A storm hit the coast on Friday and killed many people."
R9 = "Boil eggs for an hour."
R10 = "Boil eggs for a day, then peel them."
RESPONSES = [
    resp("1", "s1", GPT, "Boil eggs for 9 to 12 minutes."),
    resp("2", "s1", LLAMA, R2, [lab(R2, "15 minutes", "Evident Conflict"),
                               lab(R2, "and add salt", "Evident Baseless Info", implicit_true=True)]),
    resp("3", "s2", GPT, "Cafe Uno in Reno offers free WiFi and takeout."),
    resp("4", "s2", LLAMA, R4, [lab(R4, "has no music", "evident baseless info", due_to_null=True, implicit_true=False),
                               lab(R4, "delivery", "Evident Baseless Info")]),
    resp("5", "s3", GPT, R5, [lab(R5, "50 million", "Subtle Conflict")]),
    resp("6", "s3", LLAMA, "The mayor opened a bridge on Monday.", quality="truncated"),
    resp("7", "s4", GPT, "A storm hit the coast, closing schools.", split="test"),
    resp("8", "s4", LLAMA, R8, [lab(R8, "killed many people", "Subtle Baseless Info")], split="test"),
    # broken labels: text mismatch, offsets beyond the response
    resp("9", "s5", GPT, R9, [{**lab(R9, "an hour", "Evident Conflict"), "text": "a hour"},
                              {"start": 10, "end": 99, "text": "x", "label_type": "Evident Conflict"}], split="test"),
    # broken labels: the annotation tool's wording, a non-boolean flag, a missing end
    resp("10", "s5", LLAMA, R10, [lab(R10, "a day", "HIGH baseless info"),
                                  lab(R10, "then peel them", "Subtle Baseless Info", implicit_true="yes"),
                                  {"start": 0, "text": "Boil", "label_type": "Evident Conflict"}], split="test"),
]


def write_corpus(folder, responses=RESPONSES, sources=SOURCES, gz=False):
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("response.jsonl", responses), ("source_info.jsonl", sources)):
        body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
        (folder / (name + (".gz" if gz else ""))).write_bytes(gzip.compress(body) if gz else body)
    return folder


@pytest.fixture()
def corpus_dir(tmp_path):
    return write_corpus(tmp_path / "ragtruth")


def test_load_join_and_fields(corpus_dir):
    corpus = load_corpus_dir(str(corpus_dir))
    assert [r.id for r in corpus.records] == ["1", "2", "3", "4", "5", "6", "7", "8"]
    by_id = {r.id: r for r in corpus.records}
    r2 = by_id["2"]
    assert (r2.source_id, r2.model, r2.task_type, r2.split, r2.quality, r2.line) == \
        ("s1", LLAMA, TaskType.QA, "train", Quality.GOOD, 2)
    assert [(lb.start, lb.end, lb.text, lb.label_type, lb.implicit_true, lb.due_to_null) for lb in r2.labels] == [
        (18, 28, "15 minutes", LabelType.EVIDENT_CONFLICT, False, False),
        (29, 41, "and add salt", LabelType.EVIDENT_BASELESS, True, False)]
    assert r2.labels[0].meta == "annotator note" and r2.gold == r2.labels
    assert by_id["4"].response == R4  # U+2028 did not split the line
    assert by_id["4"].labels[0].label_type is LabelType.EVIDENT_BASELESS  # case-insensitive type
    assert by_id["4"].labels[0].due_to_null and by_id["6"].quality is Quality.TRUNCATED
    assert r2.source.prompt.startswith("Briefly answer")
    assert r2.source.context_text() == QA_INFO["question"] + "\n" + QA_INFO["passages"]
    assert '"Music": null' in by_id["4"].source.context_text()
    assert by_id["5"].source.context_text() == CNN_TEXT and by_id["7"].source.source == "Recent News"


def test_invalid_labels_counted_with_ids_and_lines(corpus_dir):
    corpus = load_corpus_dir(str(corpus_dir))
    got = [(p.reason, p.response_id, p.line, p.label_index) for p in corpus.problems]
    assert got == [("text_mismatch", "9", 9, 0), ("bad_offsets", "9", 9, 1),
                   ("unknown_label_type", "10", 10, 0), ("bad_flag", "10", 10, 1), ("missing_field", "10", 10, 2)]
    assert corpus.excluded == {"invalid_labels": ["9", "10"]}
    m = corpus.manifest
    assert (m.n_sources, m.n_responses, m.n_records) == (5, 10, 8)
    assert m.label_problems == {"text_mismatch": 1, "bad_offsets": 1, "unknown_label_type": 1, "bad_flag": 1,
                                "missing_field": 1}
    report = corpus.report()
    assert "held out (invalid_labels): 2" in report and "response.jsonl:10 id=10 label[0]" in report
    with pytest.raises(DataError, match=r"response.jsonl:9: response 9 label\[0\] is invalid \(text_mismatch.*5 inv"):
        load_corpus_dir(str(corpus_dir), CorpusOptions(invalid_labels="error"))


def test_manifest_hashes_and_pins(corpus_dir):
    corpus = load_corpus_dir(str(corpus_dir))
    digest = hashlib.sha256((corpus_dir / "response.jsonl").read_bytes()).hexdigest()
    assert corpus.manifest.files["response.jsonl"].sha256 == digest
    assert corpus.manifest.files["response.jsonl"].lines == 10
    pinned = CorpusOptions(expected_sha256={"response.jsonl": digest.upper()})
    assert load_corpus_dir(str(corpus_dir), pinned).manifest.n_records == 8
    with pytest.raises(DataError, match="source_info.jsonl at .* has sha256 .* but 00 is pinned"):
        load_corpus_dir(str(corpus_dir), CorpusOptions(expected_sha256={"source_info.jsonl": "00"}))
    with pytest.raises(DataError, match="unknown files"):
        load_corpus_dir(str(corpus_dir), CorpusOptions(expected_sha256={"responses.jsonl": digest}))


def test_split_quality_and_label_filters(corpus_dir):
    test = load_corpus_dir(str(corpus_dir), CorpusOptions(splits=("test",)))
    assert [r.id for r in test.records] == ["7", "8"]
    assert test.excluded == {"split": ["1", "2", "3", "4", "5", "6"], "invalid_labels": ["9", "10"]}
    good = load_corpus_dir(str(corpus_dir), CorpusOptions(good_quality_only=True))
    assert good.manifest.excluded == {"quality": 1, "invalid_labels": 2}
    flt = CorpusOptions(label_filter=LabelFilter(exclude_implicit_true=True, exclude_due_to_null=True))
    by_id = {r.id: r for r in load_corpus_dir(str(corpus_dir), flt).records}
    assert [lb.text for lb in by_id["2"].gold] == ["15 minutes"] and len(by_id["2"].labels) == 2
    assert [lb.text for lb in by_id["4"].gold] == ["delivery"]
    assert load_corpus_dir(str(corpus_dir), flt).manifest.options.label_filter.exclude_due_to_null



def test_test_split_keeps_good_quality_only_by_default(tmp_path):
    """As the authors' test files: a truncated response and an incorrect refusal of the test split
    are left out and counted; the train split's truncated response "6" stays."""
    extra = [resp("11", "s4", "mistral-7B-instruct", "A storm hit the coast on Friday and schools were",
                  split="test", quality="truncated"),
             resp("12", "s4", "gpt-3.5-turbo-0613", "I'm sorry, the passage does not say what happened.",
                  split="test", quality="incorrect_refusal")]
    folder = write_corpus(tmp_path / "ragtruth", RESPONSES + extra)
    corpus = load_corpus_dir(str(folder))
    assert [r.id for r in corpus.records] == ["1", "2", "3", "4", "5", "6", "7", "8"]
    assert corpus.excluded == {"quality": ["11", "12"], "invalid_labels": ["9", "10"]}
    assert corpus.manifest.excluded["quality"] == 2 and corpus.manifest.options.good_quality_only == ("test",)
    assert "held out (quality): 2" in corpus.report()
    test = load_corpus_dir(str(folder), CorpusOptions(splits=("test",)))
    assert [r.id for r in test.records] == ["7", "8"] and test.manifest.excluded["quality"] == 2
    every = load_corpus_dir(str(folder), CorpusOptions(good_quality_only=False))
    assert [r.id for r in every.records][-2:] == ["11", "12"] and "quality" not in every.excluded

@pytest.fixture()
def http_root(corpus_dir):
    def handler(*a, **k):
        return http.server.SimpleHTTPRequestHandler(*a, directory=str(corpus_dir.parent), **k)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_http_and_gzip_sources(corpus_dir, http_root, tmp_path):
    local = load_corpus_dir(str(corpus_dir))
    remote = load_corpus_dir(f"{http_root}/ragtruth/")
    assert remote.records == local.records
    assert remote.manifest.files["response.jsonl"].url.startswith("http://127.0.0.1")
    with pytest.raises(DataError, match="cannot read response.jsonl from http"):
        load_corpus(f"{http_root}/missing.jsonl", f"{http_root}/ragtruth/source_info.jsonl")
    gz = write_corpus(tmp_path / "gz", gz=True)
    zipped = load_corpus(f"file://{gz}/response.jsonl.gz", str(gz / "source_info.jsonl.gz"))
    assert zipped.records == local.records


def test_s3_source(s3_endpoint, bucket, corpus_dir):
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    for name in ("response.jsonl", "source_info.jsonl"):
        s3.put_object(Bucket=bucket, Key=f"rt/{name}", Body=(corpus_dir / name).read_bytes())
    corpus = load_corpus_dir(f"s3://{bucket}/rt", storage_options={"client_kwargs": {"endpoint_url": s3_endpoint}})
    assert corpus.manifest.n_records == 8


def row(base, **changes):
    return json.dumps({**base, **changes})


BAD_FILES = [
    # (which file, line content, error pattern)
    ("response", "{not json", r"response.jsonl:11: not valid JSON"),
    ("response", row(RESPONSES[0], id="11", source_id="s9"), r"response.jsonl:11: source_id s9 .* not in source_info"),
    ("response", row(RESPONSES[0]), r"response.jsonl:11: response id 1 already on line 1"),
    ("response", json.dumps({k: v for k, v in RESPONSES[0].items() if k != "response"} | {"id": "11"}),
     r"response.jsonl:11: field 'response' is missing"),
    ("response", row(RESPONSES[0], id="11", split="dev"), r"response.jsonl:11: split 'dev'"),
    ("response", row(RESPONSES[0], id="11", quality="bad"), r"response.jsonl:11: quality 'bad' is not one of"),
    ("response", row(RESPONSES[0], id="11", labels="none"), r"response.jsonl:11: field 'labels' must be list"),
    ("response", row(RESPONSES[0], id="11", temperature="hot"), r"response.jsonl:11: field 'temperature'"),
    ("source", row(SOURCES[0], source_id="s6", task_type="Dialogue"), r"source_info.jsonl:6: task_type 'Dialogue'"),
    ("source", row(SOURCES[0], source_id="s6", source_info={"question": "q"}),
     r"source_info.jsonl:6 source_info: field 'passages' is missing"),
    ("source", row(SOURCES[2], source_id="s6", source_info={"text": "x"}),
     r"source_info.jsonl:6: field 'source_info' must be str"),
    ("source", row(SOURCES[1]), r"source_info.jsonl:6: source_id s2 already on line 2"),
    ("source", "[1, 2]", r"source_info.jsonl:6: expected a JSON object"),
]


@pytest.mark.parametrize("which,line,pattern", BAD_FILES)
def test_malformed_rows_name_file_line_and_field(tmp_path, which, line, pattern):
    folder = write_corpus(tmp_path / "bad")
    name = "response.jsonl" if which == "response" else "source_info.jsonl"
    with open(folder / name, "a") as f:
        f.write(line + "\n\n")  # a trailing blank line is fine
    with pytest.raises(DataError, match=pattern):
        load_corpus_dir(str(folder))


def test_stats_tables(corpus_dir):
    records = load_corpus_dir(str(corpus_dir)).records
    groups = count_stats(records)
    # sharded by record (even splitting an instance's responses) the tables are the same
    assert task_table(merge_stats(*(count_stats([r]) for r in records))) == task_table(groups)
    rows = {(r["task"], r["source"]): r for r in task_table(groups)}
    assert list(rows) == [("Data2txt", "*"), ("QA", "*"), ("Summary", "*"), ("Summary", "CNN/DM"),
                          ("Summary", "Recent News"), ("Overall", "*")]
    qa = rows[("QA", "*")]
    # QA: 1 instance (s1), responses 1 (7 words) and 2 (9 words) -> mean 8, max 9; one hallucinated
    # response with 2 spans, one of them implicit_true; context = question (6) + passages (14) words
    assert (qa["n_instances"], qa["n_responses"], qa["n_hallucinated"], qa["hallucinated_pct"], qa["n_spans"]) == \
        (1, 2, 1, 50.0, 2)
    assert (qa["response_words_mean"], qa["response_words_max"], qa["context_words_max"]) == (8.0, 9, 20)
    assert (qa["n_implicit_true"], qa["n_due_to_null"]) == (1, 0)
    overall = rows[("Overall", "*")]
    # 4 instances, 8 responses; hallucinated: 2, 4, 5, 8 -> 4 (50%); spans 2 + 2 + 1 + 1 = 6
    assert (overall["n_instances"], overall["n_responses"], overall["n_hallucinated"], overall["n_spans"]) == \
        (4, 8, 4, 6)
    assert overall["spans_by_type"] == {"Evident Conflict": 1, "Subtle Conflict": 1, "Evident Baseless Info": 3,
                                        "Subtle Baseless Info": 1}
    assert rows[("Summary", "CNN/DM")]["n_instances"] == 1 and rows[("Summary", "*")]["n_hallucinated"] == 2
    # CNN/DM context 19 words, recent news 17 -> mean 18
    assert (rows[("Summary", "*")]["context_words_mean"], rows[("Summary", "*")]["context_words_max"]) == (18.0, 19)

    models = {(r["model"], r["task"]): r for r in model_table(groups)}
    llama = models[(LLAMA, "Overall")]
    # llama: responses 2 (9 words, 2 spans), 4 (12 words: U+2028 is whitespace, 2 spans), 6 (7 words),
    # 8 (11 words, 1 span): density = 100 * 5 / 39; per-response mean = (200/9 + 200/12 + 0 + 100/11) / 4
    assert (llama["n_responses"], llama["n_hallucinated"], llama["n_spans"]) == (4, 3, 5)
    assert llama["density"] == pytest.approx(100 * 5 / 39)
    assert llama["density_mean"] == pytest.approx((200 / 9 + 200 / 12 + 100 / 11) / 4)
    assert (llama["n_implicit_true"], llama["n_due_to_null"]) == (1, 1)
    gpt_d2t = models[(GPT, "Data2txt")]
    assert (gpt_d2t["n_responses"], gpt_d2t["n_hallucinated"], gpt_d2t["n_spans"], gpt_d2t["density"]) == (1, 0, 0, 0.0)
    assert models[(GPT, "Summary")]["hallucinated_pct"] == 50.0
