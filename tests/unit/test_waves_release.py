"""A deployment whose app Serve no longer lists is released only once Ray reports its resources
free: the next model is not admitted onto GPUs a replica's process still holds."""

from __future__ import annotations

import logging

from halluscope.pipeline import waves
from halluscope.pipeline.waves import Deployment, Waves, _Active
from halluscope.resolve.cluster import Job


def _active() -> _Active:
    job = Job("m", "GPU", 4.0)
    return _Active(job, Deployment("m", "GPU", 4.0, 1, 0.0, status="releasing"), None, 0.0)


def test_resources_still_held_in_rays_view_keep_the_deployment_releasing(monkeypatch, caplog):
    free = iter([{"GPU": 2.0}, {"GPU": 2.0}, {"GPU": 4.0}])
    monkeypatch.setattr(waves.ray, "available_resources", lambda: next(free))
    w, a = Waves([], {"GPU": 8.0}, {}, lambda s, e: None, lambda m, ok: None), _active()
    assert [w._freed(a, t) for t in (100.0, 101.0, 102.0)] == [False, False, True]
    assert a.gone_at == 100.0 and not caplog.records


def test_resources_busy_past_the_wait_are_taken_as_given_back_with_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(waves.ray, "available_resources", lambda: {"GPU": 0.0})
    w, a = Waves([], {"GPU": 8.0}, {}, lambda s, e: None, lambda m, ok: None), _active()
    with caplog.at_level(logging.WARNING, logger="halluscope.pipeline.waves"):
        assert not w._freed(a, 100.0)
        assert w._freed(a, 100.0 + waves.FREE_WAIT_S)
    assert "Ray has 0 of its 4 GPU free after 60 s" in caplog.text
