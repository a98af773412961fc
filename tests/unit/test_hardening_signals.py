"""SIGTERM (a deleted pod, `timeout`) and SIGHUP (a closed terminal) stop a run as Ctrl-C does: the
manifest says interrupted and why, and the CLI prints the command that resumes it."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import pytest
from tests.unit.test_cli import _replay_config

from halluscope.cli import main


class Unhandled(Exception):
    """What a stop signal raises where the run installed no handler of its own (with the default
    handler, the old code's, the signal would end the test process itself)."""


@pytest.fixture
def unhandled():
    def handler(signum, frame):
        raise Unhandled(signal.Signals(signum).name)

    before = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    yield handler
    for s, h in before.items():
        signal.signal(s, h)


def _stop_in_pipeline(monkeypatch, signum, init_ray=lambda spec, **_: None):
    from halluscope.pipeline import execute, runner

    def pipeline(*args, **kwargs):
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the signal's handler raises here
        raise AssertionError(f"{signal.Signals(signum).name} did not stop the run")

    monkeypatch.setattr(runner, "init_ray", init_ray)
    monkeypatch.setattr(execute, "execute", pipeline)


def _check_recorded(tmp_path, capsys, path, name):
    manifest = json.loads((tmp_path / "runs" / "r1" / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert manifest["reason"] == f"interrupted ({name})"
    err = capsys.readouterr().err
    assert f"halluscope: interrupted ({name})" in err
    assert "run r1 is recorded as interrupted; to resume it" in err
    assert f"halluscope run {path} --run-id r1\n" in err and "Traceback" not in err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_record_the_run_interrupted_and_print_how_to_resume(tmp_path, capsys, monkeypatch,
                                                                               unhandled, signum):
    _stop_in_pipeline(monkeypatch, signum)
    path = _replay_config(tmp_path, ["p0", "p1"])
    assert main(["run", str(path), "--run-id", "r1", "--quiet"]) == 128 + signum
    _check_recorded(tmp_path, capsys, path, signal.Signals(signum).name)
    # the handlers the run found are back
    assert signal.getsignal(signal.SIGTERM) is unhandled and signal.getsignal(signal.SIGHUP) is unhandled


def test_sigterm_after_ray_replaced_the_handler_is_recorded_too(tmp_path, capsys, monkeypatch, unhandled):
    """ray.init installs its own SIGTERM handler (sys.exit with the signal's number) in the driver."""
    def init_ray(spec, **_):
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))

    _stop_in_pipeline(monkeypatch, signal.SIGTERM, init_ray)
    path = _replay_config(tmp_path, ["p0", "p1"])
    assert main(["run", str(path), "--run-id", "r1", "--quiet"]) == 143
    _check_recorded(tmp_path, capsys, path, "SIGTERM")
    assert signal.getsignal(signal.SIGTERM) is unhandled


def test_stop_signals_raise_once_and_only_in_the_main_thread(unhandled):
    from halluscope.errors import Interrupted, stop_signals

    with pytest.raises(Interrupted) as stopped:
        with stop_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    assert stopped.value.signum == signal.SIGTERM and isinstance(stopped.value, KeyboardInterrupt)
    with stop_signals():  # a second signal while the run unwinds is not raised again
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
    assert signal.getsignal(signal.SIGTERM) is unhandled
    errors = []

    def elsewhere():
        try:
            with stop_signals() as stops:
                stops.rearm()  # as a run in a thread of its own does after its pipeline
                stops.check()
        except BaseException as err:  # noqa: BLE001 - signal.signal outside the main thread raises ValueError
            errors.append(err)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert errors == []


def test_sigterm_after_the_pipeline_is_recorded_though_ray_replaced_the_handler(tmp_path, capsys, monkeypatch,
                                                                                 unhandled):
    """A stop while the results are aggregated, after the pipeline left another handler in place
    (ray.init's outlives ray.shutdown; here the default, which would end the process without a
    word), records the run interrupted, as one during the pipeline does."""
    from halluscope.pipeline import finish, runner

    pipeline, aggregate = runner._pipeline, finish.aggregate

    def pipeline_then_replaced(*args, **kwargs):
        out = pipeline(*args, **kwargs)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        return out

    def stopped_while_aggregating(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        return aggregate(*args, **kwargs)

    monkeypatch.setattr(runner, "_pipeline", pipeline_then_replaced)
    monkeypatch.setattr(finish, "aggregate", stopped_while_aggregating)
    path = _replay_config(tmp_path, ["p0", "p1"])
    assert main(["run", str(path), "--run-id", "r1", "--quiet"]) == 143
    _check_recorded(tmp_path, capsys, path, "SIGTERM")


def _signal_inside_a_finalizer(signum: int) -> None:
    """A stop signal that lands while the main thread runs a weakref callback, where Python prints
    and drops the handler's exception instead of raising it."""
    import weakref

    class Thing:
        pass

    def callback(_ref):
        os.kill(os.getpid(), signum)
        time.sleep(0.5)  # the handler runs here, inside the callback

    thing = Thing()
    ref = weakref.ref(thing, callback)
    del thing  # the callback runs now
    assert ref() is None


def test_a_stop_whose_exception_a_finalizer_swallowed_is_raised_again_and_a_second_signal_too(unhandled):
    from halluscope.errors import Interrupted, stop_signals

    with pytest.raises(Interrupted) as stopped:
        with stop_signals() as stops:
            _signal_inside_a_finalizer(signal.SIGTERM)
            assert stops.lost == [signal.SIGTERM]  # dropped where it was raised ...
            stops.check()  # ... and raised where the run checks, before it records itself complete
    assert stopped.value.signum == signal.SIGTERM
    with pytest.raises(Interrupted) as stopped:
        with stop_signals():
            _signal_inside_a_finalizer(signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGHUP)  # the second signal is not ignored: the first was lost
            time.sleep(5)
    assert stopped.value.signum == signal.SIGHUP


def test_sigterm_swallowed_by_a_finalizer_as_the_run_finishes_is_recorded(tmp_path, capsys, monkeypatch, unhandled):
    """The moment the results are written, a SIGTERM lands in a weakref callback (the old code then
    ended the run complete, exit 0): the run records itself interrupted and exits 143."""
    from halluscope.pipeline import finish

    leaderboard = finish.leaderboard

    def board(*args, **kwargs):
        _signal_inside_a_finalizer(signal.SIGTERM)
        return leaderboard(*args, **kwargs)

    monkeypatch.setattr(finish, "leaderboard", board)
    path = _replay_config(tmp_path, ["p0", "p1"])
    assert main(["run", str(path), "--run-id", "r1", "--quiet"]) == 143
    _check_recorded(tmp_path, capsys, path, "SIGTERM")
