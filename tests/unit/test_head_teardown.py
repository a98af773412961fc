"""The Ray head the integration tests and bench scripts start is stopped with every process it
started, those that retitled themselves and those whose parent exited included
(tests.support.servers)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.servers import kill_tree, process_tree


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _until(done: Callable[[], object], failure: str, deadline: float) -> None:
    """Polls ``done`` until it holds, failing with ``failure`` past ``deadline``."""
    while not done():
        assert time.time() < deadline, failure
        time.sleep(0.01)


def test_the_processes_a_head_started_go_with_it(tmp_path):
    marker = str(tmp_path / "head-temp-dir")
    # the "head" names its temp dir; its child's command line does not, as a retitled agent's
    head = subprocess.Popen(["sh", "-c", "sleep 300 & echo $! > \"$0.child\"; wait", marker])
    child_file = Path(f"{marker}.child")
    deadline = time.time() + 10
    _until(lambda: child_file.exists() and child_file.read_text().strip(), "no child pid", deadline)
    child = int(child_file.read_text())
    # until it execs sleep, the forked child still shows the shell's command line
    _until(lambda: Path(f"/proc/{child}/cmdline").read_bytes().startswith(b"sleep"), "the child never ran sleep", deadline)
    assert marker.encode() not in Path(f"/proc/{child}/cmdline").read_bytes()
    kill_tree(marker)
    head.wait(timeout=10)
    deadline = time.time() + 10
    _until(lambda: not _alive(child), "the head's child outlived it", deadline)


def test_a_process_that_names_the_heads_address_goes_with_it_once_its_parent_is_gone(tmp_path):
    """As the Ray client server `ray start` leaves: its parent exits, and its command line names
    the head's GCS address, not its temp dir."""
    address = "--address=127.0.0.1:1"
    started = subprocess.run(["sh", "-c", f"{sys.executable} -c 'import time; time.sleep(300)' {address} "
                                          "> /dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True)
    orphan = int(started.stdout)
    deadline = time.time() + 10
    _until(lambda: address.encode() in Path(f"/proc/{orphan}/cmdline").read_bytes(), "the orphan never started", deadline)
    kill_tree(str(tmp_path / "head-temp-dir"), address)
    _until(lambda: not _alive(orphan), "the orphan outlived its head", deadline)


def test_a_mark_names_a_whole_address_or_folder_not_the_start_of_a_longer_one(tmp_path):
    """Another head's processes stay: the marks of a head at port 1 and temp dir ``head`` are not
    those of a head at port 15432 or temp dir ``head_2`` (both lanes' heads live side by side)."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)",
                              "--address=127.0.0.1:15432", f"--temp-dir={tmp_path / 'head_2'}"])
    try:
        deadline = time.time() + 10
        _until(lambda: b"--address" in Path(f"/proc/{other.pid}/cmdline").read_bytes(), "it never started", deadline)
        assert other.pid not in process_tree(str(tmp_path / "head"), "--address=127.0.0.1:1")
        assert other.pid in process_tree(str(tmp_path / "head_2"))
    finally:
        other.kill()
        other.wait(timeout=10)
