"""Readers of the public data HalluLens builds its test sets from, from a path or any fsspec URL.

The hub, Kaggle and ITIS are out of reach from a cluster job, so every reader takes a copy (local,
S3, ...) of the public file named in its docstring. Each returns what it read, a ``SourceRef``
(the file's sha256, which enters the test-set fingerprint) and a ``LoadReport``: a row that cannot
be used is counted under its reason with its row number, never silently dropped; a file that is
missing, unreadable or lacks a required column raises ``DataError`` naming it.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import math
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import fsspec
from pydantic import BaseModel, ConfigDict

from halluscope.errors import DataError
from halluscope.sources import jsonl_rows
from halluscope.storage.fs import Location

Source = str | Location
_EXAMPLES = 20  # skipped rows quoted per report


class SourceRef(BaseModel):
    """A file a test set was built from: where it was read and what it held."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    sha256: str


@dataclass
class LoadReport:
    """Rows read and kept, and the rows that were skipped, counted per reason."""

    source: str
    rows: int = 0
    kept: int = 0
    skipped: Counter = field(default_factory=Counter)
    examples: list[tuple[int, str]] = field(default_factory=list)  # (row or line number, reason)

    def skip(self, row: int, reason: str) -> None:
        self.skipped[reason] += 1
        if len(self.examples) < _EXAMPLES:
            self.examples.append((row, reason))

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "rows": self.rows, "kept": self.kept,
                "skipped": dict(sorted(self.skipped.items())),
                "skipped_examples": [list(e) for e in self.examples]}


def _locate(source: Source, storage_options: dict | None) -> Location:
    if isinstance(source, Location):
        return source
    return Location(*fsspec.core.url_to_fs(source, **(storage_options or {})))


def read_source(source: Source, what: str, storage_options: dict | None = None) -> tuple[bytes, SourceRef]:
    """The file's bytes (gunzipped if named ``.gz``) and its reference (sha256 of the stored bytes)."""
    loc = _locate(source, storage_options)
    try:
        if not loc.exists():
            raise DataError(f"{what} not found: {loc.url}")
        raw = loc.read_bytes()
    except OSError as err:
        raise DataError(f"cannot read the {what} {loc.url}: {err}") from None
    ref = SourceRef(url=loc.url, sha256=hashlib.sha256(raw).hexdigest())
    if loc.path.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise DataError(f"the {what} {loc.url} is not valid gzip: {err}") from None
    return raw, ref


def _lines(data: bytes, url: str, what: str, encoding: str = "utf-8") -> list[str]:
    """Lines split on line feeds only: line numbers must agree with ``wc -l`` (WikiRank's two files are
    joined by line number), and ``str.splitlines`` would also split on form feeds and U+2028."""
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise DataError(f"the {what} {url} is not {encoding} text (line {line}): {err.reason}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


# --- GoodWiki -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WikiPage:
    pageid: int
    title: str
    document: str  # GitHub-flavoured markdown, sections under ``##`` headings
    revid: int | None = None
    description: str | None = None
    categories: tuple[str, ...] = ()


@dataclass
class PageSet:
    pages: list[WikiPage]
    refs: list[SourceRef]
    report: LoadReport


def load_goodwiki(sources: Source | Sequence[Source], *, storage_options: dict | None = None,
                  fmt: str | None = None) -> PageSet:
    """GoodWiki pages from Parquet or JSONL (optionally gzipped); several files are one page set.

    Public source: https://huggingface.co/datasets/euirim/goodwiki (split ``train``, 44,754 Good
    and Featured English Wikipedia articles of 2023-09-04; github.com/euirim/goodwiki). Columns:
    ``pageid`` (int), ``title``, ``revid`` (int), ``description`` (str or null), ``categories``
    (list of str) and ``markdown``; a file where ``markdown`` was renamed ``document`` (as the
    HalluLens code does) is read too. Rows without a usable page id, title or text, and repeated
    page ids, are counted and skipped."""
    items = [sources] if isinstance(sources, (str, Location)) else list(sources)
    if not items:
        raise DataError("load_goodwiki: no GoodWiki file given")
    pages: list[WikiPage] = []
    refs: list[SourceRef] = []
    report = LoadReport(source=", ".join(s.url if isinstance(s, Location) else s for s in items))
    seen: set[int] = set()
    for source in items:
        data, ref = read_source(source, "GoodWiki file", storage_options)
        refs.append(ref)
        kind = fmt or _page_format(ref.url)
        rows = _parquet_records(data, ref.url) if kind == "parquet" else _jsonl_records(data, ref.url)
        for number, record in rows:
            report.rows += 1
            page = _page(record, number, report, ref.url)
            if page is None:
                continue
            if page.pageid in seen:
                report.skip(number, f"{ref.url}: duplicate pageid {page.pageid}")
                continue
            seen.add(page.pageid)
            pages.append(page)
            report.kept += 1
    if not pages:
        raise DataError(f"no usable GoodWiki page in {report.source} ({report.rows} rows read, "
                        f"skipped: {dict(report.skipped)})")
    return PageSet(pages, refs, report)


def _page_format(url: str) -> str:
    lower = url.lower().removesuffix(".gz")
    if lower.endswith(".parquet"):
        return "parquet"
    if lower.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    raise DataError(f"cannot tell the format of the GoodWiki file {url}: expected .parquet or .jsonl "
                    "(or pass fmt=)")


def _parquet_records(data: bytes, url: str) -> Iterator[tuple[int, dict | str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(io.BytesIO(data))
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"cannot read the GoodWiki file {url} as Parquet: {err}") from None
    names = set(pf.schema_arrow.names)
    missing = sorted({"pageid", "title"} - names)
    if not {"markdown", "document"} & names:
        missing.append("markdown (or document)")
    if missing:
        raise DataError(f"the GoodWiki file {url} has no column {', '.join(missing)} "
                        f"(columns: {', '.join(sorted(names))})")
    columns = [c for c in ("pageid", "title", "revid", "description", "categories", "markdown", "document")
               if c in names]
    number = 0
    for batch in pf.iter_batches(columns=columns):
        for record in batch.to_pylist():
            number += 1
            yield number, record


def _jsonl_records(data: bytes, url: str) -> Iterator[tuple[int, dict | str]]:
    for number, record, problem in jsonl_rows(_lines(data, url, "GoodWiki file"), invalid="invalid JSON"):
        yield number, problem if record is None else record


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _page(record: dict | str, number: int, report: LoadReport, url: str) -> WikiPage | None:
    if isinstance(record, str):
        report.skip(number, f"{url}: {record}")
        return None
    pageid = _int_or_none(record.get("pageid"))
    title = record.get("title")
    text = record.get("markdown", record.get("document"))
    categories = record.get("categories") or []
    if pageid is None:
        problem = "missing or non-integer pageid"
    elif not isinstance(title, str) or not title.strip():
        problem = "missing title"
    elif not isinstance(text, str) or not text.strip():
        problem = "missing text (markdown)"
    elif not isinstance(categories, list) or not all(isinstance(c, str) for c in categories):
        problem = "categories is not a list of strings"
    else:
        description = record.get("description")
        return WikiPage(pageid=pageid, title=title.strip(), document=text, revid=_int_or_none(record.get("revid")),
                        description=description if isinstance(description, str) else None,
                        categories=tuple(categories))
    report.skip(number, f"{url}: {problem}")
    return None


# --- WikiRank harmonic centrality ---------------------------------------------------------------


@dataclass
class CentralityScores:
    """Harmonic centrality (h-score) per page title."""

    scores: dict[str, float]
    refs: list[SourceRef]
    report: LoadReport

    def get(self, title: str) -> float | None:
        return self.scores.get(title_key(title))


def title_key(title: str) -> str:
    """Wikipedia titles never contain underscores (they stand for spaces in URLs), so both spellings
    of a title join; nothing else is normalised: the join is otherwise exact, as in HalluLens."""
    return title.replace("_", " ").strip()


def load_harmonic_centrality(titles: Source, scores: Source | None = None, *,
                             only: Collection[str] | None = None,
                             storage_options: dict | None = None) -> CentralityScores:
    """Page title -> harmonic centrality.

    Public source: The Open Wikipedia Ranking 2024 (LAW, Università degli Studi di Milano),
    https://wikirank-2024.di.unimi.it/ : ``enwiki-2024.titles`` (one title per line) and
    ``rank/enwiki-2024-h.txt`` (the score on the same line number). Give both files, line-aligned;
    or give one table as ``titles``: tab- or comma-separated ``title,score`` lines, or Parquet with
    columns ``title`` and ``score``. ``only`` keeps just those titles (the full ranking holds ~7M
    pages; GoodWiki needs 45k). Unparseable or non-finite scores and repeated titles are counted."""
    if scores is not None:
        title_data, title_ref = read_source(titles, "WikiRank titles file", storage_options)
        score_data, score_ref = read_source(scores, "WikiRank score file", storage_options)
        names = _lines(title_data, title_ref.url, "WikiRank titles file")
        values = _lines(score_data, score_ref.url, "WikiRank score file")
        if len(names) != len(values):
            raise DataError(f"the WikiRank files are not line-aligned: {title_ref.url} has {len(names)} lines, "
                            f"{score_ref.url} has {len(values)}")
        refs = [title_ref, score_ref]
        report = LoadReport(source=f"{title_ref.url} + {score_ref.url}")
        pairs: Iterator[tuple[int, Any, Any]] = ((i, t, v) for i, (t, v) in enumerate(zip(names, values), 1))
    else:
        data, ref = read_source(titles, "harmonic-centrality table", storage_options)
        refs = [ref]
        report = LoadReport(source=ref.url)
        pairs = _score_table(data, ref.url)
    keep = None if only is None else {title_key(t) for t in only}
    table: dict[str, float] = {}
    for number, title, value in pairs:
        report.rows += 1
        if not isinstance(title, str) or not title.strip():
            report.skip(number, "missing title")
            continue
        key = title_key(title)
        if keep is not None and key not in keep:
            continue
        try:
            score = float(value)
        except (TypeError, ValueError):
            report.skip(number, "unparseable score")
            continue
        if not math.isfinite(score):
            report.skip(number, "non-finite score")
        elif key in table:
            report.skip(number, "duplicate title")
        else:
            table[key] = score
            report.kept += 1
    return CentralityScores(table, refs, report)


def _score_table(data: bytes, url: str) -> Iterator[tuple[int, Any, Any]]:
    if url.lower().removesuffix(".gz").endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(io.BytesIO(data))
        except (pa.ArrowException, OSError) as err:
            raise DataError(f"cannot read the harmonic-centrality table {url} as Parquet: {err}") from None
        missing = sorted({"title", "score"} - set(table.column_names))
        if missing:
            raise DataError(f"the harmonic-centrality table {url} has no column {', '.join(missing)}")
        yield from ((i, t, s) for i, (t, s) in enumerate(
            zip(table.column("title").to_pylist(), table.column("score").to_pylist()), 1))
        return
    for number, line in enumerate(_lines(data, url, "harmonic-centrality table"), 1):
        if not line.strip():
            continue
        sep = "\t" if "\t" in line else ","
        title, _, value = line.rpartition(sep)
        yield (number, title, value) if title else (number, None, None)


# --- ITIS ---------------------------------------------------------------------------------------


@dataclass
class Taxonomy:
    """The ITIS tree: names by TSN, parent and children links, and every name ITIS knows."""

    names: dict[int, str]
    parent: dict[int, int]
    children: dict[int, list[int]]
    kingdom: dict[int, int]  # TSN -> TSN of its top ancestor
    known_names: set[str]  # casefolded ``completename`` of every longnames row
    refs: list[SourceRef]
    report: LoadReport


def load_itis(hierarchy: Source, longnames: Source, *, storage_options: dict | None = None) -> Taxonomy:
    """ITIS ``hierarchy`` and ``longnames`` tables, as in the MySQL dump's pipe-delimited files.

    Public source: https://www.itis.gov/downloads/itisMySQLTables.tar.gz (extract ``hierarchy`` and
    ``longnames``). ``hierarchy`` rows are ``hierarchy_string|TSN|Parent_TSN|level|ChildrenCount``;
    only the first field is read: the dash-separated TSN path from the kingdom down to the row's
    taxon. ``longnames`` rows are ``tsn|completename`` in ISO-8859-1. Rows with a non-integer TSN
    or no name are counted and skipped."""
    h_data, h_ref = read_source(hierarchy, "ITIS hierarchy file", storage_options)
    n_data, n_ref = read_source(longnames, "ITIS longnames file", storage_options)
    report = LoadReport(source=f"{h_ref.url} + {n_ref.url}")
    names: dict[int, str] = {}
    known: set[str] = set()
    for number, line in enumerate(_lines(n_data, n_ref.url, "ITIS longnames file", "iso-8859-1"), 1):
        if not line.strip():
            continue
        report.rows += 1
        tsn, _, rest = line.partition("|")
        name = " ".join(rest.split("|", 1)[0].split())
        if not tsn.strip().isdigit():
            report.skip(number, f"{n_ref.url}: non-integer TSN")
        elif not name:
            report.skip(number, f"{n_ref.url}: missing name")
        else:
            names[int(tsn)] = name
            known.add(name.casefold())
            report.kept += 1
    parent: dict[int, int] = {}
    children: dict[int, list[int]] = {}
    kingdom: dict[int, int] = {}
    for number, line in enumerate(_lines(h_data, h_ref.url, "ITIS hierarchy file"), 1):
        if not line.strip():
            continue
        report.rows += 1
        parts = line.split("|", 1)[0].strip().split("-")
        if not all(p.isdigit() for p in parts):
            report.skip(number, f"{h_ref.url}: hierarchy_string is not a dash-separated TSN path")
            continue
        path = [int(p) for p in parts]
        node = path[-1]
        if node in kingdom:
            report.skip(number, f"{h_ref.url}: repeated TSN {node}")
            continue
        kingdom[node] = path[0]
        if len(path) > 1:
            parent[node] = path[-2]
            children.setdefault(path[-2], []).append(node)
        report.kept += 1
    for kids in children.values():
        kids.sort()
    return Taxonomy(names, parent, children, kingdom, known, [h_ref, n_ref], report)


# --- medicines ----------------------------------------------------------------------------------


@dataclass
class MedicineTable:
    names: list[str]  # every non-empty ``name`` and ``substituteN`` cell, in file order
    ref: SourceRef
    report: LoadReport


def load_medicines(source: Source, *, storage_options: dict | None = None) -> MedicineTable:
    """Medicine names from the "250k medicines usage, side effects and substitutes" table.

    Public source: https://www.kaggle.com/datasets/shudhanshusingh/250k-medicines-usage-side-effects-and-substitutes
    (``medicine_dataset.csv``: ``id, name, substitute0..substitute4, sideEffect0.., use0.., ...``).
    Only ``name`` (required) and the ``substitute`` columns present are read; a row without a name is
    counted and skipped (its substitutes too)."""
    data, ref = read_source(source, "medicine table", storage_options)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise DataError(f"the medicine table {ref.url} is not UTF-8 text (line {line}): {err.reason}") from None
    report = LoadReport(source=ref.url)
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header is None or "name" not in header:
        raise DataError(f"the medicine table {ref.url} has no column 'name' "
                        f"(header: {', '.join(header or []) or 'empty file'})")
    name_col = header.index("name")
    sub_cols = [i for i, h in enumerate(header) if h.startswith("substitute")]
    names: list[str] = []
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue
        report.rows += 1
        number = reader.line_num
        name = row[name_col].strip() if name_col < len(row) else ""
        if not name:
            report.skip(number, "missing name")
            continue
        names.append(name)
        names.extend(row[i].strip() for i in sub_cols if i < len(row) and row[i].strip())
        report.kept += 1
    if not names:
        raise DataError(f"no medicine name in {ref.url} ({report.rows} rows read)")
    return MedicineTable(names, ref, report)
