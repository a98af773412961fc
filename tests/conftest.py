"""Shared fixtures: real servers on 127.0.0.1 (a Ray head, an S3 API), started and stopped here."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Ray reads its auth settings when it is first imported: token authentication stays on, with a
# token made for this test session, set before any test module imports ray.
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's S3 server on 127.0.0.1 with dummy credentials; yields the endpoint URL."""
    from moto.server import ThreadedMotoServer

    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in creds}
    os.environ.update(creds)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture()
def bucket(s3_endpoint):
    """A fresh bucket per test."""
    import uuid

    import boto3

    name = f"t-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory):
    """A Ray head on 127.0.0.1 (with the job API) shared by the integration tests."""
    import ray

    import tempfile

    ray_bin = str(Path(sys.executable).parent / "ray")
    port, dash = free_port(), free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    # a temp dir of its own (short: Ray's socket paths have a length limit), so teardown stops
    # this head's processes and nobody else's (`ray stop` would stop every Ray on the machine)
    temp_dir = tempfile.mkdtemp(prefix="hsray-", dir="/tmp")
    subprocess.run([ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", f"--temp-dir={temp_dir}",
                    "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", "--include-dashboard=true",
                    # a port of its own: concurrent heads on one machine would all try 52365
                    f"--dashboard-agent-listen-port={free_port()}",
                    "--num-cpus=6", "--object-store-memory=400000000", "--disable-usage-stats"],
                   check=True, env=env, capture_output=True, timeout=180)
    address = f"127.0.0.1:{port}"
    saved = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = address
    try:
        yield {"address": address, "dashboard": f"http://127.0.0.1:{dash}"}
    finally:
        if ray.is_initialized():
            ray.shutdown()
        subprocess.run(["pkill", "-9", "-f", temp_dir], capture_output=True, timeout=60)
        shutil.rmtree(temp_dir, ignore_errors=True)
        if saved is None:
            os.environ.pop("RAY_ADDRESS", None)
        else:
            os.environ["RAY_ADDRESS"] = saved


def config_dict(root: str, models: list[str], tasks: list[str], limit: int | None = 40, **extra) -> dict:
    """A small run config over HALOGEN's released responses."""
    cfg = {"storage": {"root": root}, "tasks": tasks,
           "models": [{"id": m, "backend": "replay"} for m in models],
           "limits": {"max_items_per_task": limit}, "concurrency": {"batch_size": 64}}
    for k, v in extra.items():
        cfg[k] = v
    return cfg
