"""Built indexes are cached in a format that cannot run code, and a cache file someone else could
have written, a linked one or one whose rows are not those built is never used: a planted file
neither runs nor changes a verdict."""

import gzip
import os
import pickle

import numpy as np
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


def test_rows_rewritten_under_a_valid_key_are_refused_and_rebuilt(tmp_path, snapshot, capsys):
    """The attack: the index rewritten with a name added, the genuine file's metadata (its key)
    kept, as its owner could. The key matches; the rows do not hash to what was built."""
    cache_dir = tmp_path / "data" / "indexes"
    knowledge = Knowledge(DataResolver(cache_dir=str(tmp_path / "data"), download=False))
    assert knowledge.packages(str(snapshot)).lookup("hallucinated-pkg")[0] is False
    [cached] = cache_dir.glob("pypi-index-*.arrow")
    genuine = pa.ipc.open_file(cached).read_all()
    forged = pa.table({"name": ["hallucinated-pkg", "numpy", "requests"]}).replace_schema_metadata(
        genuine.schema.metadata)
    with pa.ipc.new_file(cached, forged.schema) as writer:  # rewritten in place: one name, this user's
        writer.write_table(forged)
    assert pa.ipc.open_file(cached).read_all().column("name").to_pylist()[0] == "hallucinated-pkg"
    capsys.readouterr()
    again = Knowledge(DataResolver(cache_dir=str(tmp_path / "data"), download=False))
    assert again.packages(str(snapshot)).lookup("hallucinated-pkg") == (False, "not in stdlib or PyPI snapshot")
    assert f"halluscope: ignoring {cached}: it holds rows other than those built" in capsys.readouterr().err
    # rebuilt from the source and saved over it: the next process loads it, with no warning
    assert load_table(cached, f"pypi-index-v2:{sha256_file(snapshot)}")[0].column("name").to_pylist() == [
        "numpy", "requests"]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("linked", ["file", "folder"])
def test_an_index_reached_through_a_symbolic_link_is_not_used(tmp_path, snapshot, capsys, linked):
    """A link to a valid index of this user's: what it points to can change after the check."""
    elsewhere = tmp_path / "elsewhere"
    PackageIndex.cached(snapshot, elsewhere)
    [real] = elsewhere.glob("pypi-index-*.arrow")
    key = f"pypi-index-v2:{sha256_file(snapshot)}"
    assert load_table(real, key) is not None
    cache_dir = tmp_path / "indexes"
    if linked == "file":
        cache_dir.mkdir()
        (cache_dir / real.name).symlink_to(real)
    else:
        cache_dir.symlink_to(elsewhere)
    capsys.readouterr()
    assert load_table(cache_dir / real.name, key) is None
    assert "is a symbolic link" in capsys.readouterr().err


@pytest.mark.parametrize("compression", [None, "zstd", "lz4"])
def test_a_table_of_any_layout_loads_back_as_saved(tmp_path, compression):
    """The content digest is the same for the table a build hands over (sliced, chunked, with nulls,
    lists) as for the one decoded from its file, compressed or not: a genuine index is never refused."""
    ids = pa.LargeListArray.from_arrays(pa.array([0, 2, 3, 3, 5], pa.int64()), pa.array(np.arange(5, dtype=np.uint32)))
    table = pa.table({"word": pa.chunked_array([pa.array(["a", None, "ccc", "dd"]).slice(1), pa.array(["x"])]),
                      "ids": pa.chunked_array([ids.slice(0, 3), ids.slice(3)])})
    path = tmp_path / "t.arrow"
    assert save_table(path, "k", table, {"n": 1}, compression)
    loaded, info = load_table(path, "k")
    assert loaded.equals(table) and info == {"n": 1}
