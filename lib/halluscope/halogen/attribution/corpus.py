"""Exact-phrase and co-occurrence lookups over a document collection (HALOGEN §5).

The paper traces hallucinations to pretraining corpora through WIMBD; it does not say how the
queries match. Here a query is a list of phrases and a document matches when it holds every one
of them. Two backends answer the same ``CorpusIndex`` protocol:

* ``LocalCorpus``: files (plain text, JSON lines, Parquet) from a local path or any fsspec URL
  (``s3://``...), indexed in memory. It suits a documented subset of a corpus, not a TB-scale one.
* ``SearchServiceCorpus``: an Elasticsearch-compatible service (WIMBD-style) over HTTP, for the
  full corpora.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import fsspec
import httpx
import pyarrow.parquet as pq

from halluscope.errors import ConfigError, DataError
from halluscope.sources import jsonl_rows

WORD = re.compile(r"\w+")
PHRASE_MATCH = ("case-insensitive exact phrase: the phrase's own characters, any run of whitespace for a "
                "run of whitespace, starting and ending at a word boundary ('1844' does not match '18445')")
_COMPRESSION = (".gz", ".bz2", ".xz", ".zst")
_FORMATS = {".txt": "txt", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
_EXAMPLES = 10  # broken records and skipped files listed by name in describe(); the rest counted


@dataclass(frozen=True)
class Hits:
    """How many documents hold every phrase of a query, and the first few of them."""

    count: int
    sample: list[str]


class CorpusIndex(Protocol):
    """A document collection answering phrase and co-occurrence queries."""

    def docs_with_all(self, phrases: Sequence[str]) -> set[str]:
        """Ids of the documents that contain every phrase (co-occurrence = same document)."""
        ...

    def hits(self, phrases: Sequence[str], sample: int) -> Hits:
        """Count and a sample of ``docs_with_all``: what classification needs, and all that a
        service can answer cheaply for a phrase held by millions of documents."""
        ...

    def describe(self) -> dict:
        """Provenance for the run's attribution record: what was searched and how."""
        ...


def phrase_pattern(phrase: str) -> re.Pattern[str]:
    """The regex that decides whether a document holds ``phrase`` (see PHRASE_MATCH)."""
    if not WORD.search(phrase):
        raise ValueError(f"phrase {phrase!r} has no word characters to search for")
    body = r"\s+".join(re.escape(part) for part in phrase.split())
    return re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)


def _checked(phrases: Sequence[str]) -> list[str]:
    if isinstance(phrases, str) or not phrases:
        raise ValueError(f"a query needs a non-empty list of phrases, got {phrases!r}")
    for p in phrases:
        phrase_pattern(p)
    return list(phrases)


class LocalCorpus:
    """An in-memory inverted index (lower-cased word tokens -> documents). A query intersects the
    postings of its phrases' tokens, then confirms each phrase with a regex on the candidates, so
    the postings only prune and the regex alone decides a match."""

    def __init__(self, documents: Iterable[tuple[str, str]], provenance: dict | None = None) -> None:
        self._ids: list[str] = []
        self._texts: list[str] = []
        self._postings: dict[str, set[int]] = {}
        seen: set[str] = set()
        duplicates = 0
        for doc_id, text in documents:
            if doc_id in seen:
                duplicates += 1  # the first document with an id is kept
                continue
            seen.add(doc_id)
            n = len(self._ids)
            self._ids.append(doc_id)
            self._texts.append(text)
            for token in set(WORD.findall(text.lower())):
                self._postings.setdefault(token, set()).add(n)
        self._provenance = {"kind": "local", **(provenance or {}), "documents": len(self._ids),
                            "duplicate_ids_skipped": duplicates, "vocabulary": len(self._postings),
                            "phrase_match": PHRASE_MATCH}

    @classmethod
    def from_paths(cls, paths: str | Sequence[str], storage_options: dict | None = None) -> LocalCorpus:
        """Load files, folders (recursively) or globs, local or fsspec URLs (``s3://``...).

        Formats by suffix, optionally compressed (.gz, .bz2, .xz, .zst): ``.txt`` is one document
        (id = the file's path); ``.jsonl``/``.json``/``.ndjson`` hold one ``{"id", "text"}`` object
        a line (id optional, default ``path:line``); ``.parquet`` has a ``text`` column and an
        optional ``id`` (default ``path:row``). Unreadable records are counted, with examples, in
        ``describe()``; a folder's files of other formats are listed there as skipped."""
        loader = _Loader(storage_options or {})
        corpus = cls(loader.documents([paths] if isinstance(paths, str) else list(paths)))
        corpus._provenance.update(loader.report())
        return corpus

    def _matching(self, phrases: Sequence[str]) -> list[int]:
        """Positions (in load order) of the documents holding every phrase."""
        patterns = [phrase_pattern(p) for p in _checked(phrases)]
        tokens = {t for p in phrases for t in WORD.findall(p.lower())}
        postings = sorted((self._postings.get(t, set()) for t in tokens), key=len)
        candidates = postings[0].intersection(*postings[1:])
        return sorted(d for d in candidates if all(p.search(self._texts[d]) for p in patterns))

    def docs_with_all(self, phrases: Sequence[str]) -> set[str]:
        return {self._ids[d] for d in self._matching(phrases)}

    def hits(self, phrases: Sequence[str], sample: int) -> Hits:
        found = self._matching(phrases)
        return Hits(len(found), [self._ids[d] for d in found[:sample]])

    def describe(self) -> dict:
        return dict(self._provenance)


def _url(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """A path as a user would write it: plain for local files, with the protocol otherwise."""
    proto = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    return path if proto in ("file", "local") else f"{proto}://{path}"


def _format(path: str) -> str | None:
    name = path.rsplit("/", 1)[-1].lower()
    for suffix in _COMPRESSION:
        if name.endswith(suffix):
            name = name[:-len(suffix)]
    return _FORMATS.get(os.path.splitext(name)[1])


class _Loader:
    """Yields (id, text) from corpus files and counts what it could not use."""

    def __init__(self, storage_options: dict) -> None:
        self.storage_options = storage_options
        self.sources: list[str] = []
        self.files = 0
        self.broken = 0
        self.broken_examples: list[str] = []
        self.skipped: list[str] = []

    def report(self) -> dict:
        return {"sources": self.sources, "storage_option_keys": sorted(self.storage_options),
                "files": self.files, "broken_records": self.broken, "broken_examples": self.broken_examples,
                "skipped_files": len(self.skipped), "skipped_examples": self.skipped[:_EXAMPLES]}

    def _broken(self, where: str, why: str) -> None:
        self.broken += 1
        if len(self.broken_examples) < _EXAMPLES:
            self.broken_examples.append(f"{where}: {why}")

    def _files(self, source: str) -> Iterator[tuple[fsspec.AbstractFileSystem, str]]:
        try:
            fs, path = fsspec.core.url_to_fs(source, **self.storage_options)
            if any(c in path for c in "*?["):
                paths, explicit = sorted(fs.glob(path)), False
            elif fs.isdir(path):
                paths, explicit = sorted(fs.find(path)), False
            elif fs.exists(path):
                paths, explicit = [path], True
            else:
                raise DataError(f"corpus source {source} does not exist")
        except (OSError, ValueError) as err:
            raise DataError(f"corpus source {source} cannot be listed: {err}") from err
        if not paths:
            raise DataError(f"corpus source {source} matches no files")
        for p in paths:
            if explicit and _format(p) is None:
                raise DataError(f"corpus file {source}: unknown format (expected .txt, .jsonl/.json/"
                                ".ndjson or .parquet, optionally compressed)")
            if not explicit and (_format(p) is None or p.rsplit("/", 1)[-1].startswith((".", "_"))):
                self.skipped.append(_url(fs, p))  # e.g. README, _SUCCESS, .crc files beside the data
                continue
            yield fs, p

    def documents(self, sources: list[str]) -> Iterator[tuple[str, str]]:
        if not sources:
            raise DataError("no corpus source given")
        for source in sources:
            self.sources.append(source)
            for fs, path in self._files(source):
                self.files += 1
                url = _url(fs, path)
                try:
                    yield from getattr(self, f"_{_format(path)}")(fs, path, url)
                except OSError as err:
                    raise DataError(f"corpus file {url} cannot be read: {err}") from err

    def _txt(self, fs: fsspec.AbstractFileSystem, path: str, url: str) -> Iterator[tuple[str, str]]:
        with fs.open(path, "rb", compression="infer") as f:
            data = f.read()
        try:
            yield url, data.decode("utf-8")
        except UnicodeDecodeError as err:
            self._broken(url, f"not UTF-8 ({err.reason} at byte {err.start})")

    def _jsonl(self, fs: fsspec.AbstractFileSystem, path: str, url: str) -> Iterator[tuple[str, str]]:
        with fs.open(path, "rb", compression="infer") as f:
            for n, rec, problem in jsonl_rows(f, invalid="not JSON ({error})",
                                              not_object="not an object with a string 'text'"):
                if rec is None or not isinstance(rec.get("text"), str):
                    self._broken(f"{url}:{n}", problem or "not an object with a string 'text'")
                    continue
                yield (str(rec["id"]) if rec.get("id") is not None else f"{url}:{n}"), rec["text"]

    def _parquet(self, fs: fsspec.AbstractFileSystem, path: str, url: str) -> Iterator[tuple[str, str]]:
        with fs.open(path, "rb") as f:
            pf = pq.ParquetFile(f)
            names = pf.schema_arrow.names
            if "text" not in names:
                raise DataError(f"corpus file {url} has no 'text' column (columns: {names})")
            columns = ["text", "id"] if "id" in names else ["text"]
            row = 0
            for batch in pf.iter_batches(columns=columns):
                ids = batch.column("id").to_pylist() if "id" in columns else [None] * batch.num_rows
                for text, doc_id in zip(batch.column("text").to_pylist(), ids):
                    if isinstance(text, str):
                        yield (str(doc_id) if doc_id is not None else f"{url}:{row}"), text
                    else:
                        self._broken(f"{url}:{row}", "null 'text'")
                    row += 1


@dataclass(frozen=True)
class SearchServiceConfig:
    """Where an Elasticsearch-compatible index is; the API key, if any, is read from the
    environment variable named here so it never enters a config file or a run record."""

    base_url: str
    index: str
    api_key_env: str | None = None
    text_field: str = "text"
    timeout_s: float = 30.0
    max_ids: int = 10_000  # most ids docs_with_all lists (Elasticsearch's default result window)


class SearchServiceCorpus:
    """Queries a search service: ``POST <base>/<index>/_count`` and ``_search`` with one
    ``match_phrase`` per phrase in ``bool.must``. Matching follows the index's analyzer (usually
    the standard one: lower-cased word tokens, punctuation ignored), which can differ from
    ``LocalCorpus`` on punctuation inside a phrase."""

    def __init__(self, config: SearchServiceConfig) -> None:
        headers = {"Content-Type": "application/json"}
        if config.api_key_env:
            key = os.environ.get(config.api_key_env)
            if not key:
                raise ConfigError(f"search service {config.base_url}: environment variable "
                                  f"{config.api_key_env} (its API key) is not set")
            headers["Authorization"] = f"ApiKey {key}"
        self.config = config
        self._client = httpx.Client(base_url=config.base_url.rstrip("/"), headers=headers, timeout=config.timeout_s)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> SearchServiceCorpus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _post(self, endpoint: str, body: dict) -> dict:
        url = f"{self.config.base_url.rstrip('/')}/{self.config.index}/{endpoint}"
        try:
            resp = self._client.post(f"/{self.config.index}/{endpoint}", json=body)
        except httpx.HTTPError as err:
            raise DataError(f"search service {url} is unreachable: {err}") from err
        if resp.status_code >= 400:
            raise DataError(f"search service {url} answered HTTP {resp.status_code}: {resp.text[:300]}")
        try:
            return resp.json()
        except ValueError as err:
            raise DataError(f"search service {url} answered something that is not JSON: {resp.text[:300]}") from err

    def _query(self, phrases: Sequence[str]) -> dict:
        return {"bool": {"must": [{"match_phrase": {self.config.text_field: p}} for p in _checked(phrases)]}}

    def _count(self, phrases: Sequence[str]) -> int:
        return int(self._post("_count", {"query": self._query(phrases)})["count"])

    def _ids(self, phrases: Sequence[str], size: int) -> list[str]:
        found = self._post("_search", {"query": self._query(phrases), "size": size, "_source": False})
        return [h["_id"] for h in found["hits"]["hits"]]

    def docs_with_all(self, phrases: Sequence[str]) -> set[str]:
        count = self._count(phrases)
        if count > self.config.max_ids:
            raise DataError(f"search service {self.config.base_url}: {count} documents match {list(phrases)}, "
                            f"more than max_ids={self.config.max_ids} can be listed; use hits() for counts")
        return set(self._ids(phrases, count)) if count else set()

    def hits(self, phrases: Sequence[str], sample: int) -> Hits:
        count = self._count(phrases)
        return Hits(count, self._ids(phrases, sample) if count and sample else [])

    def describe(self) -> dict:
        c = self.config
        return {"kind": "search-service", "base_url": c.base_url, "index": c.index, "text_field": c.text_field,
                "api_key_env": c.api_key_env, "query": "bool.must of match_phrase, one per phrase",
                "phrase_match": "the index's analyzer (match_phrase)"}


def open_corpus(source: str | Sequence[str], storage_options: dict | None = None, api_key_env: str | None = None,
                text_field: str = "text") -> LocalCorpus | SearchServiceCorpus:
    """A search service for an ``http(s)://host[:port]/<index>`` URL; files otherwise (including an
    http(s) URL that names a corpus file by its suffix)."""
    sources = [source] if isinstance(source, str) else list(source)
    if len(sources) == 1 and sources[0].startswith(("http://", "https://")) and _format(sources[0]) is None:
        parts = urlsplit(sources[0])
        segments = [s for s in parts.path.split("/") if s]
        if not segments:
            raise ConfigError(f"search service URL {sources[0]} names no index (expected http://host:port/<index>)")
        base = f"{parts.scheme}://{parts.netloc}" + "".join(f"/{s}" for s in segments[:-1])
        return SearchServiceCorpus(SearchServiceConfig(base, segments[-1], api_key_env, text_field))
    return LocalCorpus.from_paths(sources, storage_options)
