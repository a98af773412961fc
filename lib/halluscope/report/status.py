"""What ``halluscope status RUN`` shows of a run, running or ended: its manifest's state and its
``progress.json`` (per model: rows evaluated, failed and to do; the waves' deployments and the
rows each has generated; the spend so far; where the attempt's log is)."""

from __future__ import annotations

import math
from typing import Any

from halluscope.errors import DataError
from halluscope.report.escape import terminal

_COUNTS = ("done", "failed", "total", "staged_rows", "wave")


def progress_problem(doc: Any, where: str = "") -> str | None:
    """Why a ``progress.json`` is not one a run wrote: a count that is not a non-negative integer,
    a number that is not finite, or None."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            path = f"{where}.{k}" if where else str(k)
            if k in _COUNTS and v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                return f"{path} is {v!r}, not a count"
            problem = progress_problem(v, path)
            if problem:
                return problem
    elif isinstance(doc, list):
        return next((p for i, v in enumerate(doc) if (p := progress_problem(v, f"{where}[{i}]"))), None)
    elif isinstance(doc, float) and not math.isfinite(doc):
        return f"{where} is {doc!r}, not a finite number"
    return None


def status_doc(run_id: str, manifest: dict | None, progress: dict | None) -> dict[str, Any]:
    """The run's state in one document (``status --json``); DataError for a progress file no run
    wrote (negative, fractional or infinite counts)."""
    problem = progress_problem(progress or {})
    if problem:
        raise DataError(f"progress.json of run {run_id}: {problem}; it was not written by a run (or was edited "
                        "since): nothing is shown from it")
    progress = progress or {}
    deployments = {d["model"]: d for d in progress.get("deployments", [])}
    models = {}
    for model, m in (progress.get("models") or {}).items():
        d = deployments.get(model)
        models[model] = {"evaluated": m["done"], "failed": m.get("failed", 0), "total": m["total"],
                         **({"deployment": {k: d.get(k) for k in ("status", "wave", "staged_rows", "reason")}}
                            if d else {})}
    return {"run_id": run_id, "status": (manifest or {}).get("status", "not started"),
            "reason": (manifest or {}).get("reason"), "updated_at": progress.get("updated_at"),
            "elapsed_s": progress.get("elapsed_s"), "spend": progress.get("spend"), "planned": progress.get("planned"),
            "log": progress.get("log"), "models": models}


def status_text(doc: dict[str, Any]) -> str:
    lines = [f"run {doc['run_id']}: {doc['status']}" + (f" ({doc['reason']})" if doc["reason"] else "")]
    if doc["updated_at"]:
        lines.append(f"as of {doc['updated_at']}, {doc['elapsed_s']:g} s in")
    spend, planned = doc["spend"], doc["planned"] or {}
    if spend:
        lines.append(_spend_line(spend))
    if planned:
        lines.append(_planned_line(planned, doc["elapsed_s"], spend))
    if doc["log"]:
        lines.append(f"this attempt's log: {doc['log']}")
    width = max([len(m) for m in doc["models"]] + [5])
    lines.append(f"{'model':<{width}}  {'evaluated':>15}  {'failed':>7}  deployment")
    for model, m in doc["models"].items():
        d = m.get("deployment")
        where = f"wave {d['wave']}: {d['status']}, {d['staged_rows']} generated" if d else ""
        if d and d.get("reason"):
            where += f" ({d['reason']})"
        lines.append(f"{model:<{width}}  {m['evaluated']:>7,}/{m['total']:<7,}  {m['failed']:>7,}  {where}")
    return terminal("\n".join(lines))


def _usd(x: float | None) -> str:
    return "unpriced" if x is None else f"${x:,.2f}"


def _spend_line(spend: dict) -> str:
    """Every line of the spend so far, over all the run's attempts (calls as of the last commit)."""
    budget = f" of costs.budget_usd {_usd(spend['budget_usd'])}" if spend.get("budget_usd") is not None else ""
    return (f"spent so far: {_usd(spend['total_usd'])}{budget}: this attempt's calls {_usd(spend['calls_usd'])} "
            f"(as of its last commit) and deployments {_usd(spend['deployments_usd'])}, earlier attempts "
            f"{_usd(spend['earlier_attempts_usd'])}")


def _planned_line(planned: dict, elapsed_s: float | None, spend: dict | None) -> str:
    """What the attempt's plan expects beside where it is: the time and money left by the plan."""
    parts = [f"planned for this attempt: {_usd(planned.get('usd'))}"]
    if planned.get("usd") is not None and spend:
        parts.append(f"{_usd(max(0.0, planned['usd'] - spend['calls_usd'] - (spend['deployments_usd'] or 0.0)))} "
                     "of it left")
    wall = planned.get("wall_s")
    if wall is not None:
        parts.append(f"{wall / 3600:,.2f} h" + ("" if elapsed_s is None else
                                                 f", {max(0.0, wall - elapsed_s) / 3600:,.2f} h of it left"))
    return "; ".join(parts)
