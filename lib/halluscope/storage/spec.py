"""The run config's ``storage`` section, kept beside the storage it configures: storage needs
nothing from the config layer above it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator

from halluscope.storage.names import checked, root_problem


class StorageSpec(BaseModel):
    """Where runs are written. ``root`` is an fsspec URL; S3-compatible stores take an endpoint."""

    model_config = ConfigDict(extra="forbid")

    root: str = "file://./runs"
    endpoint_url: str | None = None
    region: str | None = None
    # Names of environment variables holding credentials; the values never enter a config or manifest.
    access_key_env: str | None = None
    secret_key_env: str | None = None

    @field_validator("root")
    @classmethod
    def _supported_root(cls, v: str) -> str:
        return checked(v, root_problem, ValueError)
