"""What the end-to-end sections measure segjobs against, in the same run on the same bytes, plus the shared
set-up they need (generated log dirs, a Spark session whose start-up is timed on its own).

Baselines:

* :func:`kafka_python_compact`: a straightforward compactor built on kafka-python, the independent
  pure-Python implementation of the record format. It reads every batch of a partition, keeps the last
  record per key in a dict, and rewrites the survivors in offset order with kafka-python's batch builder.
  Honest but simple: no offset map bound, no transactions, no indexes (a real compactor has more to do, so
  it only gets slower).
* :func:`read_write_floor`: the time to merely read the input twice (the compactor needs two passes: one
  to map keys, one to rewrite) and write the output once, with fsync. No compactor can beat it by much
  on the same disk and page cache.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

#: Record size on the wire for a 16 B key and a 1000 B value, batch overhead included (measured: the
#: generator's output divided by its record count); turns a byte budget into a record count.
BYTES_PER_1KB_RECORD = 1028

_spark_startup_s: float | None = None


def timed_session(master: str = "local[2]") -> tuple[Any, float]:
    """The segjobs Spark session and the seconds its first creation in this process took.

    Every section reports start-up separately from its job times; sections after the first reuse the
    session (as ``getOrCreate`` would in a notebook) and report the start-up measured by the first. Start-up
    includes the Python workers: their daemon's preload (imports and kernels, a second or two) happens at a
    session's first Python task, which would otherwise fall into whichever job a section times first.
    """
    global _spark_startup_s
    from jobs.engine.runtime.spark_session import build_session

    t0 = time.perf_counter()
    spark = build_session(app_name="segjobs-bench", master=master)
    slots = spark.sparkContext.defaultParallelism
    spark.sparkContext.parallelize(range(slots), slots).map(abs).collect()  # one task per worker slot
    if _spark_startup_s is None:
        _spark_startup_s = time.perf_counter() - t0
    return spark, _spark_startup_s


def generate_bench_log_dir(out_dir: Path, total_bytes: int, *, partitions: int = 8, segment_bytes: int,
                           superseded_share: float = 0.5, batch_records: int = 50) -> tuple[Any, float]:
    """A fresh broker-style log dir of about ``total_bytes`` of 1 KB-value records (uncompressed, no
    tombstones, no transactions, ``batch_records`` records a batch) in ``partitions`` partitions of topic
    ``bench``; returns the generator's result and the seconds generation took."""
    from segment_io.generate import GenerateSpec, generate_log_dir

    if out_dir.exists():
        shutil.rmtree(out_dir)
    spec = GenerateSpec(topics=("bench",), partitions=partitions,
                        records=max(1, total_bytes // partitions // BYTES_PER_1KB_RECORD),
                        value_bytes=1000, superseded_share=superseded_share, tombstone_share=0.0,
                        segment_bytes=segment_bytes, batch_records=batch_records)
    t0 = time.perf_counter()
    result = generate_log_dir(spec, out_dir)
    return result, time.perf_counter() - t0


def log_files(log_dir: Path) -> list[Path]:
    """Every segment file (``*.log``) under ``log_dir``, sorted."""
    return sorted(log_dir.glob("*/*.log"))


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


# --------------------------------------------------------------------------------------------------
# kafka-python compactor
# --------------------------------------------------------------------------------------------------


@dataclass
class BaselineRun:
    """What the kafka-python compactor did to one partition."""

    seconds: float
    bytes_in: int
    bytes_out: int
    records_in: int
    records_out: int


def kafka_python_compact(partition_dir: Path, out_dir: Path, batch_bytes: int = 64 * 1024) -> BaselineRun:
    """Compact one partition dir with kafka-python: read all, keep the last record per key, rewrite.

    Survivors keep their offsets and timestamps: each output batch's base offset is patched in after
    kafka-python's builder (which writes base offset 0, as a producer does) has computed the CRC, which
    does not cover the base offset. Writes one ``.log`` file, fsynced, under ``out_dir``.
    """
    from kafka.record import MemoryRecords
    from kafka.record.default_records import DefaultRecordBatchBuilder

    t0 = time.perf_counter()
    latest: dict[bytes, tuple[int, int, bytes, bytes | None, list]] = {}
    bytes_in = records_in = 0
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        bytes_in += len(data)
        records = MemoryRecords(data)
        while (batch := records.next_batch()) is not None:
            if batch.is_control_batch:
                continue
            for r in batch:
                records_in += 1
                if r.key is not None:  # keyless records cannot be compacted: a compacted topic drops them
                    latest[r.key] = (r.offset, r.timestamp, r.key, r.value, r.headers)
    survivors = sorted(latest.values(), key=lambda s: s[0])

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{survivors[0][0] if survivors else 0:020d}.log"
    bytes_out = 0
    with open(target, "wb") as fh:
        i = 0
        while i < len(survivors):
            base = survivors[i][0]
            builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                                producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                                batch_size=batch_bytes)
            while i < len(survivors):
                offset, ts, key, value, headers = survivors[i]
                if builder.append(offset - base, ts, key, value, headers) is None:
                    break
                i += 1
            buf = builder.build()
            struct.pack_into(">q", buf, 0, base)
            fh.write(buf)
            bytes_out += len(buf)
        fh.flush()
        os.fsync(fh.fileno())
    return BaselineRun(time.perf_counter() - t0, bytes_in, bytes_out, records_in, len(survivors))



# --------------------------------------------------------------------------------------------------
# Read/write floor
# --------------------------------------------------------------------------------------------------


def read_write_floor(inputs: Iterable[Path], output_bytes: int, scratch_dir: Path,
                     chunk_bytes: int = 8 << 20) -> float:
    """Seconds to read every file of ``inputs`` into memory twice, then write ``output_bytes`` to one new
    file under ``scratch_dir`` and fsync it. The second read hits the page cache, as the compactor's
    second pass does."""
    files = list(inputs)
    scratch_dir.mkdir(parents=True, exist_ok=True)
    target = scratch_dir / "floor.out"
    chunk = os.urandom(min(chunk_bytes, max(1, output_bytes)))
    t0 = time.perf_counter()
    for _ in range(2):
        for f in files:
            with open(f, "rb") as fh:
                fh.read()
    with open(target, "wb") as fh:
        left = output_bytes
        while left > 0:
            n = min(left, len(chunk))
            fh.write(memoryview(chunk)[:n])
            left -= n
        fh.flush()
        os.fsync(fh.fileno())
    seconds = time.perf_counter() - t0
    target.unlink()
    return seconds
