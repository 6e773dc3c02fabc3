"""End to end as users run it: ``segjobs compact`` in a new process, default options, against the I/O floor.

Every row here is a new process: the ``segjobs`` console script with ``--log-dir`` and ``--config`` (a topic
config whose defaults make every topic ``compact``: what a user's config says for a compacted topic) and
nothing else, in the environment this benchmark runs in (no variable set for it). Its wall time runs from the
process's start to its exit, so it holds what a user waits for: the interpreter and imports, the JVM and
Spark, the Python workers, the scans, every stage, the commits and the exit. The other sections' job rows run
in one process with the Spark session built beforehand (in-process rows); compare them with these only by
ratio.

Data (:mod:`segment_io.generate`), shaped like compacted logs: 1 KB values, every key written twice in random
order (so superseded records are spread over every batch), in several segment sizes, Kafka's default 1 GiB
among them, and some codecs (values JSON-like text where compressed, so the codec has work):

* uncompressed, 128 MiB segments: 4 GB in 8 partitions (``--quick``: 200 MB, 8 MiB segments);
* uncompressed, 1 GiB segments: 4 GB in 2 partitions, two segments each (``--quick``: 200 MB in 2, 64 MiB);
* lz4, 32 MiB segments: 2 GB of records in 4 partitions (``--quick``: 100 MB, 2 MiB segments);
* zstd, 32 MiB segments: 2 GB of records in 4 partitions (``--quick``: 100 MB, 2 MiB segments).

The text values compress to about a third (lz4) and a fifth (zstd): the compressed cases' segments are smaller so
that every partition has closed segments to clean (Kafka never cleans the active one).

Each case runs ``--repeat`` times (default 3) on a fresh copy of its log dir, and each run's
timeline is printed: when each progress line reached this process (seconds from the process's start: start-up
is the first line's time, exit the time from the last line to the process's end). Rows give the median, the
spread (min-max) and the machine's load at each run's start. The floor, measured in the same run on the same
bytes after every run: read every input segment twice (the second read hits the page cache, as the job's
second pass does), then write the job's output bytes once to a new file and fsync it
(:func:`benchmarks.baselines.read_write_floor`). Target (issue 34): median <= 1.5x the floor on the 4 GB cases,
idle machine.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from benchmarks.baselines import log_files, read_write_floor, verdict
from benchmarks.compact_bench import CONFIG_TOML

TARGET_VS_FLOOR = 1.5
DEFAULT_REPEAT = 3
_LINE = re.compile(r"^\[\w+\s+[\d.]+s\] (.*)$")  #: a progress line: ``[compact   12.3s] ...``
#: Timeline lines kept per run: the first and last few (a run over many partitions has a line per partition).
_TIMELINE_HEAD, _TIMELINE_TAIL = 8, 6


@dataclass(frozen=True)
class Case:
    """One shape of log dir."""

    name: str
    total_bytes: int
    partitions: int
    segment_bytes: int
    codec: int = 0  #: 0 none, 3 lz4, 4 zstd

    @property
    def value_style(self) -> str:
        return "random" if self.codec == 0 else "text"


def cases(quick: bool) -> list[Case]:
    """The cases of a run (see the module docstring)."""
    mib = 1 << 20
    if quick:
        return [Case("uncompressed, 8 MiB segments", 200_000_000, 8, 8 * mib),
                Case("uncompressed, 64 MiB segments (the 1 GiB case, scaled)", 200_000_000, 2, 64 * mib),
                Case("lz4, 2 MiB segments", 100_000_000, 4, 2 * mib, codec=3),
                Case("zstd, 2 MiB segments", 100_000_000, 4, 2 * mib, codec=4)]
    return [Case("uncompressed, 128 MiB segments", 4_000_000_000, 8, 128 * mib),
            Case("uncompressed, 1 GiB segments", 4_000_000_000, 2, 1024 * mib),
            Case("lz4, 32 MiB segments", 2_000_000_000, 4, 32 * mib, codec=3),
            Case("zstd, 32 MiB segments", 2_000_000_000, 4, 32 * mib, codec=4)]


def generate(case: Case, out_dir: Path) -> tuple[int, int]:
    """The case's log dir under ``out_dir``; returns (segments, records)."""
    from segment_io.generate import GenerateSpec, generate_log_dir

    shutil.rmtree(out_dir, ignore_errors=True)
    per_record = 1000 + 40  # value, key and record overhead: about a record's bytes in a batch
    spec = GenerateSpec(topics=("events",), partitions=case.partitions,
                        records=max(1, case.total_bytes // case.partitions // per_record), value_bytes=1000,
                        superseded_share=0.5, tombstone_share=0.0, segment_bytes=case.segment_bytes,
                        codec=case.codec, value_style=case.value_style)
    result = generate_log_dir(spec, out_dir)
    return result.segments, result.records


@dataclass
class Run:
    """One ``segjobs compact`` process."""

    wall_s: float
    #: (seconds from the process's start, progress line) for every line on stderr
    lines: list[tuple[float, str]]
    load: str
    output_bytes: int

    def longest_silence(self) -> float:
        """The longest stretch without a progress line: from the start to the first, between two, or from the
        last to the exit."""
        stamps = [0.0, *(t for t, _ in self.lines), self.wall_s]
        return max(b - a for a, b in zip(stamps, stamps[1:]))

    def timeline(self) -> str:
        """The run's progress lines with their times, the start-up and the exit: one string for a row."""
        marks = [f"{t:.1f}s {text[:90]}" for t, text in self.lines]
        if len(marks) > _TIMELINE_HEAD + _TIMELINE_TAIL:
            skipped = len(marks) - _TIMELINE_HEAD - _TIMELINE_TAIL
            marks = [*marks[:_TIMELINE_HEAD], f"({skipped} more lines)", *marks[-_TIMELINE_TAIL:]]
        last = self.lines[-1][0] if self.lines else 0.0
        return " | ".join([*marks, f"{self.wall_s:.1f}s exit ({self.wall_s - last:.1f}s after the last line)"])


def _load() -> str:
    return "{:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def compact_in_a_new_process(log_dir: Path, config: Path, env: Mapping[str, str] | None = None) -> Run:
    """``segjobs compact --log-dir log_dir --config config`` as a user runs it; every stderr line timed as it
    arrives. ``env``: variables set for this run only (none by default: the environment this benchmark runs in)."""
    return segjobs_in_a_new_process(["compact", "--log-dir", str(log_dir), "--config", str(config)], log_dir, env)


def segjobs_in_a_new_process(args: list[str], log_dir: Path, env: Mapping[str, str] | None = None) -> Run:
    """``segjobs *args`` in a new process, its progress lines timed as they arrive on stderr (stdout discarded);
    the run's ``output_bytes`` are the segment bytes in ``log_dir`` when it ended. Raises with the last lines of
    stderr when it exits non-zero."""
    cmd = [str(Path(sys.executable).with_name("segjobs")), *args]
    load = _load()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env} if env else None)
    assert proc.stderr is not None
    lines: list[tuple[float, str]] = []
    tail: list[str] = []
    for raw in proc.stderr:
        stamp = time.perf_counter() - t0
        tail = [*tail[-40:], raw]
        match = _LINE.match(raw.rstrip("\n"))
        if match:
            lines.append((stamp, match.group(1)))
    code = proc.wait()
    wall = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {code}:\n{''.join(tail)}")
    return Run(wall, lines, load, sum(f.stat().st_size for f in log_files(log_dir)))


def run_case(case: Case, root: Path, repeat: int) -> list[dict]:
    """``repeat`` runs of one case, each on a fresh copy, with the floor after each; the case's rows."""
    src, work, scratch = root / "source", root / "log-dir", root / "scratch"
    t0 = time.perf_counter()
    segments, records = generate(case, src)
    config = root / "topics.toml"
    config.write_text(CONFIG_TOML)
    input_bytes = sum(f.stat().st_size for f in log_files(src))
    rows: list[dict] = [{"bench": f"e2e {case.name}: generate (untimed set-up)", "partitions": case.partitions,
                         "segments": segments, "records": records, "MB": round(input_bytes / 1e6),
                         "seconds": round(time.perf_counter() - t0, 1)}]
    runs, floors = [], []
    for i in range(repeat):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(src, work)
        run = compact_in_a_new_process(work, config)
        floors.append(read_write_floor(log_files(src), run.output_bytes, scratch))
        runs.append(run)
        rows.append({"bench": f"e2e {case.name}: run {i + 1} of {repeat}", "wall_s": round(run.wall_s, 1),
                     "floor_s": round(floors[-1], 1), "load": run.load, "timeline": run.timeline()})
    walls = [r.wall_s for r in runs]
    median_wall, median_floor = statistics.median(walls), statistics.median(floors)
    ratio = median_wall / median_floor
    summary = {"bench": f"e2e {case.name}: segjobs compact, new process, default options (median of {repeat})",
               "input_MB": round(input_bytes / 1e6), "output_MB": round(runs[-1].output_bytes / 1e6),
               "wall_s": round(median_wall, 1), "wall_min_max_s": f"{min(walls):.1f}-{max(walls):.1f}",
               "floor_s": round(median_floor, 2), "floor_min_max_s": f"{min(floors):.2f}-{max(floors):.2f}",
               "ratio_to_floor": round(ratio, 2), "loads": "; ".join(r.load for r in runs)}
    if case.total_bytes >= 4_000_000_000:
        summary.update(target=f"<= {TARGET_VS_FLOOR}x the floor (idle)", result=verdict(ratio <= TARGET_VS_FLOOR))
    rows.append(summary)
    shutil.rmtree(work, ignore_errors=True)
    return rows


def run(quick: bool = False, data_dir: Path = Path("bench-data"), repeat: int | None = None) -> list[dict]:
    repeat = repeat or DEFAULT_REPEAT
    root = data_dir / "e2e"
    rows: list[dict] = []
    try:
        for case in cases(quick):
            rows += run_case(case, root, repeat)
            shutil.rmtree(root, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows
