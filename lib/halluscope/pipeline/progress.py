"""Per-model progress of a run while it streams, for the terminal and for anyone watching storage.

The driver counts the generations each committed batch holds, per (model, task). It writes
``progress.json`` beside the run's tables at most every ``every_s`` seconds, so ``halluscope
report RUN`` can show per-model progress and partial metrics from the committed parts while the
run goes on, and it redraws one line per model on a terminal.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections import defaultdict
from typing import TextIO

from halluscope.report.escape import terminal
from halluscope.storage.run import RunStore


class Progress:
    def __init__(self, store: RunStore, totals: dict[tuple[str, str], int], done: dict[tuple[str, str], int],
                 show: bool, every_s: float = 5.0, out: TextIO = sys.stderr) -> None:
        self.store = store
        self.totals = totals
        self.done = defaultdict(int, done)
        self.show = show and out.isatty()
        self.every_s = every_s
        self.out = out
        self.started = time.time()
        self._written = 0.0
        self._lines = 0

    def add(self, model: str, task: str, rows: int) -> None:
        self.done[(model, task)] += rows
        if time.time() - self._written >= self.every_s:
            self.flush()

    def per_model(self) -> dict[str, dict]:
        models: dict[str, dict] = defaultdict(lambda: {"done": 0, "total": 0, "tasks": {}})
        for (model, task), total in sorted(self.totals.items()):
            done = self.done.get((model, task), 0)
            m = models[model]
            m["done"] += done
            m["total"] += total
            m["tasks"][task] = {"done": done, "total": total}
        return dict(models)

    def flush(self, final: bool = False) -> None:
        self._written = time.time()
        models = self.per_model()
        self.store.write_json("progress.json", {
            "updated_at": dt.datetime.now(dt.timezone.utc).isoformat(), "finished": final,
            "elapsed_s": round(time.time() - self.started, 1), "models": models})
        if self.show:
            self._draw(models)

    def _draw(self, models: dict[str, dict]) -> None:
        if self._lines:
            self.out.write(f"\x1b[{self._lines}F")  # back to the first line drawn
        names = {model: terminal(model) for model in models}  # an id's own escape codes are shown, not obeyed
        width = max((len(n) for n in names.values()), default=0)
        for model, m in models.items():
            share = m["done"] / m["total"] if m["total"] else 1.0
            bar = "#" * int(share * 30)
            self.out.write(f"\x1b[2K{names[model]:<{width}} [{bar:<30}] {m['done']}/{m['total']}\n")
        self.out.flush()
        self._lines = len(models)
