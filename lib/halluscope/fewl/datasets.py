"""The benchmarks FEWL was evaluated on, read into one record type: a question and labelled answers.

FEWL itself never reads a label (it needs no gold answer); the labels are what its evaluation
compares against. Each loader reads a local path, an fsspec URL or a Location (gzip by suffix),
checks every row and keeps the broken ones out, counted with their row and line number and the
reason, in the ``LoadReport`` that travels with the questions.

Formats (as released):
- CHALE ``hallucinated_ans_final_filtered.json``: one JSON object of parallel columns
  ``Question, Short_ans, Long_ans, halu, mid-halu, non-halu`` (lists, or pandas' index->value
  objects); a JSON array or JSON lines of records with those keys is read too.
- TruthfulQA, generation: the official ``TruthfulQA.csv`` (``Question, Best Answer, Correct
  Answers, Incorrect Answers``, answers separated by ``;``), or JSON/JSON lines with the Hugging
  Face names (``question, best_answer, correct_answers, incorrect_answers``, lists).
- TruthfulQA, multiple choice as in haltt4llm: a JSON array of ``{question, answers: [{text,
  correct, choice}]}``.
- HaluEval QA ``qa_data.json``: JSON lines of ``{knowledge, question, right_answer,
  hallucinated_answer}`` (a JSON array is read too).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import fsspec

from halluscope.errors import ConfigError, DataError
from halluscope.sources import jsonl_rows
from halluscope.storage.fs import Location

# Labels, shared across datasets where the meaning is shared.
NON_HALLUCINATED = "non_hallucinated"
HALF_HALLUCINATED = "half_hallucinated"
HALLUCINATED = "hallucinated"
BEST, GOOD, BAD = "best", "good", "bad"  # TruthfulQA generation
CORRECT, INCORRECT = "correct", "incorrect"  # TruthfulQA multiple choice


@dataclass(frozen=True)
class Candidate:
    """An answer to score; ``key`` names it uniquely within its question (``non-halu``, ``B``, ``bad-0``)."""

    key: str
    text: str
    label: str | None = None


@dataclass(frozen=True)
class Question:
    dataset: str
    question_id: str
    question: str
    candidates: tuple[Candidate, ...]
    context: str = ""  # HaluEval's knowledge paragraph; FEWL does not use it
    fields: Mapping[str, Any] = field(default_factory=dict)
    source_row: int = -1  # 0-based record number in the file

    def first(self, label: str) -> Candidate | None:
        """The first candidate with this label: the paper compares the 'best' with the *first* 'bad'."""
        return next((c for c in self.candidates if c.label == label), None)


@dataclass(frozen=True)
class BrokenRow:
    row: int  # 0-based record number
    line: int | None  # 1-based line in the file, for line-oriented formats
    reason: str

    def where(self) -> str:
        return f"line {self.line}" if self.line is not None else f"record {self.row}"


@dataclass
class LoadReport:
    dataset: str
    source: str
    sha256: str
    records: int = 0
    broken: list[BrokenRow] = field(default_factory=list)

    @property
    def loaded(self) -> int:
        return self.records - len(self.broken)

    def summary(self) -> str:
        head = f"{self.dataset} {self.source}: {self.loaded} of {self.records} records loaded"
        if not self.broken:
            return head
        shown = "; ".join(f"{b.where()}: {b.reason}" for b in self.broken[:5])
        more = f" (+{len(self.broken) - 5} more)" if len(self.broken) > 5 else ""
        return f"{head}, {len(self.broken)} broken: {shown}{more}"

    def to_dict(self) -> dict:
        return {"dataset": self.dataset, "source": self.source, "sha256": self.sha256, "records": self.records,
                "loaded": self.loaded, "broken": [{"row": b.row, "line": b.line, "reason": b.reason}
                                                  for b in self.broken]}


@dataclass
class LoadedQuestions:
    questions: list[Question]
    report: LoadReport


class _Broken(Exception):
    """A row that cannot become a question; the message is the reason."""


# (record number, line number or None, the record)
Record = tuple[int, int | None, Any]


def _read(source: str | Location, storage_options: dict | None) -> tuple[bytes, str]:
    loc = source if isinstance(source, Location) \
        else Location(*fsspec.core.url_to_fs(source, **(storage_options or {})))
    try:
        with loc.read_stream() as f:  # within the storage deadline
            return f.read(), loc.url
    except FileNotFoundError:
        raise DataError(f"data file not found: {loc.url}") from None
    except OSError as err:
        raise DataError(f"cannot read {loc.url}: {err}") from None


def _decode(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DataError(f"{name} is not UTF-8 text: {err}") from None


def _json_records(text: str, name: str) -> Iterator[Record]:
    """Records of a JSON array, or of JSON lines (one object per line; bad lines become records
    that fail validation, so they are counted with their line number)."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            doc = json.loads(text)
        except ValueError as err:
            raise DataError(f"{name} is not valid JSON: {err}") from None
        yield from ((i, None, rec) for i, rec in enumerate(doc))
        return
    for row, (number, rec, problem) in enumerate(jsonl_rows(text.splitlines(),
                                                             not_object="a {kind}, not a JSON object")):
        yield row, number, _Broken(problem) if rec is None else rec


def _text(rec: Mapping[str, Any], key: str) -> str:
    value = rec.get(key)
    if value is None:
        raise _Broken(f"missing field {key!r}")
    if not isinstance(value, str):
        raise _Broken(f"field {key!r} is a {type(value).__name__}, not text")
    if not value.strip():
        raise _Broken(f"field {key!r} is empty")
    return value.strip()


def _texts(rec: Mapping[str, Any], key: str) -> list[str]:
    """A list of answers: a JSON list of strings, or one string separated by ';' (the CSV form)."""
    value = rec.get(key)
    if value is None:
        raise _Broken(f"missing field {key!r}")
    if isinstance(value, str):
        items = value.split(";")
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = value
    else:
        raise _Broken(f"field {key!r} is not a list of answers")
    items = [v.strip() for v in items if v.strip()]
    if not items:
        raise _Broken(f"field {key!r} has no answer")
    return items


def _build(dataset: str, source: str | Location, storage_options: dict | None,
           records: Callable[[str, str], Iterator[Record]],
           make: Callable[[int, Mapping[str, Any]], Question]) -> LoadedQuestions:
    data, name = _read(source, storage_options)
    report = LoadReport(dataset, name, hashlib.sha256(data).hexdigest())
    questions: list[Question] = []
    for row, line, rec in records(_decode(data, name), name):
        report.records += 1
        try:
            if isinstance(rec, _Broken):
                raise rec
            if not isinstance(rec, dict):
                raise _Broken(f"a {type(rec).__name__}, not a JSON object")
            questions.append(make(row, rec))
        except _Broken as err:
            report.broken.append(BrokenRow(row, line, str(err)))
    if not questions:
        raise DataError(f"no usable {dataset} question in {name}: {report.summary()}")
    return LoadedQuestions(questions, report)


# --- CHALE -------------------------------------------------------------------------------------

_CHALE_ANSWERS = (("non-halu", NON_HALLUCINATED), ("mid-halu", HALF_HALLUCINATED), ("halu", HALLUCINATED))


def _chale_records(text: str, name: str) -> Iterator[Record]:
    """The released file is one object of parallel columns; records (array or lines) are read too."""
    try:
        doc = json.loads(text)
    except ValueError:
        yield from _json_records(text, name)  # JSON lines, or broken JSON reported as such
        return
    if isinstance(doc, list) or not isinstance(doc.get("Question"), (list, dict)):
        yield from _json_records(text, name)
        return
    columns: dict[str, list] = {}
    for key, col in doc.items():
        if isinstance(col, dict):  # pandas orient="columns": {"0": value, "1": value, ...}
            try:
                col = [v for _, v in sorted(col.items(), key=lambda kv: int(kv[0]))]
            except ValueError:
                raise DataError(f"{name}: column {key!r} is indexed by non-integers") from None
        if not isinstance(col, list):
            raise DataError(f"{name}: column {key!r} is a {type(col).__name__}, not a list")
        columns[key] = col
    lengths = {k: len(v) for k, v in columns.items()}
    if len(set(lengths.values())) > 1:
        raise DataError(f"{name}: the columns differ in length, so rows cannot be aligned: {lengths}")
    for i in range(lengths["Question"]):
        yield i, None, {k: col[i] for k, col in columns.items()}


def _chale_question(row: int, rec: Mapping[str, Any]) -> Question:
    question = _text(rec, "Question")
    candidates = tuple(Candidate(key, _text(rec, key), label) for key, label in _CHALE_ANSWERS)
    extra = {k: rec[k] for k in ("Short_ans", "Long_ans") if isinstance(rec.get(k), str)}
    return Question("chale", f"chale-{row:05d}", question, candidates, fields=extra, source_row=row)


def load_chale(source: str | Location, storage_options: dict | None = None) -> LoadedQuestions:
    """CHALE: per question a non-hallucinated, a half-hallucinated and a hallucinated answer."""
    return _build("chale", source, storage_options, _chale_records, _chale_question)


# --- TruthfulQA, generation ----------------------------------------------------------------------

_TQA_CSV = {"Question": "question", "Best Answer": "best_answer", "Correct Answers": "correct_answers",
            "Incorrect Answers": "incorrect_answers", "Type": "type", "Category": "category", "Source": "source"}


def _csv_records(text: str, name: str) -> Iterator[Record]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = {"Question", "Best Answer", "Correct Answers", "Incorrect Answers"} - set(reader.fieldnames or ())
    if missing:
        raise DataError(f"{name}: no column {', '.join(sorted(missing))} (columns: {reader.fieldnames})")
    start = reader.line_num + 1
    for row, rec in enumerate(reader):
        renamed: dict[str, Any] = {_TQA_CSV.get(k, k): v for k, v in rec.items() if k is not None}
        if None in rec:
            yield row, start, _Broken(f"{len(rec[None])} more cells than columns")
        elif any(v is None for v in rec.values()):
            yield row, start, _Broken("fewer cells than columns")
        else:
            yield row, start, renamed
        start = reader.line_num + 1


def _tqa_records(text: str, name: str) -> Iterator[Record]:
    if text.lstrip().startswith(("[", "{")):
        yield from _json_records(text, name)
    else:
        yield from _csv_records(text, name)


def _norm(text: str) -> str:
    return " ".join(text.lower().rstrip(".").split())


def _tqa_question(row: int, rec: Mapping[str, Any]) -> Question:
    question = _text(rec, "question")
    best = _text(rec, "best_answer")
    good = [a for a in _texts(rec, "correct_answers") if _norm(a) != _norm(best)]
    bad = _texts(rec, "incorrect_answers")
    candidates = (Candidate("best", best, BEST),
                  *(Candidate(f"good-{i}", a, GOOD) for i, a in enumerate(good)),
                  *(Candidate(f"bad-{i}", a, BAD) for i, a in enumerate(bad)))
    extra = {k: rec[k] for k in ("type", "category", "source") if isinstance(rec.get(k), str)}
    return Question("truthfulqa-gen", f"tqa-{row:04d}", question, candidates, fields=extra, source_row=row)


def load_truthfulqa_generation(source: str | Location, storage_options: dict | None = None) -> LoadedQuestions:
    """TruthfulQA generation: the 'best' answer, the other correct ('good') ones, the incorrect ('bad')."""
    return _build("truthfulqa-gen", source, storage_options, _tqa_records, _tqa_question)


# --- TruthfulQA, multiple choice (haltt4llm) -----------------------------------------------------

def _mc_question(row: int, rec: Mapping[str, Any]) -> Question:
    question = _text(rec, "question")
    answers = rec.get("answers")
    if not isinstance(answers, list) or len(answers) < 2:
        raise _Broken("field 'answers' is not a list of at least two choices")
    candidates = []
    for i, ans in enumerate(answers):
        if not isinstance(ans, dict):
            raise _Broken(f"answers[{i}] is not an object")
        try:
            text = _text(ans, "text")
        except _Broken as err:
            raise _Broken(f"answers[{i}]: {err}") from None
        if not isinstance(ans.get("correct"), bool):
            raise _Broken(f"answers[{i}].correct is not true/false")
        choice = ans.get("choice")
        key = choice if isinstance(choice, str) and choice.strip() else chr(65 + i)
        candidates.append(Candidate(key.strip(), text, CORRECT if ans["correct"] else INCORRECT))
    if len({c.key for c in candidates}) != len(candidates):
        raise _Broken("two answers share a choice letter")
    if not any(c.label == CORRECT for c in candidates):
        raise _Broken("no answer is marked correct")
    extra = {"source": rec["source"]} if isinstance(rec.get("source"), str) else {}
    return Question("truthfulqa-mc", f"tqamc-{row:04d}", question, tuple(candidates), fields=extra, source_row=row)


def load_truthfulqa_mc(source: str | Location, storage_options: dict | None = None) -> LoadedQuestions:
    """TruthfulQA multiple choice as haltt4llm ships it: (A) true, (B)/(C) wrong, (D)/(E) none/don't know."""
    return _build("truthfulqa-mc", source, storage_options, _json_records, _mc_question)


# --- HaluEval QA ---------------------------------------------------------------------------------

def _halueval_question(row: int, rec: Mapping[str, Any]) -> Question:
    question = _text(rec, "question")
    candidates = (Candidate("right_answer", _text(rec, "right_answer"), NON_HALLUCINATED),
                  Candidate("hallucinated_answer", _text(rec, "hallucinated_answer"), HALLUCINATED))
    knowledge = rec.get("knowledge")
    if knowledge is not None and not isinstance(knowledge, str):
        raise _Broken("field 'knowledge' is not text")
    return Question("halueval-qa", f"halueval-{row:05d}", question, candidates, context=knowledge or "",
                    source_row=row)


def load_halueval_qa(source: str | Location, storage_options: dict | None = None) -> LoadedQuestions:
    """HaluEval QA: a knowledge paragraph, a question, its right and its hallucinated answer."""
    return _build("halueval-qa", source, storage_options, _json_records, _halueval_question)


LOADERS: dict[str, Callable[..., LoadedQuestions]] = {
    "chale": load_chale,
    "truthfulqa-gen": load_truthfulqa_generation,
    "truthfulqa-mc": load_truthfulqa_mc,
    "halueval-qa": load_halueval_qa,
}


def load(dataset: str, source: str | Location, storage_options: dict | None = None) -> LoadedQuestions:
    try:
        loader = LOADERS[dataset]
    except KeyError:
        raise ConfigError(f"unknown FEWL dataset {dataset!r}; known: {', '.join(LOADERS)}") from None
    return loader(source, storage_options)
