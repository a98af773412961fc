"""A sentence-transformers bi-encoder directory run with transformers alone.

A bi-encoder is a transformer, a pooling of its token states and an L2 normalisation
(``modules.json``); that is a few lines over ``AutoModel``. Importing sentence-transformers instead
also imports scikit-learn and SciPy, seconds of CPU paid by every worker that embeds (figures in
docs/architecture.md). The vectors equal sentence-transformers' to float rounding
(``tests/unit/test_sentence_model.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.errors import ConfigError
from halluscope.imports import hidden

_POOLING_MODES = ("cls_token", "mean_tokens", "max_tokens")


def _modules(path: Path) -> list[str]:
    """The module types of a sentence-transformers directory; a bare transformer gets mean pooling."""
    spec = path / "modules.json"
    if not spec.is_file():
        return ["Transformer", "Pooling"]
    return [m["type"].rsplit(".", 1)[-1] for m in json.loads(spec.read_text())]


def _pooling_mode(path: Path) -> str:
    config = path / "1_Pooling" / "config.json"
    if not config.is_file():
        return "mean_tokens"
    flags = json.loads(config.read_text())
    on = [k.removeprefix("pooling_mode_") for k, v in flags.items() if k.startswith("pooling_mode_") and v]
    if len(on) != 1 or on[0] not in _POOLING_MODES:
        raise ConfigError(f"{config}: pooling {on} is not supported (one of {', '.join(_POOLING_MODES)})")
    return on[0]


class SentenceModel:
    """Unit-length sentence embeddings from a sentence-transformers directory: Transformer, then
    Pooling (CLS, mean or max), then optionally Normalize; embeddings are normalised either way."""

    def __init__(self, path: Path, device: str | None = None) -> None:
        kinds = _modules(path)
        if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in ([], ["Normalize"]):
            raise ConfigError(f"{path}: modules {kinds} are not a bi-encoder (Transformer, Pooling[, Normalize])")
        self.mode = _pooling_mode(path)
        settings = path / "sentence_bert_config.json"
        bert = json.loads(settings.read_text()) if settings.is_file() else {}
        self.lower_case = bool(bert.get("do_lower_case", False))
        with hidden("sklearn", "scipy.stats"):
            import torch  # noqa: F401 - imported here first, with the modules hidden
            from transformers import AutoModel, AutoTokenizer
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.max_length = int(bert.get("max_seq_length") or self.tokenizer.model_max_length)
        self.network: Any = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
        if device:
            self.network.to(device)
        self.dim = int(self.network.config.hidden_size)

    def _pool(self, states: Any, mask: Any) -> Any:
        if self.mode == "cls_token":
            return states[:, 0]
        mask = mask.unsqueeze(-1).to(states.dtype)
        if self.mode == "max_tokens":
            return states.masked_fill(mask == 0, -1e9).max(dim=1).values
        return (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        """float32 (len(texts), dim). Longest texts first, as sentence-transformers batches them,
        so each batch pads to about its own length."""
        order = np.argsort([-len(t) for t in texts])
        import torch

        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            rows = order[start:start + batch_size]
            batch = [texts[i].strip().lower() if self.lower_case else texts[i].strip() for i in rows]
            inputs = self.tokenizer(batch, padding=True, truncation="longest_first", max_length=self.max_length,
                                    return_tensors="pt").to(self.network.device)
            with torch.inference_mode():
                pooled = self._pool(self.network(**inputs).last_hidden_state, inputs["attention_mask"])
                out[rows] = torch.nn.functional.normalize(pooled, p=2, dim=1).float().cpu().numpy()
        return out
