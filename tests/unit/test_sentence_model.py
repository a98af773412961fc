"""The transformers-only bi-encoder against sentence-transformers itself, on the packaged MiniLM
and real text (HALOGEN's recorded biographies)."""

from __future__ import annotations

import csv
import gzip
import json
import shutil

import numpy as np
import pytest
from tests.conftest import SHARED_DATA

from halluscope.errors import ConfigError
from halluscope.knowledge.retrieval import default_model_path
from halluscope.knowledge.sentence_model import SentenceModel

BIOS = SHARED_DATA / "halogen" / "responses" / "biographies"


def _texts() -> list[str]:
    """Sentences of every length up to past the 256-token cut, an empty one and padding spaces."""
    texts = ["", "  Who wrote Hamlet?  ", "x " * 600]
    for path in sorted(BIOS.glob("*.csv.gz"))[:2]:
        with gzip.open(path, "rt", newline="") as f:
            texts += [row["response"] for row, _ in zip(csv.DictReader(f), range(40))]
    return texts


@pytest.mark.skipif(not BIOS.exists(), reason="needs ../shared/data")
def test_vectors_equal_sentence_transformers() -> None:
    from sentence_transformers import SentenceTransformer

    texts = _texts()
    ours = SentenceModel(default_model_path()).encode(texts, batch_size=16)
    theirs = SentenceTransformer(str(default_model_path()), device="cpu").encode(
        texts, batch_size=16, normalize_embeddings=True, convert_to_numpy=True)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape == (len(texts), 384)
    assert np.abs(ours - theirs).max() < 1e-5
    # what retrieval uses: the nearest text of each text is the same
    assert ((ours @ ours.T).argsort(axis=1)[:, -2:] == (theirs @ theirs.T).argsort(axis=1)[:, -2:]).all()


def _copy(tmp_path, modules: list[str], pooling: dict | None = None):
    model = tmp_path / "model"
    shutil.copytree(default_model_path(), model)
    (model / "modules.json").write_text(json.dumps(
        [{"idx": i, "name": str(i), "path": "", "type": f"sentence_transformers.models.{m}"}
         for i, m in enumerate(modules)]))
    if pooling is not None:
        (model / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return model


def test_other_module_chains_and_poolings_are_config_errors(tmp_path) -> None:
    with pytest.raises(ConfigError, match="not a bi-encoder"):
        SentenceModel(_copy(tmp_path / "a", ["Transformer", "Pooling", "Dense", "Normalize"]))
    with pytest.raises(ConfigError, match="pooling .*weightedmean"):
        SentenceModel(_copy(tmp_path / "b", ["Transformer", "Pooling"], {"pooling_mode_weightedmean_tokens": True}))


def test_cls_pooling_takes_the_first_token(tmp_path) -> None:
    cls = SentenceModel(_copy(tmp_path, ["Transformer", "Pooling"], {"pooling_mode_cls_token": True}))
    mean = SentenceModel(default_model_path())
    text = ["Ada Lovelace wrote the first program."]
    inputs = cls.tokenizer(text, return_tensors="pt")
    first = cls.network(**inputs).last_hidden_state[:, 0].detach().numpy()
    assert np.allclose(cls.encode(text, 8), first / np.linalg.norm(first), atol=1e-6)
    assert not np.allclose(cls.encode(text, 8), mean.encode(text, 8), atol=1e-3)
