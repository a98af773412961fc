"""`report.html`: one self-contained page per run, from what the run wrote.

Everything is inline (CSS, SVG charts drawn in Python) and links are relative, so the file can be
copied, mailed or opened from any storage without fetching anything. Sections whose data the run
did not write are replaced by a one-line note; records the report cannot place are counted.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import pyarrow as pa

from halluscope.errors import DataError
from halluscope.hallulens import metrics as hm
from halluscope.hallulens.report import LONGWIKI, NONEXISTENT, PWQA
from halluscope.hallulens.report import PREAMBLE as HALLULENS_PREAMBLE
from halluscope.halogen.metrics import AVG_REFUSAL, AVG_RESPONSE, CORRECTED, rule_set
from halluscope.report import causes, svg
from halluscope.report.svg import Point, Series, Style, esc
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore
from halluscope.task_registry import benchmarks
from halluscope.halogen.published import SOURCE, published

REPORT = "report.html"
TABLE_DIRS = ("generations", "atoms", "verdicts", "scores", "role_calls", "quarantine", "items")
RUN_FILES = ("metrics.json", "costs.parquet", "manifest.json", "leaderboard.md")
KINDS = (("response", AVG_RESPONSE, "Response-based tasks (paper Table 2 layout)"),
         ("refusal", AVG_REFUSAL, "Refusal-based tasks (paper Table 3 layout)"))
RULES = {"paper": "the authors' rules", "corrected": "corrected rules"}
# A difference below half a unit of the released files' sixth decimal is no difference.
EXACT = 5e-7
# From <root>/<run>/report.html to the repository's docs, when runs are under the default ./runs.
DOCS_HREF = f"../../{causes.DOC}#{causes.ANCHOR}"
COST_COLUMNS = ("calls", "cached_calls", "failed_calls", "input_tokens", "output_tokens")

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0;background:#fff;
color:#1d1d1f}
main{max-width:1240px;margin:0 auto;padding:16px 16px 40px}
h1{font-size:24px;margin:0 0 10px}h2{font-size:19px;margin:30px 0 8px;border-bottom:2px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:3px 14px;margin:0;font-size:14px}
dl.meta dt{color:#555}dl.meta dd{margin:0;font-family:ui-monospace,Menlo,Consolas,monospace}
.status{padding:1px 8px;border-radius:9px;font-weight:600}
.status-complete{background:#d9f2df;color:#14532d}.status-other{background:#fde9c8;color:#7a4a00}
.wide{overflow-x:auto}table{border-collapse:collapse;font-size:12px;margin:6px 0 10px}
th,td{border:1px solid #d4d4d4;padding:2px 5px;text-align:right;vertical-align:top}
td{white-space:nowrap}th{background:#f3f3f3;text-align:center}td:first-child{text-align:left}
tr.total td{font-weight:600;background:#fafafa}
.pub{display:block;color:#7a7a7a;font-size:10px}
.note,.omitted{color:#666;font-size:13px;margin:4px 0}
.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{background:#fff;border:1px solid #e6e6e6}
svg .title{font-size:13px;font-weight:600;fill:#222}svg .tick{font-size:10px;fill:#555}
svg .axis{font-size:11px;fill:#333}svg .label{font-size:11px;fill:#222}
ul.legend{list-style:none;padding:0;margin:6px 0;display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12px}
svg.key{margin-right:5px;vertical-align:-2px}
dl.defs{display:grid;grid-template-columns:max-content 1fr;gap:2px 10px;font-size:13px;margin:6px 0 10px}
dl.defs dt{font-weight:600}dl.defs dd{margin:0}
span.cause{display:inline-block;white-space:normal;text-align:left;min-width:360px;max-width:560px}
ul.links{font-size:14px;line-height:1.6}code{font-size:13px}
"""


@dataclass
class RunData:
    """What the report reads from one run folder, split by benchmark."""

    run_id: str
    manifest: dict | None
    halogen: list[dict] = field(default_factory=list)  # per (model, task)
    halogen_avg: list[dict] = field(default_factory=list)  # aggregate records
    hallulens: list[dict] = field(default_factory=list)
    others: dict[str, list[dict]] = field(default_factory=dict)  # benchmark -> its records
    unplaced: int = 0  # metrics records of a shape this report does not chart
    metrics_note: str | None = None
    costs: pa.Table | None = None
    styles: dict[str, Style] = field(default_factory=dict)

    @classmethod
    def load(cls, store: RunStore) -> "RunData":
        manifest = store.read_json("manifest.json")
        if manifest is not None and not isinstance(manifest, dict):
            raise DataError(f"{store.loc.child('manifest.json').url}: expected a JSON object")
        metrics = store.read_json("metrics.json")
        if manifest is None and metrics is None:
            raise DataError(f"{store.loc.url}: neither manifest.json nor metrics.json exists; not a run folder")
        data = cls(store.run_id, manifest)
        if metrics is None:
            data.metrics_note = "metrics.json is absent (the run has not finished aggregating)"
        elif not isinstance(metrics, list):
            data.metrics_note = (f"metrics.json holds a {type(metrics).__name__}, not the list of records of a "
                                 "`halluscope run`; it is linked below but not charted")
        else:
            data._split(metrics, store.loc.child("metrics.json").url)
        if store.loc.child("costs.parquet").exists():
            data.costs = store.read_table_file("costs.parquet")
        models = sorted({r["model"] for r in data.halogen + data.halogen_avg + data.hallulens})
        data.styles = {m: svg.style(i) for i, m in enumerate(models)}
        return data

    def _split(self, metrics: list, url: str) -> None:
        for i, r in enumerate(metrics):
            if not isinstance(r, dict) or not isinstance(r.get("task"), str) or not isinstance(r.get("model"), str):
                raise DataError(f"{url}: record {i} is not an object with string fields model and task")
            if r.get("benchmark") == "hallulens":
                self.hallulens.append(r)
            elif r["task"].startswith("halogen/"):
                (self.halogen_avg if r.get("aggregate") else self.halogen).append(r)
            elif isinstance(r.get("benchmark"), str):
                self.others.setdefault(r["benchmark"], []).append(r)
            elif r["task"] != "costs/total":  # the cost section reads costs.parquet itself
                self.unplaced += 1


# --- formatting ----------------------------------------------------------------------------------


def _value(x: object) -> float | None:
    """A number to draw or print; None for a missing, NaN or non-numeric value."""
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


def _f3(x: object) -> str:
    v = _value(x)
    return "–" if v is None else f"{v:.3f}"


def _int(x: int | None) -> str:
    return "–" if x is None else f"{x:,}"


def _short(task: str) -> str:
    return task.split("/", 1)[-1]


def _breakable(task: str) -> str:
    """A task name for a narrow header: escaped, and allowed to wrap after its underscores."""
    return esc(_short(task)).replace("_", "_<wbr>")


def _head(*rows: list[tuple[str, int, int]]) -> str:
    """Header rows of (HTML, colspan, rowspan) cells."""
    return "".join("<tr>" + "".join(f'<th colspan="{c}" rowspan="{r}">{h}</th>' for h, c, r in row) + "</tr>"
                   for row in rows)


def _table(header: list[str] | str, rows: list[list[str]], total: list[str] | None = None) -> str:
    """Cells are HTML already (escaped by the caller); a string header is prebuilt header rows."""
    head = header if isinstance(header, str) else _head([(h, 1, 1) for h in header])
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    if total:
        body += '<tr class="total">' + "".join(f"<td>{c}</td>" for c in total) + "</tr>"
    return f'<div class="wide"><table><thead>{head}</thead><tbody>{body}</tbody></table></div>'


class Omitted(str):
    """A section's one-line note in place of the section, when the run wrote none of its data."""


def _omitted(what: str, why: str) -> Omitted:
    return Omitted(f'<p class="omitted">{esc(what)}: omitted, {esc(why)}.</p>')


def _section(title: str, content: str) -> str:
    return content if isinstance(content, Omitted) else f"<section><h2>{esc(title)}</h2>{content}</section>"


def _by_utility(models: set[str], cells: dict[tuple[str, str], dict], avg_task: str) -> list[str]:
    """Best average utility first, models without one last, ties by name."""
    def key(m: str) -> tuple[bool, float, str]:
        u = cells.get((m, avg_task), {}).get("utility_score")
        return u is None, -(u or 0.0), m
    return sorted(models, key=key)


# --- sections ------------------------------------------------------------------------------------


def header(d: RunData) -> str:
    m = d.manifest or {}
    status = str(m.get("status", "unknown"))
    pill = f'<span class="status status-{"complete" if status == "complete" else "other"}">{esc(status)}</span>'
    rows = [("run", esc(m.get("run_id", d.run_id))), ("status", pill),
            ("created", esc(m.get("created_at", "–"))), ("finished", esc(m.get("finished_at", "–"))),
            ("code version", esc(m.get("code_version", "–"))),
            ("config fingerprint", esc(m.get("config_fingerprint", "–")))]
    cfg = m.get("config") if isinstance(m.get("config"), dict) else {}
    models = [x.get("id") for x in cfg.get("models", []) if isinstance(x, dict)]
    if models:
        rows.append(("models", esc(", ".join(map(str, models)))))
    if cfg.get("tasks"):
        rows.append(("tasks", esc(", ".join(map(str, cfg["tasks"])))))
    counts = m.get("counts") if isinstance(m.get("counts"), dict) else {}
    if counts:
        missing = sum(counts.get("missing", {}).values()) if isinstance(counts.get("missing"), dict) else 0
        rows.append(("generations", esc(f"{_int(counts.get('generations'))} planned, "
                                        f"{_int(counts.get('processed'))} processed this session, "
                                        f"{_int(counts.get('done_before'))} done before; "
                                        f"{_int(counts.get('quarantined_rows'))} quarantined input rows, "
                                        f"{missing:,} without a recorded response")))
    meta = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
    note = "" if d.manifest is not None else '<p class="note">manifest.json is absent.</p>'
    if d.metrics_note:
        note += f'<p class="note">{esc(d.metrics_note)}.</p>'
    if d.unplaced:
        note += (f'<p class="note">{d.unplaced} metrics record(s) of other benchmarks are not charted here '
                 "(see metrics.json).</p>")
    return f'<header><h1>halluscope run report</h1><dl class="meta">{meta}</dl>{note}</header>'


def _pub_cell(ours: str, pub: str) -> str:
    return f'{ours}<span class="pub">{pub}</span>'


def _pub_mean(model: str, tasks: list[str], key: str) -> float | None:
    """The released numbers averaged over the same tasks, only when all of them were released."""
    values = [(published(model, t) or {}).get(key) for t in tasks]
    return None if not values or any(v is None for v in values) else math.fsum(values) / len(values)


DEFINITIONS = (
    ("H", "hallucination score: per responded item, the share of its claims (packages, titles, facts, ...) that "
          "are unsupported, averaged over the items the model answered. Lower is better."),
    ("R", "response ratio: the share of items the model answered rather than refused. Higher means the model "
          "answered more often; on refusal-based tasks (false presuppositions, rationalization, historical "
          "events) the right move is to refuse, so there answering is the failure."),
    ("U", "utility: per item, credit for a correct response (or, on refusal-based tasks, for refusing), "
          "averaged over all items. Higher is better."),
)


def definitions() -> str:
    return '<dl class="defs" id="definitions">' + "".join(f"<dt>{k}</dt><dd>{esc(v)}</dd>"
                                                          for k, v in DEFINITIONS) + "</dl>"


def _paper_tables(d: RunData, rules: str) -> list[str]:
    """The paper's Tables 2 and 3 for one rule set; under the paper rules' numbers, in grey, the
    released ones (the corrected rules have none to compare with)."""
    records = [r for r in d.halogen + d.halogen_avg if rule_set(r["task"]) == rules]
    cells = {(r["model"], r["task"]): r for r in records}
    parts = []
    for kind, avg_task, title in KINDS:
        avg_task += CORRECTED if rules == "corrected" else ""
        tasks = sorted({r["task"] for r in records if r.get("task_kind") == kind and not r.get("aggregate")})
        if not tasks:
            continue

        def cell(ours: str, pub: str) -> str:
            return _pub_cell(ours, pub) if rules == "paper" else ours
        models = _by_utility({r["model"] for r in records if r["task"] in tasks}, cells, avg_task)
        head = _head([("model", 1, 2), ("average", 3, 1)] + [(_breakable(t), 2, 1) for t in tasks],
                     [("U", 1, 1), ("H", 1, 1), ("R", 1, 1)] + [("U", 1, 1), ("H/R", 1, 1)] * len(tasks))
        rows = []
        for model in models:
            avg = cells.get((model, avg_task), {})
            row = [esc(model)] + [cell(_f3(avg.get(k)), _f3(_pub_mean(model, tasks, k)))
                                  for k in ("utility_score", "hallucination_score", "response_ratio")]
            for t in tasks:
                c, pub = cells.get((model, t), {}), published(model, t) or {}
                row.append(cell(_f3(c.get("utility_score")), _f3(pub.get("utility_score"))))
                row.append(cell(f"{_f3(c.get('hallucination_score'))}/{_f3(c.get('response_ratio'))}",
                                f"{_f3(pub.get('hallucination_score'))}/{_f3(pub.get('response_ratio'))}"))
            rows.append(row)
        named = "" if rules == "paper" else ", corrected rules"
        parts += [f"<h3>{esc(title[:-1] + named + ')')}</h3>", _table(head, rows)]
    return parts


def _delta(ours: object, theirs: object) -> float | None:
    a, b = _value(ours), _value(theirs)
    return None if a is None or b is None else a - b


def _d4(x: float | None) -> str:
    return "–" if x is None else f"{x:+.4f}"


def _cause(task: str) -> str:
    """The task's one-line cause from ``causes.CAUSES``, linked to where the docs measure it."""
    link = f'<a href="{DOCS_HREF}">{esc(causes.DOC)}, "{esc(causes.SECTION)}"</a>'
    text = causes.CAUSES.get(task, "no known cause")
    return f'<span class="cause">{esc(text)} ({link})</span>'


def reproduction(d: RunData) -> str:
    """Per domain, how far the paper rules' numbers are from the released ones and why."""
    deltas: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in d.halogen:
        pub = published(r["model"], r["task"]) if rule_set(r["task"]) == "paper" else None
        dh, dr = (_delta(r.get(k), (pub or {}).get(k)) for k in ("hallucination_score", "response_ratio"))
        if dh is not None and dr is not None:
            deltas[r["task"]].append((abs(dh), abs(dr)))
    if not deltas:
        return ""
    rows = []
    for task, ds in sorted(deltas.items()):
        differ = sum(h > EXACT or r > EXACT for h, r in ds)
        rows.append([esc(_short(task)), f"{len(ds)}", f"{differ}", f"{max(h for h, _ in ds):.4f}",
                     f"{max(r for _, r in ds):.4f}", _cause(task) if differ else "matches the released numbers"])
    return ("<h3>Reproduction of the released numbers (paper rules)</h3>"
            f'<p class="note">A model differs when its H or R is off by more than {EXACT:g} (the released files '
            "give 6 decimals); d is ours minus released. Per task and model, with the corrected rules' numbers "
            "beside them, below.</p>"
            + _table(["task", "models", "differ", "max |dH|", "max |dR|", "why"], rows))


def _task_table(task: str, rows: list[dict], twins: dict[str, dict]) -> str:
    """One task's records: ours, the released numbers and the difference, and, for a paper task
    run beside its ``@corrected`` twin, the corrected rules' numbers."""
    head = ["model", "n", "errors", "H", "H micro", "R", "U", "H released", "R released", "U released", "dH", "dR"]
    head += ["H corrected", "R corrected", "U corrected"] if twins else []
    lines = []
    for r in rows:
        pub = published(r["model"], task) or {}
        line = [esc(r["model"]), _int(r.get("n_items")), _int(r.get("n_errors"))]
        line += [_f3(r.get(k)) for k in ("hallucination_score", "hallucination_score_micro", "response_ratio",
                                         "utility_score")]
        line += [_f3(pub.get(k)) for k in ("hallucination_score", "response_ratio", "utility_score")]
        line += [_d4(_delta(r.get(k), pub.get(k))) for k in ("hallucination_score", "response_ratio")]
        if twins:
            twin = twins.get(r["model"], {})
            line += [_f3(twin.get(k)) for k in ("hallucination_score", "response_ratio", "utility_score")]
        lines.append(line)
    return _table(head, lines)


def task_details(d: RunData) -> str:
    """Per task, collapsed: every model's numbers; a corrected task sits beside its paper twin."""
    by_task: dict[str, list[dict]] = defaultdict(list)
    for r in d.halogen:
        by_task[r["task"]].append(r)
    parts = []
    for task in sorted(by_task):
        if rule_set(task) == "corrected" and task.removesuffix(CORRECTED) in by_task:
            continue
        twins = {r["model"]: r for r in by_task.get(task + CORRECTED, [])}
        rows = sorted(by_task[task], key=lambda r: r["model"])
        title = f"{_short(task)} ({RULES[rule_set(task)]}{', corrected beside them' if twins else ''})"
        parts.append(f"<details><summary>{esc(title)}</summary>{_task_table(task, rows, twins)}</details>")
    return "<h3>Per task</h3>" + "".join(parts)


def halogen_leaderboard(d: RunData) -> str:
    if not d.halogen:
        return _omitted("HALOGEN leaderboard", "no HALOGEN records in metrics.json")
    intro = ('<p class="note">A task such as <code>halogen/code</code> follows the authors\' rules; '
             "<code>halogen/code@corrected</code> follows our corrections of them. Under each paper-rule number, in "
             f"grey: the one HALOGEN's authors released for the same responses ({esc(SOURCE)}); their averages are "
             "the mean of the released per-task numbers.</p>")
    return "".join([definitions(), intro, *_paper_tables(d, "paper"), reproduction(d),
                    *_paper_tables(d, "corrected"), task_details(d)])
def _pct(summary: dict, key: str) -> str:
    m = summary.get(key) or {}
    mean, std = _value(m.get("mean")), _value(m.get("std"))
    if mean is None:
        return "–"
    return f"{100 * mean:.1f}" + (f" ± {100 * std:.1f}" if std is not None else "")


def _longwiki_k(d: RunData) -> str:
    ks = {t.get("k") for r in d.hallulens if r["task"] == LONGWIKI for t in r.get("trials", [])} - {None}
    return "/".join(str(k) for k in sorted(ks)) or "K"


def hallulens_leaderboard(d: RunData) -> str:
    if not d.hallulens:
        return _omitted("HalluLens leaderboard", "no HalluLens records in metrics.json")
    k = _longwiki_k(d)
    by_model: dict[str, dict[str, dict]] = defaultdict(dict)
    trials: dict[str, set[int]] = defaultdict(set)
    for r in d.hallulens:
        by_model[r["model"]][r["task"]] = r.get("summary") or {}
        trials[r["model"]].add(int(r.get("n_trials") or 0))
    head = ["model", "trials", "PWQA false refusal", "PWQA hallucination", "PWQA correct", "LongWiki false refusal",
            "LongWiki precision", f"LongWiki recall@{k}", f"LongWiki F1@{k}", "NonExistent FAR mixed",
            "NonExistent FAR generated", "NonExistent FAR"]
    rows = []
    for model, tasks in sorted(by_model.items()):
        pw, lw, ne = tasks.get(PWQA, {}), tasks.get(LONGWIKI, {}), tasks.get(NONEXISTENT, {})
        rows.append([esc(model), "/".join(map(str, sorted(trials[model])))]
                    + [_pct(pw, key) for key in hm.PRECISE_WIKIQA_KEYS] + [_pct(lw, key) for key in hm.LONGWIKI_KEYS]
                    + [_pct(ne, key) for key in hm.NONEXISTENT_KEYS[1:]] + [_pct(ne, hm.NONEXISTENT_KEYS[0])])
    return f'<p class="note">Percent. {esc(HALLULENS_PREAMBLE)}</p>' + _table(head, rows)


def _mean(summary: dict, key: str) -> float | None:
    return _value((summary.get(key) or {}).get("mean"))


def _one_minus(v: object) -> float | None:
    v = _value(v)
    return None if v is None else 1.0 - v


def scatter_panels(d: RunData) -> list[tuple[str, str, list[tuple[str, float | None, float | None]]]]:
    """(title, y label, [(model, refusal rate, hallucination)]) per benchmark/task group."""
    panels = []
    for _, avg_task, _ in KINDS:
        rows = [(r["model"], _one_minus(r.get("response_ratio")), _value(r.get("hallucination_score")))
                for r in d.halogen_avg if r["task"] == avg_task]
        if rows:
            panels.append((f"HALOGEN {_short(avg_task)} (paper rules, mean over tasks)", "hallucination score H",
                           rows))
    lens = [(PWQA, "HalluLens PreciseWikiQA", "hallucination rate when answered",
             lambda s: _mean(s, "hallucination_rate")),
            (LONGWIKI, "HalluLens LongWiki", "1 − precision (unsupported claims)",
             lambda s: _one_minus(_mean(s, "precision")))]
    for task, title, y_label, y_of in lens:
        rows = [(r["model"], _mean(r.get("summary") or {}, "false_refusal_rate"), y_of(r.get("summary") or {}))
                for r in d.hallulens if r["task"] == task]
        if rows:
            panels.append((title, y_label, rows))
    return panels


def refusal_scatter(d: RunData) -> str:
    panels = scatter_panels(d)
    if not panels:
        return _omitted("Refusal versus hallucination", "no HALOGEN averages or HalluLens QA records")
    charts, notes, models = [], [], set()
    for title, y_label, rows in panels:
        points = [Point(m, x, y, d.styles[m]) for m, x, y in sorted(rows)]
        models |= {p.label for p in points if p.x is not None and p.y is not None}
        charts.append(svg.scatter(points, title, "refusal rate (1 − response ratio)", y_label))
        missing = sorted(m for m, x, y in rows if x is None or y is None)
        if missing:
            notes.append(f"{title}: no point for {', '.join(missing)} (a rate is undefined)")
    return (_legend(d, models)
            + '<p class="note">One point per model, its shape and colour as in the legend; a label that would cover '
            "another is left out. Axes zoom to the data. Lower hallucinates less; refusing is the right answer on "
            "HALOGEN's refusal-based tasks and a false refusal elsewhere (see H and R above). HALOGEN points follow "
            "the authors' rules; the corrected rules' averages are in the HALOGEN leaderboard. HalluLens "
            "NonExistentRefusal is not drawn: there the refusal rate is 1 − the false acceptance rate.</p>"
            + f'<div class="charts">{"".join(charts)}</div>'
            + "".join(f'<p class="note">{esc(n)}.</p>' for n in notes))


def _bin_key(b: str) -> tuple[int, str]:
    return len(b), b  # "2" before "10", as hallulens.metrics orders bins


def _legend(d: RunData, models: set[str]) -> str:
    return svg.legend([(m, d.styles[m]) for m in sorted(models)])


def difficulty_series(records: list[dict], metric: str, styles: dict[str, Style]) -> tuple[list[str], list[Series]]:
    """Per model the mean over trials of the metric in each bin; None where no trial defines it."""
    # bins are ints in memory and strings once read back from metrics.json
    by_bin = {id(t): {str(b): v or {} for b, v in (t.get("by_bin") or {}).items()}
              for r in records for t in r.get("trials", [])}
    bins = sorted({b for per_bin in by_bin.values() for b in per_bin}, key=_bin_key)
    series = []
    for r in sorted(records, key=lambda r: r["model"]):
        values = []
        for b in bins:
            vals = [v for t in r.get("trials", []) if (v := _value(by_bin[id(t)].get(b, {}).get(metric))) is not None]
            values.append(math.fsum(vals) / len(vals) if vals else None)
        series.append(Series(r["model"], styles[r["model"]], values))
    return bins, series


CURVES = ((PWQA, "hallucination_rate", "PreciseWikiQA: hallucination rate when answered"),
          (PWQA, "false_refusal_rate", "PreciseWikiQA: false refusal rate"),
          (LONGWIKI, "precision", "LongWiki: precision"),
          (LONGWIKI, "false_refusal_rate", "LongWiki: false refusal rate"))


def difficulty_curves(d: RunData) -> str:
    charts, models = [], set()
    for task, metric, title in CURVES:
        records = [r for r in d.hallulens if r["task"] == task]
        bins, series = difficulty_series(records, metric, d.styles)
        if bins:
            charts.append(svg.line_chart(bins, series, title, "difficulty bin (by harmonic centrality; 0 = hardest)",
                                         metric.replace("_", " ")))
            models |= {s.name for s in series}
    if not charts:
        return _omitted("Per-difficulty curves (HalluLens)", "no HalluLens record has per-bin rates")
    return (_legend(d, models) + '<p class="note">Mean over trials of each '
            "bin's rate; a gap is a bin where no trial scored an item.</p>"
            + f'<div class="charts">{"".join(charts)}</div>')


def _bars(d: RunData, records: list[dict], title: str) -> str:
    order = {kind: i for i, (kind, _, _) in enumerate(KINDS)}
    tasks = sorted({r["task"] for r in records}, key=lambda t: (
        min(order.get(r.get("task_kind"), 9) for r in records if r["task"] == t), t))
    cells = {(r["model"], r["task"]): _value(r.get("hallucination_score")) for r in records}
    series = [Series(m, d.styles[m], [cells.get((m, t)) for t in tasks]) for m in sorted({r["model"] for r in records})]
    return svg.grouped_bars([_short(t) for t in tasks], series, title, "H")


def domain_bars(d: RunData) -> str:
    """The paper rules' H per task; the corrected rules' in a chart of their own, never mixed in."""
    if not d.halogen:
        return _omitted("Hallucination by domain (HALOGEN)", "no HALOGEN records in metrics.json")
    paper, corrected = ([r for r in d.halogen if rule_set(r["task"]) == rules] for rules in RULES)
    charts = [_bars(d, paper, "Hallucination score H per task and model (the authors' rules)")] if paper else []
    if corrected:
        chart = _bars(d, corrected, "Hallucination score H per task and model (corrected rules)")
        charts.append(f"<details><summary>Corrected rules</summary>{chart}</details>" if paper else chart)
    return (_legend(d, {r["model"] for r in d.halogen})
            + '<p class="note">Response-based tasks first, then refusal-based; a grey dash: H undefined '
              "(the model answered none of the task's items).</p>" + "".join(charts))


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


def _seconds(values: list[float | None]) -> str:
    present = [v for v in values if v is not None]
    return f"{math.fsum(present):,.1f}" if present else "–"


def cost_table(rows: list[dict], by: str) -> str:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[str(r[by])].append(r)

    def line(name: str, rs: list[dict]) -> list[str]:
        return ([esc(name)] + [_int(sum(r[c] or 0 for r in rs)) for c in COST_COLUMNS]
                + [_seconds([r["resource_seconds"] for r in rs]), _usd([r["usd"] for r in rs])])
    head = [by, "calls", "cached", "failed", "input tokens", "output tokens", "resource seconds", "USD"]
    return _table(head, [line(k, groups[k]) for k in sorted(groups)], line("total", rows))


def costs(d: RunData) -> str:
    if d.costs is None:
        return _omitted("Cost breakdown", "costs.parquet is absent")
    if d.costs.num_rows == 0:
        return _omitted("Cost breakdown", "costs.parquet has no rows (no live model calls: replayed responses "
                                          "cost this run nothing)")
    missing = {"model", "role", "task", "resource_seconds", "usd", *COST_COLUMNS} - set(d.costs.column_names)
    if missing:
        raise DataError(f"costs.parquet of run {d.run_id}: missing columns {sorted(missing)}")
    rows = d.costs.to_pylist()
    why = sorted({f"{r['model']} ({r['role']}) {r['stage']}: {r.get('note') or 'no price'}"
                  for r in rows if r["usd"] is None})
    unpriced = "".join(f"<li>{esc(w)}</li>" for w in why)
    return (f'<p class="total">Cost of this run: {esc(_total_usd([r["usd"] for r in rows]))}</p>'
            + (f'<p class="note">Unpriced:</p><ul class="unpriced">{unpriced}</ul>' if unpriced else "")
            + '<p class="note">Calls answered from the cache cost nothing and are counted apart; resource seconds are '
            "deployment time of served models (stage serve, task *) and this run's share of shared services' time "
            "(stage shared); ≥ marks a sum with unpriced rows.</p>"
            + "".join(f"<h3>By {by}</h3>" + cost_table(rows, by) for by in ("model", "role", "task")))


def links(store: RunStore) -> str:
    present, absent = [], []
    for name in TABLE_DIRS:
        n = sum(1 for x in store.loc.child(name).list_names() if x.endswith(".parquet"))
        if n:
            present.append(f'<li><a href="{name}/">{name}/</a> ({n} Parquet file{"s" * (n != 1)})</li>')
        else:
            absent.append(f"{name}/")
    for name in RUN_FILES:
        if store.loc.child(name).exists():
            present.append(f'<li><a href="{name}">{name}</a></li>')
        else:
            absent.append(name)
    note = f'<p class="note">Not written by this run: {esc(", ".join(absent))}.</p>' if absent else ""
    return f'<ul class="links">{"".join(present)}</ul>{note}'


# --- the page ------------------------------------------------------------------------------------


def render_report(store: RunStore) -> str:
    """The HTML of the run's report, read from any storage the run was written to."""
    d = RunData.load(store)
    body = [header(d),
            _section("Leaderboard: HALOGEN", halogen_leaderboard(d)),
            _section("Leaderboard: HalluLens", hallulens_leaderboard(d)),
            _section("Refusal versus hallucination", refusal_scatter(d)),
            _section("Per-difficulty curves (HalluLens)", difficulty_curves(d)),
            _section("Hallucination by domain (HALOGEN)", domain_bars(d)),
            *(_section(f"Leaderboard: {name}", benchmark_section(name, records))
              for name, records in sorted(d.others.items())),
            _section("Cost breakdown", costs(d)),
            _section("Run files", links(store))]
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>halluscope report: {esc(d.run_id)}</title><style>{CSS}</style></head>"
            f'<body><main>{"".join(body)}</main></body></html>')


def benchmark_section(name: str, records: list[dict]) -> str:
    """A benchmark's own HTML (its ``html``), or a table of its records' top-level numbers."""
    bench = benchmarks().get(name)
    if bench is not None and bench.html is not None:
        return bench.html(records)
    keys = ["model", "task", *sorted({k for r in records for k, v in r.items()
                                      if isinstance(v, (int, float)) and not isinstance(v, bool)})]

    def cell(v: object) -> str:
        return _f3(v) if isinstance(v, float) else esc("-" if v is None else str(v))

    head = "".join(f"<th>{esc(k)}</th>" for k in keys)
    rows = "".join("<tr>" + "".join(f"<td>{cell(r.get(k))}</td>" for k in keys) + "</tr>"
                   for r in sorted(records, key=lambda r: (r["task"], r["model"])))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def write_report(store: RunStore) -> Location:
    """Writes ``<run>/report.html`` atomically and returns where it is."""
    loc = store.loc.child(REPORT)
    loc.write_bytes_atomic(render_report(store).encode())
    return loc
