"""Which Ray a run uses: the one its config or RAY_ADDRESS names, else a new one of its own. A
`ray start` head left on the machine (another run, a test's cluster) is never joined by accident:
Ray would join it when ray.init gets no address, and refuse the run's CPU and GPU counts."""

from __future__ import annotations

import ray

from halluscope import runkit
from halluscope.config.schema import RaySpec


def _calls(monkeypatch, env_address: str | None, spec: RaySpec) -> list[dict]:
    calls: list[dict] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    if env_address is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env_address)
    runkit.init_ray(spec, cpus_needed=6)
    return calls


def test_without_an_address_a_run_starts_a_local_ray_of_its_own(monkeypatch):
    [call] = _calls(monkeypatch, None, RaySpec())
    assert call["address"] == "local" and call["num_cpus"] >= 6


def test_an_address_from_the_environment_or_the_config_is_joined(monkeypatch):
    [call] = _calls(monkeypatch, "127.0.0.1:6379", RaySpec())
    assert call["address"] == "127.0.0.1:6379" and "num_cpus" not in call
    [call] = _calls(monkeypatch, None, RaySpec(address="127.0.0.1:6380"))
    assert call["address"] == "127.0.0.1:6380"
