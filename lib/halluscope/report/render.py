"""The report's sections (contract/report.py) as Markdown and as HTML, through the Jinja templates in
templates/. Cells are formatted here, the same numbers for both views; each view escapes every text
it writes: HTML by Jinja's autoescape, Markdown by ``md_text`` applied to every value the template
writes (table pipes, code spans, emphasis, links and raw HTML made inert)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from halluscope.contract.report import Beside, Cell, Chart, Column, Joined, Link, Notes, Plain, Sampled, Section, Table
from halluscope.report import svg
from halluscope.report.escape import markdown
from halluscope.report.sections import has_tables

HTML_MISSING, MD_MISSING = "–", "-"  # what a view writes for no value


def md_text(value: object) -> str:
    """Inert in Markdown, and free of HTML entities except for ``<`` and ``&`` (a ``>`` opens no
    tag, and the text is read on a terminal too: "best > bad", not "best &gt; bad")."""
    return markdown("" if value is None else value).replace("&gt;", ">")


_loader = PackageLoader("halluscope.report", "templates")
HTML_ENV = Environment(loader=_loader, autoescape=True, trim_blocks=True, lstrip_blocks=True,
                       undefined=StrictUndefined)
MD_ENV = Environment(loader=_loader, autoescape=False, finalize=md_text, trim_blocks=True, lstrip_blocks=True,
                     keep_trailing_newline=True, undefined=StrictUndefined)


# --- cells ----------------------------------------------------------------------------------------


def number(v: Plain, spec: str, missing: str) -> str:
    """A plain value as text: numbers by the column's format spec (default: integers as they are,
    floats to 3 decimals); None and non-finite numbers as ``missing``."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return missing
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if spec:
        return format(v, spec)
    return str(v) if isinstance(v, int) else f"{v:.3f}"


def flat(cell: Cell, spec: str, missing: str) -> str:
    """A cell's own text, without its link or the value beside it."""
    if isinstance(cell, Sampled | Beside):
        return flat(cell.value, spec, missing)
    if isinstance(cell, Link):
        return cell.text
    if isinstance(cell, Joined):
        return cell.sep.join(number(p, spec, missing) for p in cell.parts)
    return number(cell, spec, missing)


def relative(href: str) -> str | None:
    """A link report.html may hold: relative to the run folder, with no scheme or host."""
    parts = urlsplit(href)
    return href if not parts.scheme and not parts.netloc and not href.startswith("//") else None


# --- Markdown -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One Markdown block; the template writes it and a blank line."""

    kind: str  # heading, text, list, table
    text: str = ""
    level: int = 0
    items: Sequence[str] = ()
    header: Sequence[str] = ()
    rows: Sequence[Sequence[str]] = ()


def md_cell(cell: Cell, col: Column) -> str:
    if isinstance(cell, Sampled):
        cell = cell.value
    text = flat(cell, col.format, MD_MISSING)
    return f"{text} ({flat(cell.other, col.format, MD_MISSING)})" if isinstance(cell, Beside) else text


def markdown_blocks(sections: Sequence[Section], level: int = 2) -> list[Block]:
    """The sections that have a table, as Markdown blocks (leaderboard.md draws no charts)."""
    out: list[Block] = []
    for s in sections:
        if not has_tables(s):
            continue
        out.append(Block("heading", s.title, level))
        if s.definitions:
            out.append(Block("list", items=[f"{term} = {meaning}" for term, meaning in s.definitions]))
        out += [Block("text", p) for p in s.preamble]
        for part in s.parts:
            if isinstance(part, Section):
                out += markdown_blocks([part], level + 1)
            elif isinstance(part, Notes):
                out += [Block("text", part.lead), Block("list", items=list(part.items))]
            elif isinstance(part, Table):
                out += _md_table(part, level + 1)
    return out


def _md_table(t: Table, level: int) -> list[Block]:
    cols = t.specs
    rows = [*t.rows, *([t.total] if t.total is not None else [])]
    return ([Block("heading", t.title, level)] if t.title else []) + [Block("text", n) for n in t.notes] + [
        Block("table", header=[f"{c.group} {c.name}" if c.group else c.name for c in cols],
              rows=[[md_cell(cell, c) for cell, c in zip(row, cols)] for row in rows])]


def render_markdown(title: str, blocks: Sequence[Block]) -> str:
    return MD_ENV.get_template("leaderboard.md.j2").render(title=title, blocks=blocks)


# --- HTML -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HtmlCell:
    text: str
    other: str | None = None  # shown under the text, smaller
    href: str | None = None
    wrap: bool = False


@dataclass(frozen=True)
class HtmlHead:
    text: str
    colspan: int = 1
    rowspan: int = 1
    breakable: bool = False  # may wrap after its underscores (a narrow group of columns)


@dataclass(frozen=True)
class HtmlTable:
    title: str
    notes: Sequence[str]
    head: Sequence[Sequence[HtmlHead]]
    rows: Sequence[Sequence[HtmlCell]]
    total: Sequence[HtmlCell] | None
    collapsed: bool
    kind: str = "table"


@dataclass(frozen=True)
class HtmlChart:
    """A chart on its own: folded under its title until opened."""

    title: str
    svg: Markup
    kind: str = "chart"


@dataclass(frozen=True)
class HtmlCharts:
    """Consecutive charts, side by side as they fit."""

    charts: Sequence[Markup]
    kind: str = "charts"


@dataclass(frozen=True)
class HtmlNotes:
    lead: str
    items: Sequence[str]
    kind: str = "notes"


@dataclass
class HtmlSection:
    title: str
    level: int  # its heading: h2, h3, ...
    definitions: Sequence[tuple[str, str]] = ()
    preamble: Sequence[str] = ()
    legend: Markup | None = None
    chart_notes: list[str] = field(default_factory=list)  # how to read its charts
    parts: list = field(default_factory=list)
    after: list[str] = field(default_factory=list)  # what its charts could not draw
    kind: str = "section"


@dataclass(frozen=True)
class Omitted:
    """A one-line note in place of a section whose data the run did not write."""

    what: str
    why: str
    kind: str = "omitted"


SCATTER_NOTE = ("One point per model, its shape and colour as in the legend; a label that would cover another is "
                "left out. Axes zoom to the data.")


def chart_models(parts: Sequence[object]) -> set[str]:
    """Every name a chart of these sections draws (each gets one style for the page)."""
    names: set[str] = set()
    for p in parts:
        if isinstance(p, Section):
            names |= chart_models(p.parts)
        elif isinstance(p, Chart):
            names |= {s.name for s in p.series} | {pt.name for pt in p.points}
    return names


def styles_for(sections: Sequence[Section]) -> dict[str, svg.Style]:
    return {m: svg.style(i) for i, m in enumerate(sorted(chart_models(sections)))}


def html_cell(cell: Cell, col: Column, anchors: Mapping[tuple[str, str], str]) -> HtmlCell:
    """``anchors``: (model, task) -> the id of that pair's samples on the page, which a Sampled
    cell links to."""
    href = None
    if isinstance(cell, Sampled):
        target = anchors.get((cell.model, cell.task))
        href, cell = (None if target is None else f"#{target}"), cell.value
    if isinstance(cell, Link):
        href = relative(cell.href)
    other = flat(cell.other, col.format, HTML_MISSING) if isinstance(cell, Beside) else None
    return HtmlCell(flat(cell, col.format, HTML_MISSING), other, href, col.wrap)


def _head(cols: Sequence[Column]) -> list[list[HtmlHead]]:
    """One header row, or two when columns are grouped: a group over its columns, and an ungrouped
    column spanning both rows."""
    if not any(c.group for c in cols):
        return [[HtmlHead(c.name) for c in cols]]
    top: list[HtmlHead] = []
    i = 0
    while i < len(cols):
        j = i + 1
        while cols[i].group and j < len(cols) and cols[j].group == cols[i].group:
            j += 1
        top.append(HtmlHead(cols[i].group, j - i, 1, True) if cols[i].group else HtmlHead(cols[i].name, 1, 2))
        i = j
    return [top, [HtmlHead(c.name) for c in cols if c.group]]


def html_table(t: Table, anchors: Mapping[tuple[str, str], str]) -> HtmlTable:
    cols = t.specs
    return HtmlTable(t.title, list(t.notes), _head(cols), [[html_cell(c, col, anchors) for c, col in zip(r, cols)]
                                                          for r in t.rows],
                     None if t.total is None else [html_cell(c, col, anchors) for c, col in zip(t.total, cols)],
                     t.collapsed)


def draw(chart: Chart, styles: dict[str, svg.Style]) -> Markup:
    """The chart as inline SVG (svg.py escapes every text it writes)."""
    if chart.kind == "scatter":
        points = [svg.StyledPoint(p.name, p.x, p.y, styles[p.name]) for p in chart.points]
        return Markup(svg.scatter(points, chart.title, chart.x_label, chart.y_label))
    series = [svg.StyledSeries(s.name, styles[s.name], s.values, s.intervals) for s in chart.series]
    if chart.kind == "lines":
        return Markup(svg.line_chart(chart.labels, series, chart.title, chart.x_label, chart.y_label))
    return Markup(svg.grouped_bars(chart.labels, series, chart.title, chart.y_label))


def _drawn(chart: Chart) -> set[str]:
    """The legend's names for a chart: a scatter's points that have both coordinates, every series."""
    if chart.kind == "scatter":
        return {p.name for p in chart.points if p.x is not None and p.y is not None}
    return {s.name for s in chart.series}


def html_section(s: Section, styles: dict[str, svg.Style], anchors: Mapping[tuple[str, str], str],
                 level: int = 2) -> HtmlSection:
    out = HtmlSection(s.title, level, list(s.definitions), list(s.preamble))
    charts = [p for p in s.parts if isinstance(p, Chart)]
    if charts:
        out.legend = Markup(svg.legend([(m, styles[m]) for m in sorted(set().union(*map(_drawn, charts)))]))
    if any(c.kind == "scatter" for c in charts):
        out.chart_notes.append(SCATTER_NOTE)
    for part in s.parts:
        if isinstance(part, Chart):
            drawn = draw(part, styles)
            if part.collapsed:
                out.parts.append(HtmlChart(part.title, drawn))
            elif out.parts and isinstance(out.parts[-1], HtmlCharts):
                out.parts[-1] = HtmlCharts([*out.parts[-1].charts, drawn])
            else:
                out.parts.append(HtmlCharts([drawn]))
            missing = sorted(p.name for p in part.points if p.x is None or p.y is None)
            if missing:
                out.after.append(f"{part.title}: no point for {', '.join(missing)} (a rate is undefined)")
        elif isinstance(part, Table):
            out.parts.append(html_table(part, anchors))
        elif isinstance(part, Notes):
            out.parts.append(HtmlNotes(part.lead, list(part.items)))
        elif isinstance(part, Section):
            out.parts.append(html_section(part, styles, anchors, level + 1))
    return out


def render_html(**page: object) -> str:
    return HTML_ENV.get_template("report.html.j2").render(**page)
