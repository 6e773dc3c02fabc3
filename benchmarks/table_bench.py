"""``segjobs table``: rows/s of a first build and of a nightly increment of 1% new records.

A generated compacted topic (2 partitions, half of its records superseded, 2% tombstones, 100-byte values) is
written as segments; ``jobs.api.table`` builds the Delta table with the embedded ``deltalake`` writer (partitions
read in this process, as ``segjobs table`` does without spark-submit), then 1% more records arrive as a new
segment per partition and the next run applies them. Baseline in the same run: decoding the same segments alone
(``segment_io.read_segment``), the floor of any reader.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TOPIC = "bench"
PARTITIONS = 2


def _split(table: pa.Table, share: float) -> tuple[pa.Table, pa.Table]:
    """The first ``share`` of the records, and the rest starting at a batch boundary as a new segment."""
    base = table.column("batch_base_offset").to_numpy()
    cut = int(table.num_rows * share)
    while 0 < cut < table.num_rows and base[cut] == base[cut - 1]:
        cut += 1
    head, tail = table.slice(0, cut), table.slice(cut)
    if tail.num_rows:
        first = int(tail.column("offset")[0].as_py())
        tail = tail.set_column(tail.schema.get_field_index("segment_base_offset"), "segment_base_offset",
                               pa.array(np.full(tail.num_rows, first, np.int64)))
    return head, tail


def run(quick: bool = False, data_dir: Path = Path("bench-data")) -> list[dict]:
    from jobs import api
    from segment_io.decode import read_segment
    from segment_io.generate import GenerateSpec, synthetic_table
    from segment_io.layout import partition_dir_name
    from tests.support.builders import write_log

    per_partition = 100_000 if quick else 1_000_000
    root = data_dir / "table"
    shutil.rmtree(root, ignore_errors=True)
    log_dir, table_uri = root / "logs", root / "table"
    spec = GenerateSpec(topics=(TOPIC,), partitions=PARTITIONS, records=int(per_partition * 1.01),
                        superseded_share=0.5, tombstone_share=0.02, value_bytes=100, segment_bytes=16 << 20)
    rng = np.random.default_rng(spec.seed)
    tails = []
    for p in range(PARTITIONS):
        head, tail = _split(synthetic_table(spec, TOPIC, p, rng), 1 / 1.01)
        write_log(head, log_dir / partition_dir_name(TOPIC, p), segment_bytes=spec.segment_bytes)
        tails.append(tail)
    rows = []
    try:
        t0 = time.perf_counter()
        decoded = sum(read_segment(str(f)).num_rows for f in sorted(log_dir.glob("*/*.log")))
        t_decode = time.perf_counter() - t0

        options = api.TableOptions(table=str(table_uri), topic=TOPIC, writer="deltalake")
        seams = api.Seams(runner=api.InProcessTasks())
        t0 = time.perf_counter()
        first = api.table(log_dir, options, seams=seams)
        t_first = time.perf_counter() - t0
        assert first.exit_code == 0
        for p, tail in enumerate(tails):
            write_log(tail, log_dir / partition_dir_name(TOPIC, p))
        t0 = time.perf_counter()
        nightly = api.table(log_dir, options, seams=seams)
        t_night = time.perf_counter() - t0
        assert nightly.exit_code == 0 and nightly.version_after == 1
        live = int(pc.sum(pa.array([p.inserts for p in first.partitions])).as_py())
        rows.append({"case": "first build", "records": first.records_read, "rows_written": live,
                     "seconds": round(t_first, 2), "records_per_s": round(first.records_read / t_first),
                     "decode_only_records_per_s": round(decoded / t_decode),
                     "ratio_to_decode": round((first.records_read / t_first) / (decoded / t_decode), 3)})
        rows.append({"case": "nightly increment (1% new)", "records": nightly.records_read,
                     "upserts": nightly.inserts + nightly.updates, "deletes": nightly.deletes,
                     "seconds": round(t_night, 2), "records_per_s": round(nightly.records_read / t_night),
                     "table_rows": first.inserts + nightly.inserts - nightly.deletes,
                     # the night's cost is mostly fixed (scans of the partitions' headers, the MERGE's read of
                     # the touched files): the rows kept up to date per second of it
                     "table_rows_per_s": round((first.inserts + nightly.inserts - nightly.deletes) / t_night)})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows
