"""The Ray head the integration tests and bench scripts start is stopped with every process it
started, those that retitled themselves included (tests.support.servers)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.support.servers import kill_tree


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_the_processes_a_head_started_go_with_it(tmp_path):
    marker = str(tmp_path / "head-temp-dir")
    # the "head" names its temp dir; its child's command line does not, as a retitled agent's
    head = subprocess.Popen(["sh", "-c", "sleep 300 & echo $! > \"$0.child\"; wait", marker])
    child_file = Path(f"{marker}.child")
    deadline = time.time() + 10
    while not child_file.exists() or not child_file.read_text().strip():
        assert time.time() < deadline
        time.sleep(0.01)
    child = int(child_file.read_text())
    # until it execs sleep, the forked child still shows the shell's command line
    while not Path(f"/proc/{child}/cmdline").read_bytes().startswith(b"sleep"):
        assert time.time() < deadline
        time.sleep(0.01)
    assert marker.encode() not in Path(f"/proc/{child}/cmdline").read_bytes()
    kill_tree(marker)
    head.wait(timeout=10)
    deadline = time.time() + 10
    while _alive(child):
        assert time.time() < deadline, "the head's child outlived it"
        time.sleep(0.01)
