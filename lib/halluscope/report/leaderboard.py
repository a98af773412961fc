"""The Markdown leaderboard of a run: each benchmark's sections (report/sections.py), then the cost.

Every text is escaped as it is written (``report.render.md_text``): model ids and task names may come
from stored runs or replay files, and the leaderboard is also printed on the terminal."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from halluscope.contract.metrics import COSTS_TOTAL, MetricRecord
from halluscope.cost.ledger import cost_record
from halluscope.report.escape import terminal
from halluscope.report.render import Block, markdown_blocks, render_markdown
from halluscope.report.sections import Built, report_sections, stored_records
from halluscope.storage.run import RunStore


def leaderboard(metrics: Sequence[MetricRecord], run_id: str, built: Built | None = None) -> str:
    """The run's leaderboard: each benchmark's sections (``built`` from ``metrics`` already, for
    report.html too), each opening with what its numbers mean, and what the run cost."""
    sections, _ = built or report_sections(metrics)
    blocks = markdown_blocks(sections)
    record = next((m for m in metrics if m.task == COSTS_TOTAL), None)
    if record is not None:  # $0.0000 too (replayed answers only): the dollars `plan` gave and metrics.json holds
        cost = record.values
        blocks.append(Block("text", f"Cost of this run: {cost_text(cost)}; {cost['calls']} model calls, "
                                    f"{cost['input_tokens']} input and {cost['output_tokens']} output tokens "
                                    "(costs.parquet has the breakdown)."))
        if cost.get("unpriced"):
            blocks.append(Block("list", items=[f"unpriced: {why}" for why in cost["unpriced"]]))
    return render_markdown(f"halluscope leaderboard: run {run_id}", blocks)


def cost_text(cost: Mapping[str, Any]) -> str:
    """The "costs/total" record's dollars: the total only when every line item is priced."""
    if cost.get("complete", cost["usd"] is not None) and cost["usd"] is not None:
        return f"${cost['usd']:,.4f}"
    n = cost.get("unpriced_rows")
    if n is None:  # a record from before the ledger counted its unpriced rows
        return "incomplete: some line items unpriced"
    return f"incomplete: {n} line item{'s' * (n != 1)} unpriced (priced items ${cost.get('usd_priced') or 0:,.4f})"


def json_records(run: RunStore) -> object:
    """A finished run's metrics.json for `halluscope report --json`, its "costs/total" record made
    from costs.parquet as the ledger reads it now: the dollars `halluscope plan` and the leaderboard
    give. A run written before the ledger counted unpriced rows has ``usd: null`` there for a run
    with no line item at all (replayed answers only: $0). A file that is not a list is given as it
    is. Both files are read as the run wrote them (``RunStore.read_view``)."""
    data = run.read_view("metrics.json")
    raw = json.loads(data) if data is not None else None
    if not isinstance(raw, list) or not run.loc.child("costs.parquet").exists():
        return raw
    records = stored_records(raw, run.loc.child("metrics.json").url)
    total = cost_record(run.read_table_file("costs.parquet"))
    at = next((i for i, r in enumerate(records) if r.task == COSTS_TOTAL), None)
    if at is None:
        records.append(total)
    else:
        records[at] = replace(records[at], values={**records[at].values, **total.values})
    return [r.as_json() for r in records]


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
