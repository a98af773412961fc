"""The Ray head the integration tests and bench scripts start is stopped with every process it
started, those that retitled themselves and those whose parent exited included
(tests.support.servers)."""

from __future__ import annotations

import subprocess
import sys
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


def test_a_process_that_names_the_heads_address_goes_with_it_once_its_parent_is_gone(tmp_path):
    """As the Ray client server `ray start` leaves: its parent exits, and its command line names
    the head's GCS address, not its temp dir."""
    address = "--address=127.0.0.1:1"
    started = subprocess.run(["sh", "-c", f"{sys.executable} -c 'import time; time.sleep(300)' {address} "
                                          "> /dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True)
    orphan = int(started.stdout)
    deadline = time.time() + 10
    while address.encode() not in Path(f"/proc/{orphan}/cmdline").read_bytes():
        assert time.time() < deadline
        time.sleep(0.01)
    kill_tree(str(tmp_path / "head-temp-dir"), address)
    while _alive(orphan):
        assert time.time() < deadline, "the orphan outlived its head"
        time.sleep(0.01)
