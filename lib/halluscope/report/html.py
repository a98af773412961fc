"""`report.html`: one self-contained page per run, from what the run wrote.

Everything is inline (CSS, SVG charts drawn in Python) and links are relative, so the file can be
copied, mailed or opened from any storage without fetching anything. The benchmarks' sections are
those of leaderboard.md (report/sections.py), here with their charts; the page adds the run's
metadata, its costs and its files. Sections whose data the run did not write are replaced by a
one-line note; records of no benchmark are counted.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field, replace

import pyarrow as pa
from markupsafe import Markup

from halluscope.contract.metrics import MetricRecord
from halluscope.contract.report import Column, Notes, Section, Table
from halluscope.errors import DataError
from halluscope.report.render import HtmlSection, Omitted, html_section, render_html, styles_for
from halluscope.report.samples import BUDGET_CHARS, collect
from halluscope.report.sections import Built, by_benchmark, report_sections, stored_records
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore
from halluscope.task_registry import benchmarks

REPORT = "report.html"
TABLE_DIRS = ("generations", "atoms", "verdicts", "scores", "role_calls", "quarantine", "items")
RUN_FILES = ("metrics.json", "costs.parquet", "manifest.json", "leaderboard.md")
COST_COLUMNS = ("calls", "cached_calls", "failed_calls", "input_tokens", "output_tokens")
SAMPLES_NOTE = (f"Per model and task, its most hallucinated responses (the highest share of unsupported units), a "
                f"clean one and a refusal, with each unit's verdict and the verifier's own answer; a figure in the "
                f"tables above links to its pair's. Texts are cut short and the samples of a page hold at most "
                f"{BUDGET_CHARS:,} characters, fewer per pair in a larger run; `halluscope show RUN --model M "
                f"--task T --item ID` prints a response whole.")

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0;background:#fff;
color:#1d1d1f}
main{max-width:1240px;margin:0 auto;padding:16px 16px 40px}
h1{font-size:24px;margin:0 0 10px}h2{font-size:19px;margin:30px 0 8px;border-bottom:2px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}h4{font-size:14px;margin:14px 0 6px}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:3px 14px;margin:0;font-size:14px}
dl.meta dt{color:#555}dl.meta dd{margin:0;font-family:ui-monospace,Menlo,Consolas,monospace}
.status{padding:1px 8px;border-radius:9px;font-weight:600}
.status-complete{background:#d9f2df;color:#14532d}.status-other{background:#fde9c8;color:#7a4a00}
.wide{overflow-x:auto}table{border-collapse:collapse;font-size:12px;margin:6px 0 10px}
th,td{border:1px solid #d4d4d4;padding:2px 5px;text-align:right;vertical-align:top}
td{white-space:nowrap}th{background:#f3f3f3;text-align:center}td:first-child{text-align:left}
tr.total td{font-weight:600;background:#fafafa}
.beside{display:block;color:#7a7a7a;font-size:10px}
.note,.omitted{color:#666;font-size:13px;margin:4px 0}
ul.notes{font-size:13px;color:#444;margin:4px 0}
.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{background:#fff;border:1px solid #e6e6e6}
svg .title{font-size:13px;font-weight:600;fill:#222}svg .tick{font-size:10px;fill:#555}
svg .axis{font-size:11px;fill:#333}svg .label{font-size:11px;fill:#222}
ul.legend{list-style:none;padding:0;margin:6px 0;display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12px}
svg.key{margin-right:5px;vertical-align:-2px}
dl.defs{display:grid;grid-template-columns:max-content 1fr;gap:2px 10px;font-size:13px;margin:6px 0 10px}
dl.defs dt{font-weight:600}dl.defs dd{margin:0}
span.wrap{display:inline-block;white-space:normal;text-align:left;min-width:360px;max-width:560px}
ul.links{font-size:14px;line-height:1.6}code{font-size:13px}
.sample{border-left:3px solid #ddd;padding:2px 10px;margin:8px 0}.why{font-size:13px;margin:2px 0}
.prompt{font-size:12px;color:#555;margin:2px 0}pre.response{white-space:pre-wrap;font-size:12px;margin:4px 0}
ul.units{font-size:12px;margin:2px 0;padding-left:18px}li.unsupported{color:#9b1c1c}li.unverified{color:#7a7a7a}
.evidence{display:block;color:#7a7a7a;font-size:11px}
"""


@dataclass
class RunData:
    """What the report reads from one run folder."""

    run_id: str
    manifest: dict | None
    records: list[MetricRecord] = field(default_factory=list)  # metrics.json's records
    metrics_note: str | None = None
    costs: pa.Table | None = None

    @classmethod
    def load(cls, store: RunStore) -> RunData:
        manifest = store.read_json("manifest.json")
        if manifest is not None and not isinstance(manifest, dict):
            raise DataError(f"{store.loc.child('manifest.json').url}: expected a JSON object")
        data_bytes = store.read_view("metrics.json")
        metrics = json.loads(data_bytes) if data_bytes is not None else None
        if manifest is None and metrics is None:
            raise DataError(f"{store.loc.url}: neither manifest.json nor metrics.json exists; not a run folder")
        data = cls(store.run_id, manifest)
        if metrics is None:
            data.metrics_note = "metrics.json is absent (the run has not finished aggregating)"
        elif not isinstance(metrics, list):
            data.metrics_note = (f"metrics.json holds a {type(metrics).__name__}, not the list of records of a "
                                 "`halluscope run`; it is linked below but not charted")
        else:
            data.records = stored_records(metrics, store.loc.child("metrics.json").url)
        if store.loc.child("costs.parquet").exists():
            data.costs = store.read_table_file("costs.parquet")
        return data

    def config(self) -> dict:
        cfg = (self.manifest or {}).get("config")
        return cfg if isinstance(cfg, dict) else {}


def _int(x: int | None) -> str:
    return "–" if x is None else f"{x:,}"


# --- sections ------------------------------------------------------------------------------------


def header(d: RunData, unplaced: int) -> tuple[list[tuple[str, str]], list[str]]:
    """The run's metadata (key, value) and the notes under it."""
    m = d.manifest or {}
    rows = [("run", str(m.get("run_id", d.run_id))), ("status", str(m.get("status", "unknown"))),
            ("created", str(m.get("created_at", "–"))), ("finished", str(m.get("finished_at", "–"))),
            ("code version", str(m.get("code_version", "–"))),
            ("config fingerprint", str(m.get("config_fingerprint", "–")))]
    cfg = d.config()
    models = [x.get("id") for x in cfg.get("models", []) if isinstance(x, dict)]
    if models:
        rows.append(("models", ", ".join(map(str, models))))
    if cfg.get("tasks"):
        rows.append(("tasks", ", ".join(map(str, cfg["tasks"]))))
    counts = m.get("counts") if isinstance(m.get("counts"), dict) else {}
    if counts:
        missing = sum(counts.get("missing", {}).values()) if isinstance(counts.get("missing"), dict) else 0
        rows.append(("generations", f"{_int(counts.get('generations'))} planned, "
                                    f"{_int(counts.get('processed'))} processed this session, "
                                    f"{_int(counts.get('done_before'))} done before; "
                                    f"{_int(counts.get('quarantined_rows'))} quarantined input rows, "
                                    f"{missing:,} without a recorded response"))
    notes = [] if d.manifest is not None else ["manifest.json is absent"]
    notes += [d.metrics_note] if d.metrics_note else []
    if unplaced:
        notes.append(f"{unplaced} metrics record(s) of no benchmark are not shown here (see metrics.json)")
    return rows, notes


def without_records(d: RunData) -> list[Omitted]:
    """A note for each benchmark whose tasks the run lists but which has no record in metrics.json."""
    if d.metrics_note:
        return []
    known, (groups, _) = benchmarks(), by_benchmark(d.records)
    listed = dict.fromkeys(str(t).split("/", 1)[0] for t in d.config().get("tasks") or [])
    return [Omitted(name, "no records of it in metrics.json") for name in listed
            if name in known and name not in groups]


def _usd(values: list[float | None]) -> str:
    """A sum of priced rows; a lower bound (≥) when some rows had no price."""
    priced = [v for v in values if v is not None]
    if not priced:
        return "not priced"
    return ("≥ " if len(priced) < len(values) else "") + f"${math.fsum(priced):,.4f}"


def _total_usd(values: list[float | None]) -> str:
    """The run's cost: a number only when every line item is priced, never a partial sum alone."""
    priced = math.fsum(v for v in values if v is not None)
    unpriced = sum(v is None for v in values)
    if unpriced:
        return f"incomplete: {unpriced} line item{'s' * (unpriced != 1)} unpriced (priced items ${priced:,.4f})"
    return f"${priced:,.4f}"


def _seconds(values: list[float | None]) -> str | None:
    present = [v for v in values if v is not None]
    return f"{math.fsum(present):,.1f}" if present else None


def cost_table(rows: list[dict], by: str) -> Table:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[str(r[by])].append(r)

    def line(name: str, rs: list[dict]) -> list:
        return ([name] + [sum(r[c] or 0 for r in rs) for c in COST_COLUMNS]
                + [_seconds([r["resource_seconds"] for r in rs]), _usd([r["usd"] for r in rs])])
    columns = [Column(by), *(Column(c, ",") for c in ("calls", "cached", "failed", "input tokens", "output tokens")),
               Column("resource seconds"), Column("USD")]
    return Table(f"By {by}", columns, [line(k, groups[k]) for k in sorted(groups)], total=line("total", rows))


def costs(d: RunData) -> Section | Omitted:
    if d.costs is None:
        return Omitted("Cost breakdown", "costs.parquet is absent")
    if d.costs.num_rows == 0:
        return Omitted("Cost breakdown", "costs.parquet has no rows (no live model calls: replayed responses "
                                         "cost this run nothing)")
    missing = {"model", "role", "task", "resource_seconds", "usd", *COST_COLUMNS} - set(d.costs.column_names)
    if missing:
        raise DataError(f"costs.parquet of run {d.run_id}: missing columns {sorted(missing)}")
    rows = d.costs.to_pylist()
    why = sorted({f"{r['model']} ({r['role']}) {r['stage']}: {r.get('note') or 'no price'}"
                  for r in rows if r["usd"] is None})
    by_model, *others = (cost_table(rows, by) for by in ("model", "role", "task"))
    by_model = replace(by_model, notes=[
        "Calls answered from the cache cost nothing and are counted apart; resource seconds are deployment time of "
        "served models (stage serve, task *) and this run's share of shared services' time (stage shared); ≥ marks "
        "a sum with unpriced rows."])
    return Section("Cost breakdown", [f"Cost of this run: {_total_usd([r['usd'] for r in rows])}"],
                   parts=[*([Notes("Unpriced:", why)] if why else []), by_model, *others])


def links(store: RunStore) -> tuple[list[tuple[str, str]], list[str]]:
    """The run's files that exist (relative link, what it holds) and those the run did not write."""
    present, absent = [], []
    for name in TABLE_DIRS:
        n = sum(1 for x in store.loc.child(name).list_names() if x.endswith(".parquet"))
        if n:
            present.append((f"{name}/", f"{n} Parquet file{'s' * (n != 1)}"))
        else:
            absent.append(f"{name}/")
    for name in RUN_FILES:
        if store.loc.child(name).exists():
            present.append((name, ""))
        else:
            absent.append(name)
    return present, absent


# --- the page ------------------------------------------------------------------------------------


def render_report(store: RunStore, data: RunData | None = None,
                  built: Built | None = None) -> str:
    """The HTML of the run's report: of ``data`` and its ``built`` sections where the run that has
    just written them passes them on (as leaderboard.md's), else read from any storage the run was
    written to."""
    d = data or RunData.load(store)
    sections, unplaced = built or report_sections(d.records)
    styles = styles_for(sections)
    samples = collect(store)
    anchors = {(p.model, p.task): p.anchor for p in samples if p.samples}
    page: list[HtmlSection | Omitted] = [html_section(s, styles, anchors) for s in sections]
    page += without_records(d)
    cost = costs(d)
    page.append(cost if isinstance(cost, Omitted) else html_section(cost, styles, anchors))
    meta, notes = header(d, unplaced)
    files, absent = links(store)
    return render_html(run_id=d.run_id, css=Markup(CSS), meta=meta, notes=notes, sections=page, files=files,
                       absent=absent, samples=samples, samples_note=SAMPLES_NOTE)


def write_report(store: RunStore, data: RunData | None = None,
                 built: Built | None = None) -> Location:
    """Writes ``<run>/report.html`` atomically and returns where it is."""
    loc = store.loc.child(REPORT)
    loc.write_bytes_atomic(render_report(store, data, built).encode())
    return loc
