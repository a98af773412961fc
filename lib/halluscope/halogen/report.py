"""HALOGEN's sections of leaderboard.md and report.html, from its metric records: the paper's Tables
2 and 3 with the numbers the authors released beside ours, how far each domain is from them and
why, the names the code verifier rejected most, the averages, every task's numbers, and charts of
refusal against hallucination and of H per domain."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence

from halluscope.contract.metrics import PAIRED, MetricRecord
from halluscope.contract.report import Beside, Cell, Chart, Column, Joined, Link, Point, Sampled, Section, Series, Table
from halluscope.halogen import causes
from halluscope.halogen.metrics import AVG_REFUSAL, AVG_RESPONSE, CORRECTED, rule_set
from halluscope.halogen.published import SOURCE, published
from halluscope.knowledge.import_names import IMPORT_TO_PROJECT
from halluscope.report import ranking

KINDS = (("response", AVG_RESPONSE, "Response-based tasks (paper Table 2 layout)"),
         ("refusal", AVG_REFUSAL, "Refusal-based tasks (paper Table 3 layout)"))
RULES = {"paper": "the authors' rules", "corrected": "corrected rules"}
H, R, U = "hallucination_score", "response_ratio", "utility_score"
# A difference below half a unit of the released files' sixth decimal is no difference.
EXACT = 5e-7
# |dH| and |dR| within which a (domain, model) pair counts as reproduced
REPRODUCED_H, REPRODUCED_R = 0.005, 0.002
# From <root>/<run>/ (report.html, leaderboard.md) to the repository's docs, when runs are under ./runs.
DOCS_HREF = f"../../{causes.DOC}#{causes.ANCHOR}"

DEFINITIONS = (
    ("H", "hallucination score: per responded item, the share of its claims (packages, titles, facts, ...) that "
          "are unsupported, averaged over the items the model answered (H micro pools every claim of every "
          "answer). Lower is better."),
    ("R", "response ratio: the share of items the model answered rather than refused. Higher means the model "
          "answered more often; on refusal-based tasks (false presuppositions, rationalization, historical "
          "events) the right move is to refuse, so there answering is the failure."),
    ("U", "utility: per item, credit for a correct response (or, on refusal-based tasks, for refusing), "
          "averaged over all items. Higher is better."),
)
PREAMBLE = (
    "A task such as halogen/code follows the authors' rules; halogen/code@corrected follows our corrections of "
    "them. Beside each paper-rule number of the paper's layout: the one HALOGEN's authors released for the "
    f"same responses ({SOURCE}); their averages are the mean of the released per-task numbers. The per-task "
    "tables give the released numbers in columns of their own, d = ours minus released, and the corrected "
    "rules' numbers beside the authors' rules' ones.")


def _value(x: object) -> float | None:
    """A number to show or draw; None for a missing, NaN or non-numeric value."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
        return float(x)
    return None


def _short(task: str) -> str:
    return task.split("/", 1)[-1]


def _delta(ours: object, theirs: object) -> float | None:
    a, b = _value(ours), _value(theirs)
    return None if a is None or b is None else a - b


def _by_utility(models: set[str], cells: dict[tuple[str, str], dict], avg_task: str) -> list[str]:
    """Best average utility first, models without one last, ties by name."""
    def key(m: str) -> tuple[bool, float, str]:
        u = _value(cells.get((m, avg_task), {}).get(U))
        return u is None, -(u or 0.0), m
    return sorted(models, key=key)


def _pub_mean(model: str, tasks: list[str], key: str) -> float | None:
    """The released numbers averaged over the same tasks, only when all of them were released."""
    values = [(published(model, t) or {}).get(key) for t in tasks]
    present = [float(v) for v in values if v is not None]
    return math.fsum(present) / len(present) if present and len(present) == len(values) else None


def paper_tables(records: list[dict], rules: str) -> list[Table]:
    """The paper's Tables 2 and 3 for one rule set: per model the averages over the tasks of a kind,
    then U and H/R per task; beside the paper rules' numbers, the released ones (the corrected rules
    have none to compare with)."""
    records = [r for r in records if rule_set(r["task"]) == rules]
    cells = {(r["model"], r["task"]): r for r in records}
    out = []
    for kind, avg_task, title in KINDS:
        avg_task += CORRECTED if rules == "corrected" else ""
        tasks = sorted({r["task"] for r in records if r.get("task_kind") == kind and not r.get("aggregate")})
        if not tasks:
            continue

        def cell(ours: Cell, theirs: Cell) -> Cell:
            return Beside(ours, theirs) if rules == "paper" else ours
        columns = [Column("model"), *(Column(k, ".3f", "average") for k in ("U", "H", "R"))]
        for t in tasks:
            columns += [Column("U", ".3f", _short(t)), Column("H/R", ".3f", _short(t))]
        rows = []
        for model in _by_utility({m for m, t in cells if cells[(m, t)].get("task_kind") == kind}, cells, avg_task):
            avg = cells.get((model, avg_task), {})
            row = [model, *(cell(_value(avg.get(k)), _pub_mean(model, tasks, k)) for k in (U, H, R))]
            for t in tasks:
                c, pub = cells.get((model, t), {}), published(model, t) or {}
                row += [Sampled(cell(_value(c.get(U)), pub.get(U)), model, t),
                        Sampled(cell(Joined((_value(c.get(H)), _value(c.get(R)))), Joined((pub.get(H), pub.get(R)))),
                                model, t)]
            rows.append(row)
        named = "" if rules == "paper" else ", corrected rules"
        out.append(Table(title[:-1] + named + ")", columns, rows))
    return out


def reproduction(per_task: list[dict]) -> Table | None:
    """Per domain, how far the paper rules' numbers are from the released ones and why."""
    deltas: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in per_task:
        pub = published(r["model"], r["task"]) if rule_set(r["task"]) == "paper" else None
        dh, dr = (_delta(r.get(k), (pub or {}).get(k)) for k in (H, R))
        if dh is not None and dr is not None:
            deltas[r["task"]].append((abs(dh), abs(dr)))
    if not deltas:
        return None
    def counts(ds: list[tuple[float, float]]) -> list[Cell]:
        return [len(ds), sum(h > EXACT or r > EXACT for h, r in ds),
                sum(h <= REPRODUCED_H and r <= REPRODUCED_R for h, r in ds), max(h for h, _ in ds),
                math.fsum(h for h, _ in ds) / len(ds), max(r for _, r in ds)]

    rows: list[list[Cell]] = []
    for task, ds in sorted(deltas.items()):
        row = counts(ds)
        why = Link(causes.CAUSES.get(task, "no known cause"), DOCS_HREF) if row[1] else "matches the released numbers"
        rows.append([_short(task), *row, why])
    scored = sum(rule_set(r["task"]) == "paper" for r in per_task)
    every = [d for ds in deltas.values() for d in ds]
    rows.append(["all", *counts(every), f"{len(every)} of the {scored} (domain, model) pairs scored have a "
                                        "released H and R to compare"])
    return Table("Reproduction of the released numbers (paper rules)",
                 ["task", "models", "differ", "reproduced", *(Column(c, ".4f") for c in (
                     "max abs dH", "mean abs dH", "max abs dR")), Column("why they differ", wrap=True)], rows,
                 notes=[f"A model differs when its H or R is off by more than {EXACT:g} (the released files give 6 "
                        f"decimals); it counts as reproduced when its H is within {REPRODUCED_H} and its R within "
                        f"{REPRODUCED_R} of the released ones. {causes.DOC}, \"{causes.SECTION}\", has the "
                        "measurements behind each cause."])


def rejected_packages(per_task: list[dict], task: str = "halogen/code", shown: int = 15) -> Table | None:
    """The imported names the code verifier rejected most often, over every model: the PyPI
    snapshot is of 2026 while the paper looked names up in 2024, so a name PyPI had then (PIL, a
    registered project, is the import name of pillow) can be missing; list such names in
    ``benchmarks.halogen.pypi_extra_names`` to accept them."""
    counts: Counter[str] = Counter()
    for m in per_task:
        if m["task"] == task:
            counts.update({name: n for name, n in m.get("top_unsupported", [])})
    if not counts:
        return None
    rows: list[list[Cell]] = [[name, n, IMPORT_TO_PROJECT.get(name) or None] for name, n in counts.most_common(shown)]
    return Table(f"Names {task} found neither on PyPI nor in the standard library",
                 ["name", "responses (all models)", "import name of"], rows,
                 notes=["PyPI is read from a 2026 snapshot; the paper checked PyPI in 2024. A name PyPI had then but "
                        "not now counts as hallucinated here and not in the released numbers: accept such names "
                        "with benchmarks.halogen.pypi_extra_names."])


def averages_table(aggregates: list[dict]) -> Table | None:
    if not aggregates:
        return None
    rows = [[m["model"], m["task"], m.get("n_tasks"), _value(m.get(H)), _value(m.get(R)), _value(m.get(U))]
            for m in sorted(aggregates, key=lambda m: (m["task"], -(_value(m.get(U)) or 0)))]
    return Table("Averages over tasks (unweighted)", ["model", "task group", "tasks", "H", "R", "U"], rows)


def _task_table(task: str, rows: list[dict], twins: dict[str, dict]) -> Table:
    """One task's records: ours, the released numbers and the difference, and, for a paper task
    run beside its ``@corrected`` twin, the corrected rules' numbers."""
    columns = [Column("model"), Column("n", ","), *(Column(c, ".3f") for c in ("H", "H micro", "R", "U")),
               *(Column(c, ".4f") for c in ("H s.e.", "U s.e.")),
               *(Column(c, ".3f") for c in ("H released", "R released", "U released")),
               *(Column(c, "+.4f") for c in ("dH", "dR"))]
    columns += [Column(c, ".3f") for c in ("H corrected", "R corrected", "U corrected")] if twins else []
    columns += [Column("errors", ","), Column("not in file", ",")]
    lines = []
    for r in rows:
        pub = published(r["model"], task) or {}
        errors = r.get("stderr") or {}
        line = [r["model"], r.get("n_items"),
                *(Sampled(_value(r.get(k)), r["model"], task) for k in (H, "hallucination_score_micro", R, U)),
                *(_value(errors.get(k)) for k in (H, U)),
                *(_value(pub.get(k)) for k in (H, R, U)), *(_delta(r.get(k), pub.get(k)) for k in (H, R))]
        if twins:
            twin = twins.get(r["model"], {})
            line += [Sampled(_value(twin.get(k)), r["model"], task + CORRECTED) for k in (H, R, U)]
        lines.append(line + [r.get("n_errors"), r.get("n_missing", 0)])
    kind = rows[0].get("task_kind")
    title = f"{task} ({kind}-based): {RULES[rule_set(task)]}{', corrected rules beside them' if twins else ''}"
    return Table(title, columns, lines, collapsed=True, notes=[
        "s.e.: the standard error of H and U over the task's items (metrics.json has every figure's 95% interval "
        "and how it was computed); two models whose H differ by less than about twice their combined s.e. are not "
        "told apart by these items."])


def per_task(records: list[dict]) -> Section | None:
    """Per task, every model's numbers (best utility first); a corrected task sits beside its paper twin."""
    by_task: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_task[r["task"]].append(r)
    tables = []
    for task in sorted(by_task):
        if rule_set(task) == "corrected" and task.removesuffix(CORRECTED) in by_task:
            continue
        twins = {r["model"]: r for r in by_task.get(task + CORRECTED, [])}
        rows = sorted(by_task[task], key=lambda r: (_value(r.get(U)) is None, -(_value(r.get(U)) or 0), r["model"]))
        tables.append(_task_table(task, rows, twins))
    return Section("Per task", parts=tables) if tables else None


def _one_minus(v: object) -> float | None:
    v = _value(v)
    return None if v is None else 1.0 - v


def refusal_scatter(aggregates: list[dict]) -> Section | None:
    """Refusal rate against H of the paper rules' averages, one panel per kind of task."""
    charts = []
    for _, avg_task, _ in KINDS:
        points = sorted((Point(r["model"], _one_minus(r.get(R)), _value(r.get(H)))
                         for r in aggregates if r["task"] == avg_task), key=lambda p: p.name)
        if points:
            charts.append(Chart("scatter", f"HALOGEN {_short(avg_task)} (paper rules, mean over tasks)",
                                points=points, x_label="refusal rate (1 − response ratio)",
                                y_label="hallucination score H"))
    return Section("Refusal versus hallucination", [
        "Lower hallucinates less. On HALOGEN's refusal-based tasks refusing is the right answer (see H and R "
        "under HALOGEN). HALOGEN points follow the authors' rules; the corrected rules' averages are in HALOGEN's "
        "tables."], parts=charts) if charts else None


def _bars(records: list[dict], title: str) -> Chart:
    order = {kind: i for i, (kind, _, _) in enumerate(KINDS)}
    tasks = sorted({r["task"] for r in records}, key=lambda t: (
        min(order.get(str(r.get("task_kind")), 9) for r in records if r["task"] == t), t))
    cells = {(r["model"], r["task"]): _value(r.get(H)) for r in records}

    def interval(r: dict) -> tuple[float, float] | None:
        ci = (r.get("ci95") or {}).get(H)
        return (ci[0], ci[1]) if ci and None not in ci else None

    intervals = {(r["model"], r["task"]): interval(r) for r in records}
    series = [Series(m, [cells.get((m, t)) for t in tasks], [intervals.get((m, t)) for t in tasks])
              for m in sorted({r["model"] for r in records})]
    return Chart("bars", title, [_short(t) for t in tasks], series, y_label="H")


def domain_bars(records: list[dict]) -> Section | None:
    """The paper rules' H per task; the corrected rules' in a chart of their own, never mixed in."""
    if not records:
        return None
    paper, corrected = ([r for r in records if rule_set(r["task"]) == rules] for rules in RULES)
    charts = [_bars(paper, "Hallucination score H per task and model (the authors' rules; whiskers: 95% "
                           "intervals)")] if paper else []
    if corrected:
        chart = _bars(corrected, "Hallucination score H per task and model (corrected rules; whiskers: 95% intervals)")
        charts.append(Chart(chart.kind, chart.title, chart.labels, chart.series, y_label=chart.y_label,
                            collapsed=bool(paper)))
    return Section("Hallucination by domain (HALOGEN)", [
        "Response-based tasks first, then refusal-based; a grey dash: H undefined (the model answered none of "
        "the task's items)."], parts=charts)


def rank_separations(tasks: list[dict], paired: list[dict]) -> Table | None:
    """Per task, the models ranked by H and how many neighbours in that ranking the errors tell apart."""
    return ranking.rank_separations(tasks, paired, H, "H", [
        "Adjacent models in each task's H ranking, told apart when their difference exceeds its 95% interval: "
        "paired, over the items both answered (metrics.json holds the differences in R, H and U of every two "
        "models up to 16 per task, else of each figure's neighbours, table \"paired\"); where a run has no "
        "paired record, their errors taken as unpaired, which overstates it."])


def rank_intervals(paired: list[dict]) -> Table | None:
    """Per model and task, the ranks by H its paired differences allow (``report.ranking``)."""
    return ranking.rank_intervals(paired, H, "Rank intervals by H (1: least hallucinated)", [
        "The ranks a model can hold on a task, given which of its paired differences in H exceed their 95% "
        "interval: 3-7 means two models are surely less hallucinated and four surely more. A model that answered "
        "no item of a task has no H and no rank there."])


def sections(records: Sequence[MetricRecord]) -> list[Section]:
    """The report hook: HALOGEN's tables, then its charts (read from the records' flat objects)."""
    every = [r.as_json() for r in records]
    paired = [r for r in every if r.get("table") == PAIRED]
    rows = [r for r in every if r.get("table") != PAIRED]
    tasks = [r for r in rows if not r.get("aggregate")]
    aggregates = [r for r in rows if r.get("aggregate")]
    parts = [*paper_tables(rows, "paper"), reproduction(tasks), *paper_tables(rows, "corrected"),
             averages_table(aggregates), rejected_packages(tasks), per_task(tasks), rank_separations(tasks, paired),
             rank_intervals(paired)]
    main = Section("HALOGEN", [PREAMBLE], DEFINITIONS, [p for p in parts if p is not None])
    return [s for s in (main, refusal_scatter(aggregates), domain_bars(tasks)) if s is not None]
