"""The ``deltalake`` writer's dedupe for partitions whose latest rows may not fit memory: an external-sort pass
(the compaction strategy's key pass and buckets, :mod:`jobs.rules.external_sort`) that finds each key's latest
offset on disk, then a read that keeps exactly those records, streamed to the Delta merge in segment-sized
batches. Its memory is bounded by ``latest_buffer_bytes`` and the size of one segment, whatever the key count.

For one partition and the range ``[start, end)`` its plan applies:

1. **Key pass** (a segment at a time): decode offsets, 128-bit key hashes and batch flags only
   (:func:`segment_io.decode.decode_key_hashes_bytes`); :func:`jobs.engine.compact.cleaning.piece_of` pre-aggregates
   them, one row per key of the segment with its latest *eligible* offset (keyed data records in the range that
   no aborted transaction holds: :func:`jobs.rules.offset_map.mappable_rows`, the table's rule too), ordered by
   hash bucket, written as one work file. The table's current keys of the partition (read in batches, key column
   only) are hashed into work files the same way, with offset ``-2``: they tell inserts from updates and, for a
   rebuild, which rows go.
2. **Buckets** (one at a time): every piece's share of the bucket goes through
   :func:`jobs.rules.external_sort.piece_rows` once more, which gives per key the smallest offset seen (``-2``:
   the table has the key) and the largest eligible one (the key's latest record in the range; ``-1``: none).
   The latest offsets, with whether the table has the key, are written sorted to a keep file per bucket.
   A key lives in one bucket, and the bucket count is chosen (:func:`jobs.rules.external_sort.bucket_count`)
   so that one bucket fits ``latest_buffer_bytes``.
3. **Read** (a segment at a time, in offset order): each bucket's share of the segment's keep offsets; decode
   the segment and keep exactly those records: the batches of the merge's source. Counting inserts, updates,
   deletes and tombstones of absent keys happens here, exactly, also in a dry run.

The work files live in a temporary directory of the driver (``$TMPDIR``), removed at the end: 32 bytes per
key and segment, 16 per kept key.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.engine.compact.cleaning import piece_of, write_rows
from jobs.engine.compact.external_sort import read_rows
from jobs.rules.external_sort import PIECE_COLUMNS, bucket_count, piece_rows
from jobs.rules.transactions import AbortedTxns
from segment_io.decode import decode_key_hashes_bytes, decode_segment_bytes
from segment_io.errors import CorruptRecordError, LocatedError
from segment_io.format import batch_positions
from segment_io.hashing import hash_keys
from segment_io.latest import SOURCE_COLUMNS, TABLE_SCHEMA
from segment_io.layout import parse_segment_file
from segment_io.storage import open_storage

if TYPE_CHECKING:
    from segment_io.storage.base import Storage
    from segment_io.storage.spool import TaskSpool

#: ``latest_buffer_bytes`` when not given: the memory one partition's latest rows may take in its task.
DEFAULT_LATEST_BUFFER_BYTES = 256 << 20
#: What the in-memory dedupe costs per record of its range beyond the segments' bytes: the decoded segment (12
#: columns), the rows taken from it, the held latest rows (twice while they are compacted), their key hashes and
#: hash table. Measured: 2 M distinct keys with 20-byte values (87 MiB of segments) peak about 1 GB above the
#: interpreter, 500 bytes a record; with the segment bytes counted apart, 400 a record keeps the estimate close.
ROW_OVERHEAD_BYTES = 400
#: Both passes decode a segment this many bytes at a time (whole batches), so that what they hold does not grow
#: with the segment size (1 GiB by default in Kafka); the read pass hands the merge batches of at most
#: :data:`BATCH_ROWS` rows.
PIECE_BYTES = 8 << 20
BATCH_ROWS = 1 << 16
#: Offset of a table key in the bucket rows: below every offset (and the -1 of "no eligible record").
_IN_TABLE = -2
#: Columns of a keep file (int64 each, row-major): the key's latest offset, 1 when the table has the key.
_KEEP_COLUMNS = 2


def latest_bytes_bound(segment_bytes: int, records: int) -> int:
    """An upper estimate of what the in-memory dedupe of a range holds: its segments' bytes (a latest row is a
    record) plus :data:`ROW_OVERHEAD_BYTES` per record."""
    return segment_bytes + records * ROW_OVERHEAD_BYTES


@dataclass
class SortedCounts:
    """What the read of a sorted partition found (exact; complete once its rows were consumed)."""

    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    tombstones_without_row: int = 0
    records_read: int = 0


@dataclass
class SortedPartition:
    """One partition after the key pass and the buckets: where its keep files are, and how each bucket's keep
    offsets split by segment (``splits[b][i]``: rows of bucket ``b`` below segment ``i``'s end)."""

    partition: int
    start: int
    end: int
    rebuild: bool
    segments: list[tuple[str, bool]]
    keep_uris: list[str] = field(default_factory=list)
    splits: list[np.ndarray] = field(default_factory=list)
    keys: int = 0
    buckets: int = 1
    counts: SortedCounts = field(default_factory=SortedCounts)


def work_dir() -> tuple[Storage, str]:
    """A fresh local work directory for one run's files, and the storage that reaches it."""
    root = tempfile.mkdtemp(prefix="segjobs-table-")
    return open_storage(root), root


def remove_work_dir(root: str) -> None:
    shutil.rmtree(root, ignore_errors=True)


def prepare(storage: Storage, work: Storage, root: str, *, partition: int, start: int, end: int, rebuild: bool,
            segments: list[tuple[str, bool]], aborted: AbortedTxns | None, records: int, table_keys: Any,
            table_rows: int, latest_buffer_bytes: int, max_batch_bytes: int | None,
            spool: TaskSpool | None = None) -> SortedPartition:
    """Stages 1 and 2 (see the module docstring) for one partition. ``segments``: ``(uri, allow a truncated
    tail)`` of the range, in offset order; ``records``: an upper bound of their records; ``table_keys``: an
    iterable of the table's key arrays of the partition (batches), ``table_rows`` how many; ``spool``: on an
    object store, where the segments are kept between this pass and :func:`read_rows_of`'s (fetched once)."""
    aborted = aborted if aborted is not None else AbortedTxns.empty()
    out = SortedPartition(partition, start, end, rebuild, segments)
    # (never more buckets than rows: a bound below one row's bytes still makes a bucket a row)
    buckets = out.buckets = min(bucket_count(records + table_rows, latest_buffer_bytes, 1),
                                max(1, records + table_rows))
    base = f"{root.rstrip('/')}/{partition}"
    pieces: list[tuple[str, np.ndarray]] = []
    ends = np.zeros(len(segments), np.int64)  # each segment's last offset + 1
    last = start
    for i, (uri, tail) in enumerate(segments):
        for j, (view, at) in enumerate(_pieces(storage, uri, tail, spool)):
            table = _located(at, decode_key_hashes_bytes, view, path=uri, max_batch_bytes=max_batch_bytes)
            del view
            out.counts.records_read += table.num_rows
            if table.num_rows:
                last = max(last, int(pc.max(table.column("offset")).as_py()) + 1)
            rows, counts = piece_of(table, first_dirty_offset=start, first_uncleanable_offset=end, aborted=aborted,
                                    buckets=buckets)
            del table
            if len(rows):
                pieces.append(_write_piece(work, f"{base}/segment-{i}-{j}.rows", rows, counts, buckets))
        ends[i] = last
    for j, keys in enumerate(table_keys):
        hi, lo = hash_keys(keys)
        n = len(hi)
        rows, counts = piece_rows(hi, lo, np.full(n, _IN_TABLE, np.int64), np.zeros(n, bool), np.ones(n, bool),
                                  buckets)
        if len(rows):
            pieces.append(_write_piece(work, f"{base}/table-{j}.rows", rows, counts, buckets))
    starts = [np.concatenate([[0], np.cumsum(c)[:-1]]) for _, c in pieces]
    columns = len(PIECE_COLUMNS)
    for b in range(buckets):
        parts = [read_rows(work, uri, int(s[b]), int(c[b]), columns) for (uri, c), s in zip(pieces, starts) if c[b]]
        if not parts:
            out.splits.append(np.zeros(len(segments), np.int64))
            out.keep_uris.append("")
            continue
        rows = np.concatenate(parts)
        del parts
        # per key: the smallest offset seen (_IN_TABLE: the table has it) and the latest eligible one (-1: none)
        offsets = np.where(rows[:, 2] == _IN_TABLE, _IN_TABLE, rows[:, 3])
        keyed = np.ones(len(rows), bool)
        per_key, _ = piece_rows(rows[:, 0], rows[:, 1], offsets, offsets >= 0, keyed, 1)
        del rows, offsets, keyed
        in_table = per_key[:, 2] == _IN_TABLE
        keep = per_key[:, 3] >= 0
        if rebuild:
            out.counts.deletes += int((in_table & ~keep).sum())
        kept = np.stack([per_key[keep, 3], in_table[keep].astype(np.int64)], axis=1)
        del per_key
        kept = kept[np.argsort(kept[:, 0], kind="stable")]
        out.keys += len(kept)
        uri = f"{base}/keep-{b}.rows"
        if len(kept):
            write_rows(work, uri, kept)
        out.keep_uris.append(uri if len(kept) else "")
        out.splits.append(np.searchsorted(kept[:, 0], ends, side="left").astype(np.int64))
    for uri, _ in pieces:
        work.delete(uri)
    return out


def _pieces(storage: Storage, uri: str, tail: bool,
            spool: TaskSpool | None = None) -> Iterator[tuple[memoryview, int]]:
    """A segment's bytes as views of whole batches, about :data:`PIECE_BYTES` each, with their byte position;
    an incomplete last batch of the ``tail`` segment (a broker still writing it) is left out. The views must
    be dropped before the next one is asked for. ``spool``: an active one holds the object store's segments."""

    # the active segment is read, not mapped: a broker may truncate it, and a mapping would then fault (a spool's
    # copy is the run's own)
    source = (spool.mapped(uri) if spool is not None and spool.active
              else nullcontext(storage.read(uri)) if tail else storage.read_mapped(uri))
    with source as data:
        view = memoryview(data)
        positions, _, rest = batch_positions(data, path=uri, allow_truncated_tail=tail)
        if len(positions):
            cuts = np.append(positions, len(view) - rest)
            wanted = np.arange(PIECE_BYTES, int(cuts[-1]), PIECE_BYTES)
            bounds = np.unique(np.concatenate([[0], np.searchsorted(cuts, wanted), [len(cuts) - 1]]))
            for a, b in zip(bounds[:-1], bounds[1:]):
                start, stop = int(cuts[a]), int(cuts[b])
                piece = view[start:stop]
                yield piece, start
                piece.release()
        del view


def _located(at: int, decode: Any, *args: Any, **kwargs: Any) -> Any:
    """``decode(*args, **kwargs)`` of a piece starting at byte ``at``, its errors' byte positions made the file's."""
    try:
        return decode(*args, **kwargs)
    except CorruptRecordError as exc:
        if at and exc.position is not None:
            exc.position += at
        raise


def _write_piece(work: Storage, uri: str, rows: np.ndarray, counts: np.ndarray,
                 buckets: int) -> tuple[str, np.ndarray]:
    write_rows(work, uri, rows)
    return uri, np.asarray(counts, np.int64).reshape(buckets)


def read_rows_of(storage: Storage, work: Storage, part: SortedPartition, *, topic: str, live_only: bool,
                 max_batch_bytes: int | None, spool: TaskSpool | None = None) -> Iterator[pa.RecordBatch]:
    """Stage 3: the partition's latest rows (TABLE_SCHEMA; tombstones included unless ``live_only``), a segment
    at a time in offset order, counting them into ``part.counts`` as they go; ``spool``: :func:`prepare`'s."""
    names = list(TABLE_SCHEMA.names)
    for i, (uri, tail) in enumerate(part.segments):
        shares = []
        for b, keep_uri in enumerate(part.keep_uris):
            lo = int(part.splits[b][i - 1]) if i else 0
            hi = int(part.splits[b][i])
            if hi > lo:
                shares.append(read_rows(work, keep_uri, lo, hi - lo, _KEEP_COLUMNS))
        if not shares:
            continue
        keep = np.concatenate(shares)
        keep = keep[np.argsort(keep[:, 0], kind="stable")]
        found = np.zeros(len(keep), bool)
        name = parse_segment_file(uri.rsplit("/", 1)[-1])
        for view, at_byte in _pieces(storage, uri, tail, spool):
            records = _located(at_byte, decode_segment_bytes, view, path=uri, topic=topic, partition=part.partition,
                               segment_base_offset=name[0] if name else None, columns=SOURCE_COLUMNS,
                               max_batch_bytes=max_batch_bytes)
            del view
            offsets = records.column("offset").to_numpy()
            if not len(offsets):
                continue
            lo_k, hi_k = np.searchsorted(keep[:, 0], [offsets[0], offsets[-1] + 1])
            want = keep[lo_k:hi_k]
            at = np.searchsorted(offsets, want[:, 0])
            hit = at < len(offsets)
            hit[hit] = offsets[at[hit]] == want[hit, 0]
            found[lo_k:hi_k] = hit
            rows = records.take(pa.array(at[hit])).select(names).cast(TABLE_SCHEMA)
            del records
            live = pc.is_valid(rows.column("value")).to_numpy(zero_copy_only=False)
            present = want[hit, 1].astype(bool)
            c = part.counts
            c.inserts += int((live & ~present).sum())
            c.updates += int((live & present).sum())
            c.deletes += int((~live & present).sum())
            c.tombstones_without_row += int((~live & ~present).sum())
            if live_only:
                rows = rows.filter(pa.array(live))
            yield from rows.to_batches(max_chunksize=BATCH_ROWS)
        if not found.all():
            missing = int(keep[~found, 0][0])
            raise LocatedError(f"offset {missing} was in the segment when the run listed its keys and is gone now: "
                               f"the log changed during the run (a compaction?); rerun the table",
                               path=uri, offset=missing)


__all__ = ["DEFAULT_LATEST_BUFFER_BYTES", "SortedCounts", "SortedPartition", "latest_bytes_bound", "prepare",
           "read_rows_of", "remove_work_dir", "work_dir"]
