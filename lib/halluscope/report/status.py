"""What ``halluscope status RUN`` shows of a run, running or ended: its manifest's state and its
``progress.json`` (per model: rows evaluated, failed and to do; the waves' deployments and the
rows each has generated; the spend so far; where the attempt's log is)."""

from __future__ import annotations

from typing import Any

from halluscope.report.escape import terminal


def status_doc(run_id: str, manifest: dict | None, progress: dict | None) -> dict[str, Any]:
    """The run's state in one document (``status --json``)."""
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
            "elapsed_s": progress.get("elapsed_s"), "spend_so_far_usd": progress.get("spend_so_far_usd"),
            "log": progress.get("log"), "models": models}


def status_text(doc: dict[str, Any]) -> str:
    lines = [f"run {doc['run_id']}: {doc['status']}" + (f" ({doc['reason']})" if doc["reason"] else "")]
    if doc["updated_at"]:
        lines.append(f"as of {doc['updated_at']}, {doc['elapsed_s']:g} s in")
    if doc["spend_so_far_usd"] is not None:
        lines.append(f"spent so far: ${doc['spend_so_far_usd']:,.2f} (deployments' held time; API calls are "
                     "priced when the run ends)")
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
