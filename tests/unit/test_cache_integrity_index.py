"""The passage index persisted under ``<storage.root>/_cache/indexes/<key>/`` is read back only
if this cache wrote it: a linked, altered or others-writable file is rebuilt over, with a warning."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from halluscope.knowledge.passages import ArticleStore
from halluscope.knowledge.retrieval import DenseRetriever, cache_key
from halluscope.storage.fs import Location

pytest.importorskip("faiss")

ARTICLES = {"Ada Lovelace": ["Ada wrote the first program.", "She worked with Babbage."],
            "Alan Turing": ["Turing defined computability.", "He worked at Bletchley Park."]}


class FakeEncoder:
    """Unit vectors from a hash of each text: fast, deterministic, counts what it embeds."""

    name = "fake-encoder@000000000000"
    dim = 16

    def __init__(self) -> None:
        self.texts: list[str] = []

    def encode(self, texts):
        self.texts.extend(texts)
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[:self.dim], dtype=np.uint8) for t in texts]
        vectors = np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim) + 1.0
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture()
def store():
    return ArticleStore({t: list(ps) for t, ps in ARTICLES.items()}, "test", 256)


@pytest.fixture()
def root(tmp_path):
    return Location.from_url(f"file://{tmp_path / 'root'}").child("_cache", "indexes")


def _folder(root, store, encoder) -> Path:
    return Path(root.path) / cache_key(store, encoder)


def _cached(store, root):
    encoder = FakeEncoder()
    retriever = DenseRetriever.cached(store, encoder, root)  # type: ignore[arg-type]
    return retriever, len(encoder.texts)


def _warned(caplog, *words) -> bool:
    return any(all(w in r.getMessage() for w in words) for r in caplog.records if r.levelno == logging.WARNING)


def test_own_index_is_reused_and_private(store, root):
    old = os.umask(0o000)
    try:
        _, built = _cached(store, root)
    finally:
        os.umask(old)
    assert built == 4
    folder = _folder(root, store, FakeEncoder())
    assert sorted(os.listdir(folder)) == ["index.faiss", "meta.parquet", "meta.sha256"]
    assert all((folder / n).stat().st_mode & 0o777 == 0o644 for n in os.listdir(folder))
    _, built = _cached(store, root)
    assert built == 0


def test_altered_metadata_is_rebuilt(store, root, caplog):
    _cached(store, root)
    meta = _folder(root, store, FakeEncoder()) / "meta.parquet"
    table = pq.read_table(meta)
    poisoned = table.set_column(1, "passage", pa.array(["POISONED passage"] * table.num_rows))
    buf = io.BytesIO()
    pq.write_table(poisoned.replace_schema_metadata(table.schema.metadata), buf)
    meta.write_bytes(buf.getvalue())
    with caplog.at_level(logging.WARNING, logger="halluscope.knowledge.retrieval"):
        retriever, built = _cached(store, root)
    assert built == 4 and "POISONED passage" not in retriever.passages
    assert _warned(caplog, "meta.parquet does not hash to meta.sha256")


def test_index_file_writable_by_others_is_rebuilt(store, root, caplog):
    _cached(store, root)
    os.chmod(_folder(root, store, FakeEncoder()) / "index.faiss", 0o666)
    with caplog.at_level(logging.WARNING, logger="halluscope.knowledge.retrieval"):
        _, built = _cached(store, root)
    assert built == 4 and _warned(caplog, "index.faiss", "writable by others")
    _, built = _cached(store, root)  # the rebuild replaced it with a private file
    assert built == 0


def test_symlinked_index_folder_is_neither_read_nor_written(store, root, tmp_path, caplog):
    elsewhere = Location.from_url(f"file://{tmp_path / 'elsewhere'}")
    _cached(store, elsewhere)  # a complete index of ours, outside the root
    folder = _folder(root, store, FakeEncoder())
    folder.parent.mkdir(parents=True)
    folder.symlink_to(_folder(elsewhere, store, FakeEncoder()), target_is_directory=True)
    before = {n: (folder / n).stat().st_mtime_ns for n in os.listdir(folder)}
    with caplog.at_level(logging.WARNING, logger="halluscope.knowledge.retrieval"):
        _, built = _cached(store, root)
    assert built == 4 and _warned(caplog, "symbolic link")
    assert {n: (folder / n).stat().st_mtime_ns for n in os.listdir(folder)} == before


def test_index_of_the_old_layout_is_rebuilt_once(store, root, caplog):
    _cached(store, root)
    (_folder(root, store, FakeEncoder()) / "meta.sha256").unlink()
    with caplog.at_level(logging.WARNING, logger="halluscope.knowledge.retrieval"):
        _, built = _cached(store, root)
    assert built == 4 and _warned(caplog, "has no meta.sha256")
    assert _cached(store, root)[1] == 0


def test_an_index_copied_to_another_key_is_not_used(store, root):
    """meta.parquet names the key it was built for: a folder copied under another key is rebuilt."""
    _cached(store, root)
    other = ArticleStore({"Grace Hopper": ["Hopper wrote a compiler."]}, "other", 256)
    shutil.copytree(_folder(root, store, FakeEncoder()), _folder(root, other, FakeEncoder()))
    retriever, built = _cached(other, root)
    assert built == 1 and retriever.passages == ["Hopper wrote a compiler."]
    assert json.loads(pq.read_schema(_folder(root, other, FakeEncoder()) / "meta.parquet")
                      .metadata[b"halluscope"])["key"] == cache_key(other, FakeEncoder())
