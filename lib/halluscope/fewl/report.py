"""A FEWL run as Markdown: the paper's comparisons (share of questions where the labelled true
answer outscores the other, per method), answers ranked first, mean scores, and what was left out."""

from __future__ import annotations


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def markdown(metrics: dict) -> str:
    ev = metrics["evaluation"]
    lines = [f"# FEWL run {metrics['run_id']}: {metrics['dataset']}, {metrics['questions']} questions", "",
             f"References {', '.join(metrics['reference_ids'])}; IW/CO by {metrics['generator']}; "
             f"similarity {metrics['similarity']}; single-reference baselines use {metrics['single_reference']}.", "",
             "## Pairwise: share of questions where the first label scores above the second", "",
             "| method | pair | wins | ties | losses | share (%) | skipped |", "|---|---|---|---|---|---|---|"]
    for t in ev["pairwise"]:
        skipped = ", ".join(f"{k} {v}" for k, v in t["skipped"].items()) or "-"
        lines.append(f"| {t['method']} | {t['positive']} > {t['negative']} | {t['wins']} | {t['ties']} | "
                     f"{t['losses']} | {_pct(t['share'])} | {skipped} |")
    lines += ["", "## Ranked first", "", "| method | label | first | compared |", "|---|---|---|---|"]
    lines += [f"| {t['method']} | {t['label']} | {t['first']} | {t['compared']} |" for t in ev["ranked_first"]]
    lines += ["", "## Mean score per label", "", "| method | label | n | unscored | mean |", "|---|---|---|---|---|"]
    lines += [f"| {r['method']} | {r['label']} | {r['n']} | {r['unscored']} | {_num(r['mean'])} |"
              for r in metrics["mean_scores"]]
    prep = metrics["preparation"]
    lines += ["", f"Prepared {prep['prepared']} questions; excluded {len(prep['excluded'])}; uniform-weight "
                  f"fallback {len(prep['uniform_fallback'])}; questions missing a reference "
                  f"{len(prep['missing_references'])}."]
    for step, models in metrics["parse_report"].items():
        for model, kinds in models.items():
            lines.append(f"Unusable {step} replies of {model}: " + ", ".join(f"{k} {v}" for k, v in kinds.items()))
    c = metrics["costs"]["total"]
    lines.append(f"Model calls: {c['calls']} ({c['cached_calls']} from the cache, {c['failed_calls']} failed), "
                 f"{c['input_tokens']} input and {c['output_tokens']} output tokens.")
    return "\n".join(lines) + "\n"
