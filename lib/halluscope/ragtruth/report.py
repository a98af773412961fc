"""RAGTruth's section of leaderboard.md and report.html, from its metric records: the paper's
Tables 5 and 6 layout (P / R / F1 per task type and Overall, one row per response model and one
for all of them) per detector, the selection experiment, and RAG generation. A ratio that was 0/0
(e.g. recall where no response has gold spans) is shown as n/a."""

from __future__ import annotations

from collections.abc import Sequence

from halluscope.contract.metrics import PAIRED, MetricRecord
from halluscope.contract.report import Section, Table
from halluscope.ragtruth.metrics import ALL, OVERALL
from halluscope.ragtruth.selection import STRATEGIES
from halluscope.report import ranking


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _prf(rows: list[dict], level: str) -> tuple[list[str], list[list[str]]]:
    """One row per response model, one column per task type; cells P / R / F1 (%) of ``level``, and
    F1's bootstrap standard error where the record has one."""
    types = [t for t in dict.fromkeys(r["task_type"] for r in rows) if t != OVERALL] + [OVERALL]
    generators = [ALL] + sorted({r["generator"] for r in rows} - {ALL})
    cell = {(r["task_type"], r["generator"]): r for r in rows}
    body = []
    for g in generators:
        cells = []
        for t in types:
            r = cell.get((t, g))
            se = None if r is None else (r.get("stderr") or {}).get(f"{level}_f1")
            cells.append("-" if r is None else " / ".join(
                "n/a" if f"{level}_{k}" in r["undefined"] else _pct(r[f"{level}_{k}"])
                for k in ("precision", "recall", "f1")) + ("" if se is None else f" ± {_pct(se)}"))
        body.append(["all models" if g == ALL else g, *cells])
    return ["response model", *types], body


def tables(records: list[dict]) -> list[Table]:
    """Every table of the section, in order."""
    out: list[Table] = []
    for detector in sorted({r["model"] for r in records if r.get("table") == "detection"}):
        rows = [r for r in records if r.get("table") == "detection" and r["model"] == detector]
        overall = next(r for r in rows if r["task_type"] == OVERALL and r["generator"] == ALL)
        problems: dict = next((r["problems"] for r in records
                               if r.get("table") == "detector_problems" and r["model"] == detector), {})
        note = (f"{overall['n_responses']} responses scored, {overall['unreadable']} of them unreadable answers "
                f"scored as empty lists; {overall['unpredicted']} without a prediction"
                + ("; problems: " + ", ".join(f"{k} {v}" for k, v in problems.items()) if problems else ""))
        out.append(Table(f"RAGTruth detector {detector}, response level: P / R / F1 (%) ± F1's bootstrap standard "
                         f"error. {note}",
                         *_prf(rows, "response")))
        out.append(Table(f"RAGTruth detector {detector}, span level, characters (micro): P / R / F1 (%) ± F1's "
                         "bootstrap standard error",
                         *_prf(rows, "span")))
        for rep in (r for r in records if r.get("table") == "selection" and r["model"] == detector):
            out.append(Table(f"RAGTruth selection by {detector} among {' + '.join(rep['models'])} "
                             f"({rep['n_instances']} instances)",
                             ["strategy", "valid", "hallucination rate (%)", "reduction (%)"],
                             [[name, str(rep["strategies"][name]["valid"]), _pct(rep["strategies"][name]["rate"]),
                               _pct(rep["strategies"][name]["reduction"])] for name in STRATEGIES]))
    corpus = [r for r in records if r.get("table") == "corpus_tasks"]
    if corpus:
        out.append(Table("RAGTruth corpus (Table 2)", ["task type", "source", "instances", "responses",
                                                        "hallucinated (%)", "spans"],
                         [[r["task_type"], "all" if r["source"] == ALL else r["source"], str(r["n_instances"]),
                           str(r["n_responses"]),
                           _pct(None if r["hallucinated_pct"] is None else r["hallucinated_pct"] / 100),
                           str(r["n_spans"])] for r in corpus]))
    gen = [r for r in records if r.get("table") == "generation"]
    if gen:
        out.append(Table("RAGTruth RAG generation, judged by the run's judge",
                         ["model", "task type", "scored", "hallucination rate (%)", "density (spans / 100 words)",
                          "generation errors", "unpredicted"],
                         [[r["model"], r["task_type"], str(r["scored"]), _pct(r["hallucination_rate"]),
                           "-" if r["density"] is None else f"{r['density']:.2f}", str(r["generation_errors"]),
                           str(r["unpredicted"])] for r in gen]))
    return out


DETECTION = (
    "Detection (ragtruth/detect): the model under test reads each corpus response with its source and lists "
    "the spans it finds hallucinated; they are compared with the annotators' spans. Response level: a response "
    "counts as hallucinated when it has at least one span, predicted or annotated; P = share of the responses "
    "flagged that are annotated, R = share of the annotated responses flagged, F1 their harmonic mean. Span "
    "level: the same over characters, pooled over responses. Higher is better.")
SELECTION = ("Selection: for each source, the detector's spans pick one of the candidate models' responses "
             "(random; fewer_spans: fewest detected; no_spans: none detected); rate = share of picked responses "
             "with annotated hallucinations, reduction = how much lower than random's (higher is better).")
GENERATION = (
    "RAG generation (ragtruth/generate): the model under test answers each corpus source and the run's judge "
    "lists the hallucinated spans of its answer. Hallucination rate = share of answers with at least one "
    "span; density = spans per 100 words (lower is better for both).")


def preamble(records: list[dict]) -> list[str]:
    """What the numbers of the tables present mean, one paragraph per kind."""
    kinds = {r.get("table") for r in records}
    return [text for kind, text in (("detection", DETECTION), ("selection", SELECTION), ("generation", GENERATION))
            if kind in kinds]


# the figures whose rankings the report shows, by task: each model's figure over all of it
RANKED = (("response_f1", "response-level F1"), ("span_f1", "span-level F1"),
          ("hallucination_rate", "hallucination rate"))


def rankings(rows: list[dict], paired: list[dict]) -> list[Table]:
    """Which models the paired differences tell apart (``report.ranking``): detectors by F1, the
    models answering sources by hallucination rate, each over all task types and response models."""
    overall = [r for r in rows if r.get("table") in ("detection", "generation") and r["task_type"] == OVERALL
               and r.get("generator", ALL) == ALL]
    tables = []
    for key, name in RANKED:
        tables += [ranking.rank_separations(overall, paired, key, name, [
                       f"Adjacent models in each task's ranking by {name}, told apart when their paired difference "
                       "exceeds its 95% interval: detectors over the responses both scored (a paired bootstrap "
                       "over sources), models answering sources over the sources both were scored on "
                       "(metrics.json: table \"paired\"); without a paired record, their errors taken as "
                       "unpaired, which overstates it."]),
                   ranking.rank_intervals(paired, key, f"Rank intervals by {name} (1: the lowest)", [
                       f"The ranks a model can hold on a task, given which of its paired differences in {name} "
                       "exceed their 95% interval."])]
    return [t for t in tables if t is not None]


def sections(records: Sequence[MetricRecord]) -> list[Section]:
    """The report hook: RAGTruth's section of leaderboard.md and report.html (read from the records'
    flat objects)."""
    every = [r.as_json() for r in records]
    rows = [r for r in every if r.get("table") != PAIRED]
    paired = [r for r in every if r.get("table") == PAIRED]
    return [Section("RAGTruth", preamble(rows), parts=[*tables(rows), *rankings(rows, paired)])]
