import gzip
import hashlib
import http.server
import threading

import pytest
from tests.conftest import SHARED_DATA

from halluscope.errors import DataError
from halluscope.halogen.downloads import COMMIT as HALOGEN_COMMIT
from halluscope.halogen.downloads import PINS as PINNED
from halluscope.sources import (
    ENV_SOURCE_BASE,
    PYPI_SIMPLE_INDEX,
    DataResolver,
    jsonl_rows,
    public_url,
)

SERVED = b'prompt\n"How to x?"\n'


@pytest.fixture()
def file_server(tmp_path):
    """A static HTTP server on 127.0.0.1 standing in for the public source."""
    served = tmp_path / "served"
    (served / "halogen" / "prompts").mkdir(parents=True)
    (served / "halogen" / "prompts" / "prompts_code.csv").write_bytes(SERVED)
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(served), **k)  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture()
def pinned_served(monkeypatch):
    """The test server's prompts file stands in for the pinned one."""
    monkeypatch.setitem(PINNED, "halogen/prompts/prompts_code.csv.gz", hashlib.sha256(SERVED).hexdigest())


def test_public_urls_are_at_the_pinned_commit(monkeypatch):
    monkeypatch.delenv(ENV_SOURCE_BASE, raising=False)
    repo = f"https://raw.githubusercontent.com/AbhilashaRavichander/HALoGEN/{HALOGEN_COMMIT}"
    assert HALOGEN_COMMIT.startswith("0bd13ac")
    assert public_url("halogen/prompts/prompts_code.csv.gz") == f"{repo}/prompts/prompts_code.csv"
    assert public_url("halogen/recorded/biographies/alpaca_7b_biographies.csv.gz") == \
        f"{repo}/model_hallucinations/biographies/alpaca_7b_biographies.csv"
    assert public_url("halogen/recorded/results/code_results.json") == f"{repo}/scorers/results/code_results.json"
    for name in PINNED:  # every pinned HALOGEN file is fetched from the pinned commit
        if name.startswith("halogen/"):
            assert public_url(name).startswith(f"{repo}/")
    # PyPI's live index is never taken for the pinned snapshot
    with pytest.raises(DataError, match="snapshot pypi/project-names.txt.gz has no public copy"):
        public_url("pypi/project-names.txt.gz")


@pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")
def test_pins_are_the_shared_files():
    """../shared/data holds the public files at the pinned commit (gzipped); the recorded outputs of
    the program-verified tasks, stripped of their label columns there, are not the public ones."""
    for name, digest in PINNED.items():
        body = (SHARED_DATA / name).read_bytes()
        assert hashlib.sha256(gzip.decompress(body) if name.endswith(".gz") else body).hexdigest() == digest, name
    assert "pypi/project-names.txt.gz" in PINNED and "halogen/prompts/prompts_code.csv.gz" in PINNED
    assert "halogen/recorded/code/alpaca_7b_code_AU.csv.gz" not in PINNED


def test_a_download_that_is_not_the_pinned_file_is_refused(tmp_path, file_server, monkeypatch):
    monkeypatch.setenv(ENV_SOURCE_BASE, file_server)
    monkeypatch.setattr("halluscope.sources._repo_shared_data", lambda: None)
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match=r"prompts_code.csv is not the pinned halogen/prompts/prompts_code.csv.gz: "
                                        r"sha256 [0-9a-f]{64}, expected"):
        DataResolver(cache_dir=str(cache)).resolve("halogen/prompts/prompts_code.csv.gz")
    with pytest.raises(DataError, match="has no pinned sha256, so it is not downloaded"):
        DataResolver(cache_dir=str(cache)).resolve("halogen/prompts/other.csv.gz")
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*"))


def test_dir_then_cache_then_download(tmp_path, file_server, monkeypatch, pinned_served):
    monkeypatch.setenv(ENV_SOURCE_BASE, file_server)
    monkeypatch.setattr("halluscope.sources._repo_shared_data", lambda: None)
    cache = tmp_path / "cache"
    resolver = DataResolver(str(tmp_path / "empty"), cache_dir=str(cache))
    path = resolver.resolve("halogen/prompts/prompts_code.csv.gz")
    assert path == cache / "halogen/prompts/prompts_code.csv.gz"
    assert gzip.open(path, "rt").read() == 'prompt\n"How to x?"\n'  # stored gzipped
    # a configured directory wins over the cache
    local = tmp_path / "empty" / "halogen/prompts/prompts_code.csv.gz"
    local.parent.mkdir(parents=True)
    local.write_bytes(gzip.compress(b"prompt\n"))
    assert resolver.resolve("halogen/prompts/prompts_code.csv.gz") == local


def test_missing_file_errors(tmp_path, file_server, monkeypatch):
    monkeypatch.setenv(ENV_SOURCE_BASE, file_server)
    monkeypatch.setattr("halluscope.sources._repo_shared_data", lambda: None)
    with pytest.raises(DataError, match="downloads are disabled"):
        DataResolver(cache_dir=str(tmp_path), download=False).resolve("halogen/prompts/nope.csv.gz")
    monkeypatch.setitem(PINNED, "halogen/prompts/nope.csv.gz", "0" * 64)
    with pytest.raises(DataError, match="downloading .* failed"):
        DataResolver(cache_dir=str(tmp_path)).resolve("halogen/prompts/nope.csv.gz")
    monkeypatch.delenv(ENV_SOURCE_BASE)
    with pytest.raises(DataError, match="no public source"):
        public_url("other/thing.csv")


def test_resolve_any_path_and_url(tmp_path, file_server):
    resolver = DataResolver(cache_dir=str(tmp_path / "c"))
    f = tmp_path / "names.txt"
    f.write_text("a\n")
    assert resolver.resolve_any(str(f)) == f
    got = resolver.resolve_any(f"{file_server}/halogen/prompts/prompts_code.csv")
    assert got.read_text().startswith("prompt")
    with pytest.raises(DataError, match="cannot fetch"):
        resolver.resolve_any(f"{file_server}/missing.txt")


def test_the_live_pypi_index_only_when_asked_for(tmp_path, monkeypatch):
    answer = b'{"meta": {"api-version": "1.1"}, "projects": [{"name": "numpy"}, {"name": "Flask"}]}'
    monkeypatch.setattr("halluscope.sources._fetch", lambda url, what, accept=None: answer)
    got = DataResolver(cache_dir=str(tmp_path)).resolve_any(PYPI_SIMPLE_INDEX)
    assert got.read_text() == "numpy\nFlask\n"


def test_jsonl_rows_report_bad_lines_instead_of_raising():
    lines = ['{"a": 1}\n', "  \n", "{oops\n", "[1, 2]\n", '{"b": 2}']
    assert [(n, row, problem.split(":")[0]) for n, row, problem in jsonl_rows(lines)] == [
        (1, {"a": 1}, ""), (3, None, "invalid JSON"), (4, None, "not a JSON object"), (5, {"b": 2}, "")]
    worded = jsonl_rows([b"\xff\n", b"7\n"], start=0, invalid="bad ({error})", not_object="a {kind}")
    assert [(n, problem.split(" ")[0]) for n, _, problem in worded] == [(0, "bad"), (1, "a")]
    too_long = next(jsonl_rows(["1" * 5000]))  # a ValueError that is not a JSONDecodeError
    assert too_long[:2] == (1, None) and too_long[2].startswith("invalid JSON: Exceeds the limit")
