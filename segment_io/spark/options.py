"""Reader options of the ``kafka-segments`` data source: parsing and validation in one place.

Spark hands options over as a case-insensitive map of strings. Every key is checked (a misspelt option
would otherwise be silently ignored and read far more data than intended) and every error names the option.
Offset and timestamp ranges are half-open like Kafka's own ``startingOffsets``/``endingOffsets``:
the starting bound is inclusive, the ending bound exclusive.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Mapping

from segment_io.errors import ConfigError, UsageError
from segment_io.layout import parse_partition_dir
from segment_io.remote_layout import LocalTieredStorageLayout
from segment_io.storage import StorageOptions
from segment_io.units import parse_size

_Get = Callable[[str], str | None]  # an option's value by name, None when not given

DEFAULT_BATCH_ROWS = 65536
DEFAULT_MAX_SPLIT_BYTES = 128 << 20
#: The weight of opening a split's file or object, in bytes (:mod:`segment_io.spark.packing`): a local open and
#: read is about 0.1 ms, an S3 GET tens of ms; 1 MiB keeps a packed task of small segments to about 128 files at
#: the default target, so its opens stay a small part of its time on either (and its segments are fetched ahead,
#: several at once, on S3). Here, beside the split target, so that the jobs' driver-side packing of partitions
#: into tasks (which weighs them alike) does not import pyspark through the packing module.
SPLIT_OPEN_COST_BYTES = 1 << 20

#: Reader option -> StorageOptions field. Only the options a user sets override the environment.
S3_OPTIONS: dict[str, str] = {
    "s3.endpoint": "endpoint_url",
    "s3.region": "region",
    "s3.access_key_id": "access_key_id",
    "s3.secret_access_key": "secret_access_key",
    "s3.session_token": "session_token",
    "s3.profile": "profile",
}

#: Every option the source accepts, spelt as documented (Spark lower-cases keys before we see them).
KNOWN_OPTIONS: tuple[str, ...] = (
    "path", "topics", "partitions", "startingOffset", "endingOffset", "startingTimestamp", "endingTimestamp",
    "includeControl", "verifyCrc", "allowTruncatedTail", "batchRows", "maxSplitBytes", "schema", "columns",
    "read", "remote", "remoteLayout", *S3_OPTIONS,
)
#: Values of the ``read`` option: every record, or the latest record per key (a compacted topic as a table).
READ_MODES = ("records", "latest")
#: Options that select records by offset or time, or shape record rows: meaningless for ``read`` ``latest``.
_RECORD_ONLY_OPTIONS = ("startingOffset", "endingOffset", "startingTimestamp", "endingTimestamp", "includeControl",
                        "schema", "columns")
_CANONICAL = {name.lower(): name for name in KNOWN_OPTIONS}


class DataSourceOptionError(ConfigError):
    """A ``kafka-segments`` reader option is missing, unknown or malformed. The message names the option."""

    def __init__(self, option: str, detail: str) -> None:
        self.option = option
        super().__init__(f"kafka-segments option {option!r}: {detail}")


@dataclass(frozen=True)
class ReadOptions:
    """The validated reader options. Picklable: shipped to executors inside the reader."""

    path: str
    topic_globs: tuple[str, ...] = ()  #: empty: every topic
    partitions: frozenset[tuple[str, int]] = frozenset()  #: empty: every partition
    starting_offset: int | None = None  #: inclusive
    ending_offset: int | None = None  #: exclusive
    starting_timestamp: int | None = None  #: inclusive, epoch ms
    ending_timestamp: int | None = None  #: exclusive, epoch ms
    include_control: bool = False
    verify_crc: bool = True
    allow_truncated_tail: bool = False
    batch_rows: int = DEFAULT_BATCH_ROWS
    max_split_bytes: int = DEFAULT_MAX_SPLIT_BYTES
    #: The rows' schema, a key of :data:`segment_io.spark.schemas.ROW_SCHEMAS`: ``segments`` or ``kafka``.
    row_schema: str = "segments"
    #: The columns of the rows, of the row schema, in this order (the ``columns`` option); None: all of them.
    #: Spark does not tell a Python data source which columns a query uses, so this is how a query that needs
    #: no ``value`` avoids decoding one.
    columns: tuple[str, ...] | None = None
    #: Only the S3 settings the user gave; the rest is resolved from the environment where the read runs.
    s3_overrides: StorageOptions = StorageOptions()
    #: ``records`` (default) or ``latest``: one row per live key of each partition (:mod:`segment_io.latest`)
    read_mode: str = "records"
    #: the remote store of tiered topics (the ``remote`` option): each partition is read as one log, its finished
    #: remote segments below the local log and then its local segments (:mod:`jobs.rules.tiered_read`); None: the
    #: local segments only
    remote: str | None = None
    #: how the remote store names its objects (``remoteLayout``), as ``segjobs tiered audit --layout``
    remote_layout: str = LocalTieredStorageLayout.name

    def storage_options(self) -> StorageOptions | None:
        """Settings for :func:`segment_io.storage.open_storage`: the environment overlaid with the options.

        None when no ``s3.*`` option was given, so that the store resolves everything where it runs.
        """
        given = {k: v for k, v in dataclasses.asdict(self.s3_overrides).items() if v is not None}
        if not given:
            return None
        return dataclasses.replace(StorageOptions.from_env(), **given)


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """Validate Spark's option map. Raises :class:`DataSourceOptionError` naming the first bad option."""
    values = {str(k).lower(): v for k, v in options.items()}
    unknown = sorted(k for k in values if k not in _CANONICAL)
    if unknown:
        raise DataSourceOptionError(unknown[0], f"unknown option; known options are {', '.join(KNOWN_OPTIONS)}")

    def get(name: str) -> str | None:
        value = values.get(name.lower())
        return None if value is None else str(value)

    path = get("path")
    if not path or not path.strip():
        raise DataSourceOptionError("path", "no path given: use .load('<log dir | partition dir | segment file>')")

    parsed = ReadOptions(
        path=path.strip(),
        topic_globs=_topic_globs(get("topics")),
        partitions=_partitions(get("partitions")),
        starting_offset=_int(get, "startingOffset", minimum=0),
        ending_offset=_int(get, "endingOffset", minimum=0),
        starting_timestamp=_int(get, "startingTimestamp"),
        ending_timestamp=_int(get, "endingTimestamp"),
        include_control=_bool(get, "includeControl", False),
        verify_crc=_bool(get, "verifyCrc", True),
        allow_truncated_tail=_bool(get, "allowTruncatedTail", False),
        batch_rows=_int(get, "batchRows", minimum=1) or DEFAULT_BATCH_ROWS,
        max_split_bytes=_size(get, "maxSplitBytes", minimum=1) or DEFAULT_MAX_SPLIT_BYTES,
        row_schema=_row_schema(get("schema")),
        columns=_columns(get("columns"), _row_schema(get("schema"))),
        s3_overrides=StorageOptions(**{field: get(opt) for opt, field in S3_OPTIONS.items()}),
        read_mode=_read_mode(get("read")),
        remote=_remote(get("remote")),
        remote_layout=(get("remoteLayout") or LocalTieredStorageLayout.name).strip(),
    )
    if get("remoteLayout") is not None and parsed.remote is None:
        raise DataSourceOptionError("remoteLayout", "only with remote, the remote store's root")
    if parsed.remote is not None:
        _check_remote_layout(parsed.remote_layout)
    if parsed.read_mode == "latest":
        for name in _RECORD_ONLY_OPTIONS:
            if get(name) is not None:
                raise DataSourceOptionError(name, "not with read=latest, which returns every live key's latest "
                                                  "record up to each partition's last stable offset")
    _check_range(parsed.starting_offset, parsed.ending_offset, "endingOffset", "startingOffset")
    _check_range(parsed.starting_timestamp, parsed.ending_timestamp, "endingTimestamp", "startingTimestamp")
    return parsed


def _remote(raw: str | None) -> str | None:
    if raw is None:
        return None
    if not raw.strip():
        raise DataSourceOptionError("remote", "empty: give the remote store's root (a local path or s3:// URI)")
    return raw.strip()


def _check_remote_layout(name: str) -> None:
    # imported only for a tiered read: the plan of one is jobs' (the remote log metadata's replay, Kafka's rules)
    from jobs.logdir.tiered import readable_layout

    try:
        readable_layout(name)
    except UsageError as exc:
        raise DataSourceOptionError("remoteLayout", str(exc)) from None


def _int(get: _Get, name: str, *, minimum: int | None = None) -> int | None:
    raw = get(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise DataSourceOptionError(name, f"{raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise DataSourceOptionError(name, f"{value} is below the minimum {minimum}")
    return value


def _size(get: _Get, name: str, *, minimum: int) -> int | None:
    """A size option: bytes, or with a binary unit (``64MiB``), read by :func:`segment_io.units.parse_size`."""
    raw = get(name)
    if raw is None:
        return None
    try:
        value = parse_size(raw)
    except ValueError as exc:
        raise DataSourceOptionError(name, str(exc)) from None
    if value < minimum:
        raise DataSourceOptionError(name, f"{value} is below the minimum {minimum}")
    return value


def _bool(get: _Get, name: str, default: bool) -> bool:
    raw = get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise DataSourceOptionError(name, f"{raw!r} is not a boolean (true or false)")


def _read_mode(raw: str | None) -> str:
    if raw is None:
        return "records"
    mode = raw.strip().lower()
    if mode not in READ_MODES:
        raise DataSourceOptionError("read", f"{raw!r}: give one of {', '.join(READ_MODES)}")
    return mode


def _row_schema(raw: str | None) -> str:
    from segment_io.spark.schemas import DEFAULT_ROW_SCHEMA, ROW_SCHEMAS

    if raw is None:
        return DEFAULT_ROW_SCHEMA
    name = raw.strip().lower()
    if name not in ROW_SCHEMAS:
        raise DataSourceOptionError("schema", f"{raw!r} is not a schema; give one of {', '.join(ROW_SCHEMAS)}")
    return name


def _columns(raw: str | None, row_schema: str) -> tuple[str, ...] | None:
    from segment_io.spark.schemas import ROW_SCHEMAS

    if raw is None:
        return None
    names = tuple(name.strip() for name in raw.split(","))
    known = ROW_SCHEMAS[row_schema].arrow_schema.names
    for name in names:
        if name not in known:
            raise DataSourceOptionError("columns", f"{name!r} is not a column of schema {row_schema!r}; its columns "
                                                   f"are {', '.join(known)}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise DataSourceOptionError("columns", f"{', '.join(map(repr, repeated))} given more than once")
    return names


def _topic_globs(raw: str | None) -> tuple[str, ...]:
    if raw is None:
        return ()
    globs = tuple(g.strip() for g in raw.split(","))
    if not globs or any(not g for g in globs):
        raise DataSourceOptionError("topics", f"{raw!r} has an empty entry; give comma-separated topic globs")
    return globs


def _partitions(raw: str | None) -> frozenset[tuple[str, int]]:
    if raw is None:
        return frozenset()
    chosen = set()
    for entry in raw.split(","):
        parsed = parse_partition_dir(entry.strip())
        if parsed is None:
            raise DataSourceOptionError("partitions", f"{entry.strip()!r} is not of the form <topic>-<partition>")
        chosen.add(parsed)
    return frozenset(chosen)


def _check_range(start: int | None, end: int | None, end_name: str, start_name: str) -> None:
    if start is not None and end is not None and end < start:
        raise DataSourceOptionError(end_name, f"{end} is below {start_name} {start}")
