"""Versioned, content-addressed HalluLens test sets.

A test set is what one trial of a task asks every tested model: items with their gold data and,
per item, where it came from (page, section, bin, generator model, template, seed). It is keyed by
what made it: ``TestSetSpec`` (task, seed, bins and counts, generator models, source digests,
attempt bound, template digests, task settings) has a fingerprint, and the test-set id is that
fingerprint joined to a hash of the items. A build first looks for a test set with the same
fingerprint and reuses it, so every tested model of a trial answers the same questions, and a
rerun never regenerates (or silently reuses a stale file, as the authors' code can: spec section
11, item 17).

Layout under a storage root::

    <task>/<spec fingerprint>-<content hash>/items.parquet   the items
    <task>/<spec fingerprint>-<content hash>/manifest.json   spec, counts, generation report (written last)

Both files are written atomically and hold no timestamps: the same content gives the same id and
the same bytes. A folder without ``manifest.json`` is an unfinished write and is ignored. Both are
read back as ``storage.fs.read_private`` allows (locally: regular files of this user that no one
else can write) and the items must hash to the id: a stored set that fails is not reused.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from halluscope.contract.task import Item
from halluscope.errors import DataError, RunError
from halluscope.hallulens.sources import SourceRef
from halluscope.storage.fs import Location, UntrustedPath, read_private, write_private

logger = logging.getLogger(__name__)

FORMAT = "halluscope-hallulens-testset-v1"
ITEMS_FILE = "items.parquet"
MANIFEST_FILE = "manifest.json"

TaskName = Literal["precise_wikiqa", "longwiki", "mixed_entities", "generated_entities"]

ITEMS_SCHEMA = pa.schema([
    ("task", pa.string()),
    ("item_id", pa.string()),
    ("prompt", pa.string()),  # what the tested model is asked
    ("bin", pa.string()),  # difficulty bin ("0".."9"), domain, or domain/rotation
    ("answer", pa.string()),  # gold answer (PreciseWikiQA), mock answer (LongWiki); null otherwise
    ("entity", pa.string()),  # the nonexistent name (NonExistentRefusal); null otherwise
    ("fields", pa.string()),  # JSON: task fields (title, pageid, reference section, type, place, ...)
    ("provenance", pa.string()),  # JSON: page, section, bin, generator model, templates, seed, ...
])


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class TestSetSpec(BaseModel):
    """Everything that decides a test set's content; its fingerprint keys reuse."""

    __test__ = False  # not a pytest test class
    model_config = ConfigDict(extra="forbid", frozen=True)

    task: TaskName
    seed: int
    bins: dict[str, int] = Field(description="bin (difficulty level, domain, domain/rotation) -> items wanted")
    generator_models: list[str] = Field(default_factory=list)
    sources: dict[str, SourceRef] = Field(default_factory=dict)
    max_attempts_per_bin: int = Field(gt=0)
    templates: dict[str, str] = Field(default_factory=dict, description="template id -> digest of its text")
    params: dict[str, Any] = Field(default_factory=dict, description="the task's other settings")

    def fingerprint(self) -> str:
        """12 hex chars over the spec; a source counts by its content digest, not where it was read,
        so a copy of the same file elsewhere reuses the same test set."""
        doc = self.model_dump(mode="json")
        doc["sources"] = {name: ref["sha256"] for name, ref in doc["sources"].items()}
        return _sha(_canonical(doc))[:12]


@dataclass(frozen=True)
class TestItem:
    __test__ = False

    task: str
    item_id: str
    prompt: str
    bin: str
    answer: str | None = None
    entity: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        return {"task": self.task, "item_id": self.item_id, "prompt": self.prompt, "bin": self.bin,
                "answer": self.answer, "entity": self.entity, "fields": _canonical(self.fields),
                "provenance": _canonical(self.provenance)}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TestItem:
        return cls(task=row["task"], item_id=row["item_id"], prompt=row["prompt"], bin=row["bin"],
                   answer=row["answer"], entity=row["entity"], fields=json.loads(row["fields"]),
                   provenance=json.loads(row["provenance"]))

    def to_item(self) -> Item:
        """The evaluation pipeline's item: task fields plus the gold answer, entity and bin."""
        extra = {k: v for k, v in (("answer", self.answer), ("entity", self.entity)) if v is not None}
        return Item(self.task, self.item_id, self.prompt, {**self.fields, **extra, "bin": self.bin})


@dataclass
class BinReport:
    """How one bin (difficulty level or domain) was filled, and why candidates were turned down."""

    bin: str
    target: int
    candidates: int = 0  # pages, species or combinations available to the bin
    made: int = 0
    attempts: int = 0  # candidates sent to a generator or tried
    rejected: Counter = field(default_factory=Counter)  # reason -> count
    unusable: Counter = field(default_factory=Counter)  # candidates that cost no attempt, by reason
    surplus: int = 0  # valid items made beyond the target in the last round
    stopped: str = ""  # "full", "max_attempts", "exhausted", "max_rounds"

    @property
    def complete(self) -> bool:
        return self.made >= self.target

    def as_dict(self) -> dict[str, Any]:
        return {"bin": self.bin, "target": self.target, "made": self.made, "candidates": self.candidates,
                "attempts": self.attempts, "rejected": dict(sorted(self.rejected.items())),
                "unusable": dict(sorted(self.unusable.items())), "surplus": self.surplus,
                "stopped": self.stopped}

    def line(self) -> str:
        why = ", ".join(f"{k}={v}" for k, v in sorted(self.rejected.items())) or "none"
        skipped = "".join(f", {k}={v}" for k, v in sorted(self.unusable.items()))
        return (f"bin {self.bin}: {self.made}/{self.target} made after {self.attempts} attempts "
                f"(stopped: {self.stopped}); rejected: {why}{skipped}")


@dataclass
class GenerationReport:
    bins: dict[str, BinReport]
    rounds: int = 0
    generator_calls: int = 0  # batched calls of the Generate callables
    prompts: int = 0  # prompts in those calls
    notes: dict[str, Any] = field(default_factory=dict)  # source load reports, pages without a score, ...

    @property
    def complete(self) -> bool:
        return all(b.complete for b in self.bins.values())

    def incomplete(self) -> list[BinReport]:
        return [b for b in self.bins.values() if not b.complete]

    def summary(self) -> str:
        head = "complete" if self.complete else f"INCOMPLETE: {len(self.incomplete())} bin(s) short"
        return "\n".join([f"{head}; {self.rounds} rounds, {self.generator_calls} generator calls",
                          *(b.line() for b in self.bins.values())])

    def as_dict(self) -> dict[str, Any]:
        return {"complete": self.complete, "rounds": self.rounds, "generator_calls": self.generator_calls,
                "prompts": self.prompts, "bins": {k: b.as_dict() for k, b in self.bins.items()},
                "notes": self.notes}


def content_digest(items: list[TestItem]) -> str:
    h = hashlib.sha256()
    for item in items:
        h.update(_canonical(item.row()).encode() + b"\n")
    return h.hexdigest()


@dataclass
class TestSet:
    __test__ = False

    spec: TestSetSpec
    items: list[TestItem]
    report: dict[str, Any]  # GenerationReport.as_dict() of the build that made it
    reused: bool = False  # True when found in storage instead of generated by this call
    content_sha256: str = field(init=False)
    testset_id: str = field(init=False)

    def __post_init__(self) -> None:
        ids = Counter(i.item_id for i in self.items)
        dupes = sorted(k for k, n in ids.items() if n > 1)
        if dupes:
            raise RunError(f"test set for {self.spec.task} has duplicate item ids: {dupes[:5]}")
        self.content_sha256 = content_digest(self.items)
        self.testset_id = f"{self.spec.fingerprint()}-{self.content_sha256[:12]}"

    def counts(self) -> dict[str, int]:
        return dict(sorted(Counter(i.bin for i in self.items).items()))

    def task_items(self) -> list[Item]:
        return [i.to_item() for i in self.items]

    def manifest(self) -> dict[str, Any]:
        return {"format": FORMAT, "testset_id": self.testset_id, "task": self.spec.task,
                "spec": self.spec.model_dump(mode="json"), "spec_fingerprint": self.spec.fingerprint(),
                "content_sha256": self.content_sha256, "items": len(self.items), "counts": self.counts(),
                "report": self.report}

    def items_bytes(self) -> bytes:
        table = pa.Table.from_pylist([i.row() for i in self.items], schema=ITEMS_SCHEMA)
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        return buf.getvalue()

    def write(self, root: Location) -> Location:
        """Write items, then the manifest (the commit); returns the test set's folder."""
        folder = root.child(self.spec.task, self.testset_id)
        write_private(folder, ITEMS_FILE, self.items_bytes())
        manifest = json.dumps(self.manifest(), sort_keys=True, indent=2, ensure_ascii=False) + "\n"
        write_private(folder, MANIFEST_FILE, manifest.encode())
        return folder

    @classmethod
    def read(cls, root: Location, task: str, testset_id: str) -> TestSet:
        folder = root.child(task, testset_id)
        manifest_loc = folder.child(MANIFEST_FILE)
        if not manifest_loc.exists():
            raise DataError(f"no test set {testset_id} under {folder.url} (no {MANIFEST_FILE})")
        try:  # locally: regular files of this user that no one else can write, never through a link
            doc = json.loads(read_private(folder, MANIFEST_FILE))
            spec = TestSetSpec.model_validate(doc["spec"])
        except UntrustedPath as err:
            raise DataError(f"test-set manifest {err.url} {err.reason}: not used") from None
        except (ValueError, KeyError, TypeError, ValidationError) as err:
            raise DataError(f"unreadable test-set manifest {manifest_loc.url}: {err}") from None
        try:
            table = pq.read_table(io.BytesIO(read_private(folder, ITEMS_FILE)))
        except UntrustedPath as err:
            raise DataError(f"test-set items {err.url} {err.reason}: not used") from None
        except (OSError, pa.ArrowException) as err:
            raise DataError(f"unreadable test-set items {folder.child(ITEMS_FILE).url}: {err}") from None
        if table.schema != ITEMS_SCHEMA:
            raise DataError(f"{folder.child(ITEMS_FILE).url} does not have the test-set item schema")
        ts = cls(spec, [TestItem.from_row(r) for r in table.to_pylist()], doc.get("report", {}), reused=True)
        if ts.testset_id != testset_id:
            raise DataError(f"test set {folder.url} does not match its id: its content hashes to {ts.testset_id}")
        return ts

    @classmethod
    def find(cls, root: Location, spec: TestSetSpec) -> TestSet | None:
        """A finished test set built from this spec, if one is stored (the first by id if several
        that can be used: one altered, planted or linked is skipped with a warning naming it)."""
        prefix = spec.fingerprint() + "-"
        folder = root.child(spec.task)
        for name in folder.list_names():
            if name.startswith(prefix) and folder.child(name, MANIFEST_FILE).exists():
                try:
                    return cls.read(root, spec.task, name)
                except DataError as err:
                    logger.warning("hallulens: skipping the stored test set %s: %s", folder.child(name).url, err)
        return None


Make = Callable[[], "tuple[list[TestItem], GenerationReport]"]


def build_testset(root: Location, spec: TestSetSpec, make: Make) -> TestSet:
    """The stored test set for ``spec`` if there is one, else ``make()``'s items, written to ``root``.

    An incomplete build (a bin short after its bounded attempts) is written and returned too, with
    its report; the caller decides whether a short bin is acceptable."""
    found = TestSet.find(root, spec)
    if found is not None:
        return found
    items, report = make()
    ts = TestSet(spec, items, report.as_dict())
    ts.write(root)
    return ts
