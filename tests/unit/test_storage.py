import hashlib
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
from halluscope.storage.verified import skipped_parts


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
    assert set(store.parts("generations")) == {"k1"}


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
    assert second.committed_keys() == {"k1"} and set(second.parts("generations")) == {"k1", "k2"}
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
    # the late commit holds the same rows as k2: counted once, before it is pruned too
    assert sorted(owner.read_table("scores", ["gen_id"]).column("gen_id").to_pylist()) == list("abcd")
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

    key_of = {name.split(".")[1]: key for key, names in store.parts("scores").items() for name in names}

    def counted(f, columns=None, filters=None, schema=None):
        key = key_of[hashlib.sha256(f.read()).hexdigest()]  # parts are read from their verified bytes
        f.seek(0)
        opened[key] += 1
        if filters or (columns is not None and "model" in columns):  # read to be filtered by its model
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


def test_reads_of_an_unchanging_run_list_each_folder_once(tmp_path, monkeypatch):
    """The aggregation reads a model at a time: inside ``unchanging`` a table's folder is listed
    and the commits are checked once, whatever the reads; outside, each read lists again."""
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "run1")
    for key in ("k1", "k2"):
        store.write_batch(key, {"generations": _gens([f"{key}-a"]), "scores": _scores([f"{key}-a"])})
    listed: Counter[str] = Counter()
    real = run.list_private

    def counted(folder):
        listed[folder.url.rsplit("/", 1)[1]] += 1
        return real(folder)

    monkeypatch.setattr(run, "list_private", counted)
    with store.unchanging():
        for key in ("k1", "k2"):
            assert store.read_table("generations", ["gen_id"], keys={key}).column("gen_id").to_pylist() == [f"{key}-a"]
            assert store.read_table("scores", ["gen_id"], keys={key}).num_rows == 1
        assert store.committed_keys() == {"k1", "k2"}
    assert listed == {"generations": 1, "scores": 1}
    store.write_batch("k3", {"generations": _gens(["k3-a"]), "scores": _scores(["k3-a"])})
    assert store.committed_keys() == {"k1", "k2", "k3"}  # outside the block, what is there now
    assert store.read_table("generations").num_rows == 3


def test_a_part_altered_planted_or_linked_is_not_read_and_its_batch_is_done_again(tmp_path, caplog):
    """Committed parts are read back as the caches' are (storage.verified): a part edited after it
    was written, one planted under a name that is not its digest, a link, a file anyone may
    write, or one named as an older halluscope named parts - none is read; each is warned about.
    A batch whose commit is not read is not committed: a resume prunes its parts and does it again."""
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "run1")
    for key, ids in (("k1", ["a"]), ("k2", ["b"]), ("k3", ["c"]), ("k4", ["d"]), ("k7", ["g"])):
        store.write_batch(key, {"generations": _gens(ids), "scores": _scores(ids)})
    scores = tmp_path / "run1" / "scores"
    named = {key: names[0] for key, names in store.parts("scores").items()}
    edited = _scores(["b"]).set_column(9, "n_atoms", pa.array([7], pa.int64()))
    (scores / named["k2"]).write_bytes(run.table_to_bytes(edited))  # edited in place after the commit
    (tmp_path / "outside.parquet").write_bytes(run.table_to_bytes(_scores(["x"])))
    os.remove(scores / named["k3"])
    os.symlink(tmp_path / "outside.parquet", scores / named["k3"])  # a link in its place
    os.chmod(scores / named["k4"], 0o666)  # anyone may rewrite it
    os.link(scores / named["k7"], tmp_path / "another-name.parquet")  # a hard link: changed through the other name
    (scores / "part-k5.parquet").write_bytes(run.table_to_bytes(_scores(["e"])))  # an older halluscope's name
    planted = run.table_to_bytes(_scores(["f"]))
    (scores / f"part-k6.{hashlib.sha256(b'other bytes').hexdigest()}.parquet").write_bytes(planted)

    fresh = RunStore(Location.from_url(f"file://{tmp_path}"), "run1")
    with caplog.at_level("WARNING"):
        assert fresh.read_table("scores", ["gen_id"]).column("gen_id").to_pylist() == ["a"]
        assert fresh.committed_keys() == {"k1"}
        assert fresh.read_table("generations", ["gen_id"]).column("gen_id").to_pylist() == ["a"]
    reasons = {url.rsplit("/", 1)[-1]: why for url, why in skipped_parts().items() if "/run1/scores/" in url}
    assert "does not hash to the sha256 in its name" in reasons[named["k2"]]
    assert reasons[named["k3"]].startswith("is a symbolic link")
    assert "writable by others" in reasons[named["k4"]]
    assert reasons[named["k7"]] == "has 2 hard links: its bytes can be changed under another name"
    assert len(reasons) == 5 and "does not hash" in reasons[f"part-k6.{hashlib.sha256(b'other bytes').hexdigest()}.parquet"]
    assert "are not parts named part-<key>.<sha256>.parquet" in caplog.text and "part-k5.parquet" in caplog.text
    # the resume: what is not committed is pruned (its generations too), then done again
    fresh.claim()
    assert fresh.prune(BATCH_TABLES, fresh.committed_keys()) == 9
    fresh.write_batch("k2", {"generations": _gens(["b"]), "scores": _scores(["b"])})
    assert sorted(fresh.read_table("scores", ["gen_id"]).column("gen_id").to_pylist()) == ["a", "b"]
