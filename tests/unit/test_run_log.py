"""An attempt's log lines reach the run's storage: at each upload, and when the attempt ends, also
when it ends on an error; nothing before the attempt claims the run; warnings still reach the
terminal."""

from __future__ import annotations

import logging

import pytest

from halluscope.pipeline import run_log
from halluscope.pipeline.run_log import RunLog
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

logger = logging.getLogger("halluscope.pipeline.test")


def _store(tmp_path, claimed: bool = True) -> RunStore:
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "r")
    if claimed:
        store.claim()
    return store


def _stored(tmp_path, store: RunStore) -> str:
    return (tmp_path / "r" / "logs" / f"driver-{store.attempt}.log").read_text()


def test_lines_are_uploaded_as_they_come_and_when_the_attempt_ends_on_an_error(tmp_path):
    store = _store(tmp_path)
    with pytest.raises(RuntimeError), RunLog(store) as log:
        logger.info("deploying m (wave 1)")
        logger.debug("not kept")
        assert log.view() == {"log": store.loc.child("logs", f"driver-{store.attempt}.log").url}
        assert _stored(tmp_path, store).endswith("INFO halluscope.pipeline.test: deploying m (wave 1)\n")
        raise RuntimeError("engine lost")
    text = _stored(tmp_path, store)
    assert "not kept" not in text
    assert text.splitlines()[-1].endswith("ERROR halluscope: the attempt stopped: RuntimeError: engine lost")
    logger.info("after the attempt")  # the handler is gone with it
    assert "after the attempt" not in _stored(tmp_path, store)


def test_nothing_is_written_before_the_attempt_claims_the_run(tmp_path):
    store = _store(tmp_path, claimed=False)
    with RunLog(store) as log:
        logger.info("planning")
        assert log.view() == {"log": None}
    assert not (tmp_path / "r").exists()


def test_a_long_log_keeps_its_first_lines_and_its_last_and_counts_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(run_log, "MAX_DRIVER_BYTES", 400)
    store = _store(tmp_path)
    with RunLog(store):
        for n in range(50):
            logger.info("line %d", n)
    lines = _stored(tmp_path, store).splitlines()
    assert lines[0].endswith("line 0") and lines[-1].endswith("line 49")
    kept = len(lines) - 1
    assert lines[-2] == f"... {50 - kept} lines left out (over 0 MiB)"


def test_warnings_still_reach_the_terminal(tmp_path, capsys, monkeypatch):
    # as in the command: no handler above the package's logger (the test runner's sit on the root)
    monkeypatch.setattr(logging.getLogger("halluscope"), "propagate", False)
    with RunLog(_store(tmp_path)):
        logger.warning("model m failed")
        logger.info("deploying m")
    err = capsys.readouterr().err
    assert "model m failed" in err and "deploying m" not in err
