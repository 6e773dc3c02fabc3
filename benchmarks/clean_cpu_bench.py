"""CPU per byte of cleaning (issue 34 item 3): the cleaning task alone, in-process, in bytes per core second.

Data: for each codec (none, lz4, zstd) a generated partition of 1 KB text values (``segjobs generate
--value-style text``), half of the records superseded by a later record of the same key in random order (so
every batch is partly superseded and must be re-encoded, as in a real compacted topic's dirty section), 2%
tombstones, 50 records a batch, several segments (``--quick``: smaller). Then the same with 15 records a batch
(the rows named "16 KB batches"): what a producer with Kafka's default ``batch.size`` (16,384 bytes) writes with
1 KB values, three times as many batches for the same bytes.

What is measured, in a new process per codec and checkout, each the median CPU seconds (``time.process_time``:
user and system time of every thread of the process) of ``--repeat`` runs after one warm-up run:

* **task (in-process)**: the memory strategy's cleaning task as a Spark executor runs it
  (:func:`jobs.engine.compact.cleaning.compact_partition`: map pass, decode, index checks, clean, encode with CRCs
  and compression, the staged segment and its indexes written and synced), without Spark around it, each run
  writing new files as a task's first attempt does (the files of the run before are removed, untimed);
* its **parts**, each run alone on the same bytes: the map pass (``PartitionCleaner.build_map``, with the full
  decodes it keeps for the clean), the clean's decode of the segments the map pass did not keep,
  ``clean_records``, the encoding of the kept rows (``iter_encoded_parts``),
  and the write of the staged files (``write_segment`` less the encoding);
* **where its CPU time goes**, where ``perf`` is installed and allowed to sample: the task ``max(repeat, 5)`` times in
  a new process, perf sampling those runs only (not start-up, imports or compilation), each sample counted for the
  file its code is in (:data:`PERF_GROUPS`: the codec library, the compiled kernels, Python, numpy, Arrow, the C
  library, the OS kernel). Unlike the cProfile row's shares (lower bounds: the profiler slows the Python around the
  calls it counts), these count all of the task's CPU time, the kernel's too;
* **floors** on the same bytes: a memcpy of them, their CRC32C (one call per segment file), and the codec's (the
  least a rewrite of the batches costs in the codec library): every compressed payload of the input decompressed
  once and every payload of the batches the task wrote (the kept records; not the batches it copied verbatim)
  compressed once, by the compiled calls of the codec's functions that the task makes (LZ4's block functions,
  libzstd through contexts made once), a run of about a MiB of payloads a call, every run into the same buffer
  (one that stays in the processor's cache), with nothing around them. This checkout's process measures it and
  the baseline's rows are given the same figure: the floor is the data's and the library's, not the checkout's.
  Beside it, not part of it: the same calls decompressing once more the payload of every input batch the task
  rewrote (not copied verbatim), which a cleaner that reads the dirty section twice (the map's pass, then the
  clean, as Kafka's does) cannot avoid without holding every decompressed payload between its passes.

The section's first row is a fact of the machine (:func:`first_touch_row`): the kernel time to touch 256 MiB of new
memory right after as much was freed, and after two idle seconds; on a VM that gives freed memory back to its host
the second is many times the first, and these back-to-back runs see mostly the first.

Bytes are the cleaned segments' bytes as they are on disk (compressed for lz4 and zstd). The machine's load is
printed with each row: on a shared machine the CPU seconds also measure the other tenants (caches, memory
bandwidth), so compare checkouts by the ratios of one run, not by absolute numbers.

``baseline``: another checkout of segjobs (e.g. ``git archive <commit> | tar -x -C /tmp/before``) measured in the
same run, in alternation with this one, on the same data, in :data:`ROUNDS` new processes each (every figure is
then the median over the rounds; the ratio row lists each round's task seconds); rows then give after/before
ratios. From the command
line: ``python -m benchmarks.run --only clean-cpu --baseline /tmp/before``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

CODECS = ("none", "lz4", "zstd")
#: Records a batch: the issue's data (50), and Kafka's default batch.size (16 KB) filled with 1 KB values (15).
BATCH_RECORDS = (50, 15)
DEFAULT_REPEAT = 3
#: With a baseline: new processes per checkout and case, alternating (each runs the task ``repeat`` times).
ROUNDS = 3
TOPIC = "clean"
#: Target (issue 34 item 3): at least twice the bytes per core second of the cleaning before the issue.
TARGET_SPEEDUP = 2.0


def _load() -> str:
    return "{:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def generate(out: Path, codec: str, quick: bool, batch_records: int = BATCH_RECORDS[0]) -> None:
    """One partition as described in the module docstring."""
    from jobs.logdir.lock import work_uri
    from segment_io.compression import codec_from_name
    from segment_io.generate import GenerateSpec, generate_log_dir

    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(work_uri(str(out)), ignore_errors=True)  # what a task staged there before: measure() finds its own
    records, segment_bytes = (64_000, 8 << 20) if quick else (256_000, 32 << 20)
    generate_log_dir(GenerateSpec(topics=(TOPIC,), partitions=1, records=records, value_bytes=1000,
                                  superseded_share=0.5, tombstone_share=0.02, segment_bytes=segment_bytes,
                                  batch_records=batch_records, codec=codec_from_name(codec), value_style="text"),
                     out)


# --------------------------------------------------------------------------------------------------
# Inside the measuring process (run with the measured checkout first on sys.path)
# --------------------------------------------------------------------------------------------------


def _cpu(fn: Callable[[], Any], repeat: int, before_each: Callable[[], Any] | None = None) -> float:
    """Median CPU seconds of ``repeat`` calls of ``fn`` after a warm-up call; ``before_each`` runs before every
    call, untimed."""
    if before_each is not None:
        before_each()
    fn()
    seconds = []
    for _ in range(repeat):
        if before_each is not None:
            before_each()
        t0 = time.process_time()
        fn()
        seconds.append(time.process_time() - t0)
    return statistics.median(seconds)


def measure(log_dir: Path, repeat: int, codec_floors: bool = True) -> dict[str, Any]:
    """CPU seconds of the task, its parts and the floors on the partition in ``log_dir``, and its bytes. The codec's
    floors call the compiled codec calls of this checkout (``codec_floors``): the baseline's process leaves them
    out, and its rows are given this checkout's (the floor is the data's and the library's, not the checkout's)."""
    import crc32c
    import numpy as np
    import pyarrow as pa

    from jobs.engine.compact.cleaning import PartitionCleaner, compact_partition
    from jobs.logdir.lock import work_uri
    from jobs.rules.cleaner import clean_records
    from jobs.rules.plan_compact import group_segments_by_size
    from segment_io import compression
    from segment_io.encode_stream import iter_encoded_parts
    from segment_io.generate import GenerateSpec
    from segment_io.segment_writer import write_segment
    from tests.support.cleaning import partition_task

    spec = GenerateSpec()
    now_ms = spec.start_ms + spec.span_ms + 24 * 3600 * 1000
    task = partition_task(log_dir, TOPIC, 0, now_ms, max_keys=1 << 22)
    scratch = log_dir.parent / f"{log_dir.name}-scratch"
    scratch.mkdir(exist_ok=True)
    # Files the task writes (in the log dir's work dir, where every checkout stages) and the write part's are
    # removed before each timed run: a task's first attempt writes new files, while renaming over the previous
    # run's would charge it for freeing their blocks (about 6% of the uncompressed task).
    written = [Path(work_uri(str(log_dir))), scratch]
    before = {path for root in written for path in _files(root)}

    def new_files() -> set[Path]:
        return {path for root in written for path in _files(root)} - before

    def remove_written() -> None:
        for path in new_files():
            path.unlink()

    def run_task() -> Any:
        out = compact_partition(task)
        if out.error is not None:
            raise RuntimeError(str(out.error))
        return out

    outcome = run_task()
    if len(outcome.groups) != 1 or not outcome.groups[0].changed:
        raise RuntimeError(f"expected one changed group, got {outcome.groups}")
    bytes_in, bytes_out = outcome.groups[0].bytes_before, outcome.groups[0].bytes_after
    [staged] = [path.read_bytes() for path in new_files() if path.suffix == ".log"]
    cpu: dict[str, float] = {"task": _cpu(run_task, repeat, remove_written)}
    remove_written()
    profile = _profile_shares(run_task)

    def map_pass() -> tuple[Any, set[int]]:
        """The map's pass of a new cleaner, as the task runs it: its map, and the segments whose full decode it
        kept for the clean (none in checkouts that keep none for a range this large)."""
        cleaner = PartitionCleaner(task, [])
        omap = cleaner.build_map(None)
        kept = set(cleaner.decoded)
        for decoded in cleaner.decoded.values():
            if hasattr(decoded, "release"):  # the mapping it holds
                decoded.release.close()
        return omap, kept

    cpu["map pass"] = _cpu(map_pass, repeat)
    omap, kept = map_pass()
    cleaner = PartitionCleaner(task, [])
    plan = task.plan
    in_round = [s for s in task.state.segments if s.base_offset < min(omap.end_offset, plan.first_uncleanable_offset)]
    [group] = group_segments_by_size(in_round, task.config.segment_bytes, task.config.segment_index_bytes,
                                     plan.first_uncleanable_offset, task.config.index_interval_bytes)
    sources = {s.base_offset: (log_dir / f"{TOPIC}-0" / f"{s.base_offset:020d}.log").read_bytes() for s in group}

    # checkouts whose cleaning task keeps the decompressed payloads for the encoder (8ae0558 does not, nor does
    # this one since it stopped; versions in between did): the parts below hand them over the same way
    store = getattr(cleaner, "payloads", None)

    def decode(bases: Any = sources) -> tuple[pa.Table, list[Any]]:
        if store is not None:
            store.clear()  # each repeat keeps its own, as one task's decode does
        decoded = [cleaner.decode(sources[base], base) for base in bases]
        return pa.concat_tables([t for t, _ in decoded]), [h for _, h in decoded]

    # the clean's own decode: of the segments the map's pass did not keep
    again = [base for base in sources if base not in kept]
    cpu["decode"] = _cpu(lambda: decode(again), repeat) if again else 0.0
    records, _ = decode()

    def clean() -> Any:
        return clean_records(records, offset_map=omap, txn_state=task.txn, params=cleaner.params,
                             segment_last_modified_ms={s.base_offset: s.mtime_ms for s in group})

    cpu["clean_records"] = _cpu(clean, repeat)
    result = clean()
    handed = {} if store is None else {"payloads": store}
    cpu["encode"] = _cpu(lambda: sum(p.size for p in iter_encoded_parts(
        result.records, empty_batches=result.empty_batches, sources=sources, **handed)), repeat)
    target = str(scratch / f"{group[0].base_offset:020d}.log")
    cpu["write (less encode)"] = _cpu(lambda: write_segment(
        result.records, target, empty_batches=result.empty_batches, sources=sources, **handed),
        repeat, remove_written) - cpu["encode"]

    views = [np.frombuffer(data, np.uint8) for data in sources.values()]
    copy_into = np.empty(max(len(v) for v in views), np.uint8)
    cpu["floor: memcpy"] = _cpu(lambda: [np.copyto(copy_into[:len(v)], v) for v in views], repeat)
    cpu["floor: CRC32C"] = _cpu(lambda: [crc32c.crc32c(data) for data in sources.values()], repeat)
    if codec_floors:
        # the codec floor: every compressed payload read decompressed once, and every payload the task wrote
        # compressed once (only the kept records: the batches of the staged segment, less those it copied verbatim
        # from the input), by the bare compiled calls
        read = [payload for data in sources.values() for payload in _compressed_payloads(data)]
        written = _compressed_payloads(staged)
        read_ids, written_ids = {batch for _, _, batch in read}, {batch for _, _, batch in written}
        floor = _codec_floor([(c, p) for c, p, _ in read], [(c, bytes(compression.decompress(c, p)))
                                                             for c, p, batch in written if batch not in read_ids])
        cpu["floor: codec"] = _cpu(floor, repeat) if floor is not None else 0.0
        # what a cleaner that reads the dirty section twice (Kafka's, and this one: the map's pass, then the clean)
        # spends in the codec beyond that floor: the payload of every input batch not copied verbatim decompressed
        # again
        again_floor = _codec_floor([(c, p) for c, p, batch in read if batch not in written_ids], [])
        cpu["floor: codec, second decompression"] = _cpu(again_floor, repeat) if again_floor is not None else 0.0
    shutil.rmtree(scratch, ignore_errors=True)
    return {"bytes_in": bytes_in, "bytes_out": bytes_out, "cpu_s": cpu, "profile": profile}


def _files(root: Path) -> set[Path]:
    return {path for path in root.rglob("*") if path.is_file()}


def _compressed_payloads(segment: bytes) -> list[tuple[int, memoryview, bytes]]:
    """(codec, payload, the batch's base offset and CRC) of each compressed v2 batch of a segment's bytes, read from
    the batch framing alone (the same in every checkout): the base offset at byte 0, the length field at 8, the CRC
    at 17, attributes at 21, records from byte 61."""
    out, pos, mv = [], 0, memoryview(segment)
    while pos + 61 <= len(segment):
        (length,) = struct.unpack_from(">i", segment, pos + 8)
        (attributes,) = struct.unpack_from(">h", segment, pos + 21)
        end = pos + 12 + length
        if length < 49 or end > len(segment):
            raise RuntimeError(f"no whole v2 batch at byte {pos}")
        if attributes & 7:
            out.append((attributes & 7, mv[pos + 61:end], segment[pos:pos + 8] + segment[pos + 17:pos + 21]))
        pos = end
    return out


#: Kafka's LZ4 block size (64 KiB): what the worst case of a frame counts its blocks in.
_LZ4_BLOCK = 64 << 10
_LZ4, _ZSTD = 3, 4


def _joined(payloads: list[Any]) -> tuple[Any, Any, Any]:
    """``payloads`` one after another in one array: (the bytes, where each starts, where each ends)."""
    import numpy as np

    ends = np.cumsum([len(p) for p in payloads], dtype=np.int64)
    starts = ends - np.array([len(p) for p in payloads], np.int64)
    return np.frombuffer(b"".join(payloads), np.uint8), starts, ends


#: The codec's floor decompresses or compresses a run of payloads of at most this many bytes of output at a time,
#: into one buffer reused by every run, which stays in the processor's cache (into one buffer for all of them, LZ4
#: takes a third more time on this benchmark's data, zstd a tenth).
_FLOOR_RUN_BYTES = 1 << 20


def _codec_floor(inputs: list[tuple[int, memoryview]], outputs: list[tuple[int, bytes]]) -> Callable[[], None] | None:
    """The least CPU a rewrite of these batches costs in the codec library: each compressed input payload
    (``inputs``: codec and payload) decompressed once and each output payload (``outputs``: codec and records)
    compressed once, as the encoder frames them, by the compiled calls of the codec's functions that the task makes
    (``segment_io/_lz4_kernels.py``, ``_zstd_kernels.py``), with nothing around them: a run of payloads of about
    :data:`_FLOOR_RUN_BYTES` of output in one call, every run into the same buffer. None when nothing is
    compressed. Other codecs are not in this benchmark's data."""
    from segment_io import _lz4_kernels, _zstd_kernels

    if not inputs and not outputs:
        return None
    if any(c not in (_LZ4, _ZSTD) for c, _ in inputs + outputs):
        raise RuntimeError("the codec floor covers lz4 and zstd only")
    if not (_lz4_kernels.LINKED and _zstd_kernels.LINKED):
        raise RuntimeError("the codec floor needs the compiled codec calls (LZ4's and libzstd's functions found)")
    calls = [call for codec in (_LZ4, _ZSTD)
             for make, items in ((_inflating, [p for c, p in inputs if c == codec]),
                                 (_deflating, [raw for c, raw in outputs if c == codec])) if items
             for call in make(codec, items)]

    def floor() -> None:
        for call in calls:
            if not call():
                raise RuntimeError("the codec floor's calls did not take every payload")

    return floor


def _runs(sizes: Any) -> list[slice]:
    """``sizes`` cut into runs of at most :data:`_FLOOR_RUN_BYTES` in all (at least one each)."""
    runs, start, total = [], 0, 0
    for i, size in enumerate(sizes.tolist()):
        if i > start and total + size > _FLOOR_RUN_BYTES:
            runs.append(slice(start, i))
            start, total = i, 0
        total += size
    return runs + [slice(start, len(sizes))]


def _inflating(codec: int, payloads: list[memoryview]) -> list[Callable[[], bool]]:
    """Compiled calls decompressing ``payloads``, a run each, into the rooms the task plans for them; each says
    whether it took its whole run."""
    import numpy as np

    from segment_io import _lz4_kernels, _zstd_kernels, compression

    data, starts, ends = _joined(payloads)
    codecs, limits = np.full(len(payloads), codec, np.int64), np.full(len(payloads), 1 << 30, np.int64)
    _, rooms = compression.plan_payloads(data, starts, ends, codecs, limits)
    runs = _runs(rooms)
    into, done = np.empty(max(int(rooms[r].sum()) for r in runs), np.uint8), np.empty(len(payloads), np.int64)
    if codec == _ZSTD:
        return [lambda r=r: _zstd_kernels.inflate_frames(  # type: ignore[misc]
            data, starts[r], ends[r], codecs[r], rooms[r], limits[r], 0, into, 0, done[r],
            _zstd_kernels.decompression_context())[0] == r.stop - r.start for r in runs]
    found = compression._lz4_frame_blocks(memoryview(data), starts, ends, codecs)  # type: ignore[arg-type]
    scratch = np.empty(int(found.block_max.max()), np.uint8)
    return [lambda r=r: _lz4_kernels.inflate_frames(  # type: ignore[misc]
        data, found.first[r], found.count[r], found.block_max[r], found.block_start, found.block_size, rooms[r],
        limits[r], 0, into, 0, scratch, done[r])[0] == r.stop - r.start for r in runs]


def _deflating(codec: int, records: list[bytes]) -> list[Callable[[], bool]]:
    """Compiled calls compressing ``records``, a run each, into a buffer of their worst cases, framed as the
    encoder frames them; each says whether it did."""
    import numpy as np

    from segment_io import _lz4_kernels, _zstd_kernels, compression

    data, starts, ends = _joined(records)
    sizes = ends - starts
    if codec == _ZSTD:
        bounds = compression._zstd_bounds(sizes)
    else:  # each frame's worst case, as the encoder sizes it
        blocks = -(-sizes // _LZ4_BLOCK)
        bounds = len(compression._LZ4_JAVA_HEADER) + 4 * (blocks + 1) + sizes + sizes // 255 + 16 * blocks
    runs = _runs(bounds)
    out, at = np.empty(max(int(bounds[r].sum()) for r in runs), np.uint8), np.empty(len(records) + 1, np.int64)
    if codec == _ZSTD:
        return [lambda r=r: _zstd_kernels.deflate_frames(  # type: ignore[misc]
            data, starts[r], sizes[r], 0, bounds[r], out, at, _zstd_kernels.compression_context()) >= 0
            for r in runs]
    return [lambda r=r: _lz4_kernels.deflate_java_frames(  # type: ignore[misc]
        data, starts[r], sizes[r], 0, compression._LZ4_JAVA_HEADER_BYTES, out, at) >= 0 for r in runs]


def _profile_shares(fn: Callable[[], Any]) -> dict[str, float]:
    """Shares of one profiled call of ``fn``'s CPU time spent inside the codec library's calls (with the compiled
    kernels that call LZ4's and libzstd's, ``segment_io/_lz4_kernels.py`` and ``_zstd_kernels.py``), the crc32c
    package's and the other compiled kernels
    (``segment_io/_*_kernels.py``). The profiler slows the Python around
    those calls, not the calls themselves, so these shares are lower bounds."""
    import cProfile
    import pstats

    profiler = cProfile.Profile(time.process_time)
    profiler.runcall(fn)
    # pstats' table: (file, line, function) -> (calls, primitive calls, own time, cumulative time, callers)
    table: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in table.values())
    shares = {"codec library": 0.0, "CRC32C (crc32c package)": 0.0, "compiled kernels": 0.0}
    for (filename, _, function), entry in table.items():
        if filename == "~" and "crc32c" in function:
            shares["CRC32C (crc32c package)"] += entry[2]
        elif (filename == "~" and "compress" in function) or filename.endswith(("_lz4_kernels.py",
                                                                                 "_zstd_kernels.py")):
            # the compiled calls of the codecs' functions: the codec's time, with the frame walk around it
            shares["codec library"] += entry[2]
        elif filename.endswith("_kernels.py"):
            shares["compiled kernels"] += entry[2]
    return {name: own / total for name, own in shares.items()}


#: Where perf's samples of the task fell, by the file their code is in (``perf report --sort dso``), in groups.
PERF_GROUPS = (
    ("codec library", ("_block.", "_cffi.", "backend_c.", "zstd", "lz4", "cramjam", "snappy", "libz.")),
    ("CRC32C (crc32c package)", ("_crc32c",)),
    ("compiled kernels", ("[JIT]",)),
    ("Python (interpreter, its C modules, numba's dispatch)", ("libpython", "python3", "_struct.", "mmap.",
                                                              "_dispatcher.", "_nrt_python.")),
    ("numpy", ("_multiarray_umath", "numpy")),
    ("Arrow", ("libarrow", "lib.cpython", "pyarrow")),
    ("C library (memcpy, malloc)", ("libc.so", "libc-", "libm.so", "libstdc++")),
    ("OS kernel (page cache writes, page faults)", ("[kernel",)),
)
#: Samples a second perf takes of the task (enough for shares within a percent or two).
PERF_FREQUENCY = 2000


def sample_task(log_dir: Path, runs: int, control: str, ack: str) -> None:
    """The task of :func:`measure` ``runs`` times after a warm-up run, perf's sampling enabled around those runs
    only (through its control fifo): start-up, imports and compilation are left out, as the CPU rows leave them."""
    from jobs.engine.compact.cleaning import compact_partition
    from jobs.logdir.lock import work_uri
    from segment_io.generate import GenerateSpec
    from tests.support.cleaning import partition_task

    spec = GenerateSpec()
    task = partition_task(log_dir, TOPIC, 0, spec.start_ms + spec.span_ms + 24 * 3600 * 1000, max_keys=1 << 22)
    root = Path(work_uri(str(log_dir)))
    before = _files(root)

    def run_task() -> None:
        for path in _files(root) - before:  # as measure() does: each run writes new files
            path.unlink()
        if compact_partition(task).error is not None:
            raise RuntimeError("the sampled task failed")

    run_task()
    with open(control, "w") as ctl, open(ack) as acks:
        def say(command: str) -> None:
            ctl.write(command + "\n")
            ctl.flush()
            acks.readline()

        say("enable")
        for _ in range(runs):
            run_task()
        say("disable")
    for path in _files(root) - before:
        path.unlink()


def perf_shares(checkout: Path, log_dir: Path, runs: int) -> dict[str, str]:
    """Shares of the task's CPU samples (:func:`sample_task` under ``perf record``, user and kernel time alike) by
    :data:`PERF_GROUPS`, in a new process of ``checkout``; ``{"skipped": why}`` where perf is missing or not
    allowed to sample (``kernel.perf_event_paranoid``)."""
    import tempfile

    if shutil.which("perf") is None:
        return {"skipped": "perf is not installed"}
    with tempfile.TemporaryDirectory(prefix="clean-cpu-perf-") as tmp:
        control, ack, data = (str(Path(tmp) / name) for name in ("control", "ack", "perf.data"))
        os.mkfifo(control)
        os.mkfifo(ack)
        child = ("import sys; from pathlib import Path; "
                 f"sys.path.insert(0, {str(checkout)!r}); sys.path.insert(1, {str(Path(__file__).parent)!r}); "
                 "import clean_cpu_bench as b; "
                 f"b.sample_task(Path({str(log_dir)!r}), {runs}, {control!r}, {ack!r})")
        recorded = subprocess.run(["perf", "record", "-q", "-F", str(PERF_FREQUENCY), "-D", "-1",
                                   f"--control=fifo:{control},{ack}", "-o", data, "--", sys.executable, "-c", child],
                                  capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(checkout)),
                                  cwd=str(checkout))
        if recorded.returncode != 0:
            last = (recorded.stderr.strip().splitlines() or ["no message"])[-1]
            return {"skipped": f"perf record exited {recorded.returncode}: {last}"}
        report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso", "--stdio", "-q"],
                                capture_output=True, text=True, check=True).stdout
    return {name: f"{percent:.0f}%" for name, percent in grouped_shares(report).items()}


def grouped_shares(report: str) -> dict[str, float]:
    """Percent of the samples in each of :data:`PERF_GROUPS` (and "other"), from ``perf report --sort dso``'s lines
    (``  48.00%  _block.cpython-311-x86_64-linux-gnu.so``)."""
    shares = dict.fromkeys([name for name, _ in PERF_GROUPS] + ["other"], 0.0)
    for line in report.splitlines():
        share, _, dso = line.strip().partition("%")
        try:
            percent = float(share)
        except ValueError:
            continue
        group = next((name for name, marks in PERF_GROUPS if any(mark in dso for mark in marks)), "other")
        shares[group] += percent
    return shares


# --------------------------------------------------------------------------------------------------
# The section
# --------------------------------------------------------------------------------------------------


def _measure_in_new_process(checkout: Path, log_dir: Path, repeat: int, codec_floors: bool) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    out = subprocess.run([sys.executable, "-c", "import json, sys; from pathlib import Path; "
                          f"sys.path.insert(0, {str(checkout)!r}); sys.path.insert(1, {str(Path(__file__).parent)!r}); "
                          "import clean_cpu_bench as b; "
                          f"print(json.dumps(b.measure(Path({str(log_dir)!r}), {repeat}, {codec_floors})))"],
                         check=True, capture_output=True, text=True, env=env, cwd=str(checkout)).stdout
    return json.loads(out.strip().splitlines()[-1])


def _mb_per_cpu_s(nbytes: int, seconds: float) -> float | None:
    """None for a part that took no time (no codec; no segment left for the clean to decode): JSON has no infinity."""
    return round(nbytes / seconds / 1e6, 1) if seconds > 0 else None


def _rows(codec: str, label: str, m: dict[str, Any], load: str) -> list[dict]:
    cpu, nbytes = m["cpu_s"], m["bytes_in"]
    floor = cpu["floor: memcpy"] + cpu["floor: CRC32C"] + cpu["floor: codec"]
    rows = [{"bench": f"clean-cpu {codec}: {label} task (in-process, compact_partition)",
             "MB_in": round(nbytes / 1e6, 1), "MB_out": round(m["bytes_out"] / 1e6, 1),
             "cpu_s": round(cpu["task"], 3), "MB_per_cpu_s": _mb_per_cpu_s(nbytes, cpu["task"]),
             "x_floor": round(cpu["task"] / floor, 1) if floor else None, "load": load}]
    for part, seconds in cpu.items():
        if part != "task":
            rows.append({"bench": f"clean-cpu {codec}: {label} {part}", "cpu_s": round(seconds, 3),
                         "MB_per_cpu_s": _mb_per_cpu_s(nbytes, seconds),
                         "share_of_task": f"{seconds / cpu['task']:.0%}"})
    if "profile" in m:
        rows.append({"bench": f"clean-cpu {codec}: {label} task profiled (cProfile, CPU time; lower bounds)",
                     **{name: f"{share:.0%}" for name, share in m["profile"].items()}})
    return rows


#: Memory the first-touch probe allocates and touches (see :func:`first_touch_row`).
PROBE_BYTES = 256 << 20
_PROBE = """
import json, resource, time
import numpy as np
def touch():
    t0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    a = np.empty({n}, np.uint8)
    a[::4096] = 1
    return a, resource.getrusage(resource.RUSAGE_SELF).ru_stime - t0
out = {{}}
for pause in (0.0, 2.0):
    a, _ = touch()
    del a
    time.sleep(pause)
    a, out[pause] = touch()
    del a
print(json.dumps(out))
"""


def first_touch_row() -> dict:
    """What this machine's kernel spends making 256 MiB of new memory present, in a new process: touched again right
    after the same amount was freed, and after a free and two idle seconds. On a VM whose host takes freed memory back
    (a balloon with free page reporting) the second costs many times the first, and so does every task's first touch
    of memory it did not reuse: the row says how much of a task's CPU seconds can be the host's."""
    probe = subprocess.run([sys.executable, "-c", _PROBE.format(n=PROBE_BYTES)], capture_output=True, text=True)
    if probe.returncode != 0:
        raise RuntimeError(f"the first-touch probe exited {probe.returncode}: {probe.stderr.strip()}")
    seconds = {float(k): v for k, v in json.loads(probe.stdout.strip().splitlines()[-1]).items()}
    return {"bench": f"clean-cpu machine: kernel CPU seconds to touch {PROBE_BYTES >> 20} MiB of new memory",
            "reused_s": round(seconds[0.0], 3), "after_2s_idle_s": round(seconds[2.0], 3),
            "ratio": round(seconds[2.0] / seconds[0.0], 1) if seconds[0.0] else None, "load": _load()}


def _median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One measurement from several processes' (:func:`measure`): each CPU figure the median over them."""
    first = runs[0]
    return {**first, "cpu_s": {part: statistics.median(r["cpu_s"][part] for r in runs) for part in first["cpu_s"]}}


def run(quick: bool = False, data_dir: Path = Path("bench-data"), repeat: int | None = None,
        baseline: Path | None = None) -> list[dict]:
    repeat = repeat or DEFAULT_REPEAT
    here = Path(__file__).resolve().parent.parent
    root = data_dir.resolve() / "clean-cpu"
    rows: list[dict] = []
    try:
        rows.append(first_touch_row())
        for batch_records, codec in ((n, c) for n in BATCH_RECORDS for c in CODECS):
            log_dir = root / f"{codec}-{batch_records}"
            generate(log_dir, codec, quick, batch_records)
            case = codec if batch_records == BATCH_RECORDS[0] else f"{codec}, 16 KB batches"
            checkouts = [("after", here)] + ([("before", baseline.resolve())] if baseline else [])
            rounds: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in checkouts}
            loads: dict[str, str] = {}
            # the checkouts alternate on the same data, so a change of the machine's load hits both alike; with a
            # baseline, in ROUNDS new processes each: the same code's CPU seconds differ by up to a third from one
            # process to the next on a shared VM (page cache, writeback of the previous run's output)
            for _ in range(ROUNDS if baseline else 1):
                for label, checkout in checkouts:
                    loads.setdefault(label, _load())
                    rounds[label].append(_measure_in_new_process(checkout, log_dir, repeat, label == "after"))
            measured = {label: _median_of(runs) for label, runs in rounds.items()}
            for label in measured:  # the codec's floors, measured by this checkout's calls (see measure)
                for part in ("floor: codec", "floor: codec, second decompression"):
                    measured[label]["cpu_s"].setdefault(part, measured["after"]["cpu_s"][part])
            for label, checkout in checkouts:
                rows += _rows(case, label if baseline else "", measured[label], loads[label])
                rows.append({"bench": f"clean-cpu {case}: {label if baseline else ''} task sampled by perf (shares of "
                                      "its CPU time by where the code runs, user and kernel)".replace("  ", " "),
                             **perf_shares(checkout, log_dir, max(repeat, 5))})
            if baseline:
                after, before = measured["after"]["cpu_s"]["task"], measured["before"]["cpu_s"]["task"]
                if measured["after"]["bytes_out"] != measured["before"]["bytes_out"]:
                    raise RuntimeError(f"{case}: before and after wrote different sizes")
                speedup = before / after
                rows.append({"bench": f"clean-cpu {case}: task bytes per core second, after / before (same run)",
                             "speedup": round(speedup, 2), "target": f">= {TARGET_SPEEDUP}x",
                             "result": "PASS" if speedup >= TARGET_SPEEDUP else "MISS",
                             "rounds (task CPU s, after / before)": " ".join(
                                 f"{a['cpu_s']['task']:.3f}/{b['cpu_s']['task']:.3f}"
                                 for a, b in zip(rounds["after"], rounds["before"]))})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows
