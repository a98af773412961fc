"""The section a report opens with when its judge was calibrated (``contract.metrics.AGREEMENT``
records): how far the judge agrees with the reference, and a warning where it falls below the
run's threshold, since every figure that rests on its verdicts inherits its errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from halluscope.contract.metrics import AGREEMENT, Estimate, MetricRecord
from halluscope.contract.report import Column, Joined, Section, Table

TITLE = "Judge agreement with the reference judge"


def is_agreement(r: MetricRecord) -> bool:
    return r.values.get("table") == AGREEMENT


def _ci(e: Estimate) -> Joined | None:
    return Joined(e.ci95, " to ") if e.ci95 else None


def agreement_section(records: Sequence[MetricRecord]) -> Section | None:
    own = [r for r in records if is_agreement(r)]
    if not own:
        return None
    low = [r for r in own if r.values.get("below_threshold")]
    judges = ", ".join(dict.fromkeys(f"'{r.model}'" for r in own))
    first = own[0].values
    preamble = [f"The judge {judges} decided the units of {first.get('items_per_model')} item(s) per "
                f"task of every released model the reference covers, beside the reference judge "
                f"'{first.get('reference')}' on the same units (the reference extractor in both). Accuracy is the "
                "share of decisions that match; Cohen's kappa discounts the agreement two judges would "
                "reach by chance."]
    runs = first.get("runs") or []
    if runs:
        cost = f"${first['usd']:,.4f}" if first.get("usd") is not None else "unpriced"
        preamble.append(f"Its calls are the run {runs[-1]}'s (cost: {cost}), stored beside this run; the reference's "
                        f"answers are recorded ({runs[0]}).")
    if low:
        where = ", ".join(f"{r.task} ({r.values['decision']}: kappa {r.values['kappa'].value:.2f})" for r in low)
        preamble.insert(0, f"WARNING: the judge {judges} agrees with the reference below the threshold "
                           f"(kappa below {low[0].values['min_kappa']:g}) on {where}. Figures resting on its verdicts "
                           "are not to be trusted.")
    else:
        preamble.append(f"Every task is at or above the threshold (kappa >= {first.get('min_kappa'):g}).")
    rows = [[r.model, r.task, r.values["decision"], r.values["decisions"], r.values["responses"],
             r.values["accuracy"].value, _ci(r.values["accuracy"]), r.values["kappa"].value, _ci(r.values["kappa"]),
             "below" if r.values.get("below_threshold") else "ok"] for r in own]
    columns: list[Column | str] = ["judge", "task", "decision", Column("units", ","), Column("responses", ","),
               Column("accuracy", ".3f"), Column("accuracy 95% CI", ".3f"), Column("kappa", ".3f"),
               Column("kappa 95% CI", ".3f"), "threshold"]
    return Section(TITLE, preamble=preamble, parts=[Table("", columns, rows)])


def agreement_summary(r: MetricRecord) -> dict[str, Any]:
    """What the manifest keeps of a record: enough to tell whether the judge was trusted."""
    keys = ("decision", "decisions", "accuracy", "kappa", "min_kappa", "below_threshold", "runs")
    flat = r.as_json()  # the estimates' values
    return {"judge": r.model, "task": r.task, **{k: flat.get(k) for k in keys}}
