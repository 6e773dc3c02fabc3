"""S3 storage over boto3: whole-object GETs, multipart uploads, conditional writes, copy + delete renames.

An :class:`S3Storage` holds only its :class:`~segment_io.storage.options.StorageOptions` and tuning numbers.
The boto3 client is created lazily, once per process (a forked or unpickled copy makes its own), and is
dropped when pickling, so the object can travel to Spark executors.

Every botocore error is translated here, at the boundary: a missing object becomes
:class:`~segment_io.errors.NotFoundError`, a lost conditional write
:class:`~segment_io.errors.PreconditionFailedError`; missing credentials, an endpoint that does not answer
and a missing bucket become :class:`~segment_io.errors.StorageAccessError` subclasses whose message says
which variable or option fixes them; anything else :class:`~segment_io.errors.StorageError`, each naming
the ``s3://`` URI. Etags are passed around exactly as S3 returns them (quoted).

:meth:`S3Storage.check_reachable` answers "can this bucket be used at all?" within seconds (a HEAD of
the bucket with short timeouts and one retry), so a job can fail before it starts rather than after it
worked.
"""

from __future__ import annotations

import builtins  # annotations in the class body say builtins.list: there, `list` is the listing method
import io
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterator, Literal, Mapping, NoReturn, TypeVar

from segment_io.errors import (
    BucketNotFoundError,
    CredentialsError,
    EndpointUnreachableError,
    NotFoundError,
    PreconditionFailedError,
    StorageError,
    UsageError,
)
from segment_io.storage import traffic
from segment_io.storage.base import KIND_DIRECTORY, FileInfo, PendingUpload, Storage
from segment_io.storage.options import ENV_VARS, StorageOptions

if TYPE_CHECKING:  # the client's types come from the boto3-stubs[s3] dev extra; boto3 itself has none
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef, ListObjectsV2OutputTypeDef

S3_SCHEME = "s3://"
MiB = 1 << 20
#: S3's limits: parts (except the last) of at least 5 MiB, single PUT/COPY of at most 5 GiB.
MIN_PART_SIZE = 5 * MiB
#: The pieces :meth:`S3Storage.download` streams an object in (memory per download: one piece)
DOWNLOAD_CHUNK = 8 * MiB
MAX_SINGLE_COPY = 5 << 30

T = TypeVar("T")

_NOT_FOUND_CODES = {"NoSuchKey", "404", "NotFound", "NoSuchBucket"}
# 409 ConditionalRequestConflict: S3 saw a concurrent conditional write to the same key; it lost.
_PRECONDITION_CODES = {"PreconditionFailed", "412", "ConditionalRequestConflict"}
# S3's answers to a key it does not know or a signature it cannot verify: the credentials are the problem.
_BAD_CREDENTIAL_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"}

#: Seconds to wait for a TCP connection to the endpoint. botocore's default (60 s, times every retry) turns
#: an endpoint that does not answer into minutes of silence; a reachable S3 endpoint connects in milliseconds.
CONNECT_TIMEOUT_S = 10
#: Read-only S3 requests in flight at once over many partitions (listings, header reads, recovery's checks; see
#: :func:`~segment_io.storage.base.map_ahead`), unless ``SEGJOBS_S3_CONCURRENCY`` says otherwise. Each request
#: is a round trip of milliseconds that costs the client almost no CPU: 16 at once hide the latency without
#: drawing throttling from S3 (3,500 writes / 5,500 reads per second per prefix).
DEFAULT_CONCURRENCY = 16
CONCURRENCY_ENV = "SEGJOBS_S3_CONCURRENCY"
#: The reachability check (:meth:`S3Storage.check_reachable`): short timeouts, one retry.
PROBE_CONNECT_TIMEOUT_S = 3
PROBE_READ_TIMEOUT_S = 10
PROBE_MAX_ATTEMPTS = 2


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b")``; the key may be empty (bucket root)."""
    if not uri.startswith(S3_SCHEME):
        raise UsageError(f"{uri}: not an s3:// URI")
    bucket, _, key = uri[len(S3_SCHEME):].partition("/")
    if not bucket:
        raise UsageError(f"{uri}: no bucket name")
    return bucket, key


def concurrency_from_env(environ: Mapping[str, str] | None = None) -> int:
    """``SEGJOBS_S3_CONCURRENCY`` (a whole number, at least 1), else :data:`DEFAULT_CONCURRENCY`."""
    raw = (os.environ if environ is None else environ).get(CONCURRENCY_ENV, "").strip()
    if not raw:
        return DEFAULT_CONCURRENCY
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"{CONCURRENCY_ENV}={raw!r}: expected a whole number of at least 1 (requests in flight at "
                         f"once; default {DEFAULT_CONCURRENCY})")
    return value


def _dir_prefix(key: str) -> str:
    """The listing prefix of directory ``key``: a directory, never a string prefix (``t-1`` ≠ ``t-10``)."""
    key = key.strip("/")
    return f"{key}/" if key else ""


class S3Storage(Storage):
    """Objects under ``s3://`` URIs.

    ``part_size`` is the multipart part size of :meth:`open_write` (outputs smaller than one part go up
    in a single PUT); ``copy_part_size`` the part size of server-side copies above ``single_copy_limit``;
    ``max_attempts`` bounds botocore's retries of throttled or failed requests; ``io_concurrency`` (default
    ``SEGJOBS_S3_CONCURRENCY``, else :data:`DEFAULT_CONCURRENCY`) how many read-only requests over many
    partitions may be in flight at once.
    """

    atomic_rename = False

    def __init__(
        self,
        options: StorageOptions | None = None,
        *,
        part_size: int = 16 * MiB,
        upload_concurrency: int = 4,
        single_copy_limit: int = MAX_SINGLE_COPY,
        copy_part_size: int = 512 * MiB,
        max_attempts: int = 8,
        io_concurrency: int | None = None,
    ) -> None:
        if part_size < MIN_PART_SIZE or copy_part_size < MIN_PART_SIZE:
            raise UsageError(f"S3 part sizes must be at least {MIN_PART_SIZE} bytes")
        self.options = options if options is not None else StorageOptions.from_env()
        self.part_size = part_size
        self.upload_concurrency = max(1, upload_concurrency)
        self.single_copy_limit = single_copy_limit
        self.copy_part_size = copy_part_size
        self.max_attempts = max_attempts
        self.io_concurrency = io_concurrency if io_concurrency is not None else concurrency_from_env()
        self._client_obj: S3Client | None = None
        self._client_pid = -1
        self._client_lock = threading.Lock()
        self._probe_obj: S3Client | None = None

    # ------------------------------------------------------------------ pickling and the client

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client_obj"] = None
        state["_client_pid"] = -1
        state["_probe_obj"] = None
        del state["_client_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client_lock = threading.Lock()

    @property
    def _client(self) -> S3Client:
        # A client inherited through fork shares connections with the parent: make a fresh one per pid.
        if self._client_obj is None or self._client_pid != os.getpid():
            with self._client_lock:
                if self._client_obj is None or self._client_pid != os.getpid():
                    self._client_obj = self._make_client()
                    self._client_pid = os.getpid()
        return self._client_obj

    def _make_client(self, *, connect_timeout: float = CONNECT_TIMEOUT_S, read_timeout: float = 60,
                     max_attempts: int | None = None,
                     retry_mode: Literal["standard", "adaptive"] = "adaptive") -> S3Client:
        import boto3
        from botocore.config import Config

        o = self.options
        session = boto3.session.Session(
            aws_access_key_id=o.access_key_id,
            aws_secret_access_key=o.secret_access_key,
            aws_session_token=o.session_token,
            region_name=o.region,
            profile_name=o.profile,
        )
        config = Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"max_attempts": self.max_attempts if max_attempts is None else max_attempts, "mode": retry_mode},
            max_pool_connections=max(10, 2 * self.upload_concurrency, self.io_concurrency + 2),
            # Custom endpoints (MinIO, moto, on-prem) rarely resolve bucket subdomains.
            s3={"addressing_style": "path"} if o.endpoint_url else {},
        )
        try:
            return session.client("s3", endpoint_url=o.endpoint_url, config=config)
        except Exception as e:  # botocore raises plain exceptions for bad profiles and regions
            raise StorageError(f"cannot create an S3 client: {e}") from None

    def check_reachable(self, uri: str) -> None:
        """Fail within seconds when the bucket of ``uri`` cannot be used: no credentials, an endpoint that
        does not answer, a bucket that does not exist or that these credentials may not use. One HEAD of
        the bucket, with short timeouts and one retry (a job's own requests retry far longer)."""
        bucket, _ = parse_s3_uri(uri)
        if self._probe_obj is None:
            self._probe_obj = self._make_client(
                connect_timeout=PROBE_CONNECT_TIMEOUT_S, read_timeout=PROBE_READ_TIMEOUT_S,
                max_attempts=PROBE_MAX_ATTEMPTS, retry_mode="standard")
        bucket_uri = f"{S3_SCHEME}{bucket}"
        try:
            traffic.count("head")
            self._probe_obj.head_bucket(Bucket=bucket)
        except Exception as e:
            from botocore.exceptions import ClientError

            if isinstance(e, ClientError):
                # HEAD answers carry no error body: only the status says what went wrong.
                status = str(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
                code = str(e.response.get("Error", {}).get("Code", ""))
                if status == "404" or code in ("404", "NoSuchBucket", "NotFound"):
                    raise self._no_bucket(bucket, bucket_uri) from None
                if status == "403" or code in ("403", "AccessDenied", "Forbidden"):
                    raise CredentialsError(
                        f"access to bucket {bucket!r} denied (403): the credentials in use may not read it, "
                        f"or belong to another account; {_credentials_hint()}", uri=bucket_uri) from None
            self._raise(e, bucket_uri)

    def _endpoint_text(self) -> str:
        return self.options.endpoint_url or "AWS S3 (the default endpoint)"

    def _no_bucket(self, bucket: str, uri: str) -> BucketNotFoundError:
        return BucketNotFoundError(f"bucket {bucket!r} does not exist at {self._endpoint_text()}: check the "
                                   f"name, or create the bucket first", uri=uri)

    # ------------------------------------------------------------------ naming and listing

    def join(self, base: str, *parts: str) -> str:
        pieces = [base.rstrip("/")] + [p.strip("/") for p in parts if p.strip("/")]
        return "/".join(pieces)

    def list(self, prefix: str, *, recursive: bool = False, irregular: bool = False) -> list[FileInfo]:
        bucket, key = parse_s3_uri(prefix)
        out: list[FileInfo] = []
        for page in self._pages(prefix, bucket, _dir_prefix(key), recursive):
            for obj in page.get("Contents", ()):
                uri = f"{S3_SCHEME}{bucket}/{obj['Key']}"
                mtime_ms = int(obj["LastModified"].timestamp() * 1000)
                if obj["Key"].endswith("/"):
                    # a "folder" marker some tools create: no data, reported only when asked for
                    if irregular and obj["Key"] != _dir_prefix(key):
                        out.append(FileInfo(uri=uri.rstrip("/"), size=obj["Size"], mtime_ms=mtime_ms,
                                            etag=obj.get("ETag"), kind=KIND_DIRECTORY))
                    continue
                out.append(FileInfo(uri=uri, size=obj["Size"], mtime_ms=mtime_ms, etag=obj.get("ETag")))
            if irregular and not recursive:
                out.extend(FileInfo(uri=f"{S3_SCHEME}{bucket}/{cp['Prefix'].rstrip('/')}", size=0, mtime_ms=0,
                                    kind=KIND_DIRECTORY) for cp in page.get("CommonPrefixes", ()))
        return out

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        bucket, key = parse_s3_uri(prefix)
        return [f"{S3_SCHEME}{bucket}/{cp['Prefix'].rstrip('/')}"
                for page in self._pages(prefix, bucket, _dir_prefix(key), False)
                for cp in page.get("CommonPrefixes", ())]

    def _pages(self, uri: str, bucket: str, key_prefix: str,
               recursive: bool) -> Iterator[ListObjectsV2OutputTypeDef]:
        kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": key_prefix}
        if not recursive:
            kwargs["Delimiter"] = "/"
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(**kwargs):
                traffic.count("list")
                yield page
        except Exception as e:
            self._raise(e, uri)

    def stat(self, uri: str) -> FileInfo:
        bucket, key = parse_s3_uri(uri)
        head = self._call(uri, lambda: self._client.head_object(Bucket=bucket, Key=key), "head")
        return FileInfo(uri=uri, size=head["ContentLength"],
                        mtime_ms=int(head["LastModified"].timestamp() * 1000), etag=head.get("ETag"))

    # ------------------------------------------------------------------ reading

    def read(self, uri: str) -> bytes:
        bucket, key = parse_s3_uri(uri)
        data = self._call(uri, lambda: self._client.get_object(Bucket=bucket, Key=key)["Body"].read(), "get")
        traffic.count("get", len(data), requests=0)
        return data

    def download(self, uri: str, path: str, *, etag: str | None = None) -> int:
        bucket, key = parse_s3_uri(uri)

        def get() -> int:
            answer = (self._client.get_object(Bucket=bucket, Key=key, IfMatch=etag) if etag is not None
                      else self._client.get_object(Bucket=bucket, Key=key))
            body = answer["Body"]
            done = 0
            with open(path, "xb") as f:
                for chunk in body.iter_chunks(DOWNLOAD_CHUNK):
                    f.write(chunk)
                    done += len(chunk)
            return done

        size = self._call(uri, get, "get")
        traffic.count("get", size, requests=0)
        return size

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise StorageError(f"invalid range start={start} length={length}", uri=uri)
        bucket, key = parse_s3_uri(uri)
        if length == 0:
            self.stat(uri)  # still report a missing object
            return b""

        def get() -> bytes:
            resp = self._client.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{start + length - 1}")
            return resp["Body"].read()

        try:
            data = self._call(uri, get, "get")
            traffic.count("get", len(data), requests=0)
            return data
        except StorageError as e:
            # A range starting at or past the end is "416 InvalidRange" on S3; locally it reads nothing.
            if "InvalidRange" in e.detail:
                return b""
            raise

    # ------------------------------------------------------------------ writing

    def write_atomic(self, uri: str, data: bytes, *, durable: bool = True) -> None:
        bucket, key = parse_s3_uri(uri)
        self._call(uri, lambda: self._client.put_object(Bucket=bucket, Key=key, Body=data), "put", len(data))

    @contextmanager
    def open_write(self, uri: str, *, durable: bool = True, uncached: bool = False) -> Iterator[BinaryIO]:
        writer = _MultipartWriter(self, uri)
        try:
            yield writer  # type: ignore[misc]
            writer.finish()
        except BaseException:
            writer.abort()
            raise

    def put_if_absent(self, uri: str, data: bytes, *, durable: bool = True) -> str:
        bucket, key = parse_s3_uri(uri)
        resp = self._call(uri, lambda: self._client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*"),
                          "put", len(data))
        return resp["ETag"]

    def put_if_match(self, uri: str, data: bytes, etag: str | None) -> str:
        """Overwrite only while the object's etag is ``etag``; ``etag=None`` means "only if absent"."""
        if etag is None:
            return self.put_if_absent(uri, data)
        bucket, key = parse_s3_uri(uri)
        try:
            resp = self._call(uri, lambda: self._client.put_object(Bucket=bucket, Key=key, Body=data, IfMatch=etag),
                              "put", len(data))
        except NotFoundError:
            # The object is gone (a racer deleted it): the condition failed just the same.
            raise PreconditionFailedError(f"does not exist (expected etag {etag})", uri=uri) from None
        return resp["ETag"]

    def delete_if_match(self, uri: str, etag: str) -> None:
        bucket, key = parse_s3_uri(uri)
        try:
            self._call(uri, lambda: self._client.delete_object(Bucket=bucket, Key=key, IfMatch=etag), "delete")
        except NotFoundError:
            raise PreconditionFailedError(f"does not exist (expected etag {etag})", uri=uri) from None

    # ------------------------------------------------------------------ moving and removing

    def rename(self, src: str, dst: str) -> None:
        """Copy then delete: not atomic; a crash in between leaves both (callers' protocols allow for it)."""
        if src == dst:
            self.stat(src)  # S3 refuses a plain self-copy, and copy + delete would lose the object
            return
        self.copy(src, dst)
        self.delete(src)

    def copy(self, src: str, dst: str) -> None:
        sb, sk = parse_s3_uri(src)
        db, dk = parse_s3_uri(dst)
        size = self.stat(src).size
        if size <= self.single_copy_limit:
            self._call(src, lambda: self._client.copy_object(Bucket=db, Key=dk, CopySource={"Bucket": sb, "Key": sk}),
                       "copy")
            return
        self._multipart_copy(src, dst, size)

    def _multipart_copy(self, src: str, dst: str, size: int) -> None:
        sb, sk = parse_s3_uri(src)
        db, dk = parse_s3_uri(dst)
        upload_id = self._call(dst, lambda: self._client.create_multipart_upload(Bucket=db, Key=dk),
                               "other")["UploadId"]
        try:
            parts: builtins.list[CompletedPartTypeDef] = []
            for number, start in enumerate(range(0, size, self.copy_part_size), start=1):
                end = min(start + self.copy_part_size, size) - 1
                resp = self._call(src, lambda: self._client.upload_part_copy(
                    Bucket=db, Key=dk, UploadId=upload_id, PartNumber=number,
                    CopySource={"Bucket": sb, "Key": sk}, CopySourceRange=f"bytes={start}-{end}"), "copy")
                parts.append({"PartNumber": number, "ETag": resp["CopyPartResult"]["ETag"]})
            self._call(dst, lambda: self._client.complete_multipart_upload(
                Bucket=db, Key=dk, UploadId=upload_id, MultipartUpload={"Parts": parts}), "other")
        except BaseException:
            self._abort_upload(dst, upload_id)
            raise

    def delete(self, uri: str, *, missing_ok: bool = True) -> None:
        bucket, key = parse_s3_uri(uri)
        if not missing_ok:
            self.stat(uri)  # S3 deletes of missing keys succeed silently
        self._call(uri, lambda: self._client.delete_object(Bucket=bucket, Key=key), "delete")

    def makedirs(self, uri: str) -> None:
        """Nothing to do: S3 has no directories."""

    # ------------------------------------------------------------------ multipart helpers and errors

    def list_pending_uploads(self, prefix: str) -> builtins.list[PendingUpload]:
        from botocore.exceptions import ClientError

        bucket, key = parse_s3_uri(prefix)
        out = []
        paginator = self._client.get_paginator("list_multipart_uploads")
        try:
            for page in paginator.paginate(Bucket=bucket, Prefix=_dir_prefix(key)):
                traffic.count("other")
                for u in page.get("Uploads", ()):
                    uri = f"{S3_SCHEME}{bucket}/{u['Key']}"
                    parts = self._client.get_paginator("list_parts").paginate(
                        Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])
                    try:
                        size = 0
                        for page_ in parts:
                            traffic.count("other")
                            size += sum(p["Size"] for p in page_.get("Parts", ()))
                    except ClientError as e:
                        if e.response.get("Error", {}).get("Code") == "NoSuchUpload":
                            continue  # completed or aborted since it was listed: no longer pending
                        raise
                    out.append(PendingUpload(uri=uri, upload_id=u["UploadId"], size=size,
                                             initiated_ms=int(u["Initiated"].timestamp() * 1000)))
        except Exception as e:
            self._raise(e, prefix)
        return sorted(out, key=lambda u: (u.uri, u.initiated_ms, u.upload_id))

    def abort_pending_upload(self, upload: PendingUpload) -> None:
        from botocore.exceptions import ClientError

        bucket, key = parse_s3_uri(upload.uri)
        try:
            traffic.count("other")
            self._client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload.upload_id)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") != "NoSuchUpload":  # already gone: what we wanted
                self._raise(e, upload.uri)
        except Exception as e:
            self._raise(e, upload.uri)

    def _abort_upload(self, uri: str, upload_id: str) -> None:
        bucket, key = parse_s3_uri(uri)
        try:
            traffic.count("other")
            self._client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        except Exception:
            pass  # best effort: a bucket lifecycle rule for incomplete uploads is the backstop

    def _call(self, uri: str, fn: Callable[[], T], kind: traffic.Kind | None = None, n_bytes: int = 0) -> T:
        """``fn``'s answer; a failure as a segjobs storage error naming ``uri``. ``kind``: the request ``fn``
        sends, counted (with ``n_bytes`` of body sent) in the running :mod:`~segment_io.storage.traffic` scope."""
        if kind is not None:
            traffic.count(kind, n_bytes)
        try:
            return fn()
        except Exception as e:
            self._raise(e, uri)

    def _raise(self, e: Exception, uri: str) -> NoReturn:
        """Translate a botocore error into a segjobs storage error naming ``uri``."""
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
        )

        if isinstance(e, ClientError):
            err = e.response.get("Error", {})
            code = str(err.get("Code", ""))
            status = str(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            message = err.get("Message") or code or status
            if code == "NoSuchBucket":
                raise self._no_bucket(str(err.get("BucketName") or parse_s3_uri(uri)[0]), uri) from None
            if code in _BAD_CREDENTIAL_CODES:
                raise CredentialsError(f"S3 rejected the credentials ({code}: {message}); {_credentials_hint()}",
                                       uri=uri) from None
            if code in _NOT_FOUND_CODES or (not code and status == "404"):
                raise NotFoundError(f"not found ({code or status}: {message})", uri=uri) from None
            if code in _PRECONDITION_CODES or status == "412":
                raise PreconditionFailedError(f"precondition failed ({code or status}: {message})", uri=uri) from None
            raise StorageError(f"S3 {code or status}: {message}", uri=uri) from None
        if isinstance(e, (NoCredentialsError, PartialCredentialsError)):
            raise CredentialsError(f"no usable AWS credentials ({e}); {_credentials_hint()}", uri=uri) from None
        if isinstance(e, (EndpointConnectionError, ConnectTimeoutError, ConnectionClosedError)):
            endpoint = self.options.endpoint_url or getattr(e, "kwargs", {}).get("endpoint_url") or "AWS S3"
            fix = ("check --s3-endpoint, SEGJOBS_S3_ENDPOINT or AWS_ENDPOINT_URL" if self.options.endpoint_url
                   else "check the network route to AWS, or point --s3-endpoint (or SEGJOBS_S3_ENDPOINT) at "
                        "your S3 service")
            raise EndpointUnreachableError(f"the S3 endpoint {endpoint} did not answer ({type(e).__name__}): "
                                           f"{fix}", uri=uri) from None
        if isinstance(e, BotoCoreError):
            raise StorageError(f"S3 request failed: {e}", uri=uri) from None
        raise e  # our own errors, and programming errors, pass through unchanged


def _credentials_hint() -> str:
    """Where credentials come from, spelled with the variables :class:`StorageOptions` reads."""
    key, secret, profile = (ENV_VARS[f] for f in ("access_key_id", "secret_access_key", "profile"))
    return (f"set {key[1]} and {secret[1]} (or {key[0]} and {secret[0]}), or {profile[1]} for a profile of "
            f"the AWS config files, or run where an instance or container role provides them")


class _MultipartWriter(io.RawIOBase):
    """A write-only stream: one PUT if the output fits in a part, else a multipart upload whose parts go
    up in the background (at most ``upload_concurrency`` in flight, bounding memory)."""

    def __init__(self, storage: S3Storage, uri: str) -> None:
        super().__init__()
        self._storage = storage
        self._uri = uri
        self._bucket, self._key = parse_s3_uri(uri)
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[tuple[int, Future[str]]] = []
        self._next_part = 1
        self._written = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._written

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._buffer += view
        self._written += len(view)
        while len(self._buffer) >= self._storage.part_size:
            part = bytes(self._buffer[: self._storage.part_size])
            del self._buffer[: self._storage.part_size]
            self._submit(part)
        return len(view)

    def _submit(self, part: bytes) -> None:
        s = self._storage
        if self._upload_id is None:
            self._upload_id = s._call(self._uri, lambda: s._client.create_multipart_upload(
                Bucket=self._bucket, Key=self._key), "other")["UploadId"]
            self._pool = ThreadPoolExecutor(max_workers=s.upload_concurrency, thread_name_prefix="s3-part")
        # Wait for the oldest part when the window is full: memory stays at about concurrency x part size.
        in_flight = [f for _, f in self._pending if not f.done()]
        if len(in_flight) >= s.upload_concurrency:
            in_flight[0].result()
        number = self._next_part
        self._next_part += 1
        upload_id = self._upload_id
        assert self._pool is not None
        future = self._pool.submit(traffic.in_context(lambda: s._call(self._uri, lambda: s._client.upload_part(
            Bucket=self._bucket, Key=self._key, UploadId=upload_id, PartNumber=number, Body=part), "put",
            len(part))["ETag"]))
        self._pending.append((number, future))

    def finish(self) -> None:
        s = self._storage
        if self._upload_id is None:
            data = bytes(self._buffer)
            s._call(self._uri, lambda: s._client.put_object(Bucket=self._bucket, Key=self._key, Body=data), "put",
                    len(data))
        else:
            if self._buffer:
                self._submit(bytes(self._buffer))
            self._buffer = bytearray()
            parts: list[CompletedPartTypeDef] = [{"PartNumber": n, "ETag": f.result()} for n, f in self._pending]
            upload_id = self._upload_id
            s._call(self._uri, lambda: s._client.complete_multipart_upload(
                Bucket=self._bucket, Key=self._key, UploadId=upload_id, MultipartUpload={"Parts": parts}), "other")
            self._shutdown()
        super().close()

    def abort(self) -> None:
        if self._upload_id is not None:
            for _, f in self._pending:
                f.cancel()
            self._shutdown()
            self._storage._abort_upload(self._uri, self._upload_id)
            self._upload_id = None
        self._buffer = bytearray()
        super().close()

    def close(self) -> None:
        # Closing the stream inside the ``with`` block must not publish: open_write's exit decides.
        pass

    def _shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
