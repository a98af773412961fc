"""Similarity backends (real MiniLM cosine, a CrossEncoder from a local directory) and the
content-hash cache of embeddings and similarity matrices, in memory and on a storage Location."""

import pickle
import shutil

import numpy as np
import pytest

from halluscope.errors import ConfigError
from halluscope.fewl.cache import ArtefactCache, content_key
from halluscope.fewl.similarity import CachedSimilarity, CrossEncoderSimilarity, EmbeddingCosine
from halluscope.knowledge.retrieval import Encoder
from halluscope.storage.fs import Location


class CountingEncoder:
    """The real encoder, counting the texts it is asked to embed."""

    def __init__(self, encoder):
        self.inner = encoder
        self.name = encoder.name
        self.dim = encoder.dim
        self.texts = 0

    def encode(self, texts):
        self.texts += len(texts)
        return self.inner.encode(texts)


@pytest.fixture(scope="module")
def encoder():
    enc = Encoder()
    assert enc.model is not None  # load once for the module
    return enc


def test_cosine_is_in_unit_range_and_symmetric(encoder):
    sim = EmbeddingCosine(encoder)
    texts = ["Canberra is the capital of Australia.", "Australia's capital city is Canberra.",
             "Water boils at 100 degrees Celsius."]
    m = sim.matrix(texts, texts)
    assert m.shape == (3, 3) and m.dtype == np.float64
    assert np.all((m >= 0) & (m <= 1)) and np.allclose(m, m.T)
    assert np.allclose(np.diag(m), 1.0)
    assert m[0, 1] > 0.8 > 0.3 > m[0, 2]  # paraphrase vs unrelated
    assert sim.matrix([], texts).shape == (0, 3) and sim.matrix(texts, []).shape == (3, 0)
    assert sim.name.startswith("cosine:all-MiniLM-L6-v2@")


def test_each_text_is_embedded_once(encoder):
    counting = CountingEncoder(encoder)
    sim = EmbeddingCosine(counting)
    sim.matrix(["a b", "c d"], ["a b", "e f"])
    assert counting.texts == 3
    sim.matrix(["e f"], ["c d", "a b"])
    assert counting.texts == 3
    # pickling (to a Ray worker) drops the vectors, not the settings
    clone = pickle.loads(pickle.dumps(sim))
    assert clone._vectors == {} and clone.encoder.name == counting.name


def test_embeddings_and_matrices_persist_on_a_location(encoder, tmp_path):
    root = Location.from_url(str(tmp_path / "cache"))
    counting = CountingEncoder(encoder)
    first = CachedSimilarity(EmbeddingCosine(counting, ArtefactCache(root)), ArtefactCache(root))
    m1 = first.matrix(["The sun is white.", "The sun is yellow."], ["Seen from space the sun is white."])
    assert counting.texts == 3
    assert first.cache.stats.misses == 1 and first.cache.stats.memory_hits == 0
    first.matrix(["The sun is white.", "The sun is yellow."], ["Seen from space the sun is white."])
    assert first.cache.stats.memory_hits == 1
    # a new process (fresh memory) finds both the matrix and the embeddings on storage
    again = CountingEncoder(encoder)
    second = CachedSimilarity(EmbeddingCosine(again, ArtefactCache(root)), ArtefactCache(root))
    assert np.array_equal(second.matrix(["The sun is white.", "The sun is yellow."],
                                        ["Seen from space the sun is white."]), m1)
    assert second.cache.stats.storage_hits == 1 and again.texts == 0
    assert second.inner.embed(["Seen from space the sun is white.", "The sun is white."]).shape == (2, 384)
    assert again.texts == 2  # another batch of texts is another artefact: embedded, then stored
    assert sorted(root.list_names()) == ["embeddings", "similarity"]


def test_a_damaged_entry_is_recomputed(tmp_path):
    cache = ArtefactCache(Location.from_url(str(tmp_path)))
    key = content_key("x", ["a"], ["b"])
    cache.put("similarity", key, np.array([[0.5]]))
    stored = tmp_path / "similarity" / key[:2] / f"{key}.npy"
    stored.write_bytes(b"not numpy")
    fresh = ArtefactCache(Location.from_url(str(tmp_path)))
    assert fresh.get_or_compute("similarity", key, lambda: np.array([[0.25]])).tolist() == [[0.25]]
    assert (fresh.stats.damaged, fresh.stats.misses) == (1, 1)
    assert np.load(stored).tolist() == [[0.25]]
    # content keys depend on the list structure, not on a joined string
    assert content_key("x", ["a b"], ["c"]) != content_key("x", ["a", "b"], ["c"])


def test_cross_encoder_needs_a_local_model(tmp_path):
    with pytest.raises(ConfigError, match="cross-encoder model directory not found"):
        CrossEncoderSimilarity(tmp_path / "hhem")


def test_cross_encoder_from_a_local_directory(encoder, tmp_path):
    # a BERT checkpoint (MiniLM's) with a fresh one-output head: the real CrossEncoder loading path
    model_dir = tmp_path / "tiny-cross-encoder"
    model_dir.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
                 "special_tokens_map.json"):
        shutil.copy(encoder.model_path / name, model_dir / name)
    ordered = CrossEncoderSimilarity(model_dir, symmetric=False)
    sym = CrossEncoderSimilarity(model_dir)
    sym._model = ordered.model  # one load for both
    left, right = ["The sun is white."], ["The sun is yellow.", "Water boils at 100 degrees."]
    forward = ordered.matrix(left, right)
    backward = ordered.matrix(right, left).T
    assert forward.shape == (1, 2) and np.all((forward >= 0) & (forward <= 1))
    assert np.allclose(sym.matrix(left, right), (forward + backward) / 2)
    assert sym.name == "cross-encoder:tiny-cross-encoder:sym" and ordered.name.endswith(":ordered")
    assert pickle.loads(pickle.dumps(sym))._model is None
