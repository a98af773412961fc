import os
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from halluscope import records
from halluscope.errors import Superseded
from halluscope.storage import run
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


def test_a_read_by_model_and_task_opens_only_the_parts_that_hold_them(tmp_path, monkeypatch):
    """The footer tells which models and tasks a part holds (a part's key fixes them): a filtered
    read skips the others unopened once it has seen them, and reads without the filter a part
    that holds only what is asked for; the rows are those pyarrow's filter keeps."""
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "run1")
    batches = {"k1": [("A", "t1"), ("A", "t1")], "k2": [("A", "t2")], "k3": [("B", "t1"), ("B", "t1")],
               "k4": [("A", "t1"), ("B", "t1")],  # two models in one part, as an earlier version wrote
               "k5": []}
    for key, rows in batches.items():
        part = _scores([f"{key}-{i}" for i in range(len(rows))])
        part = part.set_column(1, "model", pa.array([m for m, _ in rows], pa.string()))
        store.write_batch(key, {"scores": part.set_column(2, "task", pa.array([t for _, t in rows], pa.string()))})
    every = store.read_table("scores")
    opened: Counter[str] = Counter()
    filtered: list[str] = []
    real = run.read_parquet

    def counted(f, columns=None, filters=None, schema=None):
        key = os.path.basename(f.path).removeprefix("part-").removesuffix(".parquet")
        opened[key] += 1
        if filters:
            filtered.append(key)
        return real(f, columns, filters, schema)

    monkeypatch.setattr(run, "read_parquet", counted)
    for filters in ([("model", "==", "A")], [("model", "==", "B"), ("task", "==", "t1")],
                    [("task", "in", ["t2", "t9"])], [("model", "==", "C")],
                    [("model", "==", "B"), ("gen_id", "==", "k3-1")]):
        assert store.read_table("scores", ["gen_id", "model"], filters) == \
            every.filter(pq.filters_to_expression(filters)).select(["gen_id", "model"]), filters
    # seen once, a part of other models is never opened again, and only k4 needed the filter
    opened.clear()
    filtered.clear()
    assert store.read_table("scores", ["gen_id"], [("model", "==", "B")]).column("gen_id").to_pylist() == \
        ["k3-0", "k3-1", "k4-1"]
    assert opened == {"k3": 1, "k4": 1} and filtered == ["k4"]
    assert store.parts_by("model") == {"A": {"k1", "k2", "k4"}, "B": {"k3", "k4"}}
    with pytest.raises(ValueError, match="'gen_id' is not one of"):
        store.parts_by("gen_id")
