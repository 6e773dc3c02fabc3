"""External-sort compaction against the memory strategy, on one big partition (issue 20).

Data: one generated partition of ``2 x keys`` records with 100 B values, half of them superseded (``keys``
distinct keys), uncompressed, in segments of ``min(records / 8 records' bytes, 512 MiB)`` (the topic's
``segment.bytes`` set to the same size, so every segment is a group of its own, as on a broker). Every job runs
through :func:`jobs.api.compact` on a fresh copy, at a fixed ``--now``, in one ``local[2]`` session built
beforehand; generated data is kept under ``--data-dir`` (reused by the next run when its spec matches: the
generator is deterministic).

Cases (10 M keys, 20 M records, 2.5 GB; ``--quick``: 1 M keys):

* ``external-sort``, one run, the default 128 MiB buffer: time, process-tree CPU time, peak RSS of the process
  tree and of its largest driver / JVM / Python worker process;
* ``memory`` with the same buffer, run after run until the map no longer fills (Kafka's multi-pass): the sum;
* ``memory`` with a buffer that holds every key: one pass; byte-identical to external-sort?
* ``local[1]`` against ``local[2]``: external-sort on the same data in two child processes (one Spark session
  each, start-up and a warm-up run excluded): parallelism inside one partition.

Targets (PASS/MISS): external-sort <= 1.5x the one big-buffer memory pass; faster than the sum of the partial
runs; ``local[2]`` >= 1.7x ``local[1]``; byte-identical output. ``--huge`` adds 50 M and 100 M keys: one
external-sort run each (>= 50 MB/s of input and tree peak RSS <= 6 GB at 100 M keys) and one memory pass with a
buffer for every key, compared by the SHA-256 of every file of the partition (each run works on hard links to
the input, so the data dir needs the input plus the output free: about 45 GB at 100 M keys; the 50 M input is
deleted after its case); their data is generated 4 M records at a time, every key exactly
twice at pseudo-random places (:func:`generated_in_chunks`; the project's generator holds a partition in
memory). The quick run's ratios are at 1 M keys, not the targets' size.

Run alone: ``python -m benchmarks.external_sort_bench --keys 1000000 --data-dir /tmp/bench`` (``--huge-only
100000000``: that case alone, on the data a ``--huge`` run kept); as a section:
``python -m benchmarks.run --only external-sort --data-dir DIR [--huge]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.baselines import log_files, timed_session, verdict
from benchmarks.memory import PeakRssByRole

FULL_KEYS = 10_000_000
QUICK_KEYS = 1_000_000
HUGE_KEYS = (50_000_000, 100_000_000)
VALUE_BYTES = 100
MAX_SEGMENT_BYTES = 512 << 20
DEFAULT_BUFFER = 128 << 20
TARGET_VS_BIG_BUFFER = 1.5
TARGET_SCALING = 1.7
TARGET_HUGE_MB_PER_S = 50
TARGET_HUGE_RSS_BYTES = 6_000_000_000
NOW = str(1_700_000_000_000 + 8 * 86_400_000)  # after every generated timestamp (7 days from the start)
PARTITION = "big-0"


def _tree_cpu_seconds() -> float:
    """User + system CPU seconds of this process and its live descendants (the JVM, the Python workers)."""
    import psutil

    root = psutil.Process(os.getpid())
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def segment_bytes_for(records: int) -> int:
    return max(1 << 20, min(MAX_SEGMENT_BYTES, records * (VALUE_BYTES + 40) // 8))


#: Records generated at a time for the huge cases (the generator builds a partition in memory, about 400 bytes a
#: record: 20 M records took 7.7 GB).
CHUNK_RECORDS = 4_000_000


def _mix(x: np.ndarray, bits: int) -> np.ndarray:
    """A bijection of [0, 2**bits): odd multiplications and xor-shifts modulo 2**bits."""
    mask = np.uint64((1 << bits) - 1)
    x = x.astype(np.uint64)
    for mult in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB):
        x = (x * np.uint64(mult)) & mask
        x ^= x >> np.uint64(max(1, bits // 2))
    return x


def _permuted(j: np.ndarray, n: int) -> np.ndarray:
    """Position ``j`` of a fixed pseudo-random permutation of [0, n) (cycle walking over :func:`_mix`)."""
    bits = max(2, (n - 1).bit_length())
    x = _mix(j, bits)
    out_of_range = x >= n
    while out_of_range.any():
        x[out_of_range] = _mix(x[out_of_range], bits)
        out_of_range = x >= n
    return x.astype(np.int64)


def generated_in_chunks(out: Path, keys: int, segment_bytes: int) -> None:
    """One partition of ``2 x keys`` records, every key exactly twice at pseudo-random places (record ``j`` has
    key ``perm(j) // 2``), written :data:`CHUNK_RECORDS` records at a time: memory stays bounded whatever the
    size (the huge cases)."""
    from segment_io import layout
    from segment_io.checkpoint import write_offset_checkpoint
    from segment_io.generate import GenerateSpec, _fixed_binary, _keys, _split_segments, synthetic_table
    from segment_io.segment_writer import write_segment
    from segment_io.storage import open_storage

    records = 2 * keys
    pdir = out / PARTITION
    pdir.mkdir(parents=True, exist_ok=True)
    base = GenerateSpec(topics=("big",), partitions=1, records=CHUNK_RECORDS, value_bytes=VALUE_BYTES,
                        superseded_share=0.5, tombstone_share=0.0, batch_records=200, segment_bytes=segment_bytes)
    chunks = -(-records // CHUNK_RECORDS)
    for c in range(chunks):
        n = min(CHUNK_RECORDS, records - c * CHUNK_RECORDS)
        first = c * CHUNK_RECORDS
        spec = replace(base, records=n, seed=c, start_ms=base.start_ms + base.span_ms * first // records,
                       span_ms=max(1, base.span_ms * n // records))
        table = synthetic_table(spec, "big", 0)
        ids = _permuted(np.arange(first, first + n, dtype=np.int64), records) // 2
        table = table.set_column(table.schema.get_field_index("key"), "key",
                                 _fixed_binary(_keys(ids, spec.key_bytes), spec.key_bytes))
        for name in ("offset", "batch_base_offset", "batch_last_offset"):
            i = table.schema.get_field_index(name)
            table = table.set_column(i, name, pa.array(table[name].to_numpy() + first))
        for seg in _split_segments(table, segment_bytes):
            start = int(seg["offset"][0].as_py())
            seg = seg.set_column(seg.schema.get_field_index("segment_base_offset"), "segment_base_offset",
                                 pa.array(np.full(seg.num_rows, start, dtype=np.int64)))
            write_segment(seg, str(pdir / layout.segment_file_name(start)),
                          index_interval_bytes=spec.index_interval_bytes)
        del table
    (pdir / layout.LEADER_EPOCH_CHECKPOINT).write_text("0\n1\n0 0\n")
    storage = open_storage(str(out))
    write_offset_checkpoint(storage, str(out / layout.LOG_START_OFFSET_CHECKPOINT), {("big", 0): 0})
    write_offset_checkpoint(storage, str(out / layout.CLEANER_OFFSET_CHECKPOINT), {})


def generated(root: Path, keys: int, *, chunked: bool = False, in_child: bool = False) -> tuple[Path, float]:
    """The log dir of ``keys`` keys under ``root`` (generated unless a previous run left the same one) and the
    seconds generation took (0 when reused). ``chunked``: :func:`generated_in_chunks` (the huge cases), else
    the project's generator (random keys, some more than twice), which holds the partition in memory."""
    from segment_io.generate import GenerateSpec, generate_log_dir

    records = 2 * keys
    spec = GenerateSpec(topics=("big",), partitions=1, records=records, value_bytes=VALUE_BYTES,
                        superseded_share=0.5, tombstone_share=0.0, batch_records=200,
                        segment_bytes=segment_bytes_for(records))
    out = root / f"src-{keys}"
    marker = root / f"src-{keys}.spec"
    text = f"chunked {CHUNK_RECORDS} {spec!r}" if chunked else repr(spec)
    if out.exists() and marker.exists() and marker.read_text() == text:
        return out, 0.0
    shutil.rmtree(out, ignore_errors=True)
    marker.unlink(missing_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if in_child:
        if chunked:
            generated_in_chunks(out, keys, segment_bytes_for(records))
        else:
            generate_log_dir(spec, out)
    else:
        # in a child process: what the generator allocated must not count in this process's RSS (the tree's)
        subprocess.run([sys.executable, "-m", "benchmarks.external_sort_bench", "--generate", str(root), str(keys),
                        "chunked" if chunked else "whole"], check=True, cwd=Path(__file__).resolve().parents[1])
        if not out.exists():
            raise RuntimeError(f"generation of {keys} keys in {root} failed")
    marker.write_text(text)
    return out, time.perf_counter() - t0


def _fresh(src: Path, work: Path, *, link: bool = False) -> None:
    """A fresh copy of ``src`` at ``work``. ``link``: hard links instead of copies (the huge cases, where a copy
    would need another 28 GB); safe because a run never writes into an existing file (it writes new files and
    renames them over), which :func:`_source_stats` checks after the runs."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(src, work, copy_function=os.link if link else shutil.copy2)
    # the copy's dirty pages written back now, not during the timed run (one run took 58 s against 21-28 s alone)
    os.sync()


def _source_stats(src: Path) -> dict[str, tuple[int, int]]:
    return {str(f.relative_to(src)): (f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(src.rglob("*"))
            if f.is_file()}


def _compact(spark: Any, work: Path, strategy: str, buffer: int, segment_bytes: int) -> tuple[float, dict]:
    """One run on ``work``: wall seconds and the partition's entry."""
    from jobs import api
    from jobs.rules.config import ConfigSet

    config = ConfigSet().with_overrides(["*:cleanup.policy=compact", f"*:segment.bytes={segment_bytes}"])
    options = api.CompactOptions(config=config, topics=("*",), strategy=strategy, dedupe_buffer_bytes=buffer,
                                 progress=lambda line: None)
    t0 = time.perf_counter()
    result = api.compact(work, options, now=NOW, spark=spark)
    wall = time.perf_counter() - t0
    if result.exit_code != 0:
        raise RuntimeError(f"{strategy}: exit {result.exit_code}: {result.errors}")
    (entry,) = [p.entry for p in result.partitions]
    return wall, entry


def _digest(work: Path) -> dict[str, str]:
    """SHA-256 of every file of the partition and of the cleaner checkpoint."""
    out = {}
    for f in sorted([*(work / PARTITION).iterdir(), work / "cleaner-offset-checkpoint"]):
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            while chunk := fh.read(16 << 20):
                h.update(chunk)
        out[f.name] = h.hexdigest()
    return out


def _memory_rows(mem: PeakRssByRole) -> dict[str, int]:
    return {"peak_rss_MB": round(mem.peak_bytes / 1e6), "driver_MB": mem.role_mb("driver")["peak_MB"],
            "jvm_MB": mem.role_mb("jvm")["peak_MB"], "worker_MB": mem.role_mb("python worker")["peak_MB"],
            "worker_anon_MB": mem.role_mb("python worker")["peak_anon_MB"]}


def _external(spark: Any, work: Path, input_bytes: int, segment_bytes: int) -> tuple[float, dict, dict]:
    """One external-sort run: seconds, the entry, and the row of the table."""
    cpu0 = _tree_cpu_seconds()
    with PeakRssByRole() as mem:
        s, entry = _compact(spark, work, "external-sort", DEFAULT_BUFFER, segment_bytes)
    cpu = _tree_cpu_seconds() - cpu0
    row = {"seconds": round(s, 1), "MB_per_s": round(input_bytes / s / 1e6, 1), "cpu_seconds": round(cpu, 1),
           "records_removed": entry["records_removed"], "partial": entry["partial"], **_memory_rows(mem),
           **entry.get("external_sort", {})}
    return s, entry, row


def compare(spark: Any, root: Path, keys: int, *, full: bool) -> tuple[list[dict], Path]:
    """External-sort, the partial memory runs and one big memory pass at ``keys`` keys; the rows and the source
    (kept for the scaling case)."""
    from jobs.rules.map_capacity import buffer_bytes_for_keys, max_keys_for_buffer

    src, gen_s = generated(root, keys)
    records = 2 * keys
    input_bytes = sum(f.stat().st_size for f in log_files(src))
    segment_bytes = segment_bytes_for(records)
    # the default buffer holds 5.03 M keys, half of the full case's; a quick run scales it to the same share
    buffer = DEFAULT_BUFFER if full else buffer_bytes_for_keys(max(1, keys // 2))
    big = buffer_bytes_for_keys(keys + 1)
    work = root / "work"
    rows: list[dict] = [{"bench": "input", "records": records, "keys": keys, "MB": round(input_bytes / 1e6),
                         "segments": len(log_files(src)), "generate_seconds": round(gen_s, 1),
                         "buffer_keys": max_keys_for_buffer(buffer),
                         "scaled": "no" if full else "yes: the buffer holds half the keys, as 128 MiB of 10 M"}]

    _fresh(src, work)
    ext_s, _, row = _external(spark, work, input_bytes, segment_bytes)
    ext_digest = _digest(work)
    rows.append({"bench": "external-sort, one run", **row})

    _fresh(src, work)
    runs, partial_s, removed = 0, 0.0, 0
    while True:
        s, entry = _compact(spark, work, "memory", buffer, segment_bytes)
        runs += 1
        partial_s += s
        removed += entry["records_removed"]
        if not entry["partial"] or runs > 50:
            break
    rows.append({"bench": f"memory, {buffer >> 20} MiB buffer, runs until complete", "runs": runs,
                 "seconds": round(partial_s, 1), "records_removed": removed})

    _fresh(src, work)
    with PeakRssByRole() as mem:
        big_s, entry = _compact(spark, work, "memory", big, segment_bytes)
    same = _digest(work) == ext_digest
    rows.append({"bench": f"memory, one pass, {big >> 20} MiB buffer", "seconds": round(big_s, 1),
                 "records_removed": entry["records_removed"], "partial": entry["partial"], **_memory_rows(mem)})
    shutil.rmtree(work, ignore_errors=True)
    size = "" if full else " (quick: 1 M keys, not the targets' 10 M)"
    rows += [
        {"bench": f"target: external-sort <= {TARGET_VS_BIG_BUFFER}x one memory pass{size}",
         "ratio": round(ext_s / big_s, 2), "verdict": verdict(ext_s / big_s <= TARGET_VS_BIG_BUFFER)},
        {"bench": f"target: external-sort faster than {runs} partial memory runs{size}",
         "ratio": round(ext_s / partial_s, 2), "verdict": verdict(ext_s < partial_s)},
        {"bench": "target: external-sort byte-identical to one memory pass", "verdict": verdict(same)},
    ]
    return rows, src


def _child(master: str, src: Path, work: Path, segment_bytes: int) -> dict:
    """In a child process: a ``master`` session, a warm-up run on a small copy, then the timed external-sort run
    on a copy of ``src``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark, _ = timed_session(master)
    warm, _ = generated(work.parent, 20_000)
    _fresh(warm, work)
    _compact(spark, work, "external-sort", DEFAULT_BUFFER, segment_bytes_for(40_000))
    _fresh(src, work)
    s, entry = _compact(spark, work, "external-sort", DEFAULT_BUFFER, segment_bytes)
    shutil.rmtree(work, ignore_errors=True)
    return {"seconds": s, "records_removed": entry["records_removed"]}


def scaling(root: Path, src: Path, keys: int, *, full: bool) -> list[dict]:
    """External-sort on ``src`` with ``local[1]`` and ``local[2]``, each in its own process."""
    times = {}
    for master in ("local[1]", "local[2]"):
        out = subprocess.run([sys.executable, "-m", "benchmarks.external_sort_bench", "--child", master, str(src),
                              str(root / "work"), str(segment_bytes_for(2 * keys))],
                             check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
        times[master] = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
    ratio = times["local[1]"] / times["local[2]"]
    size = "" if full else " (quick: 1 M keys)"
    return [{"bench": "external-sort, local[1] / local[2] (own processes, start-up excluded)",
             "local1_seconds": round(times["local[1]"], 1), "local2_seconds": round(times["local[2]"], 1)},
            {"bench": f"target: local[2] >= {TARGET_SCALING}x local[1]{size}", "ratio": round(ratio, 2),
             "verdict": verdict(ratio >= TARGET_SCALING)}]


def huge(spark: Any, root: Path, keys: int) -> list[dict]:
    """One external-sort run and one memory pass with a buffer for every key on ``keys`` keys."""
    from jobs.rules.map_capacity import buffer_bytes_for_keys

    src, gen_s = generated(root, keys, chunked=True)
    records = 2 * keys
    input_bytes = sum(f.stat().st_size for f in log_files(src))
    segment_bytes = segment_bytes_for(records)
    work = root / "work"
    before = _source_stats(src)
    _fresh(src, work, link=True)
    ext_s, _, row = _external(spark, work, input_bytes, segment_bytes)
    ext_digest = _digest(work)
    _fresh(src, work, link=True)
    big = buffer_bytes_for_keys(keys + 1)
    with PeakRssByRole() as mem:
        big_s, _ = _compact(spark, work, "memory", big, segment_bytes)
    same = _digest(work) == ext_digest
    shutil.rmtree(work, ignore_errors=True)
    if _source_stats(src) != before:
        raise RuntimeError(f"a run wrote into the hard-linked source {src}: the huge cases' numbers are void")
    if keys != max(HUGE_KEYS):
        # the disk holds one huge input at a time (28 GB at 100 M keys); the largest is kept for the next run
        shutil.rmtree(src, ignore_errors=True)
        (root / f"src-{keys}.spec").unlink(missing_ok=True)
    rows = [{"bench": f"external-sort, {keys:,} keys, one run", "MB": round(input_bytes / 1e6),
             "generate_seconds": round(gen_s, 1), **row},
            {"bench": f"memory, one pass, {big >> 20} MiB buffer, {keys:,} keys", "seconds": round(big_s, 1),
             **_memory_rows(mem)},
            {"bench": f"{keys:,} keys: external-sort / one memory pass", "ratio": round(ext_s / big_s, 2)},
            {"bench": f"target: {keys:,} keys byte-identical to one memory pass", "verdict": verdict(same)}]
    if keys == max(HUGE_KEYS):
        mbs = input_bytes / ext_s / 1e6
        rows.append({"bench": f"target: {keys:,} keys in one run >= {TARGET_HUGE_MB_PER_S} MB/s, tree peak RSS <= "
                              f"{TARGET_HUGE_RSS_BYTES / 1e9:g} GB", "MB_per_s": round(mbs, 1),
                     "peak_rss_MB": row["peak_rss_MB"],
                     "verdict": verdict(mbs >= TARGET_HUGE_MB_PER_S
                                        and row["peak_rss_MB"] * 1e6 <= TARGET_HUGE_RSS_BYTES)})
    return rows


def run(quick: bool = False, data_dir: Path = Path("bench-data"), *, huge_cases: bool = False,
        keys: int | None = None, huge_only: int | None = None) -> list[dict]:
    """The section: rows for the table (see the module docstring). ``huge_only``: that one huge case alone."""
    keys = keys or (QUICK_KEYS if quick else FULL_KEYS)
    full = keys >= FULL_KEYS
    root = data_dir / "external-sort"
    spark, startup_s = timed_session("local[2]")
    rows: list[dict] = [{"bench": "Spark start-up (local[2], excluded)", "seconds": round(startup_s, 1)}]
    t0 = time.perf_counter()
    # Warm-up, not reported: Python workers start and load the compiled kernels once, whichever case is first.
    warm, _ = generated(root, 20_000)
    _fresh(warm, root / "work")
    _compact(spark, root / "work", "external-sort", DEFAULT_BUFFER, segment_bytes_for(40_000))
    if huge_only:
        rows += huge(spark, root, huge_only)
        rows.append({"bench": "section wall time (generation included)", "seconds": round(time.perf_counter() - t0, 1)})
        return rows
    compared, src = compare(spark, root, keys, full=full)
    rows += compared
    rows += scaling(root, src, keys, full=full)
    if huge_cases:
        for k in HUGE_KEYS:
            rows += huge(spark, root, k)
    shutil.rmtree(root / "work", ignore_errors=True)
    rows.append({"bench": "section wall time (generation included)", "seconds": round(time.perf_counter() - t0, 1)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks.external_sort_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=FULL_KEYS, help="distinct keys of the compared partition")
    p.add_argument("--huge", action="store_true", help="also 50 M and 100 M keys (see above)")
    p.add_argument("--huge-only", type=int, choices=HUGE_KEYS, metavar="KEYS",
                   help="only the huge case of KEYS keys (50000000 or 100000000), reusing its kept data")
    p.add_argument("--data-dir", default="bench-data", help="generated data, kept for the next run")
    p.add_argument("--child", nargs=4, metavar=("MASTER", "SRC", "WORK", "SEGMENT_BYTES"), help=argparse.SUPPRESS)
    p.add_argument("--generate", nargs=3, metavar=("ROOT", "KEYS", "HOW"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.generate:
        root, keys, how = args.generate
        generated(Path(root), int(keys), chunked=how == "chunked", in_child=True)
        return 0
    if args.child:
        master, src, work, seg = args.child
        print(json.dumps(_child(master, Path(src), Path(work), int(seg))), flush=True)
        return 0
    for row in run(data_dir=Path(args.data_dir), keys=args.keys, huge_cases=args.huge, huge_only=args.huge_only):
        print("  " + "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
