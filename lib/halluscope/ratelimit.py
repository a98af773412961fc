"""A thread-safe request rate limit shared by the API clients (Semantic Scholar, Brave Search)."""

from __future__ import annotations

import threading
import time


class MinInterval:
    """Callers reserve consecutive slots ``1/per_s`` apart under a lock, then sleep until theirs,
    so concurrent threads of one client never exceed the rate together."""

    def __init__(self, per_s: float) -> None:
        self.interval = 1.0 / per_s
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        with self._lock:
            now = time.monotonic()
            slot = max(now, self._next)
            self._next = slot + self.interval
        if slot > now:
            time.sleep(slot - now)
