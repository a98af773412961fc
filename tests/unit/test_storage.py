import os

import pyarrow as pa
import pytest

from halluscope import records
from halluscope.errors import Superseded
from halluscope.storage.fs import Location
from halluscope.storage.run import BATCH_TABLES, RunStore


def _gens(ids):
    return pa.Table.from_pylist([{"gen_id": i, "run_id": "r", "model": "m", "task": "t", "item_id": i,
                                  "sample_idx": 0, "text": "x", "input_tokens": None, "output_tokens": None,
                                  "latency_s": None, "attempts": 0, "error": None} for i in ids],
                                schema=records.GENERATIONS)


def _scores(ids):
    return pa.Table.from_pylist([{"gen_id": i, "model": "m", "task": "t", "item_id": i, "prompt": "p",
                                  "task_kind": "response", "error": None, "responded": True,
                                  "abstention_rule": "r", "n_atoms": 0, "n_unsupported": 0, "n_unverified": 0,
                                  "f": 0.0, "g": 1.0, "atoms": [], "unsupported_atoms": []} for i in ids],
                                schema=records.SCORES)


def test_atomic_write_leaves_no_temporaries(tmp_path):
    loc = Location.from_url(f"file://{tmp_path}").child("a", "b.json")
    loc.write_bytes_atomic(b"one")
    loc.write_bytes_atomic(b"two")
    assert loc.read_bytes() == b"two"
    assert os.listdir(tmp_path / "a") == ["b.json"]


def test_only_committed_batches_are_read(tmp_path):
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "run1")
    store.write_batch("k1", {"generations": _gens(["a", "b"]), "scores": _scores(["a", "b"])})
    # a batch killed after its generations part, before its scores part (the commit)
    store.write_part("generations", "k2", _gens(["c"]))
    assert sorted(store.read_table("generations").column("gen_id").to_pylist()) == ["a", "b"]
    assert store.committed_keys() == {"k1"}
    assert store.prune(BATCH_TABLES, store.committed_keys()) == 1
    assert store.part_keys("generations") == {"k1"}


def test_an_attempt_stops_committing_once_the_run_is_claimed_again(tmp_path):
    root = Location.from_url(f"file://{tmp_path}")
    first, second = RunStore(root, "run"), RunStore(root, "run")
    first.claim()
    first.write_batch("k1", {"generations": _gens(["a"]), "scores": _scores(["a"])})
    second.claim()
    with pytest.raises(Superseded, match=f"claimed by attempt {second.attempt}"):
        first.write_batch("k2", {"generations": _gens(["b"]), "scores": _scores(["b"])})
    with pytest.raises(Superseded):  # nor may it prune what the new owner keeps
        first.prune(BATCH_TABLES, set())
    assert second.committed_keys() == {"k1"} and second.part_keys("generations") == {"k1", "k2"}
    second.write_batch("k3", {"generations": _gens(["b"]), "scores": _scores(["b"])})
    assert second.committed_keys() == {"k1", "k3"}


def test_a_late_commit_of_an_earlier_attempt_is_pruned(tmp_path):
    root = Location.from_url(f"file://{tmp_path}")
    earlier, owner = RunStore(root, "run"), RunStore(root, "run")
    earlier.write_batch("k1", {"generations": _gens(["a", "b"]), "scores": _scores(["a", "b"])})
    owner.claim()
    snapshot = owner.committed_keys()
    # an actor of the earlier attempt that passed its ownership check just before the claim
    earlier.write_batch("late", {"generations": _gens(["c", "d"]), "scores": _scores(["c", "d"])})
    owner.write_batch("k2", {"generations": _gens(["c", "d"]), "scores": _scores(["c", "d"])})
    assert sorted(owner.read_table("scores", ["gen_id"]).column("gen_id").to_pylist()) == list("abccdd")
    assert sorted(owner.read_table("scores", ["gen_id"], keys=snapshot).column("gen_id").to_pylist()) == ["a", "b"]
    assert owner.prune(BATCH_TABLES, snapshot | {"k2"}) == 2
    for table in ("generations", "scores"):
        assert sorted(owner.read_table(table, ["gen_id"]).column("gen_id").to_pylist()) == list("abcd")


def test_empty_table_has_schema(tmp_path):
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "nothing")
    assert store.read_table("scores").schema == records.SCORES
    assert store.read_table("scores", ["gen_id"]).column_names == ["gen_id"]


def test_json_roundtrip(tmp_path):
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "r")
    assert store.read_json("manifest.json") is None
    store.write_json("manifest.json", {"a": 1})
    assert store.read_json("manifest.json") == {"a": 1}
