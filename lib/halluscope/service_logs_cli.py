"""`halluscope keep-logs DEST`: the sidecar of the shared RayService's pods that keeps their logs
under storage (``service_logs.py``) until the pod is stopped."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from types import FrameType


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "keep-logs", help="copy a pod's Ray and Serve logs to storage every few seconds, and once more when the pod "
                          "stops (the shared RayService's sidecar)")
    p.add_argument("dest", help="where this pod's logs go, e.g. s3://bucket/service-logs/<pod>")
    p.add_argument("--folder", type=Path, default=Path("/tmp/ray/session_latest/logs"),
                   help="the Ray log folder the pod's Ray container writes (default: %(default)s)")
    p.add_argument("--every", type=float, default=60.0, metavar="S", help="seconds between passes (default: 60)")
    p.set_defaults(fn=main)
    return p


def main(args: argparse.Namespace) -> int:
    from halluscope.errors import ConfigError
    from halluscope.service_logs import keep_logs
    from halluscope.storage.fs import Location

    if not args.every > 0:
        raise ConfigError(f"--every must be a positive number of seconds, not {args.every}")
    dest = Location.from_url(args.dest)
    dest.check_reachable("keep-logs DEST")  # a wrong bucket fails the container at its start, not silently
    stop = threading.Event()

    def on_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_stop)
    passes = keep_logs(args.folder, dest, args.every, stop)
    print(f"halluscope keep-logs: {passes} passes copied {args.folder} to {dest.url}")
    return 0
