"""The Markdown leaderboard of a run, with the authors' released numbers beside ours.

Model ids and task names are escaped (``report.escape.markdown``) wherever they are written: they
may come from stored runs or replay files, and the leaderboard is also printed on the terminal."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq

from halluscope.cost.ledger import cost_record
from halluscope.hallulens.report import leaderboard_section as hallulens_section
from halluscope.knowledge.import_names import IMPORT_TO_PROJECT
from halluscope.halogen.metrics import AVG_REFUSAL, AVG_RESPONSE, CORRECTED, rule_set
from halluscope.report.causes import CAUSES, DOC, SECTION
from halluscope.report.escape import markdown, terminal
from halluscope.storage.fs import Location
from halluscope.task_registry import benchmarks
from halluscope.halogen.published import SOURCE, published


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _short(task: str) -> str:
    return markdown(task.split("/", 1)[-1])


# |dH| and |dR| within which a (domain, model) pair counts as reproduced
REPRODUCED_H, REPRODUCED_R = 0.005, 0.002


def paper_tables(metrics: list[dict], rules: str = "paper") -> list[str]:
    """The layout of the paper's Tables 2 and 3 for one rule set: per model, the averages over
    the response-based (refusal-based) tasks, then U and H/R per task."""
    lines: list[str] = []
    suffix = CORRECTED if rules == "corrected" else ""
    named = "" if rules == "paper" else ", corrected rules"
    metrics = [m for m in metrics if rule_set(m["task"]) == rules]
    for kind, avg_task, title in (
            ("response", AVG_RESPONSE + suffix, f"Response-based tasks (paper Table 2 layout{named})"),
            ("refusal", AVG_REFUSAL + suffix, f"Refusal-based tasks (paper Table 3 layout{named})")):
        tasks = sorted({m["task"] for m in metrics if m.get("task_kind") == kind and not m.get("aggregate")})
        if not tasks:
            continue
        cells = {(m["model"], m["task"]): m for m in metrics if m.get("task_kind") == kind}
        models = sorted({model for model, _ in cells}, key=lambda mo: -((cells.get((mo, avg_task)) or {})
                                                                          .get("utility_score") or 0))
        header = ["model", "Avg U", "Avg H", "Avg R"]
        for t in tasks:
            header += [f"{_short(t)} U", f"{_short(t)} H/R"]
        lines += [f"## {title}", "", "| " + " | ".join(header) + " |",
                  "|" + "---|" * (4 + 2 * len(tasks))]
        for model in models:
            avg = cells.get((model, avg_task), {})
            row = [markdown(model), _fmt(avg.get("utility_score")), _fmt(avg.get("hallucination_score")),
                   _fmt(avg.get("response_ratio"))]
            for t in tasks:
                c = cells.get((model, t), {})
                row += [_fmt(c.get("utility_score")),
                        f"{_fmt(c.get('hallucination_score'))}/{_fmt(c.get('response_ratio'))}"]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    return lines


def reproduction(metrics: list[dict]) -> list[str]:
    """Per HALOGEN domain: how far the paper rules' numbers are from the released ones."""
    rows: dict[str, list[tuple[float, float]]] = {}
    for m in metrics:
        pub = published(m["model"], m["task"]) if rule_set(m["task"]) == "paper" and not m.get("aggregate") else None
        if pub and m["hallucination_score"] is not None and m["response_ratio"] is not None:
            rows.setdefault(m["task"], []).append((abs(m["hallucination_score"] - pub["hallucination_score"]),
                                                   abs(m["response_ratio"] - pub["response_ratio"])))
    if not rows:
        return []
    lines = ["## Reproduction of the released numbers (paper rules)", "",
             f"A pair is reproduced when |dH| <= {REPRODUCED_H} and |dR| <= {REPRODUCED_R}; "
             f"{DOC}, \"{SECTION}\", has the measurements behind each cause.", "",
             "| task | pairs | reproduced | max abs dH | mean abs dH | max abs dR | why they differ |",
             "|---|---|---|---|---|---|---|"]
    for task, d in sorted(rows.items()):
        ok = sum(h <= REPRODUCED_H and r <= REPRODUCED_R for h, r in d)
        exact = all(h <= 5e-7 and r <= 5e-7 for h, r in d)
        why = "matches the released numbers" if exact else CAUSES.get(task, "no known cause")
        lines.append(f"| {markdown(task)} | {len(d)} | {ok} | {max(h for h, _ in d):.4f} | "
                     f"{sum(h for h, _ in d) / len(d):.4f} | {max(r for _, r in d):.4f} | {markdown(why)} |")
    return lines + [""]


def rejected_packages(metrics: list[dict], task: str = "halogen/code", shown: int = 15) -> list[str]:
    """The imported names the code verifier rejected most often, over every model: the PyPI
    snapshot is of 2026 while the paper looked names up in 2024, so a name PyPI had then (PIL, a
    registered project, is the import name of pillow) can be missing; list such names in
    ``verifiers.pypi_extra_names`` to accept them."""
    counts: Counter[str] = Counter()
    for m in metrics:
        if m["task"] == task:
            counts.update({name: n for name, n in m.get("top_unsupported", [])})
    if not counts:
        return []
    lines = [f"## Names {markdown(task)} found neither on PyPI nor in the standard library", "",
             "PyPI is read from a 2026 snapshot; the paper checked PyPI in 2024. A name PyPI had then but "
             "not now counts as hallucinated here and not in the released numbers: accept such names with "
             "`verifiers.pypi_extra_names`.", "",
             "| name | responses (all models) | import name of |", "|---|---|---|"]
    for name, n in counts.most_common(shown):
        lines.append(f"| {markdown(name)} | {n} | {markdown(IMPORT_TO_PROJECT.get(name, '')) or '-'} |")
    return lines + [""]


def _delta(ours: float | None, theirs: float | None) -> str:
    return "-" if ours is None or theirs is None else f"{ours - theirs:+.4f}"


def _task_section(task: str, rows: list[dict], twins: dict[str, dict]) -> list[str]:
    """One task's table: ours, the released numbers and the difference, and, for a paper task
    run beside its corrected twin, the corrected rules' numbers."""
    corrected = bool(twins)
    head = "| model | n | H | H micro | R | U | H pub | R pub | U pub | dH | dR |"
    head += " H corr | R corr | U corr |" if corrected else ""
    head += " errors | not in file |"
    lines = [f"## {markdown(task)} ({markdown(rows[0]['task_kind'])}-based)", "", head,
             "|" + "---|" * (head.count("|") - 1)]
    for m in rows:
        pub = published(m["model"], task) or {}
        cells = [markdown(m["model"]), str(m["n_items"]), _fmt(m["hallucination_score"]),
                 _fmt(m["hallucination_score_micro"]), _fmt(m["response_ratio"]), _fmt(m["utility_score"]),
                 _fmt(pub.get("hallucination_score")), _fmt(pub.get("response_ratio")),
                 _fmt(pub.get("utility_score")), _delta(m["hallucination_score"], pub.get("hallucination_score")),
                 _delta(m["response_ratio"], pub.get("response_ratio"))]
        if corrected:
            twin = twins.get(m["model"], {})
            cells += [_fmt(twin.get("hallucination_score")), _fmt(twin.get("response_ratio")),
                      _fmt(twin.get("utility_score"))]
        cells += [str(m["n_errors"]), str(m.get("n_missing", 0))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


COSTS_TOTAL = "costs/total"

HALOGEN_PREAMBLE = (
    "H = hallucination score: per answered prompt, the share of its units (imported packages, facts, titles, "
    "...) found unsupported, averaged over the answered prompts (*H micro* pools every unit of every answer); "
    "lower is better. R = response ratio: the share of prompts answered rather than refused (on refusal-based "
    "tasks refusing is right). U = utility: credit per prompt for a supported answer (or a refusal where one "
    "is right), averaged over all prompts; higher is better. Columns marked *pub* are the numbers HALOGEN's "
    f"authors released for the same responses ({SOURCE}); d is ours minus theirs. A task such as "
    "`halogen/code` follows the authors' rules; `halogen/code@corrected` follows our corrections of them "
    "(*corr* columns).")


def _is_halogen(record: dict) -> bool:
    """HALOGEN's records (and those of runs written before records named their benchmark)."""
    bench = record.get("benchmark")
    return bench == "halogen" or (bench is None and record["task"] != COSTS_TOTAL)


def leaderboard(metrics: list[dict], run_id: str) -> str:
    """The run's leaderboard: each benchmark's section opens with what its numbers mean; the
    text is read on a terminal too, so what the sections write themselves carries no HTML entity."""
    hallulens = [m for m in metrics if m.get("benchmark") == "hallulens"]
    others = [m for m in metrics if m.get("benchmark") not in (None, "halogen", "hallulens")]
    cost = next((m for m in metrics if m["task"] == COSTS_TOTAL), None)
    metrics = [m for m in metrics if _is_halogen(m)]
    lines = [f"# halluscope leaderboard: run {markdown(run_id)}", ""]
    if metrics:
        lines += ["## HALOGEN", "", HALOGEN_PREAMBLE, ""]
    lines += paper_tables(metrics) + paper_tables(metrics, "corrected")
    lines += reproduction(metrics) + rejected_packages(metrics)
    lines += hallulens_section([{**m, "model": markdown(m["model"])} for m in hallulens])
    tasks = sorted({m["task"] for m in metrics if not m.get("aggregate")})
    by_task = {(m["task"], m["model"]): m for m in metrics}
    for task in tasks:
        if rule_set(task) == "corrected" and task.removesuffix(CORRECTED) in tasks:
            continue  # shown beside its paper twin
        rows = sorted((m for m in metrics if m["task"] == task), key=lambda m: (m["utility_score"] is None,
                                                                                -(m["utility_score"] or 0)))
        twins = {m["model"]: by_task[(task + CORRECTED, m["model"])] for m in rows
                 if (task + CORRECTED, m["model"]) in by_task}
        lines += _task_section(task, rows, twins)
    aggregates = [m for m in metrics if m.get("aggregate")]
    if aggregates:
        lines += ["## Averages over tasks (unweighted)", "",
                  "| model | task group | tasks | H | R | U |", "|---|---|---|---|---|---|"]
        for m in sorted(aggregates, key=lambda m: (m["task"], -(m["utility_score"] or 0))):
            lines.append(f"| {markdown(m['model'])} | {markdown(m['task'])} | {m['n_tasks']} | "
                         f"{_fmt(m['hallucination_score'])} | {_fmt(m['response_ratio'])} | "
                         f"{_fmt(m['utility_score'])} |")
        lines.append("")
    lines += benchmark_sections(others)
    if cost is not None:  # $0.0000 too (replayed answers only): the dollars `plan` gave and metrics.json holds
        lines += [f"Cost of this run: {cost_text(cost)}; {cost['calls']} model calls, {cost['input_tokens']} input "
                  f"and {cost['output_tokens']} output tokens (costs.parquet has the breakdown).", ""]
        lines += [f"- unpriced: {markdown(why)}" for why in cost.get("unpriced") or []]
        if cost.get("unpriced"):
            lines.append("")
    return "\n".join(lines)


def cost_text(cost: dict) -> str:
    """The "costs/total" record's dollars: the total only when every line item is priced."""
    if cost.get("complete", cost["usd"] is not None) and cost["usd"] is not None:
        return f"${cost['usd']:,.4f}"
    n = cost.get("unpriced_rows")
    if n is None:  # a record from before the ledger counted its unpriced rows
        return "incomplete: some line items unpriced"
    return f"incomplete: {n} line item{'s' * (n != 1)} unpriced (priced items ${cost.get('usd_priced') or 0:,.4f})"


def json_records(run: Location) -> list:
    """A finished run's metrics.json for `halluscope report --json`, its "costs/total" record made
    from costs.parquet as the ledger reads it now: the dollars `halluscope plan` and the leaderboard
    give. A run written before the ledger counted unpriced rows has ``usd: null`` there for a run
    with no line item at all (replayed answers only: $0)."""
    records = json.loads(run.child("metrics.json").read_bytes())
    costs = run.child("costs.parquet")
    if not isinstance(records, list) or not costs.exists():
        return records
    with costs.fs.open(costs.path, "rb") as f:
        table: pa.Table = pq.read_table(f)
    total = cost_record(table)
    at = next((i for i, r in enumerate(records) if isinstance(r, dict) and r.get("task") == COSTS_TOTAL), None)
    if at is None:
        return [*records, total]
    return [*records[:at], {**records[at], **total}, *records[at + 1:]]


UNMATCHED = "matches no item of the task"  # the quarantine's reason for a readable row (models.replay)


def input_notes(missing: dict[str, int], files: dict[str, str], quarantine: pa.Table, quarantine_url: str,
                shown: int = 3) -> list[str]:
    """What `halluscope run` says after the leaderboard about its recorded answers, per "model/task":
    items with no response (``missing``) and rows of the model's file set aside in the run's
    quarantine (rows that could not be read, rows that match no item), then where the quarantine
    is, with a few of its reasons. An item whose row could not be read is not "not in your file".
    ``files``: model id -> its replay file (models replaying released answers have none)."""
    rows = quarantine.select(["source", "row", "model", "task", "reason"]).to_pylist() if quarantine.num_rows else []
    unread = Counter(f"{r['model']}/{r['task']}" for r in rows if r["reason"] != UNMATCHED)
    unmatched = Counter(f"{r['model']}/{r['task']}" for r in rows if r["reason"] == UNMATCHED)
    notes = []
    for key in sorted(set(missing) | set(unread) | set(unmatched)):
        n, u, m = missing.get(key, 0), unread.get(key, 0), unmatched.get(key, 0)
        path = files.get(key.split("/")[0])
        if path is None:
            said = [f"{n} item(s) with no released response" if n else "",
                    f"{u + m} row(s) of the recorded file quarantined" if u + m else ""]
        else:
            path = terminal(path)
            said = [(f"{n} item(s) with no usable response in your file {path}" if u else
                     f"{n} item(s) not in your file {path}") if n else f"your file {path}",
                    f"{u} row(s) of it could not be read" if u else "",
                    f"{m} row(s) of it match no item" if m else ""]
        notes.append(f"{terminal(key)}: " + "; ".join(part for part in said if part))
    if rows:
        notes.append(f"quarantine: {len(rows)} input row(s) set aside, each with its file, row and reason, in "
                     f"{terminal(quarantine_url.rstrip('/'))}/ (Parquet)")
        notes += [f"  {terminal(r['source'])} row {r['row']} ({terminal(r['model'])}, {terminal(r['task'])}): "
                  f"{terminal(r['reason'])}" for r in rows[:shown]]
        if len(rows) > shown:
            notes.append(f"  ... and {len(rows) - shown} more")
    if any(missing.get(key) and key.split("/")[0] in files for key in missing):
        notes.append("rows join items by prompt text (whitespace aside), or by params.columns.item_id; if your "
                     "file covers only the first N prompts of a task, set limits.max_items_per_task: N")
    return notes


def benchmark_sections(records: list[dict]) -> list[str]:
    """Each other benchmark's section, as the benchmark writes it (its ``markdown``), or a table
    of its records' numbers."""
    lines: list[str] = []
    for name in sorted({r["benchmark"] for r in records}):
        own = [r for r in records if r["benchmark"] == name]
        bench = benchmarks().get(name)
        if bench is not None and bench.markdown is not None:
            lines += [bench.markdown(own), ""]
        else:
            lines += generic_table(f"{name} metrics", own)
    return lines


def generic_table(title: str, records: list[dict]) -> list[str]:
    """Model, task and every top-level number of the records (a benchmark without its own layout)."""
    keys = sorted({k for r in records for k, v in r.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)})
    lines = [f"## {markdown(title)}", "", "| model | task | " + " | ".join(markdown(k) for k in keys) + " |",
             "|---|---|" + "---|" * len(keys)]
    for r in sorted(records, key=lambda r: (r["task"], r["model"])):
        cells = [_fmt(r[k]) if isinstance(r.get(k), float) else str(r.get(k, "-")) for k in keys]
        lines.append(f"| {markdown(r['model'])} | {markdown(r['task'])} | " + " | ".join(cells) + " |")
    return lines + [""]
