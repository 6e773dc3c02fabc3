"""Print the batches (and with --deep the records) of Kafka segment files: segjobs' kafka-dump-log.

PATH may be a .log file, a partition directory (all its segments), an .index/.timeindex/.txnindex file, a
checkpoint file (cleaner-offset-checkpoint, log-start-offset-checkpoint, leader-epoch-checkpoint, ...), or an
s3:// URI of any of these. --format jsonl prints one JSON object per record (key and value base64, null
when null). --verify checks every CRC, every record's framing and the sanity of the .index and .timeindex
beside each .log, and exits 1 on any problem, among them a compressed batch that inflates past --max-batch-bytes
(default 256 MiB, or SEGJOBS_MAX_BATCH_BYTES): a decompression bomb or corrupt data, never allocated beyond that
bound. Without --verify, dump exits 1 only when a file cannot be read
at all (no batch in a non-empty .log, an index or checkpoint that does not parse). A log dir, or a file that
is none of the above, exits 2 before anything is printed.

With --remote (a tiered topic's remote store; --remote-layout, default local-tiered-storage), a partition directory
is dumped as one log: its finished remote segments below the local log (per the __remote_log_metadata partitions of
its log dir), then its local segments; of a remote segment the local log overlaps, only the batches and records
below the first local offset are shown. A finished remote segment whose object is missing is a problem naming the
segment, its offsets and the object (exit 1); the other paths are still dumped.

examples:
  segjobs dump /var/kafka/logs/orders-0/00000000000000000000.log
  segjobs dump --deep /var/kafka/logs/orders-0
  segjobs dump --format jsonl s3://bucket/kafka/orders-0/00000000000000001000.log | jq .offset
  segjobs dump --verify /var/kafka/logs/orders-0
  segjobs dump --deep --remote /var/kafka/tiered /var/kafka/logs/clicks-0
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import IO

import numpy as np
import pyarrow as pa

from jobs.commands.args import (
    add_remote_options,
    exit_codes_help,
    positive_size_arg,
    remote_options_from_args,
    size_arg,
)
from jobs.logdir.tiered import RemoteOptions, read_tiered_plans, unreadable_error
from jobs.rules.tiered_read import SegmentSource
from jobs.rules.timeutil import format_instant
from segment_io import index, layout
from segment_io.aiven_manifest import CorruptRemoteObject, UnsupportedManifest
from segment_io.checkpoint import parse_leader_epoch_checkpoint, parse_offset_checkpoint
from segment_io.compression import CODEC_NAMES
from segment_io.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    SegjobsError,
    TruncatedBatchError,
    UsageError,
)
from segment_io.format import LOG_OVERHEAD, BatchHeaders, cut_short_error, scan_batches
from segment_io.remote_view import is_view, parse_view
from segment_io.storage import open_storage, scheme_of
from segment_io.storage.base import KIND_FILE, Storage


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="segment files, partition dirs, index files or s3:// URIs")
    p.add_argument("--deep", action="store_true", help="print every record, not only batch headers")
    p.add_argument("--format", choices=("text", "jsonl"), default="text",
                   help="text (default) or jsonl: one JSON object per record")
    p.add_argument("--verify", action="store_true",
                   help="check CRCs, record framing and index sanity; exit 1 on any problem")
    p.add_argument("--max-batch-bytes", type=positive_size_arg, default=None, metavar="SIZE",
                   help="the most bytes one compressed batch may inflate to; past it the batch is reported as "
                        "a decompression bomb (default: $SEGJOBS_MAX_BATCH_BYTES, else 256MiB)")
    p.add_argument("--max-value-bytes", type=size_arg, default=64, metavar="SIZE",
                   help="text format: show at most this many bytes of each key/value (default: 64; -1: all)")
    add_remote_options(p)
    p.epilog = exit_codes_help(
        done="every path dumped (with --verify: and no problem found)",
        failed="a file could not be read at all (a non-empty .log in which not one batch reads, an index or "
               "checkpoint that does not parse; with --remote, a finished remote segment whose object is missing); "
               "with --verify, any problem: a CRC, a record's framing, an index, a batch inflating past "
               "--max-batch-bytes",
        nothing_done="nothing was printed: a usage error, such as a log dir, a missing path, or a file that is no "
                     "segment, index or checkpoint",
        interrupted="interrupted (Ctrl-C): the output stops where it was")


#: A segment of a tiered partition read as one log: the partition and the segment's source (None: a file as it is).
Part = tuple[tuple[str, int], SegmentSource] | None
#: Index file suffixes dump reads (a ``.snapshot`` is a producer-state snapshot, not an index).
INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")
#: Checkpoint files dump reads: the per-log-dir offset checkpoints and the per-partition leader epochs.
CHECKPOINT_FILES = (*layout.OFFSET_CHECKPOINT_FILES, layout.LEADER_EPOCH_CHECKPOINT)
_WHAT_DUMP_READS = ("dump reads .log segments, .index/.timeindex/.txnindex files, checkpoint files "
                    "and partition directories")


def _expand(storage: Storage, path: str) -> tuple[list[str], list[SegjobsError]]:
    """Files to dump for ``path`` (a file is itself, a partition directory expands to its segment files in
    base-offset order), and a problem for every entry bearing a segment file's name that is not a regular file
    (a dangling symbolic link, a directory, a FIFO, ...): a partition holding one cannot be read, so it must not
    verify OK. ``UsageError`` for a log dir (with the partition dirs to pick from), a directory without segment
    files, or nothing at all."""
    if storage.exists(path):
        return [path], []
    entries = storage.list(path, irregular=True)
    files = [f for f in entries if f.kind == KIND_FILE]
    problems: list[SegjobsError] = [layout.irregular_entry_error(f) for f in entries
                                    if f.kind != KIND_FILE and layout.parse_segment_file(f.name)]
    segs = sorted((parsed[0], f.uri) for f in files
                  if (parsed := layout.parse_segment_file(f.name)) and parsed[1] == ".log" and not parsed[2])
    if segs or problems:
        return [uri for _, uri in segs], problems
    dirs = storage.list_dirs(path)
    partitions = [d.rstrip("/") for d in dirs if layout.parse_partition_dir(d.rstrip("/").rsplit("/", 1)[-1])]
    if partitions:
        names = [d.rsplit("/", 1)[-1] for d in partitions]
        more = f" and {len(names) - 5} more" if len(names) > 5 else ""
        raise UsageError(f"{path} is a log dir, not a partition dir or segment file: dump one of its partitions, "
                         f"e.g. `segjobs dump {partitions[0]}` (partitions: {', '.join(names[:5])}{more})")
    if entries or dirs:
        raise UsageError(f"{path}: no segment files (.log) found; {_WHAT_DUMP_READS}")
    raise UsageError(f"{path}: no such file or directory")


def _kind(storage: Storage, uri: str) -> str:
    """``log``, ``index`` or ``checkpoint``: what ``uri`` holds, by its name, and for a name that says
    nothing, by whether its first bytes frame a Kafka batch. ``UsageError`` for anything else."""
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    parsed = layout.parse_segment_file(name)
    suffix = parsed[1] if parsed else None
    if name in CHECKPOINT_FILES:
        return "checkpoint"
    if suffix in INDEX_SUFFIXES or (parsed is None and name.endswith(INDEX_SUFFIXES)):
        return "index"
    if suffix == ".log" or name.endswith(".log"):
        return "log"
    if suffix == layout.SNAPSHOT_SUFFIX:
        raise UsageError(f"{uri} is a producer-state snapshot, which dump does not read; {_WHAT_DUMP_READS}")
    why = _not_a_batch_start(storage.read_range(uri, 0, LOG_OVERHEAD + 5))
    if why:
        raise UsageError(f"{uri} is not a Kafka segment, index or checkpoint file ({why}); {_WHAT_DUMP_READS}")
    return "log"  # a segment under another name (a copy, a download): its bytes say so


def _not_a_batch_start(head: bytes) -> str | None:
    """Why ``head`` (a file's first bytes) cannot start a segment; None when it frames a batch."""
    if len(head) < LOG_OVERHEAD + 5:
        return f"{len(head)} bytes: shorter than a batch header" if head else "empty, and not named .log"
    if not any(head):  # zeros frame as a tail a broker preallocated, but nothing says a file of them is a segment
        return "it starts with zero bytes, and is not named .log"
    try:
        scan_batches(head, allow_truncated_tail=True)  # magic and batch length checks, nothing else
    except CorruptRecordError as exc:
        return f"byte 0 does not start a batch: {exc.detail}"
    if int.from_bytes(head[:8], "big", signed=True) < 0:
        return "byte 0 does not start a batch: negative base offset"
    return None


def _show(b: bytes | None, limit: int) -> str:
    if b is None:
        return "null"
    text = b if limit < 0 else b[:limit]
    try:
        s = text.decode("utf-8")
        s = s if s.isprintable() else repr(text)[2:-1]
    except UnicodeDecodeError:
        s = repr(text)[2:-1]
    return s + (f"...(+{len(b) - limit} bytes)" if 0 <= limit < len(b) else "")


def _batch_line(h: BatchHeaders, i: int, crc_ok: bool | None) -> str:
    magic = int(h.magic[i])
    codec = CODEC_NAMES.get(int(h.codec[i]), str(int(h.codec[i])))
    horizon = int(h.base_timestamp[i]) if bool(h.has_delete_horizon[i]) else None
    ts_type = "LogAppendTime" if int(h.attributes[i]) & 0x08 else "CreateTime"
    count = int(h.record_count[i])
    seq = int(h.base_sequence[i])
    last_seq = seq + (int(h.last_offset[i]) - int(h.base_offset[i])) if seq >= 0 else -1
    return (f"baseOffset: {int(h.base_offset[i])} lastOffset: {int(h.last_offset[i])} "
            f"count: {count if count >= 0 else '?'} position: {int(h.position[i])} size: {int(h.size[i])} "
            f"magic: {magic} compresscodec: {codec} {ts_type}: {int(h.max_timestamp[i])} "
            f"producerId: {int(h.producer_id[i])} producerEpoch: {int(h.producer_epoch[i])} "
            f"baseSequence: {seq} lastSequence: {last_seq} "
            f"partitionLeaderEpoch: {int(h.partition_leader_epoch[i])} "
            f"isTransactional: {str(bool(h.transactional[i])).lower()} isControl: {str(bool(h.control[i])).lower()} "
            f"deleteHorizonMs: {horizon if horizon is not None else '-'}"
            + ("" if crc_ok is None else f" crcValid: {str(crc_ok).lower()}"))


def _dump_index(storage: Storage, uri: str, out: IO[str]) -> list[SegjobsError]:
    data = storage.read(uri)
    name = uri.rsplit("/", 1)[-1]
    parsed = layout.parse_segment_file(name)
    base = parsed[0] if parsed else 0
    problems: list[SegjobsError] = []
    try:
        if name.endswith(".timeindex"):
            entries = index.read_time_index(data, path=uri)
            out.write(f"Dumping {uri}: {len(entries)} time index entries\n")
            for t, r in zip(entries.timestamp.tolist(), entries.relative_offset.tolist()):
                out.write(f"timestamp: {t} offset: {base + r}\n")
        elif name.endswith(".index"):
            offsets = index.read_offset_index(data, path=uri)
            out.write(f"Dumping {uri}: {len(offsets)} offset index entries\n")
            for r, p in zip(offsets.relative_offset.tolist(), offsets.position.tolist()):
                out.write(f"offset: {base + r} position: {p}\n")
        elif name.endswith(".txnindex"):
            aborted = index.read_txn_index(data, path=uri)
            out.write(f"Dumping {uri}: {len(aborted)} aborted transactions\n")
            for e in aborted:
                out.write(f"producerId: {e.producer_id} firstOffset: {e.first_offset} lastOffset: {e.last_offset} "
                          f"lastStableOffset: {e.last_stable_offset}\n")
    except CorruptIndexError as exc:
        problems.append(exc)
    return problems


def _dump_log(storage: Storage, uri: str, args: argparse.Namespace, out: IO[str],
              part: Part = None) -> tuple[list[SegjobsError], bool]:
    """Dump one segment file: (its problems, whether it is readable: empty or holding at least one batch). ``part``:
    the segment is a source of a tiered partition's log, whose batches and records outside its kept offsets are
    not shown."""
    from segment_io.decode import decode_segment_bytes, verify_segment_crcs  # start-up: numba kernels (~0.15 s)

    try:
        data = storage.read(uri)
    except (CorruptRemoteObject, UnsupportedManifest) as exc:  # a remote segment's stored form cannot be restored
        return [exc], False
    problems: list[SegjobsError] = []
    whole = data
    framing: CorruptRecordError | None = None
    try:
        headers = scan_batches(data, path=uri, allow_truncated_tail=True)
    except CorruptRecordError as exc:
        if not exc.position:
            return [exc], False
        # the batches before the damage are shown, and the damage named after them (as a batch cut short is)
        framing, data = exc, data[:exc.position]
        headers = scan_batches(data, path=uri, allow_truncated_tail=True)
    if headers.truncated_tail:
        problems.append(cut_short_error(data, headers.truncated_tail, uri,
                                        f"last {headers.truncated_tail} bytes do not form a whole batch (what a "
                                        f"crash leaves)"))
    if framing is not None:
        problems.append(framing)
    crc_errors: dict[int, CorruptRecordError] = {}
    if args.verify or args.format == "text":
        for err in verify_segment_crcs(whole, path=uri, max_batch_bytes=args.max_batch_bytes):
            if isinstance(err, TruncatedBatchError) or (framing is not None and err.position == framing.position):
                continue  # the tail and the damage that ends the batches, named once, above
            if err.position is not None:
                crc_errors[err.position] = err
            problems.append(err)
    source = part[1] if part is not None else None
    if args.verify:
        problems.extend(_verify_indexes(storage, uri, headers, source))
    records = None
    if args.deep or args.format == "jsonl" or args.verify:
        parent = uri.rstrip("/").rsplit("/", 2)
        where = part[0] if part is not None else layout.parse_partition_dir(parent[-2]) if len(parent) >= 2 else None
        topic, partition = where if where else ("", -1)
        name = layout.parse_segment_file(parent[-1])
        base = source.base_offset if source is not None else name[0] if name else None
        try:
            records = decode_segment_bytes(data, path=uri, allow_truncated_tail=True, verify_crc=False, topic=topic,
                                           partition=partition, segment_base_offset=base,
                                           max_batch_bytes=args.max_batch_bytes)
        except CorruptRecordError as exc:
            problems.append(exc)
    first, last = _kept(source)
    shown = (headers.last_offset >= first) & (headers.base_offset <= last)
    if records is not None and (first, last) != _ALL:
        offsets = records["offset"].to_numpy()
        records = records.filter(pa.array((offsets >= first) & (offsets <= last)))
    if args.format == "jsonl":
        if records is not None:
            _write_jsonl(records, out)
    else:
        shown_uri = parse_view(uri).log_uri if is_view(uri) else uri  # the object in the remote store, not its view
        out.write(f"Dumping {shown_uri}" + (f": {source.describe()}" if source is not None and source.is_remote else "")
                  + "\n")
        rec_pos = records["batch_position"].to_numpy() if records is not None else None
        starts = np.searchsorted(rec_pos, headers.position) if rec_pos is not None else None
        ends = np.searchsorted(rec_pos, headers.position, side="right") if rec_pos is not None else None
        for i in np.flatnonzero(shown).tolist():
            ok = int(headers.position[i]) not in crc_errors
            out.write(_batch_line(headers, i, ok) + "\n")
            if args.deep and records is not None and starts is not None and ends is not None:
                _write_records_text(records.slice(int(starts[i]), int(ends[i] - starts[i])), args.max_value_bytes, out)
    return problems, bool(len(headers)) or not data


def _verify_indexes(storage: Storage, log_uri: str, headers: BatchHeaders,
                    source: SegmentSource | None = None) -> list[SegjobsError]:
    """The problems of the ``.index`` and ``.timeindex`` beside a segment (a tiered source's: its own objects)."""
    prefix = log_uri[: -len(".log")]
    if source is not None:
        files = source.files
        uris = {".index": files.index.uri if files.index else None,
                ".timeindex": files.timeindex.uri if files.timeindex else None}
        base = source.base_offset
    else:
        parsed = layout.parse_segment_file(log_uri.rsplit("/", 1)[-1])
        if not parsed:
            return []
        uris = {suffix: prefix + suffix for suffix in (".index", ".timeindex")}
        base = parsed[0]
    data = {suffix: storage.read(uri) if uri is not None and storage.exists(uri) else None
            for suffix, uri in uris.items()}
    return list(index.check_indexes(headers, data[".index"], data[".timeindex"], path=prefix,
                                    segment_base_offset=base))


#: every offset: what a segment dumped as it is shows
_ALL = (np.iinfo(np.int64).min, np.iinfo(np.int64).max)


def _kept(source: SegmentSource | None) -> tuple[int, int]:
    """The offsets of a tiered source to show (inclusive); every offset for a segment dumped as it is."""
    if source is None or not source.trimmed or source.keep_last is None:
        return _ALL
    return source.keep_first, source.keep_last


def _write_records_text(records: pa.Table, limit: int, out: IO[str]) -> None:
    cols = records.select(["offset", "timestamp", "key", "value", "headers"]).to_pydict()
    for off, ts, k, v, hs in zip(cols["offset"], cols["timestamp"], cols["key"], cols["value"], cols["headers"]):
        hk = ",".join(h["key"] for h in hs)
        out.write(f"| offset: {off} timestamp: {ts} ({format_instant(ts)}) keySize: {len(k) if k is not None else -1} "
                  f"valueSize: {len(v) if v is not None else -1} headerKeys: [{hk}] key: {_show(k, limit)} "
                  f"payload: {_show(v, limit)}\n")


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


def _write_jsonl(records: pa.Table, out: IO[str]) -> None:
    for chunk in records.to_batches(max_chunksize=10_000):
        d = chunk.to_pydict()
        for i in range(chunk.num_rows):
            out.write(json.dumps({
                "topic": d["topic"][i], "partition": d["partition"][i], "offset": d["offset"][i],
                "timestamp": d["timestamp"][i], "timestamp_type": d["timestamp_type"][i],
                "key": _b64(d["key"][i]), "value": _b64(d["value"][i]),
                "headers": [{"key": h["key"], "value": _b64(h["value"])} for h in d["headers"][i]],
                "batch_base_offset": d["batch_base_offset"][i], "producer_id": d["producer_id"][i],
                "transactional": d["transactional"][i], "control": d["control"][i],
                "delete_horizon_ms": d["delete_horizon_ms"][i],
            }, separators=(",", ":")) + "\n")


def _dump_checkpoint(storage: Storage, uri: str, out: IO[str]) -> list[SegjobsError]:
    text = storage.read(uri).decode("utf-8", errors="replace")
    try:
        if uri.rsplit("/", 1)[-1] == layout.LEADER_EPOCH_CHECKPOINT:
            epochs = parse_leader_epoch_checkpoint(text, path=uri)
            out.write(f"Dumping {uri}: {len(epochs)} leader epochs\n")
            for e in epochs:
                out.write(f"epoch: {e.epoch} startOffset: {e.start_offset}\n")
        else:
            offsets = parse_offset_checkpoint(text, path=uri)
            out.write(f"Dumping {uri}: {len(offsets)} partitions\n")
            for (topic, partition), offset in offsets.items():
                out.write(f"partition: {topic}-{partition} offset: {offset}\n")
    except CorruptCheckpointError as exc:
        return [exc]
    return []


def _tiered(storage: Storage, path: str, remote: RemoteOptions) -> tuple[list[tuple[Storage, str, str, Part]],
                                                                           list[SegjobsError]]:
    """The segments of the partition dir ``path`` read as one log (see the module docstring), or the problem that
    its plan cannot be read."""
    parent, _, name = path.rstrip("/").rpartition("/")
    tp = layout.parse_partition_dir(name)
    if tp is None:
        raise UsageError(f"{path}: --remote dumps a partition directory (<topic>-<partition>) as one log")
    failed: dict[tuple[str, int], SegjobsError] = {}
    plan = read_tiered_plans(storage, layout.list_log_dir(storage, parent), remote, partitions=[tp],
                             errors=failed).get(tp)
    if tp in failed:
        return [], [failed[tp]]
    if plan is None:  # the remote log metadata's own partition: no user data, read as it is
        return [(storage, uri, _kind(storage, uri), None) for uri in _expand(storage, path)[0]], []
    error = unreadable_error(plan)
    if error is not None:
        return [], [error]
    stores = {scheme_of(path): storage}
    for s in plan.sources:
        if scheme_of(s.uri) not in stores:
            stores[scheme_of(s.uri)] = open_storage(s.uri)
    return [(stores[scheme_of(s.uri)], s.uri, "log", (tp, s)) for s in plan.sources], []


def run(args: argparse.Namespace) -> int:
    """Dump every PATH; exit 0, or 1 when a file could not be read at all (or, with --verify, on any
    problem). Paths are checked before anything is printed: a mistake (a log dir, a file that is neither a
    segment, an index nor a checkpoint) exits 2 with nothing on stdout."""
    out = sys.stdout
    remote = remote_options_from_args(args)
    todo: list[tuple[Storage, str, str, Part]] = []
    problems: list[SegjobsError] = []
    unreadable = 0
    for path in args.paths:
        storage = open_storage(path)
        uris, irregular = _expand(storage, path)
        problems.extend(irregular)
        if remote is not None and not storage.exists(path):
            planned, failed = _tiered(storage, path, remote)
            todo += planned
            problems.extend(failed)
            unreadable += len(failed)
            continue
        todo += [(storage, uri, _kind(storage, uri), None) for uri in uris]
    for storage, uri, kind, part in todo:
        if kind == "log":
            found, readable = _dump_log(storage, uri, args, out, part)
        else:
            found = (_dump_index if kind == "index" else _dump_checkpoint)(storage, uri, out)
            readable = not found  # an index or checkpoint that does not parse shows nothing
        problems.extend(found)
        unreadable += not readable
    for p in problems:
        print(f"problem: {p}", file=sys.stderr)
    if unreadable:
        print(f"{unreadable} file(s) could not be read at all", file=sys.stderr)
    if args.verify:
        print(f"verify: {'OK' if not problems else f'{len(problems)} problem(s)'}", file=sys.stderr)
    return 1 if unreadable or (problems and args.verify) else 0
