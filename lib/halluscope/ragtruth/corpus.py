"""RAGTruth's released files (``response.jsonl``, ``source_info.jsonl``) as typed, checked records.

Files are read from any fsspec URL (local path, ``file://``, ``s3://``, ``http(s)://``), optionally
gzipped, and hashed as read; a pinned sha256 that does not match stops the load. A malformed line
(bad JSON, a missing or mistyped field, an unknown task type, split or quality, a duplicated id,
a response whose source is missing) is a DataError naming the file, line and field.

By default the test split keeps only responses of quality ``good``, as the authors' test files do
(``CorpusOptions.good_quality_only``); the others are counted under ``excluded["quality"]``.

Labels are checked one by one. A label whose offsets fall outside the response, whose
``response[start:end]`` differs from its ``text`` (no tolerance: the spec does not say the real
corpus needs one), whose type is outside the taxonomy, or whose flags are not booleans is a
``LabelProblem`` with the response id and line. Such a label is never used, and its response is
held out of ``Corpus.records`` (its gold is incomplete, so scoring it would score wrong gold),
counted under ``excluded["invalid_labels"]`` - or, with ``invalid_labels="error"``, the load fails.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import fsspec
from pydantic import BaseModel, ConfigDict, field_validator

from halluscope.errors import DataError
from halluscope.ragtruth.taxonomy import LabelType, Quality, TaskType, parse_label_type
from halluscope.sources import jsonl_rows
from halluscope.storage.fs import Location

RESPONSE_FILE = "response.jsonl"
SOURCE_FILE = "source_info.jsonl"
SPLITS = ("train", "test")

ProblemReason = Literal["missing_field", "bad_offsets", "text_mismatch", "unknown_label_type", "bad_flag"]


@dataclass(frozen=True)
class Label:
    start: int
    end: int  # exclusive
    text: str
    label_type: LabelType
    implicit_true: bool = False  # not in the context but possibly true; still a hallucination
    due_to_null: bool = False  # a JSON null read as false/negation (Data2txt)
    meta: str | None = None  # the annotator's free-text reason


@dataclass(frozen=True)
class Source:
    source_id: str
    task_type: TaskType
    source: str  # e.g. MARCO, Yelp, CNN/DM or the recent-news source
    source_info: Any  # str (Summary), {question, passages} (QA), business dict (Data2txt)
    prompt: str  # the exact generation prompt (the ground truth; never re-rendered)
    line: int

    def context_text(self) -> str:
        """The reference a response must stick to, as detectors see it and as its length is
        counted: the article; the question and passages; the business data as JSON, where
        unknown values read ``null`` (the convention the detection prompt explains)."""
        if self.task_type is TaskType.SUMMARY:
            return self.source_info
        if self.task_type is TaskType.QA:
            return f"{self.source_info['question']}\n{self.source_info['passages']}"
        return json.dumps(self.source_info, ensure_ascii=False, indent=2)


@dataclass(frozen=True)
class Record:
    """One response joined with its source."""

    id: str
    source_id: str
    model: str
    temperature: float | None
    split: str
    quality: Quality
    response: str
    labels: tuple[Label, ...]  # every label, all valid (records with invalid ones are held out)
    gold: tuple[Label, ...]  # the labels that survive the corpus' LabelFilter: what is scored
    source: Source
    line: int  # 1-based line in response.jsonl

    @property
    def task_type(self) -> TaskType:
        return self.source.task_type


@dataclass(frozen=True)
class LabelProblem:
    reason: ProblemReason
    response_id: str
    line: int
    label_index: int
    detail: str


class LabelFilter(BaseModel):
    """Gold spans to leave out (spec §2.3). Both off by default, as in the paper; a response is
    gold-positive when at least one of its spans survives."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    exclude_implicit_true: bool = False
    exclude_due_to_null: bool = False

    def keeps(self, label: Label) -> bool:
        return not ((self.exclude_implicit_true and label.implicit_true)
                    or (self.exclude_due_to_null and label.due_to_null))


class CorpusOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    splits: tuple[Literal["train", "test"], ...] | None = None  # None: every split
    # splits that keep only responses of quality "good": the authors' test files hold no truncated
    # response or incorrect refusal (baseline/prepare_dataset.py); true/false: every split / none
    good_quality_only: tuple[Literal["train", "test"], ...] = ("test",)
    label_filter: LabelFilter = LabelFilter()
    # "error": any invalid label anywhere in the files (any split) stops the load
    invalid_labels: Literal["exclude_response", "error"] = "exclude_response"
    # file name (response.jsonl / source_info.jsonl) -> sha256 the file must have
    expected_sha256: dict[str, str] = {}

    @field_validator("good_quality_only", mode="before")
    @classmethod
    def _every_split_or_none(cls, v: Any) -> Any:
        return SPLITS if v is True else () if v is False else v


class FileDigest(BaseModel):
    url: str
    sha256: str
    bytes: int
    lines: int  # non-blank lines


class Manifest(BaseModel):
    """What was read and what was left out, for a run's manifest."""

    files: dict[str, FileDigest]
    options: CorpusOptions
    n_sources: int
    n_responses: int  # lines read from response.jsonl
    n_records: int  # records kept
    excluded: dict[str, int]  # reason (split, quality, invalid_labels) -> responses held out
    label_problems: dict[str, int]  # reason -> labels


@dataclass
class Corpus:
    records: list[Record]
    sources: dict[str, Source]
    problems: list[LabelProblem]  # every invalid label in the files, whatever split it is in
    excluded: dict[str, list[str]]  # reason -> response ids held out of ``records``
    manifest: Manifest

    def report(self, examples: int = 5) -> str:
        """A short, human-readable account of what was held out and why."""
        m = self.manifest
        lines = [f"RAGTruth: {m.n_records} of {m.n_responses} responses kept, {m.n_sources} sources"]
        for reason, n in sorted(m.excluded.items()):
            lines.append(f"  held out ({reason}): {n}")
        by_reason: dict[str, list[LabelProblem]] = {}
        for p in self.problems:
            by_reason.setdefault(p.reason, []).append(p)
        for reason, probs in sorted(by_reason.items()):
            lines.append(f"  invalid labels ({reason}): {len(probs)}")
            for p in probs[:examples]:
                lines.append(f"    {RESPONSE_FILE}:{p.line} id={p.response_id} label[{p.label_index}]: {p.detail}")
        return "\n".join(lines)


def _read(url: str, name: str, expected: str | None,
          storage_options: Mapping[str, Any]) -> tuple[list[str], FileDigest]:
    try:
        raw = Location(*fsspec.core.url_to_fs(url, **storage_options)).read_bytes()  # within the storage deadline
    except Exception as err:  # fsspec backends raise many types (OSError, aiohttp, botocore)
        raise DataError(f"cannot read {name} from {url}: {err}") from None
    digest = hashlib.sha256(raw).hexdigest()
    if expected is not None and digest != expected.lower():
        raise DataError(f"{name} at {url} has sha256 {digest}, but {expected} is pinned")
    try:
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise DataError(f"{name} at {url} is not UTF-8 JSON lines (or a gzip of them): {err}") from None
    # split on \n only: str.splitlines would also break at U+2028 inside JSON strings
    lines = text.split("\n")
    return lines, FileDigest(url=url, sha256=digest, bytes=len(raw), lines=sum(1 for ln in lines if ln.strip()))


def _rows(lines: list[str], name: str) -> Iterator[tuple[int, dict]]:
    for lineno, row, problem in jsonl_rows(lines, invalid="not valid JSON ({error})",
                                           not_object="expected a JSON object, got {kind}"):
        if row is None:
            raise DataError(f"{name}:{lineno}: {problem}")
        yield lineno, row


def _field(row: dict, key: str, types: type | tuple[type, ...], where: str) -> Any:
    if key not in row:
        raise DataError(f"{where}: field {key!r} is missing")
    value = row[key]
    if not isinstance(value, types) or isinstance(value, bool):
        expected = types.__name__ if isinstance(types, type) else " or ".join(t.__name__ for t in types)
        raise DataError(f"{where}: field {key!r} must be {expected}, got {value!r:.80}")
    return value


def _ident(row: dict, key: str, where: str) -> str:
    """Ids are strings in the release; integer ids are accepted as their decimal string."""
    return str(_field(row, key, (str, int), where))


def _source(row: dict, lineno: int) -> Source:
    where = f"{SOURCE_FILE}:{lineno}"
    sid = _ident(row, "source_id", where)
    raw_task = _field(row, "task_type", str, where)
    try:
        task = TaskType(raw_task)
    except ValueError:
        raise DataError(f"{where}: task_type {raw_task!r} is not one of "
                        f"{', '.join(t.value for t in TaskType)}") from None
    if task is TaskType.SUMMARY:
        info = _field(row, "source_info", str, where)
    else:
        info = _field(row, "source_info", dict, where)
        if task is TaskType.QA:
            for key in ("question", "passages"):
                _field(info, key, str, f"{where} source_info")
    return Source(source_id=sid, task_type=task, source=_field(row, "source", str, where), source_info=info,
                  prompt=_field(row, "prompt", str, where), line=lineno)


def _label(raw: Any, response: str) -> tuple[Label, None, str] | tuple[None, ProblemReason, str]:
    if not isinstance(raw, dict):
        return None, "missing_field", f"label is {type(raw).__name__}, not an object"
    for key, typ in (("start", int), ("end", int), ("text", str), ("label_type", str)):
        if not isinstance(raw.get(key), typ) or isinstance(raw.get(key), bool):
            return None, "missing_field", f"{key} is {raw.get(key)!r:.60}, expected {typ.__name__}"
    start, end, text = raw["start"], raw["end"], raw["text"]
    if not 0 <= start < end <= len(response):
        return None, "bad_offsets", f"[{start}, {end}) is not inside a response of {len(response)} characters"
    if response[start:end] != text:
        return None, "text_mismatch", f"response[{start}:{end}] is {response[start:end]!r:.60}, text is {text!r:.60}"
    label_type = parse_label_type(raw["label_type"])
    if label_type is None:
        return None, "unknown_label_type", f"label_type {raw['label_type']!r} is outside the taxonomy"
    flags = {}
    for key in ("implicit_true", "due_to_null"):
        value = raw.get(key)
        if value is not None and not isinstance(value, bool):
            return None, "bad_flag", f"{key} is {value!r:.40}, expected true/false"
        flags[key] = bool(value)
    meta = raw.get("meta")
    return Label(start, end, text, label_type, meta=None if meta is None else str(meta), **flags), None, ""


def load_corpus(responses_url: str, sources_url: str, options: CorpusOptions | None = None,
                storage_options: Mapping[str, Any] | None = None) -> Corpus:
    """Read, check and join the two files; see the module docstring for what fails and what is counted."""
    opts = options or CorpusOptions()
    so = dict(storage_options or {})
    unknown = set(opts.expected_sha256) - {RESPONSE_FILE, SOURCE_FILE}
    if unknown:
        raise DataError(f"expected_sha256 names unknown files {sorted(unknown)}; use {RESPONSE_FILE}, {SOURCE_FILE}")
    src_lines, src_digest = _read(sources_url, SOURCE_FILE, opts.expected_sha256.get(SOURCE_FILE), so)
    resp_lines, resp_digest = _read(responses_url, RESPONSE_FILE, opts.expected_sha256.get(RESPONSE_FILE), so)

    sources: dict[str, Source] = {}
    for lineno, row in _rows(src_lines, SOURCE_FILE):
        src = _source(row, lineno)
        if src.source_id in sources:
            raise DataError(f"{SOURCE_FILE}:{lineno}: source_id {src.source_id} already on line "
                            f"{sources[src.source_id].line}")
        sources[src.source_id] = src

    records: list[Record] = []
    problems: list[LabelProblem] = []
    excluded: dict[str, list[str]] = {}
    seen: dict[str, int] = {}
    n_read = 0
    for lineno, row in _rows(resp_lines, RESPONSE_FILE):
        n_read += 1
        where = f"{RESPONSE_FILE}:{lineno}"
        rid = _ident(row, "id", where)
        if rid in seen:
            raise DataError(f"{where}: response id {rid} already on line {seen[rid]}")
        seen[rid] = lineno
        sid = _ident(row, "source_id", where)
        if sid not in sources:
            raise DataError(f"{where}: source_id {sid} (response {rid}) is not in {SOURCE_FILE}")
        model = _field(row, "model", str, where)
        response = _field(row, "response", str, where)
        split = _field(row, "split", str, where)
        if split not in SPLITS:
            raise DataError(f"{where}: split {split!r} is not train or test")
        raw_quality = _field(row, "quality", str, where)
        try:
            quality = Quality(raw_quality)
        except ValueError:
            raise DataError(f"{where}: quality {raw_quality!r} is not one of "
                            f"{', '.join(q.value for q in Quality)}") from None
        temperature = row.get("temperature")
        if temperature is not None and (not isinstance(temperature, (int, float)) or isinstance(temperature, bool)):
            raise DataError(f"{where}: field 'temperature' must be a number, got {temperature!r:.40}")
        labels: list[Label] = []
        bad = False
        for i, raw in enumerate(_field(row, "labels", list, where)):
            checked = _label(raw, response)
            if checked[0] is None:
                bad = True
                _, reason, detail = checked
                problems.append(LabelProblem(reason, rid, lineno, i, detail))
            else:
                labels.append(checked[0])
        if opts.splits is not None and split not in opts.splits:
            excluded.setdefault("split", []).append(rid)
            continue
        if quality is not Quality.GOOD and split in opts.good_quality_only:
            excluded.setdefault("quality", []).append(rid)
            continue
        if bad:
            excluded.setdefault("invalid_labels", []).append(rid)
            continue
        records.append(Record(
            id=rid, source_id=sid, model=model,
            temperature=None if temperature is None else float(temperature), split=split, quality=quality,
            response=response, labels=tuple(labels),
            gold=tuple(lb for lb in labels if opts.label_filter.keeps(lb)), source=sources[sid], line=lineno))

    if problems and opts.invalid_labels == "error":
        first = problems[0]
        raise DataError(f"{RESPONSE_FILE}:{first.line}: response {first.response_id} label[{first.label_index}] "
                        f"is invalid ({first.reason}: {first.detail}); {len(problems)} invalid labels in all")
    manifest = Manifest(
        files={SOURCE_FILE: src_digest, RESPONSE_FILE: resp_digest}, options=opts, n_sources=len(sources),
        n_responses=n_read, n_records=len(records), excluded={k: len(v) for k, v in excluded.items()},
        label_problems=dict(Counter(p.reason for p in problems)))
    return Corpus(records=records, sources=sources, problems=problems, excluded=excluded, manifest=manifest)


def load_corpus_dir(root_url: str, options: CorpusOptions | None = None,
                    storage_options: Mapping[str, Any] | None = None) -> Corpus:
    """The two files under one folder or URL prefix, named as in the release."""
    root = root_url.rstrip("/")
    return load_corpus(f"{root}/{RESPONSE_FILE}", f"{root}/{SOURCE_FILE}", options, storage_options)
