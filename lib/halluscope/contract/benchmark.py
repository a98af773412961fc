"""What a benchmark package gives the engine: its tasks, its options and its metrics.

A benchmark registers one ``Benchmark`` under the ``halluscope.benchmarks`` entry-point group. The
engine plans, streams, commits, resumes and prices the benchmark's rows knowing only this
object; the run config's ``benchmarks.<name>`` section is validated by ``options`` and handed
to the benchmark's tasks and its ``metrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    import argparse

    import pyarrow as pa

    from halluscope.contract.metrics import Figure, Group, MetricRecord
    from halluscope.contract.report import Section
    from halluscope.contract.task import Task


class NoOptions(BaseModel):
    """A benchmark without a config section: any key under it is an error."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class MetricInputs:
    """What a benchmark's metrics read: committed rows of its own tasks only (of one model under
    test when its metrics are per model: ``Benchmark.metrics_per_model``)."""

    tasks: Sequence[str]  # the run's tasks of this benchmark, in config order
    scores: pa.Table  # committed ``scores`` rows of those tasks (at least the benchmark's score_columns)
    # RunStore.read_table: committed rows of any run table (the model's parts, when per model)
    read_table: Callable[..., pa.Table]
    items: Callable[[str], pa.Table]  # task -> the items written to the run
    options: BaseModel  # the run's ``benchmarks.<name>`` section, validated
    # for the compare hook: pairs of models a reader asks for besides those a run keeps (which grow
    # linearly with its models: `halluscope compare` asks for each model against itself in another run)
    pairs: Sequence[tuple[str, str]] = ()


@dataclass(frozen=True)
class KnowledgeFile:
    """Marks a field of a benchmark's options as a knowledge file the driver and every worker read
    (``Annotated[str | None, KnowledgeFile()]``): the config refuses a system folder there, and an
    http(s) URL unless ``data.allow_http`` is set, naming the field. ``also``: values allowed all the
    same (PyPI's live index)."""

    also: tuple[str, ...] = ()


def no_metrics(inputs: MetricInputs) -> Sequence[MetricRecord]:
    return []


@dataclass(frozen=True)
class Benchmark:
    name: str  # its section under ``benchmarks:`` in a run config; its tasks are named ``<name>/...``
    tasks: Sequence[Task]
    options: type[BaseModel] = NoOptions
    # metric records (contract/metrics.py: one per model and task, or aggregate) from the committed rows
    metrics: Callable[[MetricInputs], Sequence[MetricRecord]] = no_metrics
    # True: ``metrics`` reads one model under test at a time: the engine calls it once per model
    # with that model's rows only (the driver then holds one model's rows, however many models a
    # run has), in model-id order; records of one model, task and labels that several calls return
    # (RAGTruth's corpus tables) are merged into one by their figures' aggregation. False: once,
    # with every row of the benchmark's tasks
    metrics_per_model: bool = False
    # records the engine adds per model over some of its tasks, each figure merged by its
    # aggregation (contract/metrics.py ``Group``: HALOGEN's averages over tasks); empty: none
    groups: Sequence[Group] = ()
    # its sections of leaderboard.md and report.html (contract/report.py) from its metric records;
    # None: a table of the records' numbers
    report: Callable[[Sequence[MetricRecord]], Sequence[Section]] | None = None
    description: str = ""
    # (role, model id) of each role model its options name; the run must configure every one
    role_models: Callable[[BaseModel], Sequence[tuple[str, str]]] | None = None
    # the ``scores`` columns its metrics read (the run reads no others when every benchmark of it
    # names them: prompts and atoms are most of the table); None: every column
    score_columns: Sequence[str] | None = None
    # records comparing its models under test where they answered the same items (paired
    # differences), from ``compare_columns`` of every model's ``scores`` rows of its tasks at once
    # (``MetricInputs.scores``); None: no comparisons
    compare: Callable[[MetricInputs], Sequence[MetricRecord]] | None = None
    compare_columns: Sequence[str] = ()
    # its records' figures: which way each is better (`halluscope compare` says which run a
    # difference favours; the generic table marks them) and how the engine merges them
    figures: Sequence[Figure] = ()
    # the answers of a released model's recorded pipeline steps by content key, (data resolver,
    # model) -> answers, that a ``backend: recorded`` role model names as ``module:function``: the
    # only code a run config may name (None: the benchmark has none)
    recorded_steps: Callable[[Any, str], Any] | None = None
    # the released models whose responses (``backend: replay``, ``source: recorded``) and recorded
    # steps a live judge is calibrated against (``halluscope calibrate``); empty: none
    recorded_models: Sequence[str] = ()
    # what a scripted stand-in extractor answers to this benchmark's role prompts (None: a prompt
    # it does not recognise), so drills and tests run its LLM-verified paths without a model
    stand_in: Callable[[str], str | None] | None = None
    # ``halluscope testset JOB``: builds the test sets a job file describes, yielding each one's URI
    # and a short summary (None: the benchmark's items come from released files alone)
    testsets: Callable[[str], Iterable[tuple[str, str]]] | None = None
    # provenance of the knowledge its tasks of a run use, for the manifest: (its options, the run's
    # knowledge object, the ``knowledge`` names of those tasks) -> entries such as {"wiki": {...}};
    # loading the sources there fails a bad one in the driver. None: its tasks read none
    describe_knowledge: Callable[[BaseModel, Any, Set[str]], Mapping[str, Any]] | None = None
    # config keys outside its section that it took over: old dotted key -> where it is set now; a
    # config giving an old key is refused naming the new place (a stored run's is moved there)
    moved: Mapping[str, str] = field(default_factory=dict)
    # subcommands it adds to the ``halluscope`` CLI (given the CLI's subparsers); None: none
    commands: Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], object] | None = None

    def __post_init__(self) -> None:
        summed = {f.key for f in self.figures if f.aggregation == "sum"}
        for f in self.figures:
            if f.over is not None and f.over not in summed:
                raise ValueError(f"benchmark {self.name!r}: figure {f.key!r} is pooled over {f.over!r}, which must "
                                 "be a figure of its own with aggregation 'sum'")

    def parse_options(self, raw: Mapping[str, Any] | None) -> BaseModel:
        return self.options.model_validate(dict(raw or {}))
