"""The one exception hierarchy of segjobs.

Every error that segjobs raises on purpose derives from :class:`SegjobsError`. Errors about bytes on disk
carry the file, the byte position and (when known) the Kafka offset, so a user can open the file with
``segjobs dump`` and look at exactly the place that failed.
"""

from __future__ import annotations


class SegjobsError(Exception):
    """Root of every error segjobs raises deliberately.

    ``exit_code`` is what the command line exits with when the error ends a command: 1 (the work ran, something
    failed) unless a subclass says 2 (nothing was done).
    """

    exit_code: int = 1


def located_message(detail: str, *where: str | None) -> str:
    """``"path, byte 12, offset 7: detail"``: the non-empty parts of ``where`` before the detail."""
    prefix = ", ".join(p for p in where if p)
    return f"{prefix}: {detail}" if prefix else detail


class LocatedError(SegjobsError):
    """An error at a place a user can go and look at: ``detail`` says what is wrong, the other fields where.

    ``path`` names the file or object, ``position`` a byte position in it, ``line`` a line of a text file,
    ``offset`` the Kafka offset concerned; each is None when unknown. The message is
    ``"<path>, byte <position>, line <line>, offset <offset>: <detail>"`` with the unknown parts left out.
    """

    def __init__(self, detail: str, *, path: str | None = None, position: int | None = None,
                 line: int | None = None, offset: int | None = None) -> None:
        self.detail = detail
        self.path = path
        self.position = position
        self.line = line
        self.offset = offset
        super().__init__(located_message(detail, None if path is None else str(path),
                                         None if position is None else f"byte {position}",
                                         None if line is None else f"line {line}",
                                         None if offset is None else f"offset {offset}"))


# --------------------------------------------------------------------------------------------------
# Segment data
# --------------------------------------------------------------------------------------------------


class CorruptRecordError(LocatedError):
    """Bytes of a log segment do not form valid Kafka records.

    ``path`` names the file, ``position`` the byte position of the batch (or message) that failed,
    ``offset`` the batch base offset when it could be read, ``detail`` what exactly is wrong.
    """

    def __init__(self, detail: str, *, path: str | None = None, position: int | None = None,
                 offset: int | None = None, segment: int | None = None) -> None:
        super().__init__(detail, path=path, position=position, offset=offset)
        #: the base offset of the segment whose bytes failed, where the raiser was given bytes by segment rather
        #: than files (the encoder's sources): a caller that knows the files names one with :meth:`located`
        self.segment = segment

    def located(self, *, path: str | None = None, offset_shift: int = 0) -> "CorruptRecordError":
        """Return a copy that names ``path`` (decoders that work on bytes do not know the file)."""
        err = type(self).__new__(type(self))
        CorruptRecordError.__init__(
            err,
            self.detail,
            path=path if path is not None else self.path,
            position=None if self.position is None else self.position + offset_shift,
            offset=self.offset,
            segment=self.segment,
        )
        return err


class TruncatedBatchError(CorruptRecordError):
    """The last batch of a segment is cut short: what a crash or a copy in progress leaves behind.

    Distinct from corruption in the middle of a file: everything before ``position`` is intact.
    """


class InvalidMagicError(CorruptRecordError):
    """A batch has a magic byte other than 0, 1 or 2."""


class CrcMismatchError(CorruptRecordError):
    """A batch's stored CRC does not match its bytes."""


class InvalidLengthError(CorruptRecordError):
    """A length field points beyond the batch or the file, or is negative or absurd."""


class InvalidVarintError(CorruptRecordError):
    """A varint is longer than allowed or runs past the end of its batch."""


class RecordCountMismatchError(CorruptRecordError):
    """A batch's declared record count does not match the records its bytes hold."""


class DecompressionError(CorruptRecordError):
    """A compressed batch payload could not be decompressed."""


class OversizedBatchError(CorruptRecordError):
    """A compressed batch inflates (or its frames declare it inflates) past the per-batch bound, a decompression
    bomb or corrupt data: see :func:`segment_io.compression.max_batch_bytes`. The detail names the bound and how
    to raise it. Nothing beyond the bound is ever allocated."""


class UnsupportedCodecError(CorruptRecordError):
    """A batch names a compression codec segjobs does not know (attribute bits 0-2 above 4)."""


class OffsetOrderError(CorruptRecordError):
    """A batch's offsets do not follow the previous batch's in the segment: they go backwards or overlap it, with
    valid CRCs (a segment assembled wrongly, by a bad copy or a tool, not a broker: Kafka refuses such an append
    with OffsetsOutOfOrderException); or a record's offset inside its batch does not rise above the record before
    it, or lies outside the batch's range. ``position`` and ``offset`` name the batch, the detail the record."""


class InvalidRecordsError(LocatedError):
    """Rows handed to the encoder cannot be written as Kafka batches: offsets out of order or outside their
    batch, a batch field that differs between rows of one batch, a value the format cannot hold.
    ``offset`` names the first offending record (or batch base offset), ``path`` the segment being written
    when known."""

    def __init__(self, detail: str, *, offset: int | None = None, path: str | None = None) -> None:
        super().__init__(detail, path=path, offset=offset)


# --------------------------------------------------------------------------------------------------
# Index and checkpoint files
# --------------------------------------------------------------------------------------------------


class CorruptIndexError(LocatedError):
    """An ``.index``, ``.timeindex`` or ``.txnindex`` file fails its sanity check."""

    def __init__(self, detail: str, *, path: str | None = None, position: int | None = None,
                 offset: int | None = None) -> None:
        super().__init__(detail, path=path, position=position, offset=offset)


class CorruptCheckpointError(LocatedError):
    """A checkpoint file (offset or leader-epoch) is malformed. Names the file and the line."""

    def __init__(self, detail: str, *, path: str | None = None, line: int | None = None) -> None:
        super().__init__(detail, path=path, line=line)


# --------------------------------------------------------------------------------------------------
# Storage
# --------------------------------------------------------------------------------------------------


class StorageError(LocatedError):
    """An I/O operation on a local path or an object store failed. ``uri`` names the object."""

    def __init__(self, detail: str, *, uri: str | None = None) -> None:
        super().__init__(detail, path=uri)

    @property
    def uri(self) -> str | None:
        """The object or file concerned (the located ``path``)."""
        return self.path


class StorageEnvironmentError(StorageError):
    """The machine refused an I/O operation for a reason of its own, not of the data or of segjobs: the
    filesystem is full (``ENOSPC``) or over a quota (``EDQUOT``), read-only (``EROFS``), or the file or directory
    may not be written (``EACCES``, ``EPERM``: permissions, an immutable file). ``errno_name`` says which and
    ``fix`` what to do; ``needed_bytes`` is the space the write needed where known, ``free_bytes`` what the
    filesystem had left (None where unknown). The message names the path, the space and the fix."""

    def __init__(self, reason: str, *, uri: str | None = None, errno_name: str = "", fix: str = "",
                 needed_bytes: int | None = None, free_bytes: int | None = None) -> None:
        self.reason = reason
        self.errno_name = errno_name
        self.fix = fix
        self.needed_bytes = needed_bytes
        self.free_bytes = free_bytes
        space = [f"{needed_bytes} bytes needed" if needed_bytes is not None else "",
                 f"{free_bytes} bytes free" if free_bytes is not None else ""]
        shown = ", ".join(p for p in space if p)
        super().__init__(f"{reason} ({errno_name})" + (f" ({shown})" if shown else "")
                         + f": a problem of the machine, not of the data or of segjobs; {fix}", uri=uri)

    @property
    def out_of_space(self) -> bool:
        """True for a full filesystem or a used-up quota (where the space needed says something)."""
        return self.errno_name in ("ENOSPC", "EDQUOT")

    def needing(self, needed_bytes: int) -> "StorageEnvironmentError":
        """The same error, saying how much space the failed write needed."""
        return StorageEnvironmentError(self.reason, uri=self.uri, errno_name=self.errno_name, fix=self.fix,
                                       needed_bytes=needed_bytes, free_bytes=self.free_bytes)


class NotWritableError(SegjobsError):
    """A directory a run must write (the log dir, or its work dir beside it) cannot take a file: found before any
    work by creating one there. ``uri`` names the directory, ``cause`` is the error the machine gave (a
    :class:`StorageEnvironmentError` for a read-only filesystem, permissions or an immutable directory). Exit
    code 2: nothing was done."""

    exit_code = 2

    def __init__(self, message: str, *, uri: str, cause: StorageError) -> None:
        self.uri = uri
        self.cause = cause
        super().__init__(message)


class CrossDeviceError(StorageError):
    """A rename between two filesystems (or two mounts of one, such as a bind mount): ``EXDEV``. The caller may
    copy instead."""


class NotFoundError(StorageError):
    """The file or object does not exist."""


class StorageAccessError(StorageError):
    """The store cannot be used at all: no credentials, an endpoint that does not answer, a missing bucket.
    Raised at the storage boundary; the message says what to set or fix."""


class CredentialsError(StorageAccessError):
    """No credentials were found for S3, or S3 rejected them."""


class EndpointUnreachableError(StorageAccessError):
    """The S3 endpoint did not answer (refused, timed out, or unknown host)."""


class BucketNotFoundError(StorageAccessError, NotFoundError):
    """The bucket a URI names does not exist."""


class IrregularEntryError(StorageError):
    """A log-dir entry that must hold data is not a regular file (a dangling symbolic link, a directory, a
    FIFO, ...) or lies where the log dir's lock does not reach (a partition directory linked from outside)."""


class PreconditionFailedError(StorageError):
    """A conditional write lost its race: the object exists (or changed) when it must not have."""


class LockHeldError(SegjobsError):
    """Another process holds the log dir's lock (a broker's ``.lock``, or another segjobs run's lease).
    Exit code 2: the run did nothing."""

    exit_code = 2


class JavaNotFoundError(SegjobsError):
    """Spark cannot start because there is no usable Java (no ``java`` on PATH, a JAVA_HOME without
    ``bin/java``, or a JVM that exits at once); the message says how to install one. Exit code 2: nothing was
    done, and retrying cannot help until the machine changes."""

    exit_code = 2


# --------------------------------------------------------------------------------------------------
# Configuration and usage
# --------------------------------------------------------------------------------------------------


class ConfigError(SegjobsError):
    """A topic configuration or command-line setting is invalid; the message names the key. Exit code 2:
    nothing was done."""

    exit_code = 2


class UsageError(SegjobsError):
    """The command line asks for something impossible (unknown partition in scope, missing log dir, ...).
    Exit code 2: nothing was done."""

    exit_code = 2
