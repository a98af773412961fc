"""Each attempt of a run leaves its story in the run's storage, where it outlives the pod that ran
it: the package's log lines (INFO and up) as ``logs/driver-<attempt>.log``, uploaded with every
``progress.json`` write and when the attempt ends, however it ends; and, for a run on Ray, the
logs Ray and Serve wrote during the attempt: the driver's node's (the head, for a RayJob) under
``logs/ray-<attempt>/`` when it ends, and every other node's (the GPU pods of its served models:
their replicas' and engines' logs) under ``logs/ray-<attempt>/node-<id>/``, copied by a task on
that node each time a model is given back (before the autoscaler removes its idle pod) and when
the pipeline ends. A killed pod leaves the lines of its last progress write."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import ray

from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

PACKAGE = "halluscope"
MAX_DRIVER_BYTES = 8 * 2**20  # the lines kept past this are the first and the last ones
RAY_FILE_BYTES = 2**20  # of each Ray log file, its last MiB
RAY_TOTAL_BYTES = 64 * 2**20  # per node
NODE_COPY_TIMEOUT_S = 120.0
_RAY_SUFFIXES = (".log", ".out", ".err")


class RunLog(logging.Handler):
    """Collects the package's log records of one attempt and writes them to the run's storage."""

    def __init__(self, store: RunStore) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self.store = store
        self.started = time.time()
        self.ray_logs: Path | None = None  # the driver node's Ray log folder, once the run is on Ray
        self._node_copied: dict[str, float] = {}  # node id -> when its logs were last copied
        self._copies: list[tuple[str, Any]] = []  # (node, the copying task's ref), not yet waited for
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
        """The Ray and Serve log files of the driver's node this attempt's time touched."""
        if self.ray_logs is None or self.store.attempt is None:
            return
        copy_logs(self.ray_logs, self.started, self.store.loc.child("logs", f"ray-{self.store.attempt}"))

    def copy_other_nodes(self, wait: bool = False) -> None:
        """Every other alive node's Ray and Serve logs of this attempt, each copied by a task on
        that node to the run's storage: started here, and waited for (all started so far) with
        ``wait``, at the pipeline's end; the driver goes on meanwhile. Best effort: a node that
        went is named in a warning; the run goes on."""
        if self.store.attempt is None or not ray.is_initialized():
            return
        try:
            here = this_node()
            nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and n["NodeID"] != here]
            logs = self.store.loc.child("logs", f"ray-{self.store.attempt}")
            for node in nodes:  # what changed since this node's last copy: a file is copied again as it grows
                since, self._node_copied[node] = self._node_copied.get(node, self.started), time.time()
                self._copies.append((node, _copy_node_logs.options(scheduling_strategy=_on(node)).remote(
                    logs.child(f"node-{node[:12]}"), since)))
        except Exception as err:  # noqa: BLE001 - a Ray that went (a stop) leaves nothing to ask
            logging.getLogger(__name__).warning("the nodes' logs were not copied: %s", err)
            return
        if not wait:
            return
        copies, self._copies = self._copies, []
        for node, ref in copies:
            try:
                ray.get(ref, timeout=NODE_COPY_TIMEOUT_S)
            except Exception as err:  # noqa: BLE001 - a node gone (scaled down, lost) leaves nothing to copy
                logging.getLogger(__name__).warning("the logs of node %s were not copied: %s", node[:12],
                                                    str(err).splitlines()[0] if str(err) else type(err).__name__)


def copy_logs(folder: Path, since: float, dest: Location) -> int:
    """The log files under ``folder`` modified since ``since``, each its last RAY_FILE_BYTES,
    newest first until RAY_TOTAL_BYTES, written under ``dest``; how many."""
    if not folder.is_dir():
        return 0
    touched: list[tuple[float, int, Path]] = []  # newest first
    for path in folder.rglob("*"):
        try:
            st = path.stat()
        except FileNotFoundError:  # a worker's log removed meanwhile
            continue
        if path.is_file() and path.suffix in _RAY_SUFFIXES and st.st_mtime >= since:
            touched.append((-st.st_mtime, st.st_size, path))
    total = copied = 0
    for _, size, path in sorted(touched):
        with path.open("rb") as f:
            f.seek(max(0, size - RAY_FILE_BYTES))
            data = f.read(RAY_FILE_BYTES)
        if total + len(data) > RAY_TOTAL_BYTES:
            break
        total += len(data)
        dest.child(*path.relative_to(folder).parts).write_bytes_atomic(data)
        copied += 1
    return copied


def this_node() -> str:
    """The Ray node this driver runs on, whose logs ``_copy_ray_logs`` copies."""
    return str(ray.get_runtime_context().get_node_id())


def _on(node: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node, soft=False)


@ray.remote(num_cpus=0, max_retries=0)
def _copy_node_logs(dest: Location, since: float) -> int:
    """``copy_logs`` of the node this task runs on."""
    folder = ray_log_folder()
    return 0 if folder is None else copy_logs(folder, since, dest)


def ray_log_folder() -> Path | None:
    """The Ray log folder of the node this driver runs on (a RayJob's driver runs on the head)."""
    from ray._private import worker  # Ray has no public accessor of the session folder

    node = getattr(worker, "_global_node", None)
    session = node.get_session_dir_path() if node is not None else None
    return Path(session) / "logs" if session else None
