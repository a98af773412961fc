"""A run's report as sections (contract/report.py): each benchmark's own, from its ``report`` hook,
or a table of its records' numbers. leaderboard.md and report.html render the same list."""

from __future__ import annotations

from collections.abc import Sequence

from halluscope.contract.metrics import COSTS_TOTAL, Estimate, MetricRecord
from halluscope.contract.report import Cell, Chart, Column, Part, Sampled, Section, Table
from halluscope.errors import DataError
from halluscope.report.agreement import agreement_section, is_agreement
from halluscope.task_registry import benchmarks


def stored_records(raw: list, url: str) -> list[MetricRecord]:
    """The records of a stored metrics.json (``raw``, read from ``url``); DataError naming the file and
    the first entry that is not one."""
    out = []
    for i, r in enumerate(raw):
        try:
            out.append(MetricRecord.from_json(r))
        except ValueError as e:
            raise DataError(f"{url}: record {i} is {e}") from None
    return out


def by_benchmark(records: Sequence[MetricRecord]) -> tuple[dict[str, list[MetricRecord]], int]:
    """Records per benchmark, benchmarks in the order their records come (the run config's order of
    tasks), and how many records name none. A record written before records named their benchmark
    goes by its task's prefix when that is a registered benchmark (tasks are ``<benchmark>/...``)."""
    known = benchmarks()
    groups: dict[str, list[MetricRecord]] = {}
    unplaced = 0
    for r in records:
        if r.task == COSTS_TOTAL or is_agreement(r):  # the engine's own: costs, the judge's calibration
            continue
        name = r.benchmark
        if name is None:
            prefix = r.task.split("/", 1)[0]
            name = prefix if prefix in known else None
        if name is None:
            unplaced += 1
        else:
            groups.setdefault(name, []).append(r)
    return groups, unplaced


# what report_sections gives: the sections, and the count of records of no benchmark
Built = tuple[list[Section], int]


def report_sections(records: Sequence[MetricRecord]) -> Built:
    """The judge's calibration, where there is one, then every benchmark's sections in turn,
    sections of the same title merged; and the count of records of no benchmark."""
    groups, unplaced = by_benchmark(records)
    known = benchmarks()
    calibrated = agreement_section(records)
    out: list[Section] = [calibrated] if calibrated is not None else []
    for name, own in groups.items():
        bench = known.get(name)
        out += list(bench.report(own)) if bench is not None and bench.report is not None else [generic(name, own)]
    return merged(out), unplaced


def merged(sections: list[Section]) -> list[Section]:
    """One section per title, where the title first comes: the preambles and parts of the later ones
    follow its own."""
    out: dict[str, Section] = {}
    for s in sections:
        first = out.get(s.title)
        out[s.title] = s if first is None else Section(
            s.title, [*first.preamble, *s.preamble], [*first.definitions, *s.definitions], [*first.parts, *s.parts])
    return list(out.values())


def generic(name: str, records: Sequence[MetricRecord]) -> Section:
    """Model, task and every top-level number of the records: a benchmark without its own layout."""
    keys = sorted({k for r in records for k, v in r.values.items() if _number(v) is not None})
    rows: list[list[Cell]] = [[r.model, r.task, *(Sampled(_number(r.values.get(k)), r.model, r.task) for k in keys)]
            for r in sorted(records, key=lambda r: (r.task, r.model))]
    bench = benchmarks().get(name)
    better = {f.key: f.better for f in (bench.figures if bench is not None else ()) if f.key in keys}
    notes = [f"{way} is better: {', '.join(k for k, b in better.items() if b == way)}" for way in ("higher", "lower")
             if way in better.values()]
    return Section(f"{name} metrics", parts=[Table("", ["model", "task", *(Column(k) for k in keys)], rows,
                                                   notes=notes)])


def _number(v: object) -> int | float | None:
    """A value as the table shows it: a number, an estimate's value; None for anything else."""
    v = v.value if isinstance(v, Estimate) else v
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def has_tables(part: Part) -> bool:
    """Whether Markdown shows anything of a part: it draws no charts."""
    if isinstance(part, Section):
        return any(has_tables(p) for p in part.parts)
    return not isinstance(part, Chart)
