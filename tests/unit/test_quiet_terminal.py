"""The terminal of a `halluscope` process shows halluscope's lines and other programs' output;
the lines Ray's C++ code writes to stderr go to the log file (issue: an "E" line about actor
constructor arguments on every run)."""

from __future__ import annotations

import os
import subprocess
import sys

RAY_LINE = ("[2026-11-27 23:36:46,613 E 1028 1028] core_worker.cc:2465: Actor with class name: "
            "'MapWorker(MapBatches(Evaluate))' has constructor arguments in the object store and max_restarts > 0.")
PROCESS = f"""
import os, sys
from halluscope.quiet import native_lines_to_log
native_lines_to_log()
os.write(2, {(RAY_LINE + chr(10)).encode()!r})  # as Ray's C++ code writes it: to descriptor 2
os.write(2, b"kubectl: a line of another program\\n")
print("halluscope: error: the run's own line", file=sys.stderr)
raise SystemExit(3)
"""


def test_ray_native_lines_go_to_the_log_and_the_rest_to_the_terminal(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", PROCESS], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    # both reach the terminal (the forwarded one after Python's own, which does not pass the pipe)
    assert sorted(done.stderr.splitlines()) == ["halluscope: error: the run's own line",
                                                "kubectl: a line of another program"]
    log = tmp_path / ".cache" / "halluscope" / "logs" / "ray-driver.log"
    assert log.read_text().splitlines() == [RAY_LINE]


RAYLET = """
import ray._private.worker as ray_worker
from halluscope.quiet import quiet_ray
quiet_ray()
# what Ray's error listener thread does with an error a raylet reports
ray_worker.print_to_stdstream({"lines": ["A worker died or was killed while executing a task."], "pid": "raylet",
                               "is_err": False}, ignore_prefix=False)
print("halluscope: the run's own line")
"""


def test_the_errors_raylets_report_go_to_the_log(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", RAYLET], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["halluscope: the run's own line"] and "worker died" not in done.stderr
    log = (tmp_path / ".cache" / "halluscope" / "logs" / "ray-driver.log").read_text()
    assert "WARNING ray: (raylet) A worker died or was killed while executing a task." in log
