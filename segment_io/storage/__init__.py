"""One filesystem interface for local paths and ``s3://`` URIs; :func:`open_storage` picks the store.

``S3Storage`` is imported lazily so local-only users (and executors working on local dirs) never pay for
importing boto3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from segment_io.errors import UsageError
from segment_io.storage.base import FileInfo, Storage
from segment_io.storage.local import LocalStorage
from segment_io.storage.options import StorageOptions

if TYPE_CHECKING:
    from segment_io.storage.s3 import S3Storage

S3_SCHEME = "s3://"

__all__ = ["FileInfo", "LocalStorage", "S3Storage", "Storage", "StorageOptions", "open_storage", "scheme_of"]


def scheme_of(uri: str) -> str:
    """``"s3"``, ``"file"`` (plain paths and ``file://``), or whatever other scheme ``uri`` names."""
    head, sep, _ = uri.partition("://")
    if not sep:
        return "file"
    return head.lower()


def open_storage(uri: str, options: StorageOptions | None = None) -> Storage:
    """The storage that serves ``uri``: local for plain paths and ``file://``, S3 for ``s3://``.

    ``options`` only matter for S3; None means :meth:`StorageOptions.from_env` (then the AWS chain).
    Raises :class:`~segment_io.errors.UsageError` for any other scheme.
    """
    scheme = scheme_of(uri)
    if scheme == "file":
        return LocalStorage()
    if scheme == "s3":
        from segment_io.storage.s3 import S3Storage

        return S3Storage(options if options is not None else StorageOptions.from_env())
    if scheme == "remote-segment":  # a remote segment read as the Kafka segment it was (segment_io.remote_view)
        from segment_io.remote_view import RemoteSegmentStorage

        return RemoteSegmentStorage(options=options)
    if scheme == "s3a":
        raise UsageError(f"{uri}: write s3:// (segjobs does its own S3 I/O; there is no Hadoop s3a:// layer)")
    raise UsageError(f"{uri}: unsupported storage scheme {scheme!r}; use a local path, file:// or s3://")


def __getattr__(name: str) -> Any:
    if name == "S3Storage":
        from segment_io.storage.s3 import S3Storage

        return S3Storage
    raise AttributeError(f"module 'segment_io.storage' has no attribute {name!r}")
