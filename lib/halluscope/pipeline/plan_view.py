"""What `halluscope plan` shows: the estimate's rows (``PlanRow``, mirroring the cost ledger's) and
the ``Plan`` that holds them with their totals, the schedule of the served models under test, the
notes and the options, as a text table (``Plan.table``) or JSON (``Plan.as_dict``)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from halluscope.pipeline.schedule import Schedule
from halluscope.resolve.cluster import Job

if TYPE_CHECKING:
    from halluscope.serving.throughput import PlanOptions


@dataclass
class PlanRow:
    model: str
    role: str
    task: str  # "*" for a deployment's idle row
    stage: str  # generate | abstain | decompose | verify | idle
    generations: int  # generations whose calls the row counts
    calls: int
    cached_calls: int
    input_tokens: int
    output_tokens: int
    resource: str | None  # served models: accelerator type or CPU
    resource_hours: float | None  # GPU-hours (core-hours for CPU); None when unknown
    usd: float | None  # None: could not be priced (see note)
    basis: str  # estimated | measured | measured:* | replay | predicted | cache | mixed
    note: str | None = None


@dataclass
class Plan:
    rows: list[PlanRow]
    wall_hours: float | None  # how long the served models are held; None when unknown
    notes: list[str]
    options: PlanOptions
    jobs: list[Job] = field(default_factory=list)  # the served models under test, with estimated times
    schedule: Schedule = field(default_factory=Schedule)  # their waves under the run's GPU budget
    budget: dict[str, float] | None = None
    # task -> the smallest difference between two models its items can detect (``detectable``)
    detectable: dict[str, dict] = field(default_factory=dict)

    @property
    def total_usd(self) -> float:
        """Sum of the priced rows; see ``unpriced`` for the rest."""
        return math.fsum(r.usd for r in self.rows if r.usd is not None)

    @property
    def unpriced(self) -> list[PlanRow]:
        return [r for r in self.rows if r.usd is None]

    def totals(self) -> dict:
        by_role: dict[str, dict] = {}
        for r in self.rows:
            t = by_role.setdefault(r.role, {"calls": 0, "input_tokens": 0, "output_tokens": 0, "usd": []})
            t["calls"] += r.calls
            t["input_tokens"] += r.input_tokens
            t["output_tokens"] += r.output_tokens
            t["usd"].append(r.usd or 0.0)
        for t in by_role.values():
            t["usd"] = math.fsum(t["usd"])
        hours: dict[str, list[float]] = defaultdict(list)
        for r in self.rows:
            if r.resource and r.resource_hours is not None:
                hours[r.resource].append(r.resource_hours)
        return {"usd": self.total_usd, "unpriced_rows": len(self.unpriced),
                "calls": sum(r.calls for r in self.rows), "cached_calls": sum(r.cached_calls for r in self.rows),
                "input_tokens": sum(r.input_tokens for r in self.rows),
                "output_tokens": sum(r.output_tokens for r in self.rows),
                "resource_hours": {k: math.fsum(v) for k, v in sorted(hours.items())}, "by_role": by_role}

    def schedule_dict(self) -> dict:
        out = self.schedule.as_dict()
        out["budget"] = self.budget
        out["lower_bound_s"] = self.schedule.lower_bound_s(self.budget) if self.budget else None
        usd = [r.usd for r in self.rows if r.model in {j.model for j in self.jobs} and r.resource]
        out["usd"] = None if any(u is None for u in usd) else math.fsum(u for u in usd if u is not None)
        return out

    def as_dict(self) -> dict:
        return {"rows": [asdict(r) for r in self.rows], "totals": self.totals(), "wall_hours": self.wall_hours,
                "schedule": self.schedule_dict(), "detectable": self.detectable, "notes": list(self.notes),
                "options": self.options.model_dump(mode="json", exclude={"table"})}

    def schedule_lines(self) -> list[str]:
        """The served models under test: waves, each model's window, peak GPUs, makespan, GPU-hours."""
        if not self.jobs:
            return []
        s, d = self.schedule, self.schedule_dict()
        budget = ", ".join(f"{k} {v:g}" for k, v in (self.budget or {}).items() if math.isfinite(v)) or "none known"
        lines = ["", f"schedule of the served models under test (budget: {budget}):"]
        if s.cluster:
            lines.append(f"  before the run's models: {s.cluster}")
        for i, wave in enumerate(s.waves()):
            lines.append(f"  wave {i + 1}: {', '.join(wave)}")
        for w in sorted(s.windows, key=lambda w: (w.start_s, w.model)):
            lines.append(f"  {w.model}: {w.units:g} {w.resource}, deploy {_clock(w.start_s)}, generate "
                         f"{_clock(w.ready_s)}-{_clock(w.end_s)}, released {_clock(w.end_s)}"
                         + (f", on {' + '.join(w.nodes)}" if w.nodes else ""))
        bound = f" (lower bound {_clock(d['lower_bound_s'])})" if d["lower_bound_s"] is not None else ""
        usd = "unpriced" if d["usd"] is None else f"${d['usd']:,.2f}"
        lines.append(f"  peak GPUs {d['peak_gpus']:g}; makespan {_clock(s.makespan_s)}{bound}; GPU-hours busy "
                     f"{d['gpu_hours_busy']:,.3f} of {d['gpu_hours_held']:,.3f} held; {usd}")
        return lines + [f"  note: {n}" for n in s.notes]

    def table(self) -> str:
        head = ["model", "role", "task", "stage", "gens", "calls", "cached", "in tok", "out tok", "resource",
                "res-h", "USD", "basis"]
        body = [[r.model, r.role, r.task, r.stage, f"{r.generations:,}", f"{r.calls:,}", f"{r.cached_calls:,}",
                 f"{r.input_tokens:,}", f"{r.output_tokens:,}", r.resource or "-", _num(r.resource_hours, 3),
                 _num(r.usd, 4), r.basis] for r in self.rows]
        widths = [max(len(x) for x in col) for col in zip(head, *body)]
        lines = ["  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip() for line in [head, *body]]
        t = self.totals()
        unpriced_roles = {r.role for r in self.unpriced}
        roles = ", ".join(f"{role} " + ("unpriced" if role in unpriced_roles else f"${v['usd']:,.4f}")
                          for role, v in sorted(t["by_role"].items()))
        hours = ", ".join(f"{k} {v:,.3f} h" for k, v in t["resource_hours"].items()) or "none"
        # a sum over priced items alone would pass for the cost of the run
        usd = f"unknown, {len(self.unpriced)} line item(s) unpriced (priced items: ${t['usd']:,.4f})" \
            if self.unpriced else f"${t['usd']:,.4f}"
        held = f"; served models held {_num(self.wall_hours, 3)} h" if any(r.stage == "idle" for r in self.rows) \
            else ""
        lines += ["", f"total: {usd} ({roles}); {t['calls']:,} calls ({t['cached_calls']:,} cached), "
                      f"{t['input_tokens']:,} input / {t['output_tokens']:,} output tokens; resource-hours: {hours}"
                      f"{held}"]
        if self.unpriced:
            lines.append("unpriced: " + "; ".join(sorted({f"{r.model} ({r.role}): {r.note}" for r in self.unpriced})))
        lines += self.schedule_lines()
        if self.detectable:
            lines += ["", f"smallest difference between two models each task can detect ({DETECTABLE}):",
                      *(f"  {task}: {d['difference']:.3f} with {d['items']:,} items" + (
                          "; paired, at the spread of earlier runs' differences: " + ", ".join(
                              f"{f} {v:.3f}" for f, v in d["paired"].items()) if "paired" in d else "")
                        for task, d in self.detectable.items())]
        lines += ["notes:", *(f"- {n}" for n in self.notes)]
        return "\n".join(lines)


# a difference in a per-item figure in [0, 1] (a rate, a score), found at 80% power by a two-sided
# 5% test between two models' independent samples of n items: (z_.975 + z_.8) * sd * sqrt(2 / n),
# sd at its bound for such a figure, 0.5 (a figure spread less, or models compared on the same
# items, pairs, detect smaller differences)
_Z_ALPHA, _Z_POWER, SD_BOUND = 1.959963984540054, 0.8416212335729143, 0.5
DETECTABLE = "80% power, 5% two-sided, a figure in [0, 1] at its largest spread, sd 0.5"


def detectable(items: dict[str, int], spreads: dict[str, dict[str, float]] | None = None) -> dict[str, dict]:
    """task -> {items, difference}: what ``DETECTABLE`` says, for the items each task evaluates;
    and, where earlier runs measured the spread of two models' per-item differences on the task
    (``spreads``), ``paired``: per figure the difference two models answering the same items
    detect, (z_.975 + z_.8) * sd / sqrt(n)."""
    out: dict[str, dict] = {}
    for task, n in sorted(items.items()):
        if n > 0:
            out[task] = {"items": n, "difference": (_Z_ALPHA + _Z_POWER) * SD_BOUND * math.sqrt(2 / n)}
            measured = (spreads or {}).get(task)
            if measured:
                out[task]["paired"] = {f: (_Z_ALPHA + _Z_POWER) * sd / math.sqrt(n) for f, sd in measured.items()}
    return out


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    m, sec = divmod(int(round(seconds)), 60)
    return f"{m // 60}:{m % 60:02d}:{sec:02d}" if m >= 60 else f"{m}:{sec:02d}"


def _num(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"
