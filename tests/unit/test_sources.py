import gzip
import http.server
import threading

import pytest

from halluscope.errors import DataError
from halluscope.sources import ENV_SOURCE_BASE, DataResolver, public_url


@pytest.fixture()
def file_server(tmp_path):
    """A static HTTP server on 127.0.0.1 standing in for the public source."""
    served = tmp_path / "served"
    (served / "halogen" / "prompts").mkdir(parents=True)
    (served / "halogen" / "prompts" / "prompts_code.csv").write_text('prompt\n"How to x?"\n')
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(served), **k)  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_public_urls(monkeypatch):
    monkeypatch.delenv(ENV_SOURCE_BASE, raising=False)
    assert public_url("halogen/prompts/prompts_code.csv.gz") == \
        "https://raw.githubusercontent.com/AbhilashaRavichander/HALoGEN/main/prompts/prompts_code.csv"
    assert public_url("pypi/project-names.txt.gz") == "https://pypi.org/simple/"


def test_dir_then_cache_then_download(tmp_path, file_server, monkeypatch):
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
