"""Storage that does not answer (an endpoint nothing listens on, no credentials, no bucket) ends a run
in seconds, in one line naming the URL, not after a minute of botocore retries in a traceback."""

from __future__ import annotations

import time

import pytest
from tests.support.servers import S3_CREDENTIALS, free_port, moto_s3
from tests.unit.test_cli import _replay_config

from halluscope.cli import main
from halluscope.errors import HalluscopeError
from halluscope.storage.fs import Location
from halluscope.storage.spec import StorageSpec


def _no_aws_credentials(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata lookups


def test_run_on_an_unreachable_s3_endpoint_fails_fast_in_one_line(tmp_path, capsys, monkeypatch):
    for k, v in S3_CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    path = _replay_config(tmp_path, ["p0"], storage={"root": "s3://bucket/runs", "endpoint_url": endpoint})
    started = time.monotonic()
    assert main(["run", str(path), "--run-id", "r1", "--quiet"]) == 2
    assert time.monotonic() - started < 30  # 50 s and a botocore traceback before
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"halluscope: error: storage.root s3://bucket/runs: cannot reach the S3 endpoint {endpoint}")


def test_no_credentials_is_one_line_naming_the_url(tmp_path, monkeypatch):
    _no_aws_credentials(monkeypatch, tmp_path)
    root = "s3://bucket/runs"
    loc = Location.from_url(root, StorageSpec(root=root, endpoint_url=f"http://127.0.0.1:{free_port()}"))
    with pytest.raises(HalluscopeError, match=r"^storage.root s3://bucket/runs: no S3 credentials: name the"):
        loc.check_reachable()


def test_a_missing_bucket_is_one_line_naming_the_url(tmp_path):
    with moto_s3() as endpoint:
        root = "s3://no-such-bucket/runs"
        with pytest.raises(HalluscopeError, match=r"^storage.root s3://no-such-bucket/runs: bucket 'no-such-bucket' "
                                               r"does not exist at http://127.0.0.1:"):
            Location.from_url(root, StorageSpec(root=root, endpoint_url=endpoint)).check_reachable()


def test_a_local_root_needs_no_check(tmp_path):
    Location.from_url(f"file://{tmp_path}/runs").check_reachable()
