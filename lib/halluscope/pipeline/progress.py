"""Per-model progress of a run while it streams, for the terminal and for anyone watching storage.

The driver counts the generations each committed batch holds, per (model, task): evaluated, and
of them failed. It writes ``progress.json`` beside the run's tables at most every ``every_s``
seconds, with what the run's other parts add (``views``: the waves' deployments and the rows each
has generated, the spend so far), so ``halluscope status RUN`` shows a running run and ``halluscope
report RUN`` its partial metrics; on a terminal it redraws one rich progress bar per model
(nothing is drawn when the output is not a terminal: ``progress.json`` is the record).
"""

from __future__ import annotations

import atexit
import datetime as dt
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import rich.progress
from rich.console import Console

from halluscope.report.escape import terminal
from halluscope.storage.run import RunStore


class Progress:
    def __init__(self, store: RunStore, totals: dict[tuple[str, str], int], done: dict[tuple[str, str], int],
                 show: bool, every_s: float = 5.0, out: TextIO = sys.stderr) -> None:
        self.store = store
        self.totals = totals
        self.done = defaultdict(int, done)
        self.failed: dict[tuple[str, str], int] = defaultdict(int)  # this attempt's failed rows
        self.views: list[Callable[[], dict[str, Any]]] = []  # more of progress.json, asked at each write
        self.show = show and out.isatty()
        self.every_s = every_s
        self.out = out
        self.started = time.time()
        self._written = 0.0
        self._bars: rich.progress.Progress | None = None
        self._rows: dict[str, rich.progress.TaskID] = {}
        self._lock = threading.Lock()

    def add(self, model: str, task: str, rows: int, failed: int = 0) -> None:
        self.done[(model, task)] += rows
        self.failed[(model, task)] += failed
        if time.time() - self._written >= self.every_s:
            self.flush()

    def per_model(self) -> dict[str, dict]:
        models: dict[str, dict] = defaultdict(lambda: {"done": 0, "failed": 0, "total": 0, "tasks": {}})
        for (model, task), total in sorted(self.totals.items()):
            done, failed = self.done.get((model, task), 0), self.failed.get((model, task), 0)
            m = models[model]
            m["done"] += done
            m["failed"] += failed
            m["total"] += total
            m["tasks"][task] = {"done": done, "failed": failed, "total": total}
        return dict(models)

    @contextmanager
    def written_meanwhile(self) -> Iterator[None]:
        """``progress.json`` rewritten every ``every_s`` seconds on a thread of its own while the
        block runs, also when nothing commits (a wave that only generates, a deployment loading)."""
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(self.every_s):
                if time.time() - self._written >= self.every_s:
                    self.flush(draw=False)

        thread = threading.Thread(target=tick, name="progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def flush(self, final: bool = False, draw: bool = True) -> None:
        with self._lock:
            self._write(final, draw)

    def _write(self, final: bool, draw: bool) -> None:
        self._written = time.time()
        models = self.per_model()
        doc: dict[str, Any] = {"updated_at": dt.datetime.now(dt.UTC).isoformat(), "finished": final,
                               "elapsed_s": round(time.time() - self.started, 1), "models": models}
        for view in self.views:
            doc.update(view())
        self.store.write_json("progress.json", doc)
        if self.show and draw:
            self._draw(models, final)

    def _draw(self, models: dict[str, dict], final: bool) -> None:
        """Redrawn only here, at the flush cadence: no refresh thread, and stdout/stderr are left as they are."""
        if self._bars is None:
            self._bars = rich.progress.Progress(
                # markup off: an id like "[l](x)" is text, and its escape codes are shown, not obeyed (terminal())
                rich.progress.TextColumn("{task.description}", markup=False),
                rich.progress.BarColumn(bar_width=30), rich.progress.MofNCompleteColumn(),
                rich.progress.TaskProgressColumn(), rich.progress.TimeRemainingColumn(),
                console=Console(file=self.out, force_terminal=True), auto_refresh=False,
                redirect_stdout=False, redirect_stderr=False)
        for model, m in models.items():
            if model not in self._rows:  # added before start(): adding to a started view redraws it
                self._rows[model] = self._bars.add_task(terminal(model), total=m["total"])
            self._bars.update(self._rows[model], completed=m["done"], total=m["total"])
        if not self._bars.live.is_started:
            self._bars.start()  # draws
            atexit.register(self.close)  # a run that raises before its final flush still gets its cursor back
        elif not final:
            self._bars.refresh()
        if final:
            self.close()  # draws once more, then leaves the drawing in place

    def close(self) -> None:
        """Ends the live view (the last drawing stays, the cursor shows again); idempotent."""
        if self._bars is not None:
            self._bars.stop()
            atexit.unregister(self.close)
            self._bars, self._rows = None, {}
