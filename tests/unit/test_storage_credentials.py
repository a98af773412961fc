"""S3 credentials of a StorageSpec: the variables a config names, else botocore's default chain
(IRSA's web-identity token, EKS Pod Identity's container endpoint), else a one-line error.

The shipped run configs name AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, and the manifests read
them from the Secret with `optional: true`: on a cluster with IRSA or Pod Identity the keys are
left out of the Secret, so the variables are absent and the chain must take over."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.unit.test_deploy_files import base_manifests, env_of, pod_specs

from halluscope.config.load import load_config
from halluscope.errors import ConfigError
from halluscope.storage import fs as storage_fs
from halluscope.storage.fs import CREDENTIAL_CHAIN_ENV, Location, storage_options
from halluscope.storage.spec import StorageSpec

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"access_key_env": "HS_TEST_KEY", "secret_key_env": "HS_TEST_SECRET"}
ALL_ENV = ("HS_TEST_KEY", "HS_TEST_SECRET", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
           "AWS_PROFILE", "AWS_ROLE_ARN", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
           "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", *CREDENTIAL_CHAIN_ENV)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ALL_ENV:
        monkeypatch.delenv(name, raising=False)
    # no shared files or instance metadata: the chain may only find what a test sets
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "absent-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    storage_fs._chain_logged.clear()


def spec(**kw: Any) -> StorageSpec:
    return StorageSpec(root="s3://bucket/runs", **kw)


def test_named_and_set_keys_are_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HS_TEST_KEY", "AKIDEXAMPLE")
    monkeypatch.setenv("HS_TEST_SECRET", "not-a-real-secret")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/secrets/eks.amazonaws.com/serviceaccount/token")
    opts = storage_options(spec(**KEYS))
    assert (opts["key"], opts["secret"]) == ("AKIDEXAMPLE", "not-a-real-secret")  # named keys win over the chain


def test_no_named_keys_means_the_default_chain() -> None:
    opts = storage_options(spec(region="us-east-1"))
    assert "key" not in opts and "secret" not in opts
    assert opts["client_kwargs"] == {"region_name": "us-east-1"}
    assert opts["config_kwargs"]["retries"]["max_attempts"] == 8


@pytest.mark.parametrize("chain_var, value", [
    ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/secrets/eks.amazonaws.com/serviceaccount/token"),  # IRSA
    ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://169.254.170.23/v1/credentials"),  # EKS Pod Identity
    ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc"),  # ECS task role
])
def test_unset_named_keys_fall_back_to_the_chain(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
                                                 chain_var: str, value: str) -> None:
    monkeypatch.setenv(chain_var, value)
    with caplog.at_level(logging.INFO, logger="halluscope.storage.fs"):
        opts = storage_options(spec(**KEYS))
        storage_options(spec(**KEYS))  # a run builds options many times: one line is enough
    assert "key" not in opts and "secret" not in opts
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"storage: HS_TEST_KEY and HS_TEST_SECRET not set; S3 credentials come from the AWS "
                     f"default chain ({chain_var})"]


def test_a_missing_variable_without_a_chain_is_one_clear_line() -> None:
    with pytest.raises(ConfigError) as info:
        storage_options(spec(**KEYS))
    message = str(info.value)
    assert message.startswith("storage.access_key_env: environment variable HS_TEST_KEY is not set, and no "
                              "web-identity or container credentials are (none of AWS_WEB_IDENTITY_TOKEN_FILE, ")
    assert "\n" not in message


def test_the_field_named_is_the_one_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HS_TEST_KEY", "AKIDEXAMPLE")
    with pytest.raises(ConfigError, match=r"^storage\.secret_key_env: environment variable HS_TEST_SECRET is not set"):
        storage_options(spec(**KEYS))


def test_never_half_static_half_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key without its secret (or a blank one, as an unfilled secrets.example.env gives) is
    not mixed with the chain's: the chain supplies both."""
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "/token")
    monkeypatch.setenv("HS_TEST_KEY", "AKIDEXAMPLE")
    assert "key" not in storage_options(spec(**KEYS))
    monkeypatch.setenv("HS_TEST_SECRET", "")
    assert "key" not in storage_options(spec(**KEYS)) and "secret" not in storage_options(spec(**KEYS))
    monkeypatch.delenv("AWS_WEB_IDENTITY_TOKEN_FILE")
    with pytest.raises(ConfigError, match="HS_TEST_SECRET is not set"):
        storage_options(spec(**KEYS))


def test_local_roots_need_no_credentials() -> None:
    assert storage_options(StorageSpec(root="file:///tmp/runs", **KEYS)) == {}


# ---------------------------------------------------------------- the shipped configs on IRSA


def _s3_configs() -> list[Path]:
    return sorted(p for p in (ROOT / "jobs" / "configs").glob("*.yaml")
                  if str(((yaml.safe_load(p.read_text()) or {}).get("storage") or {}).get("root", "")).startswith("s3://"))


def test_the_manifests_make_the_static_keys_optional() -> None:
    """So that a Secret without them (IRSA, Pod Identity) still starts every pod."""
    seen = 0
    for obj in base_manifests():
        for _, pod in pod_specs(obj):
            for c in pod["containers"]:
                for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                    ref = env_of(c).get(name, {}).get("valueFrom", {}).get("secretKeyRef")
                    if ref:
                        seen += 1
                        assert ref["optional"] is True, (obj["kind"], c["name"], name)
    assert seen


@pytest.mark.parametrize("path", _s3_configs(), ids=lambda p: p.name)
def test_shipped_s3_configs_run_under_irsa(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """A config that names key variables (AWS_ACCESS_KEY_ID...) needs them or a chain; one that
    names none always leaves the keys to the chain."""
    cfg = load_config(str(path))
    named = [env for env in (cfg.storage.access_key_env, cfg.storage.secret_key_env) if env]
    if named:
        with pytest.raises(ConfigError, match=rf"^storage\.\w+_key_env: environment variable {named[0]} is not set"):
            storage_options(cfg.storage)
    else:
        assert "key" not in storage_options(cfg.storage)
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::111122223333:role/halluscope")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/secrets/eks.amazonaws.com/serviceaccount/token")
    opts = storage_options(cfg.storage)
    assert "key" not in opts and "secret" not in opts
    loc = Location.from_url(cfg.storage.root, cfg.storage)  # built without contacting anything
    assert loc.fs.key is None and loc.fs.secret is None


# ---------------------------------------------------------------- end to end: Pod Identity on 127.0.0.1


@pytest.fixture()
def credentials_endpoint() -> Iterator[tuple[str, list[dict]]]:
    """A container-credentials endpoint like EKS Pod Identity's agent: answers temporary keys to
    a request bearing the pod's authorization token."""
    calls: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            calls.append({"path": self.path, "authorization": self.headers.get("Authorization")})
            body = json.dumps({"AccessKeyId": "ASIACHAINEXAMPLE", "SecretAccessKey": "chain-secret",
                               "Token": "chain-session-token", "Expiration": "2099-01-01T00:00:00Z"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/credentials", calls
    server.shutdown()
    server.server_close()


def test_a_run_store_on_s3_through_the_container_credentials_chain(
        monkeypatch: pytest.MonkeyPatch, credentials_endpoint: tuple[str, list[dict]]) -> None:
    """Named variables absent, Pod Identity's variables present: objects are written and read
    with the keys the endpoint handed out (moto's S3 on 127.0.0.1 accepts any)."""
    pytest.importorskip("moto")
    from tests.support.servers import create_bucket, moto_s3

    url, calls = credentials_endpoint
    with moto_s3() as endpoint:
        create_bucket(endpoint, "irsa-bucket")
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(name, raising=False)  # moto_s3 set them; a Pod Identity pod has none
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url)
        monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-identity-token")
        storage = StorageSpec(root="s3://irsa-bucket/runs", endpoint_url=endpoint, region="us-east-1",
                              access_key_env="AWS_ACCESS_KEY_ID", secret_key_env="AWS_SECRET_ACCESS_KEY")
        loc = Location.from_url(storage.root, storage).child("r1", "attempt.json")
        loc.fs.invalidate_cache()
        loc.write_bytes_atomic(b'{"attempt": 1}')
        assert loc.read_bytes() == b'{"attempt": 1}'
    assert calls and calls[0]["path"] == "/v1/credentials" and calls[0]["authorization"] == "pod-identity-token"


def test_an_s3_path_under_a_local_root_is_addressed_as_configured_and_bounded(monkeypatch: pytest.MonkeyPatch
                                                                              ) -> None:
    """cache.root: s3://... beside a local storage root takes the section's endpoint and keys (it
    went to the default chain, and with ambient credentials to AWS itself), and no request waits
    longer than the timeouts."""
    from halluscope.storage.fs import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, Location

    monkeypatch.setenv("HS_TEST_KEY", "AKIDEXAMPLE")
    monkeypatch.setenv("HS_TEST_SECRET", "not-a-real-secret")
    local = StorageSpec(root="file:///tmp/runs", endpoint_url="http://127.0.0.1:9", **KEYS)
    opts = storage_options(local, "s3://cache-bucket/calls")
    assert opts["client_kwargs"]["endpoint_url"] == "http://127.0.0.1:9" and opts["key"] == "AKIDEXAMPLE"
    assert (opts["config_kwargs"]["connect_timeout"], opts["config_kwargs"]["read_timeout"]) == (
        CONNECT_TIMEOUT_S, READ_TIMEOUT_S)
    fs = Location.from_url("s3://cache-bucket/calls", local).fs
    assert fs.client_kwargs["endpoint_url"] == "http://127.0.0.1:9" and fs.key == "AKIDEXAMPLE"
