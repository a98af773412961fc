"""A RAGTruth run as Markdown: the paper's Tables 5 and 6 layout (P / R / F1 per task and Overall),
one row per model and one for all models, then the selection experiment and RAG generation.
A ratio that was 0/0 (e.g. recall where no response has gold spans) is shown as n/a."""

from __future__ import annotations

from halluscope.ragtruth.metrics import ALL, OVERALL
from halluscope.ragtruth.selection import STRATEGIES


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _prf_table(rows: list[dict]) -> list[str]:
    tasks = [t for t in dict.fromkeys(r["task"] for r in rows) if t != OVERALL] + [OVERALL]
    models = [ALL] + sorted({r["model"] for r in rows} - {ALL})
    cell = {(r["task"], r["model"]): r for r in rows}
    out = ["| model | " + " | ".join(tasks) + " |", "|---" * (len(tasks) + 1) + "|"]
    for m in models:
        cells = []
        for t in tasks:
            r = cell.get((t, m))
            cells.append("-" if r is None else " / ".join(
                "n/a" if k in r["undefined"] else _pct(r[k]) for k in ("precision", "recall", "f1")))
        out.append(f"| {'all models' if m == ALL else m} | " + " | ".join(cells) + " |")
    return out


def markdown(run_id: str, metrics: dict, selection: list[dict] | None, rag: dict | None) -> str:
    det = metrics["detector"]
    overall = next(r for r in metrics["response_level"] if r["task"] == OVERALL and r["model"] == ALL)
    policy = "left out" if metrics["options"]["unpredicted"] == "exclude" else "scored as empty lists"
    lines = [f"# RAGTruth run {run_id}", "",
             f"Detector: {det['model']} ({det['template']}); {overall['n_responses']} responses scored, "
             f"{overall['unreadable']} of them unreadable answers scored as empty lists; "
             f"{overall['unpredicted']} without a prediction ({policy}).", "",
             "## Response level: P / R / F1 (%)", "", *_prf_table(metrics["response_level"]), "",
             "## Span level, characters (micro): P / R / F1 (%)", "", *_prf_table(metrics["span_level"]), ""]
    if metrics["detector_problems"]:
        lines += ["Detector problems: " + ", ".join(f"{k} {v}" for k, v in metrics["detector_problems"].items()), ""]
    for rep in selection or []:
        lines += [f"## Selection among {' + '.join(rep['models'])} ({rep['n_instances']} instances)", "",
                  "| strategy | valid | hallucination rate (%) | reduction (%) |", "|---|---|---|---|"]
        for name in STRATEGIES:
            s = rep["strategies"][name]
            lines.append(f"| {name} | {s['valid']} | {_pct(s['rate'])} | {_pct(s['reduction'])} |")
        lines.append("")
    if rag:
        lines += [f"## RAG generation, judged by {rag['detector']}", "",
                  "| model | task | scored | hallucination rate (%) | density (spans / 100 words) | "
                  "generation errors | unreadable (empty lists) | unpredicted |", "|---|---|---|---|---|---|---|---|"]
        for r in rag["rows"]:
            dens = "-" if r["density"] is None else f"{r['density']:.2f}"
            lines.append(f"| {r['model']} | {r['task']} | {r['scored']} | {_pct(r['hallucination_rate'])} | {dens} | "
                         f"{r['generation_errors']} | {r['unreadable']} | {r['unpredicted']} |")
        lines.append("")
    c = metrics["costs"]["total"]
    lines.append(f"Model calls: {c['calls']} ({c['cached_calls']} from the cache, {c['failed_calls']} failed), "
                 f"{c['input_tokens']} input and {c['output_tokens']} output tokens.")
    return "\n".join(lines) + "\n"
