"""The shared RayService's log keeper: what its pods' Ray and Serve logs leave in storage."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from halluscope import service_logs
from halluscope.service_logs import keep_logs
from halluscope.storage.fs import Location


def _wait_for(check, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_each_pass_copies_what_changed_and_the_last_pass_follows_the_stop(tmp_path: Path) -> None:
    logs, dest = tmp_path / "logs", tmp_path / "kept"
    (logs / "serve").mkdir(parents=True)
    replica = logs / "serve" / "replica_judge_1.log"
    replica.write_text("loading weights\n")
    stop = threading.Event()
    keeper = threading.Thread(target=lambda: passes.append(keep_logs(logs, Location.from_url(str(dest)), 0.05, stop)))
    passes: list[int] = []
    keeper.start()
    kept = dest / "serve" / "replica_judge_1.log"
    _wait_for(lambda: kept.is_file() and kept.read_text() == "loading weights\n")
    with replica.open("a") as f:
        f.write("engine ready\n")
    _wait_for(lambda: kept.read_text().endswith("engine ready\n"))  # a file is copied again as it grows
    with replica.open("a") as f:  # written just before the pod is stopped: the last pass begins after the stop
        f.write("SIGTERM\n")
    stop.set()
    keeper.join(10)
    assert not keeper.is_alive()
    assert kept.read_text() == "loading weights\nengine ready\nSIGTERM\n"
    assert passes and passes[0] >= 2


def test_a_pass_that_fails_is_named_and_the_next_one_copies(tmp_path: Path, monkeypatch) -> None:
    logs, dest = tmp_path / "logs", tmp_path / "kept"
    logs.mkdir()
    (logs / "raylet.out").write_text("started\n")
    calls = []
    real = service_logs.copy_logs

    def flaky(folder, since, where):
        calls.append(since)
        if len(calls) == 1:
            raise OSError("endpoint went away")
        return real(folder, since, where)

    monkeypatch.setattr(service_logs, "copy_logs", flaky)
    warnings: list[str] = []  # the module's own logger: other tests may stop the package's propagating
    monkeypatch.setattr(service_logs.logger, "warning", lambda msg, *a: warnings.append(msg % a))
    stop = threading.Event()
    stop.set()  # stopped before it began: one pass, the last
    assert keep_logs(logs, Location.from_url(str(dest)), 0.01, stop) == 0
    assert len(warnings) == 1 and "endpoint went away" in warnings[0]
    assert calls == [0.0]
    stop2 = threading.Event()
    threading.Timer(0.2, stop2.set).start()
    assert keep_logs(logs, Location.from_url(str(dest)), 0.05, stop2) >= 1
    assert calls[1] == 0.0  # after a failure the next pass starts from where the last good one did
    assert (dest / "raylet.out").read_text() == "started\n"


def test_the_sidecar_command_copies_until_terminated_and_exits_cleanly(tmp_path: Path) -> None:
    logs, dest = tmp_path / "logs", tmp_path / "kept"
    logs.mkdir()
    (logs / "gcs_server.out").write_text("up\n")
    proc = subprocess.Popen([sys.executable, "-m", "halluscope.cli", "keep-logs", str(dest), "--folder", str(logs),
                             "--every", "0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        _wait_for(lambda: (dest / "gcs_server.out").is_file(), timeout=60)
        with (logs / "gcs_server.out").open("a") as f:
            f.write("down\n")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "passes copied" in out
    assert (dest / "gcs_server.out").read_text() == "up\ndown\n"


@pytest.mark.parametrize("every", ["0", "-1", "nan"])
def test_a_period_that_is_no_period_is_refused(tmp_path: Path, every: str, capsys) -> None:
    from halluscope.cli import main

    assert main(["keep-logs", str(tmp_path), "--every", every]) == 2
    assert "--every must be a positive number" in capsys.readouterr().err
