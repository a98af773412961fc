"""Title indexes: normalisation, an offline dump (text, gzip, Parquet) and the Semantic Scholar client
against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import gzip
import http.server
import json
import pickle
import socket
import threading
import time
import urllib.parse
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from halluscope.errors import ConfigError, DataError, EndpointDown
from halluscope.knowledge.semantic_scholar import SemanticScholarIndex
from halluscope.knowledge.titles import (
    NORMALISATION,
    OfflineTitleIndex,
    TitleIndex,
    TitleMatch,
    normalize_title,
    title_similarity,
)

TITLES = ["Attention Is All You Need",
          "BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding",
          "Deep Residual Learning for Image Recognition",
          "Ｆｕｌｌ-width Ｔｉｔｌｅ",
          "Über die Elektrodynamik bewegter Körper"]


@pytest.mark.parametrize("raw, expected", [
    ("Attention Is All You Need", "attention is all you need"),
    ("  BERT:  Pre-training\tof Deep\nBidirectional Transformers. ",
     "bert pretraining of deep bidirectional transformers"),
    ("State-of-the-Art", "stateoftheart"),  # punctuation is deleted, not replaced by a space
    ("“Quoted” title — with dashes…", "quoted title with dashes"),
    ("Ｆｕｌｌ-width", "fullwidth"),  # NFKC
    ("The ﬁnal ﬂow", "the final flow"),  # ligatures
    ("Straße", "strasse"),  # casefold, not lower
    ("Über die Elektrodynamik", "über die elektrodynamik"),  # accents kept
    ("Cafe\u0301", "café"),  # combining accent composed
    ("A+B = C <3 $100", "ab c 3 100"),  # symbols deleted
    ("zero\u200bwidth soft\u00adhyphen", "zerowidth softhyphen"),  # format characters deleted
    ("α-Synuclein and β2 receptors", "αsynuclein and β2 receptors"),
    ("   ", ""),
    ("?!", ""),
])
def test_normalize_title(raw, expected):
    assert normalize_title(raw) == expected


def write_lines(path: Path, lines: list[bytes]) -> Path:
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


@pytest.fixture()
def dump(tmp_path) -> Path:
    return write_lines(tmp_path / "titles.txt.gz", [t.encode() for t in TITLES])


def test_exact_lookup(dump):
    index = OfflineTitleIndex.from_dump(dump)
    assert isinstance(index, TitleIndex)
    assert index.lookup("attention is all you need.") == TitleMatch(True, "exact: Attention Is All You Need")
    assert index.lookup("Full width title").supported is False  # spaces are not punctuation
    assert index.lookup("FULL-WIDTH TITLE").supported is True
    assert index.lookup("Attention Is Almost All You Need") == TitleMatch(False, "not in title index")
    assert index.lookup("--").supported is False
    desc = index.describe()
    assert desc["match"] == "exact-normalised" and desc["titles"] == len(TITLES)
    assert desc["normalisation"] == NORMALISATION and len(desc["sha256"]) == 64


def test_fuzzy_lookup(dump):
    index = OfflineTitleIndex.from_dump(dump, fuzzy_threshold=0.9)
    assert index.describe()["match"] == "fuzzy-indel-v2>=0.9"  # v1, "fuzzy>=0.9", was difflib's ratio
    exact = index.lookup("Deep residual learning for image recognition")
    assert exact == TitleMatch(True, "exact: Deep Residual Learning for Image Recognition")
    typo = index.lookup("Deep Residual Learning for Image Recogniton")
    assert typo.supported is True
    assert typo.evidence == "fuzzy 0.989: Deep Residual Learning for Image Recognition"
    near_miss = "Deep Residual Networks for Image Segmentation"  # ratio 0.764
    assert index.lookup(near_miss) == TitleMatch(False, "not in title index")
    assert OfflineTitleIndex.from_dump(dump, fuzzy_threshold=0.75).lookup(near_miss).supported is True
    assert index.lookup("Completely unrelated words").supported is False


def test_title_similarity_is_normalised_indel():
    """2 * LCS / (len(a) + len(b)), symmetric; difflib's ratio of the last pair was 0.375 one way round."""
    assert title_similarity("abcd", "abcd") == 1.0 and title_similarity("abcd", "") == 0.0
    assert title_similarity("abcd", "acbd") == pytest.approx(0.75)
    assert title_similarity("a b c d", "d c b a x") == title_similarity("d c b a x", "a b c d") == pytest.approx(0.5)


def test_fuzzy_blocking_finds_the_title_among_many(tmp_path):
    """Many titles share common words with the query; the rare word still brings the right one in."""
    lines = [f"A study of learning model number {i}".encode() for i in range(5000)]
    lines.append(b"A study of learning with zygomorphic flowers")
    index = OfflineTitleIndex.from_dump(write_lines(tmp_path / "many.txt", lines), fuzzy_threshold=0.9)
    found = index.lookup("A study of learning with zygomorphic flower")
    assert found.supported is True and found.evidence.endswith("zygomorphic flowers")


def test_broken_lines_are_counted(tmp_path):
    lines = [b"Good Title One", b"", b"Bad \xff\xfe bytes", b"Bell\x07 character", b"x" * 1001,
             b"   ", b"---", b"Good Title Two", b"Good title one."]
    index = OfflineTitleIndex.from_dump(write_lines(tmp_path / "titles.txt", lines))
    assert index.skipped_lines == 4
    assert index.skipped_examples == ["line 3: undecodable UTF-8", "line 4: control character",
                                      "line 5: longer than 1000 characters", "line 7: no letters or digits"]
    assert len(index.titles) == 2  # the duplicate of title one is merged, not counted as broken
    assert index.lookup("good title one").evidence == "exact: Good Title One"
    assert index.describe()["skipped_lines"] == 4


def test_parquet_dump(tmp_path):
    path = tmp_path / "titles.parquet"
    pq.write_table(pa.table({"title": [*TITLES, None, "  "], "year": list(range(len(TITLES) + 2))}), path)
    index = OfflineTitleIndex.from_dump(path)
    assert index.lookup("Über die Elektrodynamik bewegter Körper").supported is True
    assert index.skipped_lines == 1 and index.skipped_examples == [f"row {len(TITLES) + 1}: null title"]


def test_dump_errors(tmp_path):
    no_column = tmp_path / "papers.parquet"
    pq.write_table(pa.table({"name": ["x"]}), no_column)
    with pytest.raises(DataError, match=r"papers\.parquet has no 'title' column"):
        OfflineTitleIndex.from_dump(no_column)
    with pytest.raises(DataError, match="missing.txt"):
        OfflineTitleIndex.from_dump(tmp_path / "missing.txt")
    with pytest.raises(DataError, match="missing.txt"):
        OfflineTitleIndex.cached(tmp_path / "missing.txt", tmp_path / "cache")
    with pytest.raises(DataError, match=r"empty\.txt holds no usable titles \(1 broken"):
        OfflineTitleIndex.from_dump(write_lines(tmp_path / "empty.txt", [b"", b"!!"]))
    broken_gz = tmp_path / "broken.txt.gz"
    broken_gz.write_bytes(gzip.compress(b"Title\n" * 100)[:30])
    with pytest.raises(DataError, match=r"broken\.txt\.gz"):
        OfflineTitleIndex.from_dump(broken_gz)
    with pytest.raises(ConfigError, match="fuzzy_threshold"):
        OfflineTitleIndex.cached(broken_gz, tmp_path / "cache", fuzzy_threshold=1.5)


def test_cached_index_is_reused(dump, tmp_path, monkeypatch):
    cache_dir = tmp_path / "cache"
    first = OfflineTitleIndex.cached(dump, cache_dir, fuzzy_threshold=0.9)
    assert len(list(cache_dir.glob("title-index-v2-*.arrow"))) == 2  # the titles and the blocking index
    monkeypatch.setattr(OfflineTitleIndex, "from_dump", classmethod(lambda *a, **k: pytest.fail("rebuilt")))
    again = OfflineTitleIndex.cached(dump, cache_dir, fuzzy_threshold=0.8)
    assert again.describe() == {**first.describe(), "match": "fuzzy-indel-v2>=0.8"}
    assert again.lookup("Attention is all you nee").supported is True


# --- Semantic Scholar, against a local server ---------------------------------------------------

class FakeS2:
    """Answers /graph/v1/paper/search/match from a per-query script of (status, body, headers);
    unscripted queries get a 404. Records every request."""

    def __init__(self) -> None:
        self.script: dict[str, list[tuple[int, dict, dict]]] = {}
        self.requests: list[dict] = []
        self.always: tuple[int, dict, dict] | None = None
        self.clients: list[SemanticScholarIndex] = []  # closed by the fixture
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                params = dict(urllib.parse.parse_qsl(url.query))
                fake.requests.append({"path": url.path, "params": params, "t": time.monotonic(),
                                      "key": self.headers.get("x-api-key")})
                queue = fake.script.get(params.get("query", ""), [])
                status, body, headers = fake.always or (queue.pop(0) if queue else
                                                       (404, {"error": "Title match not found"}, {}))
                payload = json.dumps(body).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/graph/v1"

    def match(self, query: str, title: str) -> None:
        self.script.setdefault(query, []).append((200, {"data": [{"paperId": "p1", "title": title,
                                                                  "matchScore": 99.0}]}, {}))


@pytest.fixture()
def s2(monkeypatch):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)  # traffic stays on 127.0.0.1
    monkeypatch.setenv("S2_API_KEY", "test-key-123")
    fake = FakeS2()
    threading.Thread(target=fake.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield fake
    for index in fake.clients:
        index.close()
    fake.httpd.shutdown()
    fake.httpd.server_close()


def client(fake: FakeS2, **kwargs) -> SemanticScholarIndex:
    settings = {"base_url": fake.base_url, "rate_limit_per_s": 1000.0, "backoff_s": 0.01, "max_retries": 2,
                **kwargs}
    index = SemanticScholarIndex(**settings)
    fake.clients.append(index)
    return index


def test_s2_match_and_no_match(s2):
    s2.match("Attention is all you need", "Attention Is All You Need")
    index = client(s2)
    assert index.lookup("Attention is all you need") == TitleMatch(True, "exact: Attention Is All You Need")
    assert index.lookup("A paper nobody wrote") == TitleMatch(False, "no match in semantic scholar")
    first = s2.requests[0]
    assert first["path"] == "/graph/v1/paper/search/match"
    assert first["params"] == {"query": "Attention is all you need", "fields": "title"}
    assert first["key"] == "test-key-123"
    desc = index.describe()
    assert desc["match"] == "exact-normalised" and desc["base_url"] == s2.base_url
    assert "test-key-123" not in json.dumps(desc)


def test_s2_returned_title_compared(s2):
    s2.match("Deep Residual Learning for Image Recogniton", "Deep Residual Learning for Image Recognition")
    s2.match("Deep Residual Learning for Image Recogniton", "Deep Residual Learning for Image Recognition")
    exact = client(s2).lookup("Deep Residual Learning for Image Recogniton")
    assert exact.supported is False and exact.evidence.startswith("closest semantic scholar title differs (0.9")
    fuzzy = client(s2, fuzzy_threshold=0.9).lookup("Deep Residual Learning for Image Recogniton")
    assert fuzzy.supported is True and fuzzy.evidence.startswith("fuzzy 0.9")


def test_s2_retries_429_and_5xx(s2):
    s2.script["Paper A"] = [(429, {"message": "slow down"}, {"Retry-After": "0.3"}),
                            (200, {"data": [{"title": "Paper A"}]}, {})]
    s2.script["Paper B"] = [(500, {}, {}), (503, {}, {}), (200, {"data": [{"title": "Paper B"}]}, {})]
    index = client(s2)
    assert index.lookup("Paper A").supported is True
    a1, a2 = s2.requests
    assert a2["t"] - a1["t"] >= 0.28  # Retry-After honoured
    assert index.lookup("Paper B").supported is True
    assert len(s2.requests) == 5


def test_s2_rate_limit_spaces_requests(s2):
    index = client(s2, rate_limit_per_s=10.0)
    threads = [threading.Thread(target=index.lookup, args=(f"Title {i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    times = sorted(r["t"] for r in s2.requests)
    assert len(times) == 4
    assert min(b - a for a, b in zip(times, times[1:])) >= 0.08


def test_s2_cache_avoids_second_request(s2, tmp_path):
    s2.match("Attention is all you need", "Attention Is All You Need")
    index = client(s2, cache_dir=tmp_path / "s2")
    assert index.lookup("Attention is all you need").supported is True
    assert index.lookup("A paper nobody wrote").supported is False
    index.close()  # the answers are on disk now
    again = client(s2, cache_dir=tmp_path / "s2")  # a new process would see the same file
    assert again.lookup("ATTENTION is all you need!") == TitleMatch(True, "exact: Attention Is All You Need")
    assert again.lookup("A paper nobody wrote.").supported is False
    assert len(s2.requests) == 2


def test_s2_failures_are_not_cached(s2, tmp_path):
    s2.script["Paper C"] = [(500, {}, {}), (200, {"data": [{"title": "Paper C"}]}, {})]
    index = client(s2, cache_dir=tmp_path / "s2", max_retries=0)
    assert index.lookup("Paper C").supported is None
    assert index.lookup("Paper C").supported is True


def test_s2_missing_key(s2, monkeypatch):
    monkeypatch.delenv("S2_API_KEY")
    with pytest.raises(ConfigError, match="S2_API_KEY"):
        client(s2)
    keyless = client(s2, api_key_env=None)
    keyless.lookup("Anything")
    assert s2.requests[-1]["key"] is None


def test_s2_rejected_key(s2):
    s2.always = (403, {"message": "Forbidden"}, {})
    with pytest.raises(ConfigError, match="HTTP 403.*S2_API_KEY"):
        client(s2).lookup("Anything")


def test_s2_unreachable_then_endpoint_down(s2):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    index = client(s2, base_url=f"http://127.0.0.1:{port}/graph/v1", max_retries=1, max_consecutive_failures=3)
    first = index.lookup("Paper one")
    assert first.supported is None and first.evidence.startswith("semantic scholar unreachable: ConnectError")
    assert index.lookup("Paper two").supported is None
    with pytest.raises(EndpointDown, match="3 title lookups in a row failed"):
        index.lookup("Paper three")
    with pytest.raises(EndpointDown):
        index.lookup("Paper four")  # stays down


def test_s2_success_resets_failure_count(s2):
    s2.script["Bad"] = [(500, {}, {})] * 5
    s2.match("Good", "Good")
    index = client(s2, max_retries=0, max_consecutive_failures=3)
    assert [index.lookup(t).supported for t in ("Bad", "Bad", "Good", "Bad", "Bad")] == [None, None, True, None, None]
    with pytest.raises(EndpointDown, match="last: HTTP 500 after 1 attempts"):
        index.lookup("Bad")
    assert len(s2.requests) == 6


def test_s2_pickles_without_key(s2):
    index = client(s2, fuzzy_threshold=0.95)
    blob = pickle.dumps(index)
    assert b"test-key-123" not in blob
    clone = pickle.loads(blob)
    assert clone.describe() == index.describe()
    s2.match("Paper D", "Paper D")
    assert clone.lookup("Paper D").supported is True
    assert s2.requests[-1]["key"] == "test-key-123"
