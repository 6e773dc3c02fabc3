"""Writes the remote store of Aiven's tiered-storage-for-apache-kafka from LocalTieredStorage's tree: the same
segments, laid out and chunked as that plugin lays them out (segment_io.aiven_manifest describes the format),
with each segment's manifest built from the remote log metadata.

The plugin's jars are not on Maven Central, so no broker of ours can write this layout: the fixtures under
tests/data/kafka-tiered-aiven/ are this module's output (its SOURCES.md says so). Run

    python -m tests.support.aiven_store [OUT_DIR]

to write them again from tests/data/kafka-tiered/kafka-4.1.1/ (OUT_DIR: tests/data/kafka-tiered-aiven/ by default).
"""

from __future__ import annotations

import base64
import json
import shutil
import struct
import sys
from pathlib import Path

import cramjam

from segment_io.remote_layout import LocalTieredStorageLayout
from segment_io.remote_metadata import SegmentMetadata, read_metadata_partition
from segment_io.storage import open_storage

ROOT = Path(__file__).resolve().parents[1] / "data"
SOURCE = ROOT / "kafka-tiered" / "kafka-4.1.1"
OUT = ROOT / "kafka-tiered-aiven"
#: the variants written: directory -> (chunk size, compressed). The segments are 1461 bytes: the compressed
#: variant has three chunks per segment, the plain one two
VARIANTS = {"compressed": (512, True), "plain": (1024, False)}
#: LocalTieredStorage's index files in the order the plugin concatenates them, with the manifest's names
INDEXES = ((".index", "offset"), (".timeindex", "timestamp"), (".snapshot", "producerSnapshot"),
           (".leader_epoch_checkpoint", "leaderEpoch"), (".txnindex", "transaction"))


def pack_chunk_sizes(sizes: list[int]) -> bytes:
    """The packed form of a variable chunk index's sizes (the inverse of
    :func:`segment_io.aiven_manifest.unpack_chunk_sizes`)."""
    if len(sizes) <= 1:
        return struct.pack(">i", len(sizes)) + b"".join(struct.pack(">i", v) for v in sizes)
    base = min(sizes[:-1])
    width = max(max((v - base).bit_length() for v in sizes[:-1]) + 7, 8) // 8
    body = b"".join((v - base).to_bytes(width, "big") for v in sizes[:-1])
    return struct.pack(">iiB", len(sizes), base, width) + body + struct.pack(">i", sizes[-1])


def _chunk_index(segment: bytes, chunk_size: int, compressed: bool) -> tuple[dict, bytes]:
    chunks = [segment[i:i + chunk_size] for i in range(0, len(segment), chunk_size)]
    if not compressed:
        return ({"type": "fixed", "originalChunkSize": chunk_size, "originalFileSize": len(segment),
                 "transformedChunkSize": chunk_size, "finalTransformedChunkSize": len(chunks[-1]) if chunks else 0},
                segment)
    stored = [bytes(cramjam.zstd.compress(c)) for c in chunks]
    packed = bytes(cramjam.zstd.compress(pack_chunk_sizes([len(s) for s in stored] or [0])))
    return ({"type": "variable", "originalChunkSize": chunk_size, "originalFileSize": len(segment),
             "transformedChunks": base64.b64encode(packed).decode()}, b"".join(stored))


def _segment_metadata_json(m: SegmentMetadata) -> dict:
    p = m.partition
    return {"remoteLogSegmentId": {"topicIdPartition": {"topicId": p.topic_id, "topicPartition": {
                "topic": p.topic, "partition": p.partition}}, "id": m.segment_id},
            "startOffset": m.start_offset, "endOffset": m.end_offset, "maxTimestampMs": m.max_timestamp_ms,
            "brokerId": m.broker_id, "eventTimestampMs": m.event_timestamp_ms,
            "segmentLeaderEpochs": {str(e): o for e, o in m.leader_epochs}}


def write_store(out: Path, *, chunk_size: int, compressed: bool, source: Path = SOURCE) -> None:
    """Write the Aiven layout of ``source``'s remote segments under ``out``."""
    metadata = {m.segment_id: m for _, m in read_metadata_partition(str(source / "logs" / "__remote_log_metadata-0"))
                if isinstance(m, SegmentMetadata)}
    remote = str(source / "remote" / "kafka-tiered-storage")
    listing = LocalTieredStorageLayout().list(open_storage(remote), remote)
    for (topic_id, partition, segment_id), objs in sorted(listing.by_segment().items()):
        files = {o.suffix: Path(o.uri).read_bytes() for o in objs}
        meta = metadata[segment_id]
        index, log = _chunk_index(files[".log"], chunk_size, compressed)
        indexes, positions, at = b"", {}, 0
        for suffix, name in INDEXES:
            data = files.get(suffix)
            if data is None:
                positions[name] = None
                continue
            positions[name] = {"position": at, "size": len(data)}
            indexes, at = indexes + data, at + len(data)
        manifest = {"version": "1", "chunkIndex": index, "segmentIndexes": positions, "compression": compressed,
                    "remoteLogSegmentMetadata": _segment_metadata_json(meta)}
        base = out / f"{meta.partition.topic}-{topic_id}" / str(partition) / f"{meta.start_offset:020d}-{segment_id}"
        base.parent.mkdir(parents=True, exist_ok=True)
        base.with_name(base.name + ".log").write_bytes(log)
        base.with_name(base.name + ".indexes").write_bytes(indexes)
        base.with_name(base.name + ".rsm-manifest").write_text(json.dumps(manifest, separators=(",", ":")))


def main(argv: list[str]) -> None:
    out = Path(argv[0]) if argv else OUT
    for name, (chunk_size, compressed) in VARIANTS.items():
        shutil.rmtree(out / name, ignore_errors=True)
        write_store(out / name, chunk_size=chunk_size, compressed=compressed)
        print(f"wrote {out / name}")


if __name__ == "__main__":
    main(sys.argv[1:])
