"""Does a paper with this title exist? Title indexes for HALOGEN's scientific-attribution task.

Titles are compared after ``normalize_title``, recorded in run manifests as ``NORMALISATION``:

1. Unicode NFKC (ligatures, full-width and compatibility forms become plain letters),
2. ``str.casefold`` then NFKC again (case folding can leave a string un-normalised),
3. every punctuation (Unicode category P*), symbol (S*), control (Cc) or format (Cf) character is
   deleted without leaving a space, so "State-of-the-Art" becomes "stateoftheart", as HALOGEN's
   released scorer deletes punctuation; letters, combining marks and digits are kept, accents too
   (whitespace characters, tab and newline included, are kept as spaces),
4. runs of whitespace become one space; leading and trailing whitespace is removed.

With a ``fuzzy_threshold`` t, a title that has no exact match matches one whose normalised form is
at least t similar (``title_similarity``): 1 - (insertions + deletions) / (len(a) + len(b)), i.e.
2 * LCS / (len(a) + len(b)), in [0, 1]. The manifest records the rule as ``FUZZY_RULE>=t``. The
earlier rule, recorded as ``fuzzy>=t``, used difflib's ratio, which counts greedily found matching
blocks and so never exceeds this similarity: the same t accepts every title it accepted, and more.

A lookup answers with a ``TitleMatch``: ``supported`` is True or False when the index decided,
None when it could not (a service was unreachable); such titles count as unverified, never as real.
"""

from __future__ import annotations

import gzip
import re
import unicodedata
import zlib
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np
import pyarrow as pa
from rapidfuzz import process
from rapidfuzz.distance import Indel

from halluscope.errors import ConfigError, DataError
from halluscope.knowledge.index_cache import load_table, save_table
from halluscope.sources import sha256_file

NORMALISATION = ("NFKC, casefold, NFKC; delete Unicode P*/S*/Cc/Cf characters; "
                 "collapse whitespace runs to one space, trim")
MAX_TITLE_CHARS = 1000
_CACHE_VERSION = 2  # bump when the normalisation or the cached layout changes
_SKIP_EXAMPLES = 10
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # Unicode category Cc
# Fuzzy blocking: candidates share one of the rarest words of the query.
_BLOCK_WORDS = 4  # at most this many of the query's rarest indexed words
_BLOCK_POSTINGS = 100_000  # beyond two words, add words only while their posting lists stay this short
_MAX_CANDIDATES = 500  # titles sharing the most blocking words, compared with title_similarity
FUZZY_RULE = "fuzzy-indel-v2"  # the fuzzy rule's id in manifests: bump when title_similarity changes


class _DropTable(dict):
    """``str.translate`` table filled on demand: one category lookup per distinct code point."""

    def __missing__(self, code: int) -> str | None:
        char = chr(code)
        if char.isspace():
            value: str | None = " "
        elif unicodedata.category(char)[0] in "PS" or unicodedata.category(char) in ("Cc", "Cf"):
            value = None
        else:
            value = char
        self[code] = value
        return value


_DROP = _DropTable()


def normalize_title(title: str) -> str:
    """The comparison form of a title (see the module docstring for the rule)."""
    if title.isascii():  # NFKC leaves ASCII alone and casefold() equals lower() there
        text = title.lower()
    else:
        text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", title).casefold())
    return " ".join(text.translate(_DROP).split())


def match_rule(fuzzy_threshold: float | None) -> str:
    """How titles are matched, as recorded in the manifest."""
    return "exact-normalised" if fuzzy_threshold is None else f"{FUZZY_RULE}>={fuzzy_threshold:g}"


def title_similarity(a: str, b: str) -> float:
    """Normalised Indel similarity of two normalised titles (see the module docstring), in [0, 1].

    Computed as 2 * LCS / (len(a) + len(b)) from the integer distance, one rounding only, as difflib
    computed its ratio: a similarity exactly at the threshold (8 of 40 characters off, t = 0.8)
    reaches it, which rapidfuzz's own float cutoff can miss."""
    total = len(a) + len(b)
    return (total - Indel.distance(a, b)) / total if total else 1.0


def best_title(query: str, choices: list[str], threshold: float) -> tuple[int, float] | None:
    """(position, similarity) of the choice most similar to ``query`` if it reaches ``threshold``;
    of equally similar choices, the first. Ranked by rapidfuzz, no cutoff (see ``title_similarity``)."""
    found = process.extractOne(query, choices, scorer=Indel.normalized_similarity)
    if found is None:
        return None
    similarity = title_similarity(query, found[0])
    return (found[2], similarity) if similarity >= threshold else None


def check_threshold(fuzzy_threshold: float | None) -> float | None:
    """The threshold, checked up front so a bad config fails before any index is built."""
    if fuzzy_threshold is not None and not 0.0 <= fuzzy_threshold <= 1.0:
        raise ConfigError(f"fuzzy_threshold must lie between 0 and 1, got {fuzzy_threshold}")
    return fuzzy_threshold


@dataclass(frozen=True)
class TitleMatch:
    """``supported`` None means undecided (e.g. the service was unreachable), never "exists"."""

    supported: bool | None
    evidence: str


@runtime_checkable
class TitleIndex(Protocol):
    def lookup(self, title: str) -> TitleMatch: ...

    def describe(self) -> dict[str, Any]:
        """Provenance for the run manifest."""
        ...


class OfflineTitleIndex:
    """Titles from a local dump, held in memory: normalised title -> first title seen in that form."""

    def __init__(self, titles: dict[str, str], source: str, sha256: str, skipped_lines: int = 0,
                 skipped_examples: list[str] | None = None, fuzzy_threshold: float | None = None) -> None:
        self.titles = titles
        self.source = source
        self.sha256 = sha256
        self.skipped_lines = skipped_lines
        self.skipped_examples = skipped_examples or []
        self.fuzzy_threshold = check_threshold(fuzzy_threshold)
        # The blocking index costs memory and build time, so only fuzzy indexes carry it.
        # Posting lists are arrays when built, memoryviews over an Arrow buffer when loaded.
        self._postings: dict[str, array | memoryview] | None = None
        self._normalised: list[str] = []
        self._originals: list[str] = []
        if fuzzy_threshold is not None:
            self._build_postings()

    def _build_postings(self) -> None:
        """Inverted index word -> ids of the titles containing it (uint32 arrays, compact to cache)."""
        self._normalised = list(self.titles)
        self._originals = list(self.titles.values())
        postings: dict[str, array] = {}
        for i, norm in enumerate(self._normalised):
            for word in set(norm.split()):
                ids = postings.get(word)
                if ids is None:
                    ids = postings[word] = array("I")
                ids.append(i)
        self._postings = cast("dict[str, array | memoryview]", postings)  # loaded ones hold views

    @classmethod
    def cached(cls, path: Path, cache_dir: Path, fuzzy_threshold: float | None = None) -> OfflineTitleIndex:
        """``from_dump`` once per dump: later loads (every verifier actor) read Arrow files keyed by
        the dump's sha256 (see ``index_cache``): the titles, and for fuzzy matching the blocking
        index beside them. They serve any path of the same dump and any threshold."""
        check_threshold(fuzzy_threshold)
        try:
            digest = sha256_file(path)
        except OSError as err:
            raise DataError(f"cannot read the title dump {path}: {err}") from None
        key = f"title-index-v{_CACHE_VERSION}:{digest}"
        stem = f"title-index-v{_CACHE_VERSION}-{digest[:16]}"
        found = load_table(cache_dir / f"{stem}.arrow", key)
        if found is None:
            index = cls.from_dump(path)
            save_table(cache_dir / f"{stem}.arrow", key, pa.table({"norm": list(index.titles),
                                                                    "title": list(index.titles.values())}),
                       {"skipped_lines": index.skipped_lines, "skipped_examples": index.skipped_examples})
        else:
            table, info = found
            titles = dict(zip(table.column("norm").to_pylist(), table.column("title").to_pylist()))
            index = cls(titles, str(path), digest, info.get("skipped_lines", 0), info.get("skipped_examples"))
        if fuzzy_threshold is not None:
            postings = load_table(cache_dir / f"{stem}-postings.arrow", key)
            if postings is None:
                index._build_postings()
                save_table(cache_dir / f"{stem}-postings.arrow", key, index._postings_table(), {})
            else:
                index._attach_postings(postings[0])
        index.fuzzy_threshold = fuzzy_threshold
        return index

    def _postings_table(self) -> pa.Table:
        """The blocking index as one Arrow list column of title ids per word."""
        assert self._postings is not None
        lists = list(self._postings.values())
        offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum([len(ids) for ids in lists], out=offsets[1:])
        ids = np.frombuffer(b"".join(bytes(a) for a in lists), dtype=np.uint32)
        return pa.table({"word": list(self._postings),
                         "ids": pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(ids))})

    def _attach_postings(self, table: pa.Table) -> None:
        """The blocking index from its cached table: per word, a view into one shared buffer."""
        column = table.column("ids").combine_chunks()
        flat = memoryview(column.values.to_numpy()).cast("B").cast("I")
        offsets = column.offsets.to_numpy()
        self._normalised = list(self.titles)
        self._originals = list(self.titles.values())
        self._postings = {w: flat[offsets[i]:offsets[i + 1]]
                          for i, w in enumerate(table.column("word").to_pylist())}

    @classmethod
    def from_dump(cls, path: Path, fuzzy_threshold: float | None = None) -> OfflineTitleIndex:
        """Read a dump: Parquet with a ``title`` column, or text with one title per line (gzip or
        plain, told apart by their magic bytes). Blank entries are ignored; broken ones (undecodable
        UTF-8, control characters, over ``MAX_TITLE_CHARS``, nothing left after normalisation) are
        counted and the first few named, so a damaged dump shows in the report."""
        try:
            with open(path, "rb") as f:
                magic = f.read(4)
            entries = _parquet_titles(path) if magic == b"PAR1" else _text_titles(path, magic[:2] == b"\x1f\x8b")
            titles: dict[str, str] = {}
            skipped = 0
            examples: list[str] = []
            for where, title, problem in entries:
                norm = "" if problem else normalize_title(title)
                if not problem and not norm:
                    problem = "no letters or digits"
                if problem:
                    skipped += 1
                    if len(examples) < _SKIP_EXAMPLES:
                        examples.append(f"{where}: {problem}")
                    continue
                titles.setdefault(norm, title)
        except (OSError, EOFError, ValueError, NotImplementedError, zlib.error) as err:
            # ValueError and NotImplementedError include pyarrow's ArrowInvalid and its kin
            raise DataError(f"cannot read the title dump {path}: {type(err).__name__}: {err}") from None
        if not titles:
            raise DataError(f"the title dump {path} holds no usable titles ({skipped} broken lines)")
        return cls(titles, str(path), sha256_file(path), skipped, examples, fuzzy_threshold)

    def lookup(self, title: str) -> TitleMatch:
        query = normalize_title(title)
        if not query:
            return TitleMatch(False, "empty title after normalisation")
        found = self.titles.get(query)
        if found is not None:
            return TitleMatch(True, f"exact: {found}")
        if self.fuzzy_threshold is not None:
            best = self._best_fuzzy(query, self.fuzzy_threshold)
            if best is not None:
                ratio, original = best
                return TitleMatch(True, f"fuzzy {ratio:.3f}: {original}")
        return TitleMatch(False, "not in title index")

    def _best_fuzzy(self, query: str, threshold: float) -> tuple[float, str] | None:
        """Best ``title_similarity`` >= threshold among titles sharing the query's rarest words.

        Blocking keeps a lookup to a few hundred comparisons however large the index is; a title
        close enough to pass a useful threshold shares most of its words with the query."""
        if self._postings is None:
            self._build_postings()  # an index built without a threshold, given one later
        assert self._postings is not None
        lists = sorted((self._postings[w] for w in set(query.split()) if w in self._postings), key=len)
        counts: Counter[int] = Counter()
        total = 0
        for taken, ids in enumerate(lists[:_BLOCK_WORDS]):
            if taken >= 2 and total + len(ids) > _BLOCK_POSTINGS:
                break  # two words suffice when one of them is misspelt; more only while cheap
            counts.update(ids)
            total += len(ids)
        candidates = list(counts if len(counts) <= _MAX_CANDIDATES else dict(counts.most_common(_MAX_CANDIDATES)))
        best = best_title(query, [self._normalised[i] for i in candidates], threshold)
        return None if best is None else (best[1], self._originals[candidates[best[0]]])

    def describe(self) -> dict[str, Any]:
        return {"kind": "offline-title-dump", "source": self.source, "sha256": self.sha256,
                "titles": len(self.titles), "normalisation": NORMALISATION,
                "match": match_rule(self.fuzzy_threshold),
                "skipped_lines": self.skipped_lines, "skipped_examples": list(self.skipped_examples)}


def _text_titles(path: Path, gzipped: bool) -> Iterator[tuple[str, str, str]]:
    """(where, title, problem) per non-blank line; problem is "" for a usable line."""
    with (gzip.open(path, "rb") if gzipped else open(path, "rb")) as f:
        for lineno, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8").strip()
            except UnicodeDecodeError:
                yield f"line {lineno}", "", "undecodable UTF-8"
                continue
            if text:
                yield f"line {lineno}", text, _problem(text)


def _parquet_titles(path: Path) -> Iterator[tuple[str, str, str]]:
    """(where, title, problem) per row of the ``title`` column (string or UTF-8 binary)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    schema = parquet.schema_arrow
    if "title" not in schema.names:
        raise DataError(f"the Parquet title dump {path} has no 'title' column (columns: {schema.names})")
    column_type = schema.field("title").type
    binary = pa.types.is_binary(column_type) or pa.types.is_large_binary(column_type)
    if not binary and not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
        raise DataError(f"the 'title' column of {path} holds {column_type}, not text")
    row = 0
    for batch in parquet.iter_batches(columns=["title"], batch_size=65_536):
        for value in batch.column(0).to_pylist():
            row += 1
            if value is None:
                yield f"row {row}", "", "null title"
                continue
            if binary:
                try:
                    value = value.decode("utf-8")
                except UnicodeDecodeError:
                    yield f"row {row}", "", "undecodable UTF-8"
                    continue
            text = value.strip()
            if text:
                yield f"row {row}", text, _problem(text)


def _problem(text: str) -> str:
    if len(text) > MAX_TITLE_CHARS:
        return f"longer than {MAX_TITLE_CHARS} characters"
    if _CONTROL.search(text):
        return "control character"
    return ""
