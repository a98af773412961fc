"""Each attempt of a run leaves its story in the run's storage, where it outlives the pod that ran
it: the package's log lines (INFO and up) as ``logs/driver-<attempt>.log``, uploaded with every
``progress.json`` write and when the attempt ends, however it ends; and, for a run on Ray, the
logs Ray and Serve wrote on the driver's node (the head, for a RayJob) during the attempt, copied
under ``logs/ray-<attempt>/`` when it ends. A killed pod leaves the lines of its last progress write."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from halluscope.storage.run import RunStore

PACKAGE = "halluscope"
MAX_DRIVER_BYTES = 8 * 2**20  # the lines kept past this are the first and the last ones
RAY_FILE_BYTES = 2**20  # of each Ray log file, its last MiB
RAY_TOTAL_BYTES = 64 * 2**20
_RAY_SUFFIXES = (".log", ".out", ".err")


class RunLog(logging.Handler):
    """Collects the package's log records of one attempt and writes them to the run's storage."""

    def __init__(self, store: RunStore) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self.store = store
        self.started = time.time()
        self.ray_logs: Path | None = None  # the driver node's Ray log folder, once the run is on Ray
        self._lines: list[str] = []
        self._size = self._dropped = 0
        self._received = self._uploaded = 0  # records so far; and as of the last upload
        self._upload_lock = threading.Lock()
        self._terminal: logging.Handler | None = None
        self._level = logging.NOTSET

    def __enter__(self) -> RunLog:
        logger = logging.getLogger(PACKAGE)
        # warnings still reach the terminal as they did with no handler (logging's last resort)
        self._terminal = None if logger.hasHandlers() else logging.StreamHandler()
        for handler in (self, self._terminal):
            if handler is not None:
                logger.addHandler(handler)
        if self._terminal is not None:
            self._terminal.setLevel(logging.WARNING)
        self._level = logger.level
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        logger = logging.getLogger(PACKAGE)
        for handler in (self, self._terminal):
            if handler is not None:
                logger.removeHandler(handler)
        logger.setLevel(self._level)
        if err is not None:
            self.handle(logging.makeLogRecord({"name": PACKAGE, "levelno": logging.ERROR, "levelname": "ERROR",
                                             "msg": f"the attempt stopped: {type(err).__name__}: {err}"}))
        try:
            self.upload()
            self._copy_ray_logs()
        except Exception as failed:  # noqa: BLE001 - the run's own outcome is what the caller reports
            logging.getLogger(__name__).warning("the run's logs were not written to storage: %s", failed)

    def emit(self, record: logging.LogRecord) -> None:
        """Called under the handler's lock (``logging.Handler.handle``)."""
        line = self.format(record) + "\n"
        self._received += 1
        if self._size + len(line) > MAX_DRIVER_BYTES and len(self._lines) > 1:
            self._dropped += 1
            self._lines[-1] = line  # the newest line stays last; those between are counted
            return
        self._lines.append(line)
        self._size += len(line)

    def location(self) -> str | None:
        return None if self.store.attempt is None else self.store.loc.child("logs", self._file()).url

    def view(self) -> dict[str, Any]:
        """progress.json's pointer to this attempt's log, written with it."""
        self.upload()
        return {"log": self.location()}

    def upload(self) -> None:
        """The lines so far, as one object (rewritten whole: object stores have no append). Not
        before the attempt claims the run: until then the run's folder may be another attempt's."""
        if self.store.attempt is None:
            return
        with self._upload_lock:
            self.acquire()
            try:
                if self._received == self._uploaded:
                    return
                lines, dropped, received = list(self._lines), self._dropped, self._received
            finally:
                self.release()
            if dropped:
                lines.insert(-1, f"... {dropped} lines left out (over {MAX_DRIVER_BYTES // 2**20} MiB)\n")
            self.store.loc.child("logs", self._file()).write_bytes_atomic("".join(lines).encode())
            self._uploaded = received

    def _file(self) -> str:
        return f"driver-{self.store.attempt}.log"

    def _copy_ray_logs(self) -> None:
        """The Ray and Serve log files this attempt's time touched, each its last MiB."""
        if self.ray_logs is None or self.store.attempt is None or not self.ray_logs.is_dir():
            return
        touched: list[tuple[float, int, Path]] = []  # newest first
        for path in self.ray_logs.rglob("*"):
            try:
                st = path.stat()
            except FileNotFoundError:  # a worker's log removed meanwhile
                continue
            if path.is_file() and path.suffix in _RAY_SUFFIXES and st.st_mtime >= self.started:
                touched.append((-st.st_mtime, st.st_size, path))
        total = 0
        for _, size, path in sorted(touched):
            with path.open("rb") as f:
                f.seek(max(0, size - RAY_FILE_BYTES))
                data = f.read(RAY_FILE_BYTES)
            if total + len(data) > RAY_TOTAL_BYTES:
                break
            total += len(data)
            self.store.loc.child("logs", f"ray-{self.store.attempt}", *path.relative_to(self.ray_logs).parts) \
                .write_bytes_atomic(data)


def ray_log_folder() -> Path | None:
    """The Ray log folder of the node this driver runs on (a RayJob's driver runs on the head)."""
    from ray._private import worker  # Ray has no public accessor of the session folder

    node = getattr(worker, "_global_node", None)
    session = node.get_session_dir_path() if node is not None else None
    return Path(session) / "logs" if session else None
