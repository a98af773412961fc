"""The Brave Search client against a stub HTTP server on 127.0.0.1 (key header, retries, Retry-After,
rate limit, errors), the fixture provider and the existence rule."""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.parse

import pytest

from halluscope.errors import ConfigError
from halluscope.hallulens.search import (
    BraveSearch,
    BraveSearchConfig,
    FixtureSearchProvider,
    SearchError,
    SearchResult,
    entity_exists,
    entity_query,
)

KEY_ENV = "HALLUSCOPE_TEST_BRAVE_KEY"
BRAVE_ANSWER = {"type": "search", "web": {"results": [
    {"title": "<strong>Blue Lantern</strong> Cafe - Paris", "description": "A cozy <strong>cafe</strong> &amp; bakery.",
     "url": "https://example.org/blue"},
    {"title": "Other", "description": "Something else", "url": "https://example.org/other"},
]}}


class Stub:
    """Answers each request with the next scripted (status, body, headers); records what it got."""

    def __init__(self, script: list[tuple[int, object, dict]]) -> None:
        self.script = list(script)
        self.requests: list[dict] = []
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                url = urllib.parse.urlparse(self.path)
                stub.requests.append({"t": time.monotonic(), "path": url.path,
                                      "query": urllib.parse.parse_qs(url.query),
                                      "key": self.headers.get("X-Subscription-Token"),
                                      "accept": self.headers.get("Accept")})
                status, body, headers = stub.script.pop(0) if stub.script else (200, BRAVE_ANSWER, {})
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/res/v1/web/search"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def stub_factory(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "secret-key")
    made: list[Stub] = []

    def make(script):
        made.append(Stub(script))
        return made[-1]
    yield make
    for s in made:
        s.close()


def client(stub: Stub, **kw) -> BraveSearch:
    return BraveSearch(BraveSearchConfig(**{"api_key_env": KEY_ENV, "base_url": stub.url, "rate_limit_per_s": 1000.0,
                                            "backoff_s": 0.01, **kw}))


def test_results_key_header_and_query(stub_factory):
    stub = stub_factory([])
    with client(stub) as brave:
        results = brave.search("cafe named Blue Lantern in Paris", count=3)
    assert results == [SearchResult("Blue Lantern Cafe - Paris", "A cozy cafe & bakery.", "https://example.org/blue"),
                       SearchResult("Other", "Something else", "https://example.org/other")]
    req = stub.requests[0]
    assert req["key"] == "secret-key" and req["accept"] == "application/json"
    assert req["query"] == {"q": ["cafe named Blue Lantern in Paris"], "count": ["3"]}
    assert entity_exists(results, "cafe", "blue lantern")


def test_retries_transient_errors_then_answers(stub_factory):
    stub = stub_factory([(429, {"error": "rate limited"}, {}), (503, "busy", {}), (200, BRAVE_ANSWER, {})])
    with client(stub, max_retries=2) as brave:
        assert len(brave.search("q")) == 2
    assert len(stub.requests) == 3


def test_gives_up_after_retries(stub_factory):
    stub = stub_factory([(500, "down", {})] * 3)
    with client(stub, max_retries=2) as brave, pytest.raises(SearchError, match="after 3 tries: HTTP 500"):
        brave.search("q")
    assert len(stub.requests) == 3


def test_retry_after_is_honoured(stub_factory):
    stub = stub_factory([(429, "slow down", {"Retry-After": "0.3"}), (200, BRAVE_ANSWER, {})])
    with client(stub, backoff_s=0.0) as brave:
        brave.search("q")
    assert stub.requests[1]["t"] - stub.requests[0]["t"] >= 0.3


def test_retry_after_as_an_http_date_is_honoured_up_to_the_cap(stub_factory, monkeypatch):
    """Waits recorded through halluscope.retry's patchable wait instead of slept."""
    import email.utils

    from halluscope import retry

    waits: list[float] = []
    monkeypatch.setattr(retry, "pause", waits.append)
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    stub = stub_factory([(503, "busy", {"Retry-After": in_a_minute}), (429, "slow down", {"Retry-After": in_a_minute}),
                         (200, BRAVE_ANSWER, {})])
    with client(stub, max_backoff_s=45.0) as brave:
        brave.search("q")
    assert len(stub.requests) == 3 and len(waits) == 2
    assert 40.0 < waits[0] <= 45.0 and waits[1] == 45.0  # about a minute away, capped at 45 s


def test_rate_limit_spaces_requests(stub_factory):
    stub = stub_factory([])
    with client(stub, rate_limit_per_s=10.0) as brave:
        start = time.monotonic()
        for _ in range(4):
            brave.search("q")
        elapsed = time.monotonic() - start
    assert elapsed >= 3 * 0.1 - 0.01 and len(stub.requests) == 4  # 10 per second: the 4th starts 0.3 s after the 1st


def test_rate_limit_holds_across_threads(stub_factory):
    stub = stub_factory([])
    with client(stub, rate_limit_per_s=20.0) as brave:
        threads = [threading.Thread(target=brave.search, args=("q",)) for _ in range(6)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
    assert elapsed >= 5 * 0.05 - 0.01 and len(stub.requests) == 6  # 6 requests need 5 intervals of 1/20 s


@pytest.mark.parametrize("status, body, error, match", [
    (401, "bad key", ConfigError, f"rejected the API key in {KEY_ENV} \\(HTTP 401\\)"),
    (422, "bad query", SearchError, "HTTP 422 for 'q': bad query"),
    (200, "<html>", SearchError, "non-JSON for 'q'"),
])
def test_errors(stub_factory, status, body, error, match):
    stub = stub_factory([(status, body, {})])
    with client(stub) as brave, pytest.raises(error, match=match):
        brave.search("q")
    assert len(stub.requests) == 1  # not retried


def test_no_web_results(stub_factory):
    stub = stub_factory([(200, {"type": "search", "query": {"original": "q"}}, {})])
    with client(stub) as brave:
        assert brave.search("q") == []


def test_missing_key_is_a_config_error(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(ConfigError, match=f"environment variable {KEY_ENV} \\(Brave Search API key\\) is not set"):
        BraveSearch(BraveSearchConfig(api_key_env=KEY_ENV))
    monkeypatch.setenv(KEY_ENV, "k")
    with pytest.raises(ConfigError, match="must be an http"):
        BraveSearch(BraveSearchConfig(api_key_env=KEY_ENV, base_url="ftp://x"))


def test_connection_refused_is_retried_then_fails(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "k")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    brave = BraveSearch(BraveSearchConfig(api_key_env=KEY_ENV, base_url=f"http://127.0.0.1:{port}/search",
                                          max_retries=1, backoff_s=0.0, rate_limit_per_s=1000.0))
    with pytest.raises(SearchError, match="after 2 tries: connection error"):
        brave.search("q")


def test_fixture_provider(tmp_path):
    (tmp_path / "search.json").write_text(json.dumps({
        "cafe named Blue Lantern in Paris": [{"title": "Blue Lantern | Paris", "snippet": "The Blue Lantern cafe"},
                                             {"title": "x", "snippet": "y"}, {"title": "x", "snippet": "y"},
                                             {"title": "Blue Lantern", "snippet": "fourth result, ignored"}],
        "bar named Flaky": {"error": "RATE_LIMITED"}}))
    fixture = FixtureSearchProvider.from_json(tmp_path / "search.json")
    results = fixture.search(entity_query("cafe", "Blue Lantern", "Paris"))
    assert len(results) == 3 and entity_exists(results, "cafe", "Blue Lantern")
    assert fixture.search("bar named Nobody") == []
    with pytest.raises(SearchError, match="RATE_LIMITED"):
        fixture.search("bar named Flaky")
    assert fixture.queries == ["cafe named Blue Lantern in Paris", "bar named Nobody", "bar named Flaky"]
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ConfigError, match="must be a JSON object"):
        FixtureSearchProvider.from_json(tmp_path / "list.json")


@pytest.mark.parametrize("results, exists", [
    ([SearchResult("The Blue Lantern", "a cafe in Paris")], True),
    ([SearchResult("The Blue Lantern", "a restaurant in Paris")], False),  # type not in the snippet
    ([SearchResult("Lantern", "a cafe called Blue Lantern")], False),  # name not in the title
    ([SearchResult("THE BLUE LANTERN", "A CAFE")], True),  # compared casefolded
    ([], False),
])
def test_entity_exists(results, exists):
    assert entity_exists(results, "cafe", "Blue Lantern") is exists
