"""What a benchmark puts in a run's report: sections of tables and charts of plain values.

A benchmark's ``report`` hook turns its metric records into ``Section``s; the engine renders the
same sections as Markdown (leaderboard.md, ``halluscope report``) and as HTML (report.html). Every
text and cell here is a plain value, never markup: each view escapes and formats it for itself,
so a model id or a task name taken from a stored run can do no harm in either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Union

Plain = str | int | float | None  # None: no value (each view writes its own dash)


@dataclass(frozen=True)
class Link:
    """Text that links to a page. ``href`` is relative to the run folder (where leaderboard.md and
    report.html are); the HTML view keeps report.html free of URLs, so it shows an absolute one as
    text only, as the Markdown view shows every link."""

    text: str
    href: str


@dataclass(frozen=True)
class Joined:
    """Values shown as one cell, formatted alike (H and R as "0.050/0.980")."""

    parts: tuple[Plain, ...]
    sep: str = "/"


@dataclass(frozen=True)
class Beside:
    """A cell's value with another for comparison (the number a paper released for it): HTML shows
    it under the value, smaller and grey; Markdown in parentheses after it."""

    value: Cell
    other: Cell


@dataclass(frozen=True)
class Sampled:
    """A figure of one model on one task: report.html links it to the responses it shows for that
    pair (the most hallucinated, a clean one, a refusal); Markdown shows the value alone."""

    value: Cell
    model: str
    task: str


Cell = Plain | Link | Joined | Beside | Sampled


@dataclass(frozen=True)
class Column:
    name: str
    # format spec of its numbers (".3f", "+.4f", ","); "": integers as they are, floats to 3 decimals
    format: str = ""
    # a header over the consecutive columns of the same group (HTML: a second header row; Markdown:
    # the group before each column's name)
    group: str = ""
    wrap: bool = False  # long text, allowed to wrap (other cells keep to one line)


@dataclass(frozen=True)
class Table:
    title: str  # "": no heading of its own
    columns: Sequence[Column | str]  # a string: a column of that name with the default format
    rows: Sequence[Sequence[Cell]]
    notes: Sequence[str] = ()  # paragraphs before the table
    total: Sequence[Cell] | None = None  # a last row set apart (sums)
    collapsed: bool = False  # HTML: folded under its title until opened

    @property
    def specs(self) -> tuple[Column, ...]:
        return tuple(c if isinstance(c, Column) else Column(c) for c in self.columns)


@dataclass(frozen=True)
class Notes:
    """A lead line and a list under it."""

    lead: str
    items: Sequence[str]


@dataclass(frozen=True)
class Series:
    name: str  # a model: drawn in the same colour and marker in every chart of the page
    values: Sequence[float | None]  # one per label; None: no value (a gap, a grey dash)
    intervals: Sequence[tuple[float, float] | None] = ()  # per label its 95% interval (bars: a whisker)


@dataclass(frozen=True)
class Point:
    name: str
    x: float | None  # None in either: not drawn, and named under the chart
    y: float | None


@dataclass(frozen=True)
class Chart:
    """A chart of report.html (leaderboard.md has none: its tables give the numbers).

    ``bars``: per label a group of bars, one per series; ``lines``: a line per series over the labels;
    ``scatter``: the points, on axes that zoom to them."""

    kind: Literal["bars", "lines", "scatter"]
    title: str
    labels: Sequence[str] = ()
    series: Sequence[Series] = ()
    points: Sequence[Point] = ()
    x_label: str = ""
    y_label: str = ""
    collapsed: bool = False


Part = Union[Table, Chart, Notes, "Section"]


@dataclass(frozen=True)
class Section:
    """A benchmark's part of the report. Sections of several benchmarks with the same title are
    shown as one (their preambles and parts in turn): charts that compare across benchmarks."""

    title: str
    preamble: Sequence[str] = ()  # paragraphs: what its numbers mean
    definitions: Sequence[tuple[str, str]] = ()  # (term, meaning), before the preamble
    parts: Sequence[Part] = ()  # a nested Section is a subsection
