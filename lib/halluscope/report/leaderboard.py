"""The Markdown leaderboard of a run, with the authors' released numbers beside ours.

Model ids and task names are escaped (``report.escape.markdown``) wherever they are written: they
may come from stored runs or replay files, and the leaderboard is also printed on the terminal."""

from __future__ import annotations

from halluscope.hallulens.report import leaderboard_section as hallulens_section
from halluscope.metrics.halogen import AVG_REFUSAL, AVG_RESPONSE
from halluscope.report.escape import markdown
from halluscope.tasks.halogen.published import SOURCE, published


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _short(task: str) -> str:
    return markdown(task.split("/", 1)[-1])


def paper_tables(metrics: list[dict]) -> list[str]:
    """The layout of the paper's Tables 2 and 3: per model, the averages over the response-based
    (refusal-based) tasks, then U and H/R per task."""
    lines: list[str] = []
    for kind, avg_task, title in (("response", AVG_RESPONSE, "Response-based tasks (paper Table 2 layout)"),
                                  ("refusal", AVG_REFUSAL, "Refusal-based tasks (paper Table 3 layout)")):
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


def leaderboard(metrics: list[dict], run_id: str) -> str:
    hallulens = [m for m in metrics if m.get("benchmark") == "hallulens"]
    metrics = [m for m in metrics if m.get("benchmark") != "hallulens"]
    lines = [f"# halluscope leaderboard: run {markdown(run_id)}", "",
             "H = hallucination score (macro; micro in brackets), R = response ratio, U = utility. "
             "Columns marked *pub* are the numbers HALOGEN's authors released for the same responses "
             f"({SOURCE}).", ""]
    lines += paper_tables(metrics)
    lines += hallulens_section([{**m, "model": markdown(m["model"])} for m in hallulens])
    tasks = sorted({m["task"] for m in metrics if not m.get("aggregate")})
    cost = next((m for m in metrics if m["task"] == "costs/total"), None)
    for task in tasks:
        rows = sorted((m for m in metrics if m["task"] == task), key=lambda m: (m["utility_score"] is None,
                                                                                -(m["utility_score"] or 0)))
        lines += [f"## {markdown(task)} ({markdown(rows[0]['task_kind'])}-based)", "",
                  "| model | n | H | H micro | R | U | H pub | R pub | U pub | errors | not in file |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for m in rows:
            pub = published(m["model"], task) or {}
            lines.append(f"| {markdown(m['model'])} | {m['n_items']} | {_fmt(m['hallucination_score'])} | "
                         f"{_fmt(m['hallucination_score_micro'])} | {_fmt(m['response_ratio'])} | "
                         f"{_fmt(m['utility_score'])} | {_fmt(pub.get('hallucination_score'))} | "
                         f"{_fmt(pub.get('response_ratio'))} | {_fmt(pub.get('utility_score'))} | {m['n_errors']} | "
                         f"{m.get('n_missing', 0)} |")
        lines.append("")
    aggregates = [m for m in metrics if m.get("aggregate") and m["task"] != "costs/total"]
    if aggregates:
        lines += ["## Averages over tasks (unweighted)", "",
                  "| model | task group | tasks | H | R | U |", "|---|---|---|---|---|---|"]
        for m in sorted(aggregates, key=lambda m: (m["task"], -(m["utility_score"] or 0))):
            lines.append(f"| {markdown(m['model'])} | {markdown(m['task'])} | {m['n_tasks']} | "
                         f"{_fmt(m['hallucination_score'])} | {_fmt(m['response_ratio'])} | "
                         f"{_fmt(m['utility_score'])} |")
        lines.append("")
    if cost is not None and cost["calls"]:
        usd = "not priced (no price for these models)" if cost["usd"] is None else f"${cost['usd']:.4f}"
        lines += [f"Cost of this run: {usd}; {cost['calls']} model calls, {cost['input_tokens']} input and "
                  f"{cost['output_tokens']} output tokens (costs.parquet has the breakdown).", ""]
    return "\n".join(lines)
