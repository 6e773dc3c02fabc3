"""``segjobs table``: rows/s of a first build and of a nightly increment of 1% new records.

A generated compacted topic (2 partitions, half of its records superseded, 2% tombstones, 100-byte values) is
written as segments; ``jobs.api.table`` builds the Delta table with the embedded ``deltalake`` writer (partitions
read in this process, as ``segjobs table`` does without spark-submit), then 1% more records arrive as a new
segment per partition and the next run applies them. Baseline in the same run: decoding the same segments alone
(``segment_io.read_segment``), the floor of any reader.

More keys than memory: one partition of distinct keys (200,000 with ``--quick``, 2 M otherwise; 20-byte values),
a first build in a fresh process with the in-memory dedupe (``latest_buffer_bytes`` above the range) and with
the on-disk one (a 16 MiB bound), each process's peak RSS (``VmHWM``, which includes the interpreter and the
imports: the ``baseline`` row is a process that only imports them).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
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
    rows.extend(more_keys_than_memory(200_000 if quick else 2_000_000, data_dir / "table-keys"))
    return rows


#: What a measured process runs: a first build with the given bound (or none), printing its peak RSS.
_CHILD = """
import json, os, sys, time
from benchmarks.memory import _status_kb
from jobs import api
log_dir, table, bound = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = time.perf_counter()
if bound:
    r = api.table(log_dir, api.TableOptions(table=table, topic="keys", writer="deltalake", latest_buffer_bytes=bound,
                                            progress=lambda line: None),
                  seams=api.Seams(runner=api.InProcessTasks()))
    assert r.exit_code == 0, r.partitions
    out = {"rows": r.inserts, "dedupe": r.partitions[0].dedupe}
else:
    out = {}
out.update(seconds=round(time.perf_counter() - t0, 2),
           peak_rss_mib=round(_status_kb(os.getpid(), ("VmHWM",))["VmHWM"] / 2**20))
print(json.dumps(out))
"""


def more_keys_than_memory(keys: int, root: Path) -> list[dict]:
    """Peak RSS of a first build of ``keys`` distinct keys, in-memory dedupe vs on disk (see the docstring)."""
    from segment_io.generate import GenerateSpec, synthetic_table
    from segment_io.layout import partition_dir_name
    from tests.support.builders import write_log

    shutil.rmtree(root, ignore_errors=True)
    spec = GenerateSpec(topics=("keys",), partitions=1, records=keys, superseded_share=0.0, tombstone_share=0.0,
                        value_bytes=20, segment_bytes=64 << 20, batch_records=200)
    log_dir = root / "logs"
    write_log(synthetic_table(spec, "keys", 0, np.random.default_rng(spec.seed)),
              log_dir / partition_dir_name("keys", 0), segment_bytes=spec.segment_bytes)
    log_bytes = sum(f.stat().st_size for f in log_dir.glob("*/*.log"))
    rows = []
    try:
        cases = (("baseline (imports only)", 0), ("in memory", 1 << 40), ("on disk, 16 MiB bound", 16 << 20))
        for case, bound in cases:
            table = root / f"table-{bound}"
            out = subprocess.run([sys.executable, "-c", _CHILD, str(log_dir), str(table), str(bound)], check=True,
                                 capture_output=True, text=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append({"case": f"{keys:,} keys: {case}", "log_mib": round(log_bytes / 2**20, 1), **result})
            shutil.rmtree(table, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows
