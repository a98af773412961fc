"""A run that stops moving says what waits, instead of hanging without a word until a deadline.

Progress is any change in what the ``signals`` return (generations committed, a deployment that
changed phase). After ``timeout_s`` without one the driver prints, and the manifest keeps, what
the schedule waits on and what Ray has free, once per quiet period."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType

import ray

logger = logging.getLogger(__name__)


class Watchdog:
    def __init__(self, timeout_s: float, *signals: Callable[[], object]) -> None:
        self.timeout_s = timeout_s
        self.signals = list(signals)
        self.waiting: Callable[[], list[str]] = lambda: []
        self.stalls: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        last, since = None, time.monotonic()
        while not self._stop.wait(min(5.0, self.timeout_s / 4)):
            now = time.monotonic()
            seen = tuple(f() for f in self.signals)
            if seen != last:
                last, since = seen, now
            elif now - since >= self.timeout_s:
                self._report(now - since)
                since = now

    def _report(self, quiet_s: float) -> None:
        waiting = self.waiting() or ["the pipeline's stages (no deployment pending)"]
        try:
            free = ray.available_resources() if ray.is_initialized() else {}
        except Exception:  # noqa: BLE001 - the report must not stop the run
            free = {}
        room = ", ".join(f"{k} {v:g}" for k, v in sorted(free.items()) if k in ("CPU", "GPU") or ":" not in k)
        message = (f"no progress for {quiet_s:.0f} s (cluster.stall_timeout_s): waiting on "
                   f"{'; '.join(waiting)}; free in Ray: {room or 'nothing'}")
        self.stalls.append(message)
        logger.warning(message)
        print(f"halluscope: {message}", file=sys.stderr, flush=True)
