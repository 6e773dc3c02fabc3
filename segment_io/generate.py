"""Synthetic log dirs for the demo, the tests and the benchmarks.

``generate_log_dir(GenerateSpec(...), out_dir)`` writes a realistic broker-style log dir: topics with
partitions, segments rolled at ``segment_bytes``, indexes, checkpoint files, a controllable key
cardinality and share of superseded records, tombstones, transactional batches (committed and aborted)
and timestamps spread over a range. Everything is vectorised: records are never Python objects, so
gigabytes are written at close to the encoder's speed.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute  # makes pa.compute available

from segment_io import layout
from segment_io.compression import CODEC_NAMES
from segment_io.format import CONTROL_ABORT, CONTROL_COMMIT
from segment_io.schema import RECORD_SCHEMA


@dataclass(frozen=True)
class GenerateSpec:
    """What to generate. Sizes are per partition unless named otherwise."""

    topics: tuple[str, ...] = ("orders",)
    partitions: int = 2
    records: int = 10_000  #: data records per partition (markers come on top)
    segment_bytes: int = 1 << 20
    superseded_share: float = 0.5  #: share of data records that a later record of the same key supersedes
    tombstone_share: float = 0.02  #: share of data records that are tombstones
    value_bytes: int = 100
    key_bytes: int = 16  #: keys are zero-padded decimal ids of this width
    batch_records: int = 50
    codec: int = 0
    transactional_share: float = 0.0  #: share of batches written in transactions
    aborted_share: float = 0.0  #: of the transactional batches, the share whose transaction aborts
    start_ms: int = 1_700_000_000_000
    span_ms: int = 7 * 24 * 3600 * 1000  #: timestamps spread evenly over [start_ms, start_ms + span_ms)
    index_interval_bytes: int = 4096
    seed: int = 42
    headers: bool = False  #: give every record one small header
    #: "random" bytes (incompressible) or "text": JSON-like ASCII that compresses about as well as real events
    value_style: str = "random"

    def __post_init__(self) -> None:
        for name in ("superseded_share", "tombstone_share", "transactional_share", "aborted_share"):
            v = getattr(self, name)
            if not 0.0 <= v < 1.0 if name == "superseded_share" else not 0.0 <= v <= 1.0:
                raise ValueError(f"{name}={v} must be within [0, 1]")
        if self.partitions < 1 or self.records < 0 or self.batch_records < 1:
            raise ValueError("partitions >= 1, records >= 0 and batch_records >= 1 are required")
        if self.value_style not in VALUE_STYLES:
            raise ValueError(f"value_style {self.value_style!r}: choose one of {VALUE_STYLES}")
        if self.key_bytes < 1 or self.value_bytes < 0:
            raise ValueError("key_bytes >= 1 and value_bytes >= 0 are required")
        if self.codec not in CODEC_NAMES:
            raise ValueError(f"unknown codec {self.codec}")

    @property
    def distinct_keys(self) -> int:
        return max(1, math.ceil(self.records * (1.0 - self.superseded_share)))


@dataclass
class GenerateResult:
    """What was written."""

    out_dir: str
    partitions: int = 0
    segments: int = 0
    records: int = 0
    markers: int = 0
    bytes: int = 0
    per_partition: dict[str, int] = field(default_factory=dict)
    #: the partitions that were there already and got records appended (``append``)
    appended: list[str] = field(default_factory=list)


def _fixed_binary(data: np.ndarray, width: int, valid: np.ndarray | None = None) -> pa.Array:
    """A BinaryArray of ``len(data) // width`` values of ``width`` bytes each (null where ``valid`` is False)."""
    n = len(data) // width if width else len(valid) if valid is not None else 0
    offsets = (np.arange(n + 1, dtype=np.int32) * width)
    validity = None
    null_count = 0
    if valid is not None:
        validity = pa.py_buffer(np.packbits(valid.astype(np.uint8), bitorder="little"))
        null_count = int((~valid).sum())
        # Null slots still occupy bytes in the data buffer; make them zero-length instead.
        lengths = np.where(valid, width, 0).astype(np.int32)
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        data = data.reshape(n, width)[valid].reshape(-1) if width else data
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))]
    return pa.Array.from_buffers(pa.binary(), n, buffers, null_count=null_count)


VALUE_STYLES = ("random", "text")

#: Words the "text" style draws from: field names and values of a typical JSON event.
_WORDS = np.frombuffer(b"".join(w.ljust(8, b" ") for w in (
    b'{"id":', b'"user",', b'"order"', b'"status', b'":"ok",', b'"amount', b'":12.50', b'"EUR",', b'"items"',
    b':[1,2,3', b'],', b'"ts":', b'1700000', b'"region', b'":"eu",', b'"sku":', b'"A-17",', b'"qty":4',
    b'"note":', b'"none"}', b'"email"', b'"x@y.z"', b'"city":', b'"Paris"', b'"flag":', b'true,', b'false,',
    b'"v":3,', b'"tags":', b'["a",', b'"b"],', b'null,')), dtype=np.uint8).reshape(-1, 8)


def _value_bytes(rng: np.random.Generator, n: int, width: int, style: str) -> np.ndarray:
    """``n`` values of ``width`` bytes, flat: random bytes, or 8-byte words of a JSON-ish vocabulary."""
    if not width:
        return np.zeros(0, np.uint8)
    if style == "random":
        return rng.integers(0, 256, n * width, dtype=np.uint8)
    words = (n * width + 7) // 8
    return _WORDS[rng.integers(0, len(_WORDS), words)].reshape(-1)[: n * width].copy()


def _keys(ids: np.ndarray, width: int) -> np.ndarray:
    """Zero-padded decimal ASCII of ``ids`` as a flat uint8 array of ``len(ids) * width`` bytes."""
    digits = np.empty((len(ids), width), dtype=np.uint8)
    rest = ids.astype(np.int64).copy()
    for col in range(width - 1, -1, -1):
        digits[:, col] = 48 + (rest % 10)
        rest //= 10
    return digits.reshape(-1)


def synthetic_table(spec: GenerateSpec, topic: str, partition: int, rng: np.random.Generator | None = None, *,
                    first_offset: int = 0, first_producer_id: int | None = None, leader_epoch: int = 0) -> pa.Table:
    """All records of one partition (data and markers) as a RECORD_SCHEMA table in offset order, batch
    fields set; ``segment_base_offset`` is still 0 and ``batch_position``/``batch_size`` are placeholders.

    Offsets start at ``first_offset``; each transaction has a producer id of its own, from ``first_producer_id``
    on (default ``1000 + partition * 1_000_000``), epoch 0, sequence 0; every batch carries ``leader_epoch``."""
    rng = rng if rng is not None else np.random.default_rng(spec.seed)
    n = spec.records
    k = spec.distinct_keys
    # Every key appears at least once, so superseded records number exactly n - k.
    key_ids = np.concatenate([rng.permutation(k), rng.integers(0, k, max(0, n - k))])[:n]
    rng.shuffle(key_ids)
    tomb = rng.random(n) < spec.tombstone_share

    nb = (n + spec.batch_records - 1) // spec.batch_records
    batch_of_record = np.arange(n) // spec.batch_records
    txn_batch = rng.random(nb) < spec.transactional_share
    aborted_batch = txn_batch & (rng.random(nb) < spec.aborted_share)

    # Each transactional batch is its own transaction, closed by a marker right after it.
    markers_after = txn_batch.astype(np.int64)
    rows_per_batch = np.bincount(batch_of_record, minlength=nb)
    # Offsets: data records of batch b start after all earlier batches' records and markers.
    batch_first = np.zeros(nb, dtype=np.int64)
    if nb:
        np.cumsum((rows_per_batch + markers_after)[:-1], out=batch_first[1:])
    data_offset = batch_first[batch_of_record] + (np.arange(n) - batch_of_record * spec.batch_records)
    marker_batches = np.nonzero(txn_batch)[0]
    marker_offset = batch_first[marker_batches] + rows_per_batch[marker_batches]
    total = n + len(marker_batches)

    ts = spec.start_ms + (np.arange(total, dtype=np.int64) * spec.span_ms) // max(1, total)

    first_pid = 1000 + partition * 1_000_000 if first_producer_id is None else first_producer_id
    pid_of_batch = np.where(txn_batch, first_pid + np.arange(nb), -1).astype(np.int64)
    epoch_of_batch = np.where(txn_batch, 0, -1).astype(np.int16)
    seq_of_batch = np.where(txn_batch, 0, -1).astype(np.int32)

    # Data rows.
    data_ts = ts[data_offset]
    keys = _fixed_binary(_keys(key_ids, spec.key_bytes), spec.key_bytes)
    value_valid = ~tomb
    vals_raw = _value_bytes(rng, n, spec.value_bytes, spec.value_style)
    values = _fixed_binary(vals_raw, spec.value_bytes, value_valid) if spec.value_bytes else \
        pa.array([None if t else b"" for t in tomb], pa.binary())
    b_first = batch_first[batch_of_record]
    b_last = b_first + rows_per_batch[batch_of_record] - 1
    # Batch timestamps: the first record's and the last record's (timestamps rise with offsets).
    first_ts = ts[batch_first]
    last_ts = ts[batch_first + rows_per_batch - 1] if nb else np.zeros(0, np.int64)

    # Marker rows.
    m = len(marker_batches)
    ctrl_type = np.where(aborted_batch[marker_batches], CONTROL_ABORT, CONTROL_COMMIT).astype(np.int16)
    mkeys = np.zeros((m, 4), dtype=np.uint8)
    mkeys[:, 3] = ctrl_type  # version 0 (int16), type (int16) big-endian
    mvals = np.zeros((m, 6), dtype=np.uint8)  # version 0, coordinator epoch 0

    def col(data_part, marker_part, dtype):
        return np.concatenate([np.asarray(data_part, dtype=dtype), np.asarray(marker_part, dtype=dtype)])

    offsets = col(data_offset, marker_offset, np.int64) + first_offset
    order = np.argsort(offsets, kind="stable")
    header_list = _headers(n, m, spec.headers)
    columns = {
        "topic": pa.array(np.full(total, topic, dtype=object), pa.string()),
        "partition": pa.array(np.full(total, partition, dtype=np.int32)),
        "offset": pa.array(offsets),
        "timestamp": pa.array(col(data_ts, ts[marker_offset], np.int64)),
        "timestamp_type": pa.array(np.zeros(total, dtype=np.int8)),
        "key": pa.concat_arrays([keys, _fixed_binary(mkeys.reshape(-1), 4)]),
        "value": pa.concat_arrays([values, _fixed_binary(mvals.reshape(-1), 6)]),
        "headers": header_list,
        "batch_base_offset": pa.array(col(b_first, marker_offset, np.int64) + first_offset),
        "batch_last_offset": pa.array(col(b_last, marker_offset, np.int64) + first_offset),
        "batch_position": pa.array(np.zeros(total, dtype=np.int64)),
        "batch_size": pa.array(np.zeros(total, dtype=np.int32)),
        "batch_base_timestamp": pa.array(col(first_ts[batch_of_record], ts[marker_offset], np.int64)),
        "batch_max_timestamp": pa.array(col(last_ts[batch_of_record], ts[marker_offset], np.int64)),
        "magic": pa.array(np.full(total, 2, dtype=np.int8)),
        "codec": pa.array(col(np.full(n, spec.codec), np.zeros(m), np.int8)),
        "transactional": pa.array(col(txn_batch[batch_of_record], np.ones(m), np.bool_)),
        "control": pa.array(col(np.zeros(n), np.ones(m), np.bool_)),
        "producer_id": pa.array(col(pid_of_batch[batch_of_record], pid_of_batch[marker_batches], np.int64)),
        "producer_epoch": pa.array(col(epoch_of_batch[batch_of_record], epoch_of_batch[marker_batches], np.int16)),
        "base_sequence": pa.array(col(seq_of_batch[batch_of_record], np.full(m, -1), np.int32)),
        "partition_leader_epoch": pa.array(np.full(total, leader_epoch, dtype=np.int32)),
        "delete_horizon_ms": pa.nulls(total, pa.int64()),
        "segment_base_offset": pa.array(np.zeros(total, dtype=np.int64)),
    }
    return pa.Table.from_pydict(columns, schema=RECORD_SCHEMA).take(pa.array(order))


def _headers(n: int, m: int, with_headers: bool) -> pa.Array:
    """Headers column: one ``("source", b"gen")`` header per data record when asked, none on markers."""
    total = n + m
    per_row = np.zeros(total, dtype=np.int32)
    if with_headers:
        per_row[:n] = 1
    offsets = np.zeros(total + 1, dtype=np.int32)
    np.cumsum(per_row, out=offsets[1:])
    h = int(offsets[-1])
    hkeys = pa.array(np.full(h, "source", dtype=object), pa.string())
    hvals = _fixed_binary(np.frombuffer(b"gen" * h, dtype=np.uint8), 3) if h else pa.array([], pa.binary())
    items = pa.StructArray.from_arrays([hkeys, hvals], fields=list(RECORD_SCHEMA.field("headers").type.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets), items, type=RECORD_SCHEMA.field("headers").type)


def _split_segments(table: pa.Table, segment_bytes: int) -> list[pa.Table]:
    """Cut a partition's rows into segments of about ``segment_bytes`` at batch boundaries."""
    if table.num_rows == 0:
        return [table]
    key_len = pa.compute.binary_length(table["key"]).fill_null(0).to_numpy()
    val_len = pa.compute.binary_length(table["value"]).fill_null(0).to_numpy()
    approx = key_len + val_len + 20  # record framing overhead, roughly
    batch = table["batch_base_offset"].to_numpy()
    starts = np.nonzero(np.r_[True, batch[1:] != batch[:-1]])[0]
    batch_bytes = np.add.reduceat(approx, starts) + 61
    cum = np.cumsum(batch_bytes)
    seg_of_batch = (cum - batch_bytes) // max(1, segment_bytes)
    cuts = starts[np.nonzero(np.r_[True, seg_of_batch[1:] != seg_of_batch[:-1]])[0]]
    bounds = list(cuts) + [table.num_rows]
    return [table.slice(a, b - a) for a, b in zip(bounds[:-1], bounds[1:])]


@dataclass(frozen=True)
class PartitionTail:
    """Where an existing partition ends: what records appended to it continue from."""

    #: the next offset to write, and the base offset of the new first segment
    log_end_offset: int
    #: the largest batch timestamp in the partition (-1: none)
    max_timestamp: int
    #: above every producer id the partition holds: appended transactions take new producers from here
    next_producer_id: int
    #: the leader epoch appended batches carry: the leader-epoch checkpoint's last epoch (else the last batch's)
    leader_epoch: int
    #: the leader-epoch checkpoint's entries (empty: none), which the append keeps
    epochs: tuple[tuple[int, int], ...]
    #: the partition's first offset (the first segment's base)
    first_offset: int
    #: files of an empty last segment based at the log end, which the first appended segment replaces
    empty_active: tuple[str, ...] = ()


def partition_tail(pdir: str | os.PathLike, partition: int = 0) -> PartitionTail | None:
    """How the partition in the directory ``pdir`` ends (None: it holds no segment). Raises ValueError for a
    partition no records can be appended to: one whose last segment ends in a cut-short batch, or with files a
    crashed run left (``.cleaned``, ``.swap``, ``.deleted``: run ``segjobs recover`` first)."""
    from segment_io.checkpoint import read_leader_epoch_checkpoint
    from segment_io.format import scan_batches
    from segment_io.storage import open_storage

    path = Path(pdir)
    storage = open_storage(str(path))
    listing = layout.listing_from_files(str(path.parent), storage.list(str(path))).partitions.get(
        layout.parse_partition_dir(path.name) or ("", -1))
    if listing is None or not listing.segments:
        return None
    if listing.transient:
        left = listing.transient[0].info.uri.rsplit("/", 1)[-1]
        raise ValueError(f"{path} holds files of an unfinished run ({left}): run segjobs recover on the log dir "
                         f"first")
    end, max_ts, max_pid, last_epoch = listing.segments[0].base_offset, -1, -1, -1
    for seg in listing.segments:
        headers = scan_batches(storage.read(seg.log.uri), path=seg.log.uri, allow_truncated_tail=True)
        if headers.truncated_tail:
            raise ValueError(f"{seg.log.uri}: its last {headers.truncated_tail} bytes from byte {headers.end} are no "
                             f"whole batch (one cut short, or zeros a broker preallocated): records cannot be "
                             f"appended after them")
        end = max(end, seg.base_offset)
        if len(headers):
            end = max(end, int(headers.last_offset[-1]) + 1)
            max_ts = max(max_ts, int(headers.max_timestamp.max()))
            max_pid = max(max_pid, int(headers.producer_id.max()))
            last_epoch = int(headers.partition_leader_epoch[-1])
    last = listing.segments[-1]
    empty_active = tuple(f.uri for f in (last.log, last.index, last.timeindex, last.txnindex) if f is not None) \
        if last.log.size == 0 and last.base_offset == end else ()
    epochs = tuple((e.epoch, e.start_offset) for e in read_leader_epoch_checkpoint(
        storage, str(path / layout.LEADER_EPOCH_CHECKPOINT)))
    epoch = epochs[-1][0] if epochs else max(last_epoch, 0)
    return PartitionTail(log_end_offset=end, max_timestamp=max_ts,
                         next_producer_id=max(max_pid + 1, 1000 + partition * 1_000_000), leader_epoch=epoch,
                         epochs=epochs, first_offset=listing.segments[0].base_offset, empty_active=empty_active)


def _counted(table: pa.Table) -> str:
    """``30000 records (+93 markers)``: data records and transaction markers counted apart, as the summary does."""
    markers = int(pa.compute.sum(table["control"]).as_py() or 0)
    return f"{table.num_rows - markers} records" + (f" (+{markers} markers)" if markers else "")


def _write_partition(spec: GenerateSpec, pdir: Path, table: pa.Table, result: GenerateResult,
                     name: str) -> int:
    """Write ``table`` as segments of ``pdir`` (each named by its first offset); returns the bytes written."""
    from segment_io.segment_writer import write_segment

    written = 0
    for seg in _split_segments(table, spec.segment_bytes):
        base = int(seg["offset"][0].as_py()) if seg.num_rows else 0
        seg = seg.set_column(seg.schema.get_field_index("segment_base_offset"), "segment_base_offset",
                             pa.array(np.full(seg.num_rows, base, dtype=np.int64)))
        res = write_segment(seg, str(pdir / layout.segment_file_name(base)),
                            index_interval_bytes=spec.index_interval_bytes)
        written += res.bytes
        result.segments += 1
    markers = int(pa.compute.sum(table["control"]).as_py() or 0)
    result.partitions += 1
    result.records += table.num_rows - markers
    result.markers += markers
    result.bytes += written
    result.per_partition[name] = written
    return written


def generate_log_dir(spec: GenerateSpec, out_dir: str | os.PathLike,
                     progress: Callable[[str], None] | None = None, *, append: bool = False) -> GenerateResult:
    """Write a broker-style log dir under ``out_dir`` (created). Partitions of other topics already there are
    kept, and so are their checkpoint entries: several specs can build one log dir.

    A partition of the spec that is already there is refused (FileExistsError), unless ``append``: then its
    ``spec.records`` new records follow its log end offset, in new segments after its last one (an empty last
    segment at the log end is replaced), its transactions with producer ids above every one it holds, its batches
    in the leader epoch of its leader-epoch checkpoint, which is kept (written when absent), as are its
    log-start-offset and cleaner-offset checkpoint entries. ``result.appended`` names those partitions."""
    from segment_io.checkpoint import read_offset_checkpoint, write_leader_epoch_checkpoint, write_offset_checkpoint
    from segment_io.storage import open_storage

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    storage = open_storage(str(out))
    result = GenerateResult(out_dir=str(out))
    tails = {(topic, p): partition_tail(out / layout.partition_dir_name(topic, p), p)
             for topic in spec.topics for p in range(spec.partitions)
             if (out / layout.partition_dir_name(topic, p)).is_dir()}
    ends = sorted(t.log_end_offset for t in tails.values() if t is not None)
    # appended records get keys and values of their own, not the first run's again
    rng = np.random.default_rng([spec.seed, *ends] if ends else spec.seed)
    log_start: dict[tuple[str, int], int] = {}
    for topic in spec.topics:
        for p in range(spec.partitions):
            pdir = out / layout.partition_dir_name(topic, p)
            tail = tails.get((topic, p))
            if tail is None and pdir.exists() and any(pdir.iterdir()):
                raise FileExistsError(f"{pdir} already holds files but no segment; generate into an empty directory")
            if tail is not None and not append:
                raise FileExistsError(f"{pdir} already holds files; generate into an empty directory")
            name = f"{topic}-{p}"
            if tail is not None:
                table = synthetic_table(spec, topic, p, rng, first_offset=tail.log_end_offset,
                                        first_producer_id=tail.next_producer_id, leader_epoch=tail.leader_epoch)
                if not spec.records:
                    continue
                for uri in tail.empty_active:
                    storage.delete(uri)
                written = _write_partition(spec, pdir, table, result, name)
                if not tail.epochs:
                    write_leader_epoch_checkpoint(storage, str(pdir / layout.LEADER_EPOCH_CHECKPOINT),
                                                  [(tail.leader_epoch, tail.first_offset)])
                result.appended.append(name)
                if progress:
                    progress(f"{name}: appended {_counted(table)} at offsets {tail.log_end_offset}.."
                             f"{tail.log_end_offset + table.num_rows - 1}, {written} bytes")
                continue
            pdir.mkdir(parents=True, exist_ok=True)
            table = synthetic_table(spec, topic, p, rng)
            written = _write_partition(spec, pdir, table, result, name)
            (pdir / layout.LEADER_EPOCH_CHECKPOINT).write_text("0\n1\n0 0\n")
            log_start[(topic, p)] = 0
            if progress:
                progress(f"{name}: {_counted(table)}, {written} bytes")
    for name, entries in ((layout.LOG_START_OFFSET_CHECKPOINT, log_start), (layout.CLEANER_OFFSET_CHECKPOINT, {})):
        path = out / name
        kept = read_offset_checkpoint(storage, str(path)) if path.exists() else {}
        write_offset_checkpoint(storage, str(path), dict(sorted({**kept, **entries}.items())))
    return result
