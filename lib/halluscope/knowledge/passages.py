"""Reference articles cut into passages: the evidence FActScore-style verifiers retrieve from.

HALOGEN's biographies check each atomic fact against passages of the person's Wikipedia article;
HalluLens LongWiki retrieves passages of about 256 tokens. An ``ArticleStore`` maps titles to such
passages and loads them from FActScore's SQLite database, JSONL or Parquet, locally or over fsspec.

FActScore's database (``CREATE TABLE documents (title PRIMARY KEY, text)``) stores each article as
its passages joined by ``####SPECIAL####SEPARATOR####``; every passage is a decoded RoBERTa token
sequence, so each input sentence or paragraph inside it is wrapped as ``<s>...</s>``. Those passages
are kept (a ``</s>`` becomes a paragraph break), and only re-cut if longer than ``max_words``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sqlite3
import tempfile
import unicodedata
from collections.abc import Iterable, Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

import fsspec

from halluscope.errors import DataError
from halluscope.sources import jsonl_rows, sha256_stream
from halluscope.storage.fs import Location

FACTSCORE_SEPARATOR = "####SPECIAL####SEPARATOR####"
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"')\]])\s+")
_SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
_SQL_CHUNK = 500  # titles per ``IN (...)`` query, below SQLite's bound-parameter limit


def split_passages(text: str, max_words: int = 256) -> list[str]:
    """Pack paragraphs into passages of at most ``max_words`` words.

    A paragraph that fits is never split; a longer one is packed sentence by sentence, and a
    sentence longer than ``max_words`` is cut by words. Whitespace inside a paragraph collapses to
    one space; paragraphs sharing a passage are separated by a blank line."""
    if max_words < 1:
        raise ValueError(f"max_words must be at least 1, not {max_words}")
    units: list[tuple[list[str], bool]] = []  # (words, starts a paragraph)
    for paragraph in _PARAGRAPH_BREAK.split(text):
        words = paragraph.split()
        if not words:
            continue
        if len(words) <= max_words:
            units.append((words, True))
            continue
        first = True
        for sentence in _SENTENCE_END.split(" ".join(words)):
            sentence_words = sentence.split()
            for start in range(0, len(sentence_words), max_words):
                units.append((sentence_words[start:start + max_words], first))
                first = False
    passages: list[str] = []
    current, count = "", 0
    for words, new_paragraph in units:
        if current and count + len(words) > max_words:
            passages.append(current)
            current, count = "", 0
        piece = " ".join(words)
        current = piece if not current else current + ("\n\n" if new_paragraph else " ") + piece
        count += len(words)
    if current:
        passages.append(current)
    return passages


def article_title_key(title: str) -> str:
    """Key for the lenient title match: NFKC, underscores as spaces, whitespace collapsed, casefolded."""
    return " ".join(unicodedata.normalize("NFKC", title).replace("_", " ").split()).casefold()


def text_passages(text: str | list[str], max_words: int) -> list[str]:
    """Passages of one article: FActScore's stored passages if marked as such, else ``split_passages``.

    A list (FActScore's JSONL input format) holds the article's paragraphs."""
    if isinstance(text, list):
        text = "\n\n".join(text)
    if FACTSCORE_SEPARATOR not in text and "<s>" not in text:
        return split_passages(text, max_words)
    passages: list[str] = []
    for stored in text.split(FACTSCORE_SEPARATOR):
        passages.extend(split_passages(stored.replace("<s>", " ").replace("</s>", "\n\n"), max_words))
    return passages


def _valid_text(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))


class ArticleStore:
    """Titles mapped to passages, in load order, with what was skipped and where it came from."""

    def __init__(self, articles: dict[str, list[str]], source: str, max_words: int,
                 skipped: list[tuple[int, str]] | None = None, fs: fsspec.AbstractFileSystem | None = None,
                 path: str | None = None) -> None:
        self.articles = articles
        self.source = source
        self.max_words = max_words
        self.skipped = skipped or []  # (line or row number, reason)
        self._fs, self._path = fs, path
        self._by_norm: dict[str, str] = {}
        for title in articles:
            self._by_norm.setdefault(article_title_key(title), title)  # the first of colliding titles wins

    @classmethod
    def load(cls, source: str | Location, max_words: int = 256, titles: Iterable[str] | None = None,
             fmt: str | None = None, storage_options: dict | None = None) -> ArticleStore:
        """Load a SQLite (``.db``/``.sqlite``), JSONL (``.jsonl``, optionally gzipped) or Parquet file
        from a local path, an fsspec URL (``storage_options`` passed to its filesystem) or a Location.

        ``titles`` keeps only those articles (exact or normalised match): FActScore's English
        Wikipedia database is ~20 GB, and a benchmark needs a few hundred of its articles."""
        if isinstance(source, Location):
            loc = source
        else:
            loc = Location(*fsspec.core.url_to_fs(source, **(storage_options or {})))
        name = loc.url
        if not loc.exists():
            raise DataError(f"article file not found: {name}")
        fmt = fmt or _format_of(loc.path)
        wanted = None if titles is None else list(titles)
        rows = {"sqlite": _sqlite_rows, "jsonl": _jsonl_rows, "parquet": _parquet_rows}[fmt](loc, wanted)
        articles: dict[str, list[str]] = {}
        skipped: list[tuple[int, str]] = []
        exact = set(wanted or ())
        keep = None if wanted is None else {article_title_key(t) for t in wanted}
        try:
            for number, title, text in rows:
                if isinstance(title, _Unreadable):
                    skipped.append((number, str(title)))
                elif not isinstance(title, str) or not title.strip():
                    skipped.append((number, "missing title"))
                elif not _valid_text(text):
                    skipped.append((number, "missing text"))
                elif keep is not None and title not in exact and article_title_key(title) not in keep:
                    continue
                elif title in articles:
                    skipped.append((number, "duplicate title"))
                elif not (passages := text_passages(text, max_words)):
                    skipped.append((number, "empty text"))
                else:
                    articles[title] = passages
        except (OSError, EOFError, UnicodeDecodeError, sqlite3.Error, ValueError) as err:
            raise DataError(f"cannot read the article file {name}: {err}") from None
        if not articles:
            which = "" if wanted is None else f" matching the {len(wanted)} requested titles"
            raise DataError(f"the article file {name} holds no usable articles{which} "
                            f"({len(skipped)} rows skipped)")
        return cls(articles, name, max_words, skipped, loc.fs, loc.path)

    def resolve(self, title: str) -> str | None:
        """The stored title that ``title`` names, or None."""
        return title if title in self.articles else self._by_norm.get(article_title_key(title))

    def __len__(self) -> int:
        return len(self.articles)

    @cached_property
    def sha256(self) -> str:
        """Digest of the loaded content (titles, passages, order): keys caches built from it, so a
        title filter or another ``max_words`` gives another key."""
        h = hashlib.sha256()
        for title, passages in self.articles.items():
            h.update(json.dumps([title, passages], ensure_ascii=False).encode() + b"\n")
        return h.hexdigest()

    @cached_property
    def source_sha256(self) -> str | None:
        """Digest of the file's bytes, for the run manifest; computed on demand (large files)."""
        if self._fs is None or self._path is None:
            return None
        with self._fs.open(self._path, "rb") as f:
            return sha256_stream(f)

    def describe(self) -> dict:
        return {"source": self.source, "source_sha256": self.source_sha256, "sha256": self.sha256,
                "articles": len(self.articles), "passages": sum(map(len, self.articles.values())),
                "max_words": self.max_words, "skipped": len(self.skipped),
                "skipped_examples": self.skipped[:10]}


def _format_of(path: str) -> str:
    lower = path.lower().removesuffix(".gz")
    if lower.endswith(_SQLITE_SUFFIXES):
        return "sqlite"
    if lower.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if lower.endswith(".parquet"):
        return "parquet"
    raise DataError(f"cannot tell the format of the article file {path}: "
                    "expected .db/.sqlite, .jsonl or .parquet (or pass fmt=)")


Row = tuple[int, Any, Any]  # (line number, Parquet row number or SQLite rowid; title; text)


class _Unreadable(str):
    """Stands in for the title of a row that could not be parsed; its value is the reason."""


@contextlib.contextmanager
def _on_this_machine(loc: Location) -> Iterator[Location]:
    """The store itself when it is on this machine, else a copy of it in a temporary file, made
    within the storage deadline its size gives (a stream from an object store has none)."""
    if loc.is_local:
        yield loc
        return
    fd, tmp = tempfile.mkstemp(suffix=f"-{Path(loc.path).name}")  # its suffix names its compression
    os.close(fd)
    try:
        loc.download(tmp)
        yield Location.from_url(tmp)
    finally:
        os.remove(tmp)


def _jsonl_rows(loc: Location, _wanted: list[str] | None) -> Iterator[Row]:
    with _on_this_machine(loc) as here, here.fs.open(here.path, "rt", encoding="utf-8", compression="infer") as f:
        for number, record, problem in jsonl_rows(f, invalid="invalid JSON"):
            if record is None:
                yield number, _Unreadable(problem), None
            else:
                yield number, record.get("title"), record.get("text")


def _parquet_rows(loc: Location, _wanted: list[str] | None) -> Iterator[Row]:
    import pyarrow.parquet as pq

    with _on_this_machine(loc) as here, here.fs.open(here.path, "rb") as f:
        pf = pq.ParquetFile(f)
        missing = {"title", "text"} - set(pf.schema_arrow.names)
        if missing:
            raise ValueError(f"no column {', '.join(sorted(missing))}")
        number = 0
        for batch in pf.iter_batches(columns=["title", "text"]):
            for title, text in zip(batch.column("title").to_pylist(), batch.column("text").to_pylist()):
                number += 1
                yield number, title, text


def _sqlite_rows(loc: Location, wanted: list[str] | None) -> Iterator[Row]:
    """Rows by rowid; with ``wanted``, exact titles via the primary key, then one scan of the titles
    for the normalised matches. A remote database is copied to a temporary file first."""
    with _on_this_machine(loc) as here:
        yield from _sqlite_file_rows(Path(here.path), wanted)


def _sqlite_file_rows(path: Path, wanted: list[str] | None) -> Iterator[Row]:
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        if wanted is None:
            yield from con.execute("SELECT rowid, title, text FROM documents ORDER BY rowid")
            return
        found: set[str] = set()
        for start in range(0, len(wanted), _SQL_CHUNK):
            chunk = wanted[start:start + _SQL_CHUNK]
            query = f"SELECT rowid, title, text FROM documents WHERE title IN ({','.join('?' * len(chunk))})"
            for row in con.execute(query, chunk):
                found.add(row[1])
                yield row
        rest = {article_title_key(t) for t in wanted if t not in found}
        if rest:
            for rowid, title in con.execute("SELECT rowid, title FROM documents").fetchall():
                if isinstance(title, str) and title not in found and article_title_key(title) in rest:
                    yield from con.execute("SELECT rowid, title, text FROM documents WHERE rowid = ?", (rowid,))
    finally:
        con.close()
