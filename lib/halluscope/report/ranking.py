"""Report tables any benchmark with a compare hook shows from its paired records
(contract.metrics ``PAIRED``): which neighbours in a figure's ranking its errors tell apart, and
each model's rank interval by a figure. A benchmark names the figure and how to call it."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from halluscope.contract.errorbars import Z95
from halluscope.contract.report import Cell, Column, Table


def _value(x: object) -> float | None:
    """A number; None for a missing, NaN or non-numeric value."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
        return float(x)
    return None


def _told_apart(difference: dict) -> bool | None:
    """Whether a paired difference ({diff, stderr}) exceeds its 95% interval; None without an error."""
    diff, se = _value(difference["diff"]), _value(difference["stderr"])
    return None if diff is None or se is None else abs(diff) > Z95 * se


def separated(a: dict, b: dict, pair: dict | None, key: str) -> bool | None:
    """Whether two models' ``key`` differ by more than the 95% interval of their difference: the
    paired one (``pair``: the task's paired record of the two) where the run has it, else their
    errors taken as unpaired (which overstates it: answers to the same items are correlated);
    None when a figure or its error is missing."""
    if pair is not None and key in pair:
        return _told_apart(pair[key])
    va, vb = _value(a.get(key)), _value(b.get(key))
    sa, sb = (_value((r.get("stderr") or {}).get(key)) for r in (a, b))
    if va is None or vb is None or sa is None or sb is None:
        return None
    return abs(va - vb) > Z95 * math.hypot(sa, sb)


def _ranking(ranked: list[dict], told: list[bool | None]) -> str:
    """``a ≈ b ＜ c``: lowest first, ``＜`` where the errors tell two neighbours apart (a full-width
    sign: Markdown and HTML keep it as it is), ``·`` where one of them has no error."""
    out = ranked[0]["model"]
    for r, t in zip(ranked[1:], told):
        out += f" {'·' if t is None else '＜' if t else '≈'} {r['model']}"  # ·: an error is missing
    return out


def rank_separations(records: Sequence[dict], paired: Sequence[dict], key: str, name: str,
                     notes: Sequence[str]) -> Table | None:
    """Per task, the models ranked by ``key`` (lowest first; ``name`` in the headings) and how many
    neighbours in that ranking the errors tell apart. ``records``: per model and task, flat
    objects with the figure and its ``stderr``."""
    by_task: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        if _value(r.get(key)) is not None:
            by_task[r["task"]].append(r)
    pairs = {(p["a"], p["b"], r["task"]): p for r in paired for p in r["pairs"]}

    def pair(a: dict, b: dict) -> dict | None:  # either sign: only the difference's size is asked
        return pairs.get((a["model"], b["model"], a["task"])) or pairs.get((b["model"], a["model"], a["task"]))

    rows: list[list[Cell]] = []
    for task, recs in sorted(by_task.items()):
        ranked = sorted(recs, key=lambda r: (_value(r.get(key)) or 0.0, r["model"]))
        told = [separated(a, b, pair(a, b), key) for a, b in zip(ranked, ranked[1:])]
        rows.append([task, len(ranked), sum(t is True for t in told), sum(t is not None for t in told),
                     _ranking(ranked, told)])
    if not rows:
        return None
    return Table(f"Which neighbours in the {name} ranking differ",
                 ["task", "models", "told apart", "pairs with errors",
                  Column(f"ranking by {name}, lowest first (≈: not told apart)", wrap=True)], rows, collapsed=True,
                 notes=list(notes))


def rank_intervals(paired: Sequence[dict], key: str, title: str, notes: Sequence[str]) -> Table | None:
    """Per model and task, the ranks by ``key`` its paired differences allow (the paired record's
    ``ranks``: from 1 + the models whose value is lower beyond the 95% interval of their
    difference, to the count of ranked models less those whose value is higher beyond it). A model
    without a value is not ranked; a task's column is headed without its benchmark's prefix."""
    ranks: dict[str, dict[str, str]] = defaultdict(dict)
    for r in paired:
        for m, (lo, hi) in (r.get("ranks") or {}).get(key, {}).items():
            ranks[m][r["task"]] = f"{lo}" if lo == hi else f"{lo}-{hi}"
    tasks = sorted({t for by_task in ranks.values() for t in by_task})
    if not tasks:
        return None
    rows: list[list[Cell]] = [[m, *(ranks[m].get(t) for t in tasks)] for m in sorted(ranks)]
    return Table(title, ["model", *(Column(t.split("/", 1)[-1]) for t in tasks)], rows,
                 collapsed=True, notes=list(notes))
