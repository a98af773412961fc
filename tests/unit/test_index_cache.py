"""Built indexes are cached in a format that cannot run code, and a cache file someone else could
have written is never used: a planted file neither runs nor changes a verdict."""

import gzip
import os
import pickle

import pyarrow as pa
import pytest

from halluscope.knowledge.base import Knowledge
from halluscope.knowledge.index_cache import load_table, save_table
from halluscope.knowledge.pypi import PackageIndex
from halluscope.knowledge.specs import TitleIndexSpec
from halluscope.knowledge.titles import OfflineTitleIndex
from halluscope.sources import DataResolver, sha256_file


class Planted:
    """Unpickling this writes the marker file: what an attacker's planted pickle would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture()
def snapshot(tmp_path):
    path = tmp_path / "names.txt.gz"
    path.write_bytes(gzip.compress(b"numpy\nrequests\n"))
    return path


def _plant_pickles(cache_dir, digest, marker):
    """Every name the pickle caches used, and the same names with today's suffix."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    blob = pickle.dumps(Planted(marker))
    names = [f"pypi-index-{digest[:16]}.pickle", f"title-index-v1-{digest[:16]}-exact.pickle",
             f"title-index-v1-{digest[:16]}-fuzzy.pickle", f"pypi-index-v2-{digest[:16]}.arrow",
             f"title-index-v2-{digest[:16]}.arrow", f"title-index-v2-{digest[:16]}-postings.arrow"]
    for name in names:
        (cache_dir / name).write_bytes(blob)


def test_a_planted_pickle_never_runs(tmp_path, snapshot):
    marker = tmp_path / "pwned"
    cache_dir = tmp_path / "data" / "indexes"
    _plant_pickles(cache_dir, sha256_file(snapshot), marker)
    resolver = DataResolver(cache_dir=str(tmp_path / "data"), download=False)
    knowledge = Knowledge(resolver)
    assert knowledge.packages(str(snapshot)).lookup("numpy") == (True, "pypi")
    assert knowledge.titles(TitleIndexSpec(dump=str(snapshot))).lookup("requests").supported is True
    OfflineTitleIndex.cached(snapshot, cache_dir, fuzzy_threshold=0.9)
    assert not marker.exists()
    # the garbage was replaced by real indexes, which the next process loads
    again = PackageIndex.cached(snapshot, cache_dir)
    assert again.names == {"numpy", "requests"} and not marker.exists()


def test_an_index_writable_by_others_is_not_used(tmp_path, snapshot):
    """A valid Arrow index with extra names, planted where another user could write: ignored."""
    cache_dir = tmp_path / "indexes"
    PackageIndex.cached(snapshot, cache_dir)
    [cached] = cache_dir.glob("pypi-index-*.arrow")
    key = f"pypi-index-v2:{sha256_file(snapshot)}"
    save_table(cached, key, pa.table({"name": ["numpy", "requests", "hallucinated-pkg"]}), {})
    assert load_table(cached, key) is not None  # ours: used
    os.chmod(cached, 0o666)
    assert PackageIndex.cached(snapshot, cache_dir).names == {"numpy", "requests"}
    os.chmod(cached, 0o644)
    os.chmod(cache_dir, 0o777)  # a folder others can write to (a file could be swapped in)
    assert load_table(cached, key) is None
    os.chmod(cache_dir, 0o755)
    os.link(cached, tmp_path / "another-name.arrow")  # a hard link: its bytes change under the other name
    assert load_table(cached, key) is None


def test_an_index_of_another_source_or_damaged_is_rebuilt(tmp_path, snapshot):
    cache_dir = tmp_path / "indexes"
    first = PackageIndex.cached(snapshot, cache_dir)
    [cached] = cache_dir.glob("pypi-index-*.arrow")
    assert load_table(cached, "pypi-index-v2:another-digest") is None
    cached.write_bytes(cached.read_bytes()[:100])
    assert PackageIndex.cached(snapshot, cache_dir).names == first.names
    assert load_table(cached, f"pypi-index-v2:{sha256_file(snapshot)}") is not None
