"""`ray job submit` of jobs/evaluate.py to a local head; results land in a bucket on the S3 server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
import yaml

from tests.conftest import REPO, SHARED_DATA, config_dict

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")]


def test_job_submit_writes_results_to_s3(ray_head, s3_endpoint, bucket, tmp_path):
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    cfg = config_dict(f"s3://{bucket}/runs", ["gpt_3.5_turbo_0125"], ["halogen/code", "halogen/false_presuppositions"],
                      limit=25, storage={"root": f"s3://{bucket}/runs", "endpoint_url": s3_endpoint},
                      data={"dir": str(SHARED_DATA), "download": False})
    s3.put_object(Bucket=bucket, Key="configs/job.yaml", Body=yaml.safe_dump(cfg).encode())

    # the project's runtime env, plus what this test's S3 server needs
    runtime_env = yaml.safe_load((REPO / "cluster" / "runtime_env.yaml").read_text())
    runtime_env["env_vars"].update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                                    "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": s3_endpoint})
    env_file = tmp_path / "runtime_env.yaml"
    env_file.write_text(yaml.safe_dump(runtime_env))
    ray_bin = str(Path(sys.executable).parent / "ray")
    proc = subprocess.run(
        [ray_bin, "job", "submit", "--address", ray_head["dashboard"], "--runtime-env", str(env_file),
         "--", sys.executable, "jobs/evaluate.py", "--config", f"s3://{bucket}/configs/job.yaml", "--run-id", "job1"],
        cwd=REPO, env=os.environ.copy(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "succeeded" in proc.stdout
    metrics = json.loads(s3.get_object(Bucket=bucket, Key="runs/job1/metrics.json")["Body"].read())
    tasks = {(m["model"], m["task"]) for m in metrics}
    assert ("gpt_3.5_turbo_0125", "halogen/code") in tasks
    assert all(m["n_items"] == 25 for m in metrics if not m.get("aggregate"))
    board = s3.get_object(Bucket=bucket, Key="runs/job1/leaderboard.md")["Body"].read().decode()
    assert "halogen/false_presuppositions" in board
    manifest = json.loads(s3.get_object(Bucket=bucket, Key="runs/job1/manifest.json")["Body"].read())
    assert manifest["status"] == "complete"
