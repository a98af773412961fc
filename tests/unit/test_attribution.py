"""Attribution (HALOGEN §5): corpus loaders, phrase semantics, the search-service client against a
stub on 127.0.0.1, and Type A/B/C flags and coverage checked against numbers derived by hand."""

from __future__ import annotations

import argparse
import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from halluscope import records
from halluscope.errors import ConfigError, DataError, RunError
from halluscope.halogen.attribution import cli as attribution_cli
from halluscope.halogen.attribution.classify import CODE_TASK, HISTORICAL_TASK
from halluscope.halogen.attribution.corpus import LocalCorpus, SearchServiceConfig, SearchServiceCorpus, open_corpus
from halluscope.halogen.attribution.run import ATTRIBUTION, attribute_run
from halluscope.records import generation_id
from halluscope.storage.fs import Location
from halluscope.storage.parquet import table_to_bytes
from halluscope.storage.run import RunStore

# --- the corpus: 12 documents over three formats, in the order LocalCorpus loads them ---------
WEB = [  # web.jsonl, one entry per line; None = a broken line
    {"id": "web-1", "text": "Install it, then write: from rest_framework import serializers"},
    {"text": "class my_class: pass  # my_class is only an example name"},  # no id: <path>:2
    None,  # line 3: not JSON
    {"id": "web-4", "txt": "no text field"},  # line 4: no 'text'
    {"id": "web-5", "text": "my_classes and MyClass are different identifiers"},
    {"id": "web-6", "text": "Friedrich Nietzsche admired the steam engine of James Watt."},
]
BOOKS = [  # books.parquet (id, text); a null text is a broken row
    ("b1", "Friedrich Nietzsche (1844 - 1900) was a German philosopher."),
    ("b2", "James Watt was born in 1736 and died in 1819; he improved the steam engine."),
    ("b3", "Oberto Pallavicino (1197-1269) was an Italian condottiero."),
    ("b4", "George Robertson (1750\u20131832) was a Scottish writer."),
    ("b5", None),
]
NOTES = {  # notes/*.txt, one document each (id = the file's path)
    "a.txt": "Kofi Annan was born in 1938.",
    "b.txt": "Kofi Annan died in 2018.",  # the two years, but never in one document with the name
    "c.txt": "Toni Morrison, born 1931, wrote Beloved. A reading list: George Robertson, Toni Morrison.",
    "d.txt": "REST_FRAMEWORK is the import name of Django REST framework.",
}
PEOPLE = {  # historical-events items: (name1, birth1, death1, name2, birth2, death2)
    "h1": ("Friedrich Nietzsche", "1844", "1900", "James Watt", "1736", "1819"),
    "h2": ("Kofi Annan", "1938", "2018", "Oberto Pallavicino", "1197", "1269"),
    "h3": ("George Robertson (writer)", "1750", "1832", "Toni Morrison", "1931", "2019"),
    "h4": ("Friedrich Nietzsche", "1844", "1900", "Oberto Pallavicino", "1197", "1269"),
}


@pytest.fixture()
def corpus_dir(tmp_path):
    d = tmp_path / "corpus"
    (d / "notes").mkdir(parents=True)
    lines = ['{"id": "web-3", "text": "broken' if rec is None else json.dumps(rec) for rec in WEB]
    (d / "web.jsonl").write_text("\n".join(lines[:4]) + "\n\n" + "\n".join(lines[4:]) + "\n")  # a blank line 5
    pq.write_table(pa.table({"id": [i for i, _ in BOOKS], "text": [t for _, t in BOOKS]}), d / "books.parquet")
    for name, text in NOTES.items():
        (d / "notes" / name).write_text(text)
    (d / "notes" / "README.md").write_text("not a corpus format")
    return d


def _docs(d) -> list[tuple[str, str]]:
    """The corpus's documents as LocalCorpus loads them (web lines are 1-based, after the blank)."""
    web = [(r.get("id") or f"{d}/web.jsonl:{n}", r["text"])
           for n, r in zip((1, 2, 3, 4, 6, 7), WEB) if r is not None and "text" in r]
    books = [(i, t) for i, t in BOOKS if t is not None]
    return web + books + [(f"{d}/notes/{n}", t) for n, t in NOTES.items()]


def _local(d) -> LocalCorpus:
    return LocalCorpus.from_paths([str(d / "web.jsonl"), str(d / "books.parquet"), str(d / "notes")])


def test_loaders_read_every_format_and_count_broken_records(corpus_dir):
    corpus = _local(corpus_dir)
    info = corpus.describe()
    # web 4 (lines 1, 2, 6, 7) + books 4 (b5 has no text) + notes 4 = 12
    assert info["documents"] == 12
    assert info["files"] == 6  # web.jsonl, books.parquet, 4 notes; README.md skipped
    assert info["broken_records"] == 3  # web lines 3 and 4, books row 4
    assert [e.split(": ")[0].rsplit("/", 1)[-1] for e in info["broken_examples"]] == \
        ["web.jsonl:3", "web.jsonl:4", "books.parquet:4"]
    assert info["skipped_files"] == 1 and info["skipped_examples"][0].endswith("notes/README.md")
    assert corpus.docs_with_all(["my_class"]) == {f"{corpus_dir}/web.jsonl:2"}
    assert corpus.docs_with_all(["Kofi Annan"]) == {f"{corpus_dir}/notes/a.txt", f"{corpus_dir}/notes/b.txt"}
    assert corpus.docs_with_all(["Italian condottiero"]) == {"b3"}


def test_loader_errors_name_the_source(corpus_dir):
    with pytest.raises(DataError, match="does not exist"):
        LocalCorpus.from_paths(str(corpus_dir / "missing.jsonl"))
    with pytest.raises(DataError, match="unknown format"):
        LocalCorpus.from_paths(str(corpus_dir / "notes" / "README.md"))
    pq.write_table(pa.table({"body": ["x"]}), corpus_dir / "no_text.parquet")
    with pytest.raises(DataError, match="no 'text' column"):
        LocalCorpus.from_paths(str(corpus_dir / "no_text.parquet"))


def test_phrase_semantics():
    corpus = LocalCorpus([("1", "Born 1844, died 1900."), ("2", "In 18445 nothing happened"),
                          ("3", "friedrich\n  NIETZSCHE wrote"), ("4", "Friedrich-Nietzsche"),
                          ("5", "my_classes, my_class.")])
    assert corpus.docs_with_all(["1844"]) == {"1"}  # word boundary: not inside 18445
    assert corpus.docs_with_all(["Friedrich Nietzsche"]) == {"3"}  # case and whitespace runs; '-' is not a space
    assert corpus.docs_with_all(["my_class"]) == {"5"}
    assert corpus.docs_with_all(["1844", "1900"]) == {"1"}
    assert corpus.docs_with_all(["1844", "wrote"]) == set()  # co-occurrence means the same document
    hits = corpus.hits(["my_class"], sample=3)
    assert (hits.count, hits.sample) == (1, ["5"])
    with pytest.raises(ValueError):
        corpus.docs_with_all(["  --  "])


def test_parquet_on_s3(s3_endpoint, bucket, corpus_dir):
    import boto3

    boto3.client("s3", endpoint_url=s3_endpoint).put_object(
        Bucket=bucket, Key="corpus/books.parquet", Body=(corpus_dir / "books.parquet").read_bytes())
    corpus = LocalCorpus.from_paths(f"s3://{bucket}/corpus/", {"client_kwargs": {"endpoint_url": s3_endpoint}})
    assert corpus.describe()["documents"] == 4 and corpus.describe()["broken_records"] == 1
    assert corpus.docs_with_all(["James Watt", "1736", "1819"]) == {"b2"}


# --- a stub Elasticsearch-compatible service -------------------------------------------------
class _Stub:
    """Answers POST /<index>/_count and /<index>/_search with bool.must match_phrase queries over
    an in-memory doc list, matching as Elasticsearch's standard analyzer does (lower-cased word
    tokens in sequence), not with the code under test."""

    def __init__(self, docs: list[tuple[str, str]], index: str, api_key: str | None = None) -> None:
        self.docs, self.index, self.api_key, self.requests = docs, index, api_key, []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append((self.path, body, self.headers.get("Authorization")))
                index, _, endpoint = self.path.strip("/").partition("/")
                if stub.api_key and self.headers.get("Authorization") != f"ApiKey {stub.api_key}":
                    return self._send(401, {"error": "unauthorized"})
                if index != stub.index or endpoint not in ("_count", "_search"):
                    return self._send(404, {"error": {"type": "index_not_found_exception"}})
                found = [i for i, t in stub.docs if all(stub.match(t, m["match_phrase"]["text"])
                                                        for m in body["query"]["bool"]["must"])]
                if endpoint == "_count":
                    return self._send(200, {"count": len(found)})
                hits = [{"_index": index, "_id": i, "_score": 1.0} for i in found[:body.get("size", 10)]]
                return self._send(200, {"hits": {"total": {"value": len(found), "relation": "eq"}, "hits": hits}})

            def _send(self, status: int, doc: dict) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def match(text: str, phrase: str) -> bool:
        doc, q = re.findall(r"\w+", text.lower()), re.findall(r"\w+", phrase.lower())
        return any(doc[i:i + len(q)] == q for i in range(len(doc) - len(q) + 1))


@pytest.fixture()
def stub(corpus_dir):
    s = _Stub(_docs(corpus_dir), "c4", api_key="s3cret")
    yield s
    s.server.shutdown()
    s.server.server_close()


QUERIES = [["rest_framework"], ["my_class"], ["Kofi Annan"], ["Kofi Annan", "1938", "2018"],
           ["Friedrich Nietzsche", "James Watt"], ["George Robertson", "1750", "1832"], ["fakepkg_xyz"]]


def test_search_service_agrees_with_local_corpus(corpus_dir, stub, monkeypatch):
    monkeypatch.setenv("C4_KEY", "s3cret")
    local = _local(corpus_dir)
    with open_corpus(f"{stub.url}/c4", api_key_env="C4_KEY") as service:
        assert isinstance(service, SearchServiceCorpus) and service.config.index == "c4"
        for q in QUERIES:
            assert service.docs_with_all(q) == local.docs_with_all(q), q
            assert service.hits(q, 3) == local.hits(q, 3), q
        assert service.docs_with_all(["REST_FRAMEWORK"]) == local.docs_with_all(["REST_FRAMEWORK"])
    path, body, auth = stub.requests[0]
    assert path == "/c4/_count" and auth == "ApiKey s3cret"
    assert body == {"query": {"bool": {"must": [{"match_phrase": {"text": "rest_framework"}}]}}}


def test_search_service_errors(stub, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(ConfigError, match="NO_SUCH_KEY_VAR"):
        SearchServiceCorpus(SearchServiceConfig(stub.url, "c4", api_key_env="NO_SUCH_KEY_VAR"))
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    with SearchServiceCorpus(SearchServiceConfig(dead, "c4", timeout_s=5)) as service:
        with pytest.raises(DataError, match=re.escape(f"{dead}/c4/_count")):
            service.hits(["x"], 1)
    with SearchServiceCorpus(SearchServiceConfig(stub.url, "c4")) as service:  # no key: 401
        with pytest.raises(DataError, match="HTTP 401"):
            service.hits(["x"], 1)


# --- a run -----------------------------------------------------------------------------------
def _score(model: str, task: str, item: str, responded: bool | None, unsupported: list[str],
           error: str | None = None) -> dict:
    return {"gen_id": generation_id(task, item, model), "model": model, "task": task, "item_id": item,
            "prompt": "p", "task_kind": "response" if task == CODE_TASK else "refusal", "error": error,
            "responded": responded, "abstention_rule": "r", "n_atoms": len(unsupported) + 1,
            "n_unsupported": len(unsupported), "n_unverified": 0, "f": None, "g": None,
            "atoms": ["os", *unsupported], "unsupported_atoms": unsupported}


MEETING = ["the meeting took place"]
SCORES = [
    _score("llama", CODE_TASK, "c1", True, ["my_class", "rest_framework"]),
    _score("llama", CODE_TASK, "c2", True, ["my_class", "fakepkg_xyz"]),
    _score("llama", CODE_TASK, "c3", True, []),
    _score("llama", CODE_TASK, "c4", False, []),
    _score("olmo", CODE_TASK, "c1", True, ["rest_framework", "cryptomath"]),
    _score("olmo", CODE_TASK, "c2", None, [], error="generation failed"),
    _score("olmo", CODE_TASK, "c3", True, ["cryptomath"]),
    _score("llama", HISTORICAL_TASK, "h1", True, MEETING),
    _score("llama", HISTORICAL_TASK, "h2", False, []),
    _score("llama", HISTORICAL_TASK, "h3", True, MEETING),
    _score("olmo", HISTORICAL_TASK, "h1", True, MEETING),
    _score("olmo", HISTORICAL_TASK, "h2", True, MEETING),
    _score("olmo", HISTORICAL_TASK, "h3", False, []),
    _score("olmo", HISTORICAL_TASK, "h4", True, MEETING),
]


def _run(tmp_path, name: str = "run1", items: bool = True) -> RunStore:
    store = RunStore(Location.from_url(f"file://{tmp_path}/runs"), name)
    store.write_batch("b1", {"scores": pa.Table.from_pylist(SCORES, schema=records.SCORES)})
    if items:
        keys = ("name1", "birth1", "death1", "name2", "birth2", "death2")
        rows = [{"task": HISTORICAL_TASK, "item_id": i, "prompt": "p", "fields": json.dumps(dict(zip(keys, v))),
                 "source_row": n} for n, (i, v) in enumerate(PEOPLE.items())]
        store.items_location(HISTORICAL_TASK).write_bytes_atomic(
            table_to_bytes(pa.Table.from_pylist(rows, schema=records.ITEMS)))
    return store


# Derived by hand from the corpus above.
# Code, query = the package name. Found: rest_framework (web-1, notes/d.txt: case-insensitive),
# my_class (web line 2 only: web-5's "my_classes"/"MyClass" are other words). Not found:
# fakepkg_xyz, cryptomath.
#   llama: units c1 my_class, rest_framework + c2 my_class, fakepkg_xyz = 4; unique 3;
#          found 2 (my_class, rest_framework) -> B 2, C 1, coverage 2/3.
#   olmo:  c1 rest_framework, cryptomath + c3 cryptomath = 4 - 1 = 3 units (c2 failed); unique 2;
#          found 1 -> B 1, C 1, coverage 1/2.
# Historical events (B: both names in one doc; A: each name with both its years in one doc):
#   h1 Nietzsche/Watt:   pair web-6; Nietzsche b1, Watt b2            -> A, B
#   h2 Annan/Pallavicino: no pair; Annan's years in two docs, never one -> C (Pallavicino b3)
#   h3 Robertson/Morrison: pair notes/c.txt ("(writer)" dropped); Robertson b4; Morrison
#                          has no death year anywhere                  -> B, C
#   h4 Nietzsche/Pallavicino: no pair; b1 and b3                       -> A
#   llama hallucinated h1, h3: units 2, unique 2, A 1, B 2, C 1, coverage 2/2.
#   olmo hallucinated h1, h2, h4: units 3, unique 3, A 2, B 1, C 1, coverage 1/3.
EXPECTED = [
    ("llama", CODE_TASK, 4, 3, 0, 2, 1, 2 / 3),
    ("llama", HISTORICAL_TASK, 2, 2, 1, 2, 1, 1.0),
    ("olmo", CODE_TASK, 3, 2, 0, 1, 1, 1 / 2),
    ("olmo", HISTORICAL_TASK, 3, 3, 2, 1, 1, 1 / 3),
]
FLAGS = {"Friedrich Nietzsche | James Watt": (True, True, False),
         "Kofi Annan | Oberto Pallavicino": (False, False, True),
         "George Robertson (writer) | Toni Morrison": (False, True, True),
         "Friedrich Nietzsche | Oberto Pallavicino": (True, False, False),
         "my_class": (False, True, False), "rest_framework": (False, True, False),
         "fakepkg_xyz": (False, False, True), "cryptomath": (False, False, True)}


def test_attribute_run_matches_hand_count(tmp_path, corpus_dir):
    store = _run(tmp_path)
    summary = attribute_run(store, _local(corpus_dir), "c4-subset")
    got = [(s["model"], s["task"], s["hallucinated_units"], s["unique_units"], s["type_a"], s["type_b"],
            s["type_c"]) for s in summary]
    assert got == [e[:7] for e in EXPECTED]
    assert [s["coverage"] for s in summary] == pytest.approx([e[7] for e in EXPECTED])
    assert [s["found"] for s in summary] == [2, 2, 1, 1]

    table = store.read_table("attribution")
    assert table.schema == ATTRIBUTION and table.num_rows == 4 + 2 + 3 + 3
    rows = table.to_pylist()
    assert {r["corpus"] for r in rows} == {"c4-subset"} and {r["run_id"] for r in rows} == {"run1"}
    for r in rows:
        assert (r["type_a"], r["type_b"], r["type_c"]) == FLAGS[r["atom"]], r["atom"]
    h3 = next(json.loads(r["evidence"]) for r in rows if r["atom"].startswith("George"))
    assert h3["pair"] == {"query": ["George Robertson", "Toni Morrison"], "docs": 1,
                          "sample_docs": [f"{corpus_dir}/notes/c.txt"]}
    assert h3["entity1"]["query"] == ["George Robertson", "1750", "1832"] and h3["entity2"]["docs"] == 0
    rest = next(json.loads(r["evidence"]) for r in rows if r["atom"] == "rest_framework")
    assert rest == {"query": ["rest_framework"], "docs": 2, "sample_docs": ["web-1", f"{corpus_dir}/notes/d.txt"]}

    doc = store.read_json("attribution.json")
    assert doc["summary"] == summary and doc["corpora"]["c4-subset"]["documents"] == 12


def test_attribution_via_search_service_equals_local(tmp_path, corpus_dir, stub, monkeypatch):
    monkeypatch.setenv("C4_KEY", "s3cret")
    local_store, service_store = _run(tmp_path, "local"), _run(tmp_path, "service")
    attribute_run(local_store, _local(corpus_dir), "c4")
    with open_corpus(f"{stub.url}/c4", api_key_env="C4_KEY") as service:
        attribute_run(service_store, service, "c4")
    cols = [c for c in ATTRIBUTION.names if c != "run_id"]
    key = lambda r: (r["model"], r["gen_id"], r["atom"])  # noqa: E731
    assert sorted(local_store.read_table("attribution").select(cols).to_pylist(), key=key) == \
        sorted(service_store.read_table("attribution").select(cols).to_pylist(), key=key)


def test_runs_without_what_attribution_needs(tmp_path, corpus_dir):
    corpus = _local(corpus_dir)
    with pytest.raises(RunError, match="no committed scores"):
        attribute_run(RunStore(Location.from_url(f"file://{tmp_path}/runs"), "empty"), corpus, "c")
    with pytest.raises(RunError, match="no items for halogen/historical_events"):
        attribute_run(_run(tmp_path, "no-items", items=False), corpus, "c")
    with pytest.raises(RunError, match=r"model\(s\) \['gpt'\]"):
        attribute_run(_run(tmp_path), corpus, "c", ["gpt"])
    other = RunStore(Location.from_url(f"file://{tmp_path}/runs"), "other-task")
    row = {**SCORES[0], "task": "halogen/summarization"}
    other.write_batch("b1", {"scores": pa.Table.from_pylist([row], schema=records.SCORES)})
    with pytest.raises(RunError, match="no scores for halogen/code or halogen/historical_events"):
        attribute_run(other, corpus, "c")


def test_cli_attributes_per_corpus_and_keeps_other_corpora(tmp_path, corpus_dir, capsys):
    store = _run(tmp_path)
    parser = argparse.ArgumentParser()
    attribution_cli.add_parser(parser.add_subparsers(dest="command"))
    uri = f"{tmp_path}/runs/run1"
    args = parser.parse_args(["attribute", uri, "--corpus", str(corpus_dir / "books.parquet"),
                              "--models", "olmo"])
    assert args.fn(args) == 0
    args = parser.parse_args(["attribute", uri, "--corpus", str(corpus_dir), "--corpus-name", "c4",
                              "--models", "llama"])
    assert args.fn(args) == 0
    out = capsys.readouterr().out
    assert "66.67% (2/3)" in out and "100.00% (2/2)" in out  # llama code and historical on c4
    doc = store.read_json("attribution.json")
    assert sorted(doc["corpora"]) == ["books", "c4"]
    assert [(s["corpus"], s["model"]) for s in doc["summary"]] == \
        [("books", "olmo"), ("books", "olmo"), ("c4", "llama"), ("c4", "llama")]
    # books.parquet alone holds no package names and no pair: olmo's code coverage is 0/2
    assert doc["summary"][0]["coverage"] == 0.0
    assert store.read_table("attribution").num_rows == 6 + 6
