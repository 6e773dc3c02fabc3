"""How to reach an object store: endpoint, region and (optionally) explicit credentials.

Anything left ``None`` falls through to the standard AWS chain (environment, shared config and credential
files, instance or container roles), exactly as boto3 resolves it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

#: Environment variables read by :meth:`StorageOptions.from_env`, first match wins per field.
#: SEGJOBS_* names come first so a job can point at a different endpoint than other AWS tools on the host.
ENV_VARS: dict[str, tuple[str, ...]] = {
    "endpoint_url": ("SEGJOBS_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "region": ("SEGJOBS_S3_REGION", "AWS_REGION", "AWS_DEFAULT_REGION"),
    "access_key_id": ("SEGJOBS_S3_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID"),
    "secret_access_key": ("SEGJOBS_S3_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY"),
    "session_token": ("SEGJOBS_S3_SESSION_TOKEN", "AWS_SESSION_TOKEN"),
    "profile": ("SEGJOBS_S3_PROFILE", "AWS_PROFILE"),
}


@dataclass(frozen=True)
class StorageOptions:
    """Connection settings for ``s3://`` URIs (ignored by local storage).

    Holds plain strings only, so it pickles into Spark task closures. ``repr`` hides the secrets.
    """

    endpoint_url: str | None = None  #: e.g. ``http://127.0.0.1:9000`` for MinIO or moto; None for AWS
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    profile: str | None = None  #: a named profile from the shared AWS config files

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "StorageOptions":
        """Options from environment variables (see :data:`ENV_VARS`); unset fields stay None."""
        env = os.environ if environ is None else environ
        values: dict[str, str | None] = {}
        for field_name, names in ENV_VARS.items():
            values[field_name] = next((env[n] for n in names if env.get(n)), None)
        return cls(**values)

    def __repr__(self) -> str:
        # Secrets end up in logs and Spark UIs through reprs; show only whether they are set.
        hidden = {"secret_access_key", "session_token"}
        shown = ", ".join(
            f"{name}={'***' if name in hidden and value is not None else repr(value)}"
            for name, value in self.__dict__.items()
        )
        return f"StorageOptions({shown})"
