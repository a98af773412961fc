"""Ray's and Serve's chatter goes to a log file, not the terminal where it would bury the run's
own output: the token-auth notice, "Started a local Ray instance", "Started Serve",
"Connecting to existing Serve app" (Serve prints it at every deployment), Ray Data's plans.
Errors still reach the terminal."""

from __future__ import annotations

import logging
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
    return path
