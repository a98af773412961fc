"""One way to reach storage: an fsspec filesystem built from a URL and a StorageSpec."""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import fsspec
from fsspec.implementations.local import LocalFileSystem

from halluscope.errors import ConfigError

if TYPE_CHECKING:  # storage sits below config: it reads a spec's fields, never builds one
    from halluscope.config import StorageSpec

logger = logging.getLogger(__name__)

# Set in a pod by EKS for IRSA (a projected service-account token botocore exchanges for role
# credentials) and for EKS Pod Identity (a local credentials endpoint). botocore's default chain
# reads them; an instance profile (IMDS) announces itself by no variable.
CREDENTIAL_CHAIN_ENV = ("AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
_CREDENTIAL_FIELDS = (("access_key_env", "key"), ("secret_key_env", "secret"))
_chain_logged: set[tuple[str, ...]] = set()


def _static_keys(spec: StorageSpec) -> dict:
    """key/secret from the variables the spec names, or {} for botocore's default chain.

    Both named and set: those keys. None named: the chain. Named but unset (or empty, as a Secret
    copied from secrets.example.env unfilled gives): the chain when the pod has web-identity or
    container credentials (a manifest that mounts the key Secret optionally, run under IRSA or
    Pod Identity), else a ConfigError naming the field."""
    named = [(field, opt, getattr(spec, field)) for field, opt in _CREDENTIAL_FIELDS if getattr(spec, field)]
    missing = [(field, env) for field, _, env in named if not os.environ.get(env)]
    if not missing:
        return {opt: os.environ[env] for _, opt, env in named}
    chain = [v for v in CREDENTIAL_CHAIN_ENV if os.environ.get(v)]
    if not chain:
        field, env = missing[0]
        raise ConfigError(f"storage.{field}: environment variable {env} is not set, and no web-identity or "
                          f"container credentials are (none of {', '.join(CREDENTIAL_CHAIN_ENV)})")
    unset = tuple(env for _, env in missing)
    if unset not in _chain_logged:  # once per process: every Location of a run builds options
        _chain_logged.add(unset)
        logger.warning("storage: %s not set; S3 credentials come from the AWS default chain (%s)",
                       " and ".join(unset), ", ".join(chain))
    # Never one static half with the chain's other half: all or nothing.
    return {}


def storage_options(spec: StorageSpec) -> dict:
    """fsspec options for a StorageSpec; credentials come from the named environment variables,
    else from botocore's default chain (see `_static_keys`)."""
    opts: dict = {}
    if spec.root.startswith("s3://"):
        client_kwargs: dict = {}
        if spec.endpoint_url:
            client_kwargs["endpoint_url"] = spec.endpoint_url
        if spec.region:
            client_kwargs["region_name"] = spec.region
        if client_kwargs:
            opts["client_kwargs"] = client_kwargs
        opts.update(_static_keys(spec))
        # transient S3 errors (throttling, 5xx, dropped connections) are retried by botocore
        opts.setdefault("config_kwargs", {"retries": {"max_attempts": 8, "mode": "adaptive"}})
    return opts


@dataclass
class Location:
    """A filesystem and a path inside it; picklable, so Ray workers can write directly."""

    fs: fsspec.AbstractFileSystem
    path: str

    @classmethod
    def from_url(cls, url: str, spec: StorageSpec | None = None) -> "Location":
        opts = storage_options(spec) if spec and url.startswith("s3://") else {}
        if url.startswith("file://"):
            url = os.path.abspath(url[len("file://"):])
        fs, path = fsspec.core.url_to_fs(url, **opts)
        return cls(fs, path.rstrip("/"))

    def child(self, *parts: str) -> "Location":
        return Location(self.fs, "/".join([self.path, *parts]))

    @property
    def url(self) -> str:
        proto = self.fs.protocol[0] if isinstance(self.fs.protocol, (tuple, list)) else self.fs.protocol
        return self.path if proto in ("file", "local") else f"{proto}://{self.path}"

    def exists(self) -> bool:
        return self.fs.exists(self.path)

    def read_bytes(self) -> bytes:
        return self.fs.cat_file(self.path)

    def write_bytes_atomic(self, data: bytes) -> None:
        """Readers see the old object or the whole new one, never a half-written file.

        Object stores commit an object only when its upload completes; a local (or other POSIX)
        filesystem gets a temporary name in the same folder and a rename."""
        if isinstance(self.fs, LocalFileSystem):
            parent = os.path.dirname(self.path)
            os.makedirs(parent, exist_ok=True)
            tmp = os.path.join(parent, f".tmp-{uuid.uuid4().hex}-{os.path.basename(self.path)}")
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        else:
            self.fs.pipe_file(self.path, data)

    def list_names(self) -> list[str]:
        """Names directly under this folder, hidden temporaries excluded; [] if it does not exist."""
        try:
            entries = self.fs.ls(self.path, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        names = [e.rstrip("/").rsplit("/", 1)[-1] for e in entries]
        return sorted(n for n in names if not n.startswith("."))

    def remove(self) -> None:
        if self.fs.exists(self.path):
            self.fs.rm(self.path, recursive=True)
