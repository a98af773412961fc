"""Ray's and Serve's chatter goes to a log file, not the terminal where it would bury the run's
own output: the token-auth notice, "Started a local Ray instance", "Started Serve",
"Connecting to existing Serve app" (Serve prints it at every deployment), Ray Data's plans, and
the lines Ray's C++ code writes to stderr. Python's errors from Ray still reach the terminal."""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
import threading
from pathlib import Path

LOG = Path("~/.cache/halluscope/logs/ray-driver.log")
_LOGGERS = ("ray", "ray.serve", "ray.data")


def quiet_ray() -> Path:
    """Send Ray's, Serve's and Ray Data's loggers to ``LOG``; call again after Serve starts, which
    installs a terminal handler of its own. Returns the file."""
    path = LOG.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        mine = [h for h in logger.handlers if isinstance(h, logging.FileHandler) and h.baseFilename == str(path)]
        for handler in logger.handlers:
            if handler not in mine:
                handler.setLevel(logging.ERROR)
        if not mine:
            log = logging.FileHandler(path)
            log.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            logger.addHandler(log)
        if name == "ray.data":  # no handler of its own: it would propagate to the root logger
            logger.setLevel(logging.INFO)
            logger.propagate = False
    _raylet_errors_to_log()
    return path


def _raylet_errors_to_log() -> None:
    """A Ray driver prints the errors its raylets report ("A worker died or was killed while
    executing a task ...") to stdout from a thread of its own, past every logger and whatever
    ``log_to_driver`` says: they go to the "ray" logger, so to ``LOG``, beside Ray's other lines.
    The run itself reports what such a death cost it (a retried task, a requeued model)."""
    import ray._private.worker as ray_worker

    printer = getattr(ray_worker, "print_to_stdstream", None)
    if printer is None or getattr(printer, "to_log", False):
        return

    def print_to_stdstream(data: dict, ignore_prefix: bool) -> None:
        if data.get("pid") != "raylet":
            printer(data, ignore_prefix)
            return
        for line in data.get("lines", ()):
            logging.getLogger("ray").warning("(raylet) %s", line)

    print_to_stdstream.to_log = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = print_to_stdstream


# how Ray's C++ code (core worker, raylet client) begins a line: "[2026-11-27 23:36:46,613 E 1028 1028] "
_NATIVE_LINE = re.compile(rb"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [DIWEF] \d+ \d+\] ")


def native_lines_to_log() -> Path:
    """Ray's C++ code writes its warnings and errors straight to the process's stderr (file
    descriptor 2), which no Python logger controls: on every run with actor pools, an "E" line
    about constructor arguments that is no error of the run. For a process that is halluscope's
    command (not a test runner, whose capture owns descriptor 2), descriptor 2 becomes a pipe: a
    thread appends those lines to ``LOG`` and passes everything else on to the terminal.
    Python's own ``sys.stderr`` writes to the terminal directly, so a traceback at exit is never
    left in the pipe; at exit the pipe is drained. Returns the log file."""
    path = LOG.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    terminal = os.dup(2)
    read, write = os.pipe()
    os.dup2(write, 2)
    os.close(write)
    sys.stderr = open(terminal, "w", buffering=1, encoding=sys.stderr.encoding, errors="backslashreplace",
                      closefd=False)

    def forward() -> None:
        with open(read, "rb", buffering=0) as pipe, path.open("ab") as log, \
                open(terminal, "wb", closefd=False) as out:
            for line in iter(pipe.readline, b""):
                to = log if _NATIVE_LINE.match(line) else out
                to.write(line)
                to.flush()

    thread = threading.Thread(target=forward, name="native-stderr", daemon=True)
    thread.start()

    def drain() -> None:
        """At exit: descriptor 2 back to the terminal, which closes the pipe's last writer (but
        for children still running), and the lines still in it forwarded."""
        os.dup2(terminal, 2)
        thread.join(timeout=2)

    atexit.register(drain)
    return path
