"""Shared fixtures: real servers on 127.0.0.1 (a Ray head, an S3 API), started and stopped here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from tests.support.configs import ConfigDumper
from tests.support.servers import create_bucket, moto_s3, use_token_auth
from tests.support.servers import ray_head as ray_head_process

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

# the configs tests write with yaml.safe_dump share sub-dicts: written out in full, as config_yaml does
yaml.SafeDumper.ignore_aliases = ConfigDumper.ignore_aliases  # type: ignore[method-assign]

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# every Ray a test starts on 127.0.0.1: on Linux Ray swaps a loopback node address for the machine's
# own (`ray start --node-ip-address=127.0.0.1` included) and its agents and client server listen
# there; off, Ray keeps to loopback as it does on a laptop (no `ray start --address` worker joins)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# token authentication stays on, with a token made for this test session
use_token_auth()


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's S3 server on 127.0.0.1 with dummy credentials; yields the endpoint URL."""
    with moto_s3() as endpoint:
        yield endpoint


@pytest.fixture()
def bucket(s3_endpoint):
    """A fresh bucket per test."""
    import uuid

    return create_bucket(s3_endpoint, f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture()
def drivers():
    """The `halluscope run` processes a drill starts (tests.support.drills.Driver); none outlives it."""
    started: list = []
    yield started
    for d in started:
        d.kill()


@pytest.fixture(scope="session")
def ray_head():
    """A Ray head on 127.0.0.1 (with the job API) shared by the integration tests."""
    with ray_head_process() as head:
        yield head


def leave_ray(env: pytest.MonkeyPatch) -> None:
    """No Ray for this process's runs to join: the session's head, once started, sets RAY_ADDRESS,
    and a run that joined it left this process connected."""
    import ray

    env.delenv("RAY_ADDRESS", raising=False)
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture()
def in_driver(monkeypatch):
    """A run in the driver's own process, for tests whose subject is not Ray. Such a run must
    serve nothing: its stand-ins answer in process."""
    leave_ray(monkeypatch)


IN_DRIVER = "in the driver's process"  # manifest.json's execution of such a run


RECORDED_STEPS = {"steps": "halluscope.halogen.recorded:replies"}


def recorded_roles(tasks: list[str]) -> list[dict]:
    """The recorded judge and extractor that HALOGEN tasks call (answering from the authors' pipeline)."""
    from halluscope.task_registry import get_task

    needed = {role for t in tasks for role in get_task(t).roles}
    return [{"id": f"halogen-recorded-{role}", "role": role, "backend": "recorded", "params": RECORDED_STEPS}
            for role in ("extractor", "judge") if role in needed]


def config_dict(root: str, models: list[str], tasks: list[str], limit: int | None = 40, **extra) -> dict:
    """A small run config over the responses HALOGEN's released numbers were computed from, with
    the recorded role models the tasks call."""
    cfg = {"storage": {"root": root}, "tasks": tasks,
           "models": [{"id": m, "backend": "replay", "params": {"source": "recorded"}} for m in models]
           + recorded_roles(tasks),
           "limits": {"max_items_per_task": limit}, "concurrency": {"batch_size": 64}}
    for k, v in extra.items():
        cfg[k] = v
    return cfg
