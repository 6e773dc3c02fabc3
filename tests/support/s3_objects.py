"""Log dirs as S3 objects: a local dir put under a key prefix (with boto3 or through segjobs' own storage), and
the objects under a prefix read back."""

from __future__ import annotations

from pathlib import Path

from segment_io.storage.base import Storage

PREFIX = "kafka/logs"


def put_objects(endpoint, bucket: str, local_dir: Path) -> None:
    """Every file under ``local_dir`` as an object under :data:`PREFIX` (boto3, no segjobs code)."""
    client = endpoint.client()
    for p in sorted(local_dir.rglob("*")):
        if p.is_file():
            client.put_object(Bucket=bucket, Key=f"{PREFIX}/{p.relative_to(local_dir)}", Body=p.read_bytes())


def contents(endpoint, bucket: str, prefix: str = PREFIX + "/") -> dict[str, bytes]:
    """Relative key -> bytes of every object under ``prefix``."""
    client = endpoint.client()
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            out[o["Key"][len(prefix):]] = client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    return out


def replace_all_objects(endpoint, bucket: str, local_dir: Path) -> None:
    """Every object of ``bucket`` deleted, then :func:`put_objects` of ``local_dir`` (boto3, no segjobs code)."""
    client = endpoint.client()
    for key in list(contents(endpoint, bucket, "")):
        client.delete_object(Bucket=bucket, Key=key)
    put_objects(endpoint, bucket, local_dir)


def upload(storage: Storage, local: Path, log_dir: str) -> None:
    """Every file under ``local`` written below ``log_dir`` through segjobs' own ``storage``."""
    for f in sorted(local.rglob("*")):
        if f.is_file():
            storage.write_atomic(storage.join(log_dir, *f.relative_to(local).parts), f.read_bytes())
