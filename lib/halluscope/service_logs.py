"""The shared RayService's logs, kept under storage as a run's are (``pipeline/run_log.py``): its
pods live for weeks, their log volumes go with them, and no run copies them. A sidecar of each
service pod (`halluscope keep-logs`) copies the Ray and Serve log files that changed since its
last pass to ``<dest>/<pod>/`` every ``every_s`` seconds, and once more when the pod is stopped.
Each file keeps its last MiB, rewritten as it grows (``copy_logs``'s rule)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from halluscope.pipeline.run_log import copy_logs
from halluscope.storage.fs import Location

logger = logging.getLogger(__name__)

MTIME_SLACK_S = 2.0  # a file written in the second a pass began is copied again by the next one


def keep_logs(folder: Path, dest: Location, every_s: float, stop: threading.Event) -> int:
    """Pass after pass until ``stop`` is set, then a last one; how many passes copied without an
    error. A pass that fails (storage away a while) is named in a warning and tried again at the
    next: the pod it watches goes on serving."""
    since, passes = 0.0, 0
    while True:
        stopping = stop.is_set()  # the last pass begins after the stop: it sees the lines written until then
        started = time.time()
        try:
            copy_logs(folder, since, dest)
        except Exception as err:  # noqa: BLE001 - the next pass copies what this one missed
            logger.warning("the logs of %s were not copied to %s this pass: %s", folder, dest.url,
                           " ".join(str(err).split())[:300])
        else:
            since, passes = started - MTIME_SLACK_S, passes + 1
        if stopping:
            return passes
        stop.wait(every_s)
