"""Secrets never leak, and bad configs fail before any model starts, for jobs sent with `ray job submit`.

Two random secrets are planted: an S3 secret key and an API key that a local OpenAI-compatible stub
demands (so the key is really used). The run config only names their variables (storage.secret_key_env,
params.api_key_env). After one good run and two bad-config jobs, each secret (raw, and base64 at every
byte alignment) is searched in everything the jobs wrote to S3, every job's `ray job logs`, the Ray
head's session logs and the repository's deploy files; the stub's request log is the positive control.
(moto checks no signatures, so the S3 secret's control is weaker: the run succeeds only if the variable
storage.secret_key_env names is set.) The session's Ray auth token is searched for too.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import pyarrow.parquet as pq
import pytest
import yaml
from ray.job_submission import JobStatus, JobSubmissionClient
from starlette.requests import Request
from starlette.responses import Response
from tests.conftest import REPO, SHARED_DATA
from tests.support.openai_server import OpenAIStubServer, _error

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")]

RAY = str(Path(sys.executable).parent / "ray")
ITEMS = 8                      # halogen/code prompts the stub answers: one generation call each
GOOD, BAD_FIELD, BAD_TASK = "secrets-good", "secrets-bad-field", "secrets-bad-task"
SERVED_ID = "would-be-served"  # a scripted model: Ray Serve would host it if a bad config got that far
AGENT_WAIT_S = 60                     # how long a fresh head may refuse jobs for want of its agent
MAX_SCANNED_BYTES = 64 * 1024 * 1024  # session log files bigger than this are not read (none come close)

# The secrets reach the job the way pods get theirs from a Secret (k8s/base/*.yaml): in the environment
# of the Ray processes. They are set while this module is collected, before the session's Ray head
# starts, so the head and every worker and job driver it spawns inherit them. A runtime_env's env_vars
# would not do: Ray's runtime_env_agent.log records each runtime env in full, values included.
S3_KEY_ID_ENV, S3_SECRET_ENV, API_KEY_ENV = "HS_PLANTED_S3_KEY_ID", "HS_PLANTED_S3_SECRET", "HS_PLANTED_API_KEY"
os.environ[S3_KEY_ID_ENV] = "hs-planted-key-id"  # an access key id is not secret
os.environ[S3_SECRET_ENV] = "hs-s3-" + secrets.token_urlsafe(30)
os.environ[API_KEY_ENV] = "hs-api-" + secrets.token_urlsafe(30)


class KeyedStub(OpenAIStubServer):
    """The OpenAI stub, answering only requests that carry the planted key; it logs every request's
    headers and body, which is where the key must show up."""

    def __init__(self, api_key: str) -> None:
        super().__init__(responder=lambda _p: "```python\nimport numpy as np\nimport totally_made_up_pkg\n```")
        self.api_key = api_key
        self.request_log: list[str] = []
        self.rejected = 0

    async def _chat_completions(self, request: Request) -> Response:
        body = await request.body()
        self.request_log.append(json.dumps({"headers": dict(request.headers), "body": body.decode()}))
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            self.rejected += 1
            return _error(401, "invalid API key")
        return await super()._chat_completions(request)


def forms(secret: str) -> list[bytes]:
    """The secret's bytes, and its base64 (standard and URL-safe) at all three byte alignments: inside
    a longer base64 blob only the characters fully determined by the secret's bytes are stable."""
    raw = secret.encode()
    out = [raw]
    for pad in range(3):
        enc = base64.b64encode(b"\0" * pad + raw)
        stable = enc[4 if pad else 0:-4]  # drop groups shared with the padding or the tail
        out += [stable, stable.replace(b"+", b"-").replace(b"/", b"_")]
    return out


def leaks(blob: bytes, planted: dict[str, str]) -> list[str]:
    """Which planted secrets the blob holds, each with the text just before it as evidence (any
    secret in that text masked, so a failing test never prints one)."""
    found = []
    for name, value in planted.items():
        hits = [i for i in (blob.find(f) for f in forms(value)) if i >= 0]
        if hits:
            before = blob[max(0, min(hits) - 100):min(hits)]
            for other in planted.values():
                for f in forms(other):
                    before = before.replace(f, b"***")
            found.append(f"{name} after {before.decode(errors='replace')!r}")
    return found


def s3_texts(s3, bucket: str) -> dict[str, bytes]:
    """Every object in the bucket; Parquet files are also decoded (their pages may be compressed) and
    gzip objects unpacked, so a secret inside a compressed column is still seen."""
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            data = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            if obj["Key"].endswith(".parquet"):
                data += repr(pq.read_table(io.BytesIO(data)).to_pylist()).encode()
            elif obj["Key"].endswith(".gz"):
                data += gzip.decompress(data)
            out[obj["Key"]] = data
    return out


def session_dir(address: str) -> Path:
    """The session folder of the fixture's head: the one whose GCS listens on its port (other heads,
    of tests running beside this one, live in other /tmp/hsray-* folders)."""
    port = address.rsplit(":", 1)[1]
    for marker in Path("/tmp").glob("hsray-*/session_latest/gcs_server_port_*"):
        if marker.read_text().strip() == port:
            return marker.parent
    raise AssertionError(f"no Ray session folder with GCS port {port}")


def auth_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {os.environ['RAY_AUTH_TOKEN']}"}


def serve_apps(dashboard: str) -> set[str]:
    req = urllib.request.Request(f"{dashboard}/api/serve/applications/", headers=auth_headers())
    with urllib.request.urlopen(req, timeout=30) as r:
        return set(json.load(r).get("applications") or {})


def ray_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([RAY, *args], cwd=REPO, env=os.environ.copy(), capture_output=True, text=True,
                          timeout=timeout)


def submit(dashboard: str, sid: str, env_file: Path, *entrypoint: str) -> subprocess.CompletedProcess:
    """`ray job submit`, waiting for the job's end. A head that has just started may not have its
    job agent yet and refuses submissions for a few seconds; those refusals are retried."""
    deadline = time.monotonic() + AGENT_WAIT_S
    while True:
        proc = ray_cli("job", "submit", "--address", dashboard, "--submission-id", sid, "--runtime-env", str(env_file),
                       "--", sys.executable, *entrypoint, timeout=600)
        if "No available agent to submit job" not in proc.stderr:
            return proc
        if time.monotonic() > deadline:
            pytest.fail(f"the Ray head's job agent did not come up in {AGENT_WAIT_S} s; see dashboard_agent.log "
                        "in its session logs (its HTTP port may be taken by another Ray head)")
        time.sleep(2)


@pytest.fixture(scope="module")
def jobs(ray_head, s3_endpoint, tmp_path_factory):
    """One good run and two bad-config jobs, submitted together."""
    from halluscope.serving.app import app_name_for

    planted = {"s3 secret key": os.environ[S3_SECRET_ENV], "api key": os.environ[API_KEY_ENV],
               "ray auth token": os.environ["RAY_AUTH_TOKEN"]}
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)  # moto checks no signature: the test's own
    bucket = f"t-{uuid.uuid4().hex[:12]}"               # "testing" key reads what the job wrote
    s3.create_bucket(Bucket=bucket)
    stub = KeyedStub(planted["api key"]).start()

    storage = {"root": f"s3://{bucket}/runs", "endpoint_url": s3_endpoint,
               "access_key_env": S3_KEY_ID_ENV, "secret_key_env": S3_SECRET_ENV}
    good = {"storage": storage, "tasks": ["halogen/code"], "limits": {"max_items_per_task": ITEMS},
            "data": {"dir": str(SHARED_DATA), "download": False},
            "models": [{"id": "stub", "backend": "openai",
                        "params": {"base_url": stub.base_url, "model": "gpt-4o-mini",
                                   "api_key_env": API_KEY_ENV, "max_retries": 0}}]}
    scripted = {"id": SERVED_ID, "backend": "scripted"}
    configs = {GOOD: good, BAD_FIELD: {**good, "models": [scripted], "limits": {"max_item_per_task": ITEMS}},
               BAD_TASK: {**good, "models": [scripted], "tasks": ["halogen/codes"]}}
    for name, cfg in configs.items():
        s3.put_object(Bucket=bucket, Key=f"configs/{name}.yaml", Body=yaml.safe_dump(cfg).encode())

    # the project's runtime env, plus what reaches this test's S3 server; the config file itself is
    # read with the default credential chain, so it gets the server's dummy key (no planted value)
    runtime_env = yaml.safe_load((REPO / "cluster" / "runtime_env.yaml").read_text())
    runtime_env["env_vars"].update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                                    "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": s3_endpoint})
    env_file = tmp_path_factory.mktemp("secrets") / "runtime_env.yaml"
    env_file.write_text(yaml.safe_dump(runtime_env))

    dashboard = ray_head["dashboard"]
    apps_before = serve_apps(dashboard)

    def one(name: str) -> dict:
        sid = f"{name}-{uuid.uuid4().hex[:8]}"
        proc = submit(dashboard, sid, env_file, "jobs/evaluate.py",
                      "--config", f"s3://{bucket}/configs/{name}.yaml", "--run-id", name)
        logs = ray_cli("job", "logs", "--address", dashboard, sid, timeout=120)
        return {"submit": proc, "logs": logs.stdout + logs.stderr,
                "status": JobSubmissionClient(dashboard).get_job_status(sid)}

    try:
        with ThreadPoolExecutor(len(configs)) as pool:
            results = dict(zip(configs, pool.map(one, configs)))
    finally:
        stub.stop()
    yield {"planted": planted, "s3": s3, "bucket": bucket, "stub": stub, "results": results,
           "apps_before": apps_before, "apps_after": serve_apps(dashboard),
           "served_app": app_name_for(SERVED_ID), "session": session_dir(ray_head["address"])}


def test_good_run_writes_report_and_costs_to_s3(jobs):
    r = jobs["results"][GOOD]
    assert r["submit"].returncode == 0, r["submit"].stdout[-3000:] + r["submit"].stderr[-3000:]
    assert r["status"] == JobStatus.SUCCEEDED
    s3, bucket = jobs["s3"], jobs["bucket"]
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"runs/{GOOD}/")["Contents"]}
    for name in ("report.html", "costs.parquet", "metrics.json", "manifest.json", "leaderboard.md"):
        assert f"runs/{GOOD}/{name}" in keys, sorted(keys)
    # the job's log and the head's Ray logs of its time outlive the cluster (and are searched for secrets below)
    logs = {k.split("/")[3].partition("-")[0] for k in keys if k.startswith(f"runs/{GOOD}/logs/")}
    assert logs == {"driver", "ray"}, sorted(keys)
    costs = pq.read_table(io.BytesIO(s3.get_object(Bucket=bucket, Key=f"runs/{GOOD}/costs.parquet")["Body"].read()))
    by_stage = {(c["model"], c["stage"]): c for c in costs.to_pylist()}
    # one generation call per item, all answered (the stub accepted the key), none from the cache
    gen = by_stage[("stub", "generate")]
    assert (gen["calls"], gen["failed_calls"], gen["cached_calls"]) == (ITEMS, 0, 0), gen
    assert gen["input_tokens"] > 0 and gen["usd"] > 0  # gpt-4o-mini is priced in cluster/prices.yaml
    assert jobs["stub"].calls == ITEMS and jobs["stub"].rejected == 0
    manifest = json.loads(s3.get_object(Bucket=bucket, Key=f"runs/{GOOD}/manifest.json")["Body"].read())
    assert manifest["status"] == "complete"
    # the manifest keeps the variables' names, which is all a rerun needs
    assert manifest["config"]["storage"]["secret_key_env"] == S3_SECRET_ENV
    assert manifest["config"]["models"][0]["params"]["api_key_env"] == API_KEY_ENV


def test_the_api_key_was_really_sent(jobs):
    """Positive control: the search finds the key where it belongs, so its absence elsewhere means something."""
    log = "\n".join(jobs["stub"].request_log).encode()
    assert [n.split(" after ")[0] for n in leaks(log, jobs["planted"])] == ["api key"]


def test_no_planted_secret_in_s3_logs_or_deploy_files(jobs):
    planted, found = jobs["planted"], []
    objects = s3_texts(jobs["s3"], jobs["bucket"])
    assert any(k.startswith("runs/_cache/") for k in objects), sorted(objects)  # the call cache was written too
    for key, data in objects.items():
        found += [f"s3://{jobs['bucket']}/{key}: {n}" for n in leaks(data, planted)]
    for name, r in jobs["results"].items():
        found += [f"`ray job logs` of {name}: {n}" for n in leaks(r["logs"].encode(), planted)]
        found += [f"`ray job submit` output of {name}: {n}"
                  for n in leaks((r["submit"].stdout + r["submit"].stderr).encode(), planted)]
    scanned = 0
    for path in sorted((jobs["session"] / "logs").rglob("*")):
        if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_SCANNED_BYTES:
            scanned += 1
            found += [f"{path}: {n}" for n in leaks(path.read_bytes(), planted)]
    assert scanned > 10, f"only {scanned} files in {jobs['session']}/logs"
    for folder in ("k8s", "cluster"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file():
                found += [f"{path}: {n}" for n in leaks(path.read_bytes(), planted)]
    assert not found, "planted secret found:\n" + "\n".join(found)


@pytest.mark.parametrize(("name", "message"), [
    (BAD_FIELD, "limits.max_item_per_task: Extra inputs are not permitted"),
    (BAD_TASK, "tasks.0: unknown task 'halogen/codes'; did you mean halogen/code"),
])
def test_bad_config_fails_before_any_model_starts(jobs, name, message):
    r = jobs["results"][name]
    assert r["submit"].returncode != 0
    assert r["status"] == JobStatus.FAILED
    assert f"invalid run config s3://{jobs['bucket']}/configs/{name}.yaml" in r["logs"], r["logs"][-3000:]
    assert message in r["logs"], r["logs"][-3000:]
    assert "Traceback" not in r["logs"]  # a user's mistake is one clear line, not a stack
    # no Serve application appeared for its (served) model, and nothing was written for the run
    assert jobs["served_app"] not in jobs["apps_after"]
    assert jobs["apps_after"] <= jobs["apps_before"], jobs["apps_after"] - jobs["apps_before"]
    assert "Contents" not in jobs["s3"].list_objects_v2(Bucket=jobs["bucket"], Prefix=f"runs/{name}/")

