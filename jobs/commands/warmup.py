"""Compile segjobs' kernels (numba) and cache them, so that no job's first run spends a minute compiling.

The decoder, encoder, key hash, offset map and transaction walk are compiled the first time they run and
cached on disk beside their modules (see jobs.engine.runtime.kernels). This runs them once, in this process and
without Spark, on a small generated log dir that has every codec, transactions (committed and aborted),
tombstones and headers: inspect, retain, compact (both strategies, twice, so tombstones are also removed)
and the data source's decoder. `make venv` runs it after installing; run it again after changing a kernel's
source. Takes about a minute on a cold cache, a few seconds on a warm one.

Then, once per Java and Spark install, it makes the class archive of Spark's driver JVM
(jobs.engine.runtime.class_archive): a small compaction on a local Spark session whose JVM writes the classes it
loaded into an archive that later runs' JVMs map instead of loading them again.

First of all it writes the bytecode of segjobs' own modules beside them (:func:`write_bytecode`). Writes nothing
outside a temporary directory, those ``__pycache__`` directories, the kernels' cache and the archive (in the
virtualenv's share/segjobs/jvm).
"""

from __future__ import annotations

import argparse
import importlib.util
import py_compile
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable

from jobs.commands.args import exit_codes_help


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.add_argument("--no-class-archive", action="store_true",
                   help="only the kernels: do not make the Spark driver JVM's class archive (by default made once "
                        "per Java and Spark install, in a local Spark session: about half a minute; see "
                        "jobs.engine.runtime.class_archive)")
    p.epilog = exit_codes_help(
        done="the kernels compiled and cached, and the class archive made or already there, or not made "
             "(--no-class-archive; no java or Spark, or its JVM did not write it: a line says so unless --quiet; "
             "runs then go without one)",
        failed="a kernel or the run that exercises it failed (the error says which), or the class "
               "archive's JVM ran past its 10 minutes; the kernels cached before it stay cached",
        nothing_done="a usage error (an unknown option): nothing was compiled",
        interrupted="interrupted (Ctrl-C): the kernels compiled before the stop stay cached; run warm-up again for "
                    "the rest")


def run(args: argparse.Namespace) -> int:
    from jobs.engine.runtime.kernels import cached_kernels, mostly_cold

    t0 = time.monotonic()
    before = cached_kernels()
    say = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    write_bytecode(package_dirs(), say)
    if mostly_cold(before):
        say("compiling kernels (once; about a minute)...")
    with tempfile.TemporaryDirectory(prefix="segjobs-warm-up-") as tmp:
        exercise(Path(tmp) / "logs", say)
    after = cached_kernels()
    compiled = sum(1 for n in after if after[n] > before.get(n, 0))
    cached = sum(1 for v in after.values() if v)
    print(f"kernels ready: {cached} of {len(after)} cached ({compiled} compiled now) in "
          f"{time.monotonic() - t0:.1f}s")
    if not args.no_class_archive:
        class_archive(say)
    return 0


def package_dirs() -> list[Path]:
    """The directories of segjobs' own packages (``jobs``, ``segment_io``), wherever they are installed."""
    import jobs
    import segment_io

    return [Path(jobs.__file__).parent, Path(segment_io.__file__).parent]


def write_bytecode(roots: Iterable[Path], say: Callable[[str], None]) -> int:
    """Compile every module under ``roots`` to its bytecode file (``__pycache__``, or ``sys.pycache_prefix``), as
    pip does for the packages it installs; the number of modules that could not be written.

    A checkout installed in place (``pip install -e``, what ``make venv`` does) otherwise gets its bytecode written
    at a module's first import, unless the environment forbids it (``PYTHONDONTWRITEBYTECODE``, set in many
    container images): then every process compiles segjobs' modules from source again, each run's driver and each
    Spark worker daemon, about a quarter of a second of CPU each. Python reads bytecode that is there whatever that
    variable says, and compiles from source again (without writing) any module edited since. A module that cannot
    be written (a read-only install, a syntax error) is named and skipped: the jobs then compile it as before."""
    failed: list[str] = []
    for root in roots:
        for source in sorted(root.rglob("*.py")):
            if _bytecode_current(source):  # a wheel's, or this warm-up's before: nothing to write
                continue
            try:
                py_compile.compile(str(source), doraise=True)
            except (py_compile.PyCompileError, OSError) as exc:
                why = str(exc).strip()
                failed.append(f"{source}: {why.splitlines()[-1] if why else type(exc).__name__}")
    for line in failed[:5]:
        say(f"bytecode not written for {line}")
    if len(failed) > 5:
        say(f"bytecode not written for {len(failed) - 5} more module(s)")
    return len(failed)


def _bytecode_current(source: Path) -> bool:
    """Whether ``source`` has bytecode Python will use: written by this Python for this version of the source (the
    modification time and size its header records), or checked by hash at import (as pip writes it when
    ``SOURCE_DATE_EPOCH`` is set). Not ``compileall``'s own check: it compares the modification time alone and
    rewrites hash-checked bytecode, which a read-only install would then report as not written."""
    try:
        with open(importlib.util.cache_from_source(str(source)), "rb") as cached:
            header = cached.read(16)
        stat = source.stat()
    except (OSError, ValueError, NotImplementedError):
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags, mtime, size = (int.from_bytes(header[i:i + 4], "little") for i in (4, 8, 12))
    return flags != 0 or (mtime == int(stat.st_mtime) & 0xFFFFFFFF and size == stat.st_size & 0xFFFFFFFF)


def class_archive(say) -> None:
    """Make the Spark driver JVM's class archive for this Java and Spark, unless it exists."""
    from jobs.engine.runtime.class_archive import archive_path, make_archive

    t0 = time.monotonic()
    path = archive_path()
    if path is not None and path.is_file():
        print(f"class archive ready: {path}")
        return
    say("making the Spark driver's class archive (once per Java and Spark install; about half a minute)...")
    made = make_archive(say, [sys.executable, "-m", "jobs.commands.warmup"])
    if made is not None:
        print(f"class archive ready: {made} ({made.stat().st_size / 1e6:.0f} MB) in {time.monotonic() - t0:.1f}s")


def exercise(log_dir: Path, say) -> None:
    """Run the code paths that call kernels on a small log dir at ``log_dir``."""
    from jobs import api
    from segment_io.compression import CODEC_BY_NAME
    from segment_io.decode import decode_segment_bytes
    from segment_io.generate import GenerateSpec, generate_log_dir
    from segment_io.latest import partition_latest
    from segment_io.layout import parse_partition_dir

    start, day = 1_700_000_000_000, 86_400_000
    for codec_name, codec in sorted(CODEC_BY_NAME.items()):
        generate_log_dir(GenerateSpec(topics=(f"warm-{codec_name}",), partitions=1, records=2_000,
                                      superseded_share=0.5, tombstone_share=0.05, transactional_share=0.3,
                                      aborted_share=0.3, codec=codec, segment_bytes=64 << 10, headers=True,
                                      value_style="text", start_ms=start, span_ms=day, seed=codec), log_dir)
    for segment in sorted(log_dir.glob("*/*.log")):  # the data source's decoder reads whole files as bytes
        decode_segment_bytes(segment.read_bytes(), path=str(segment))
    for partition in sorted(p for p in log_dir.iterdir() if p.is_dir() and parse_partition_dir(p.name)):
        # the latest row per key (`segjobs table`, read=latest)
        topic, number = parse_partition_dir(partition.name) or ("", 0)
        segments = [(str(s), s.read_bytes()) for s in sorted(partition.glob("*.log"))]
        partition_latest(segments, topic=topic, partition=number, allow_truncated_tail=True)
    seams = api.Seams(runner=api.InProcessTasks())
    settings = ("*:cleanup.policy=compact,delete", "*:retention.ms=30d", "*:min.cleanable.dirty.ratio=0.01",
                "*:delete.retention.ms=1h", "*:segjobs.max.delete.fraction=1")
    say("  inspect")
    api.inspect(log_dir, api.InspectOptions(overrides=settings, exact=True), now=start + 2 * day, seams=seams)
    # external-sort on a copy as it was before any compaction: after the first memory run nothing is dirty, and
    # a compaction with nothing to clean calls none of the key-pass and bucket kernels
    sorted_copy = log_dir.with_name(log_dir.name + "-external-sort")
    shutil.copytree(log_dir, sorted_copy)
    say("  compact (external-sort)")
    api.compact(sorted_copy, api.CompactOptions(overrides=settings, strategy="external-sort"), now=start + 2 * day,
                seams=seams)
    for night in range(2):  # the second run is past the tombstones' delete horizon
        say("  compact (memory)")
        api.compact(log_dir, api.CompactOptions(overrides=settings, strategy="memory"),
                    now=start + (2 + night) * day, seams=seams)
    say("  retain")
    api.retain(log_dir, api.RetainOptions(overrides=("*:retention.ms=1d", "*:segjobs.max.delete.fraction=1")),
               now=start + 10 * day, seams=seams)


def archive_exercise(tmp: str) -> None:
    """The class archive's exercise (see :func:`jobs.engine.runtime.class_archive.make_archive`): an inspection and a
    compaction on a local Spark session, so that its JVM loads what a run's driver loads, then the JVM is
    stopped and awaited (it writes the archive as it exits)."""
    from jobs import api
    from jobs.engine.runtime.class_archive import stop_and_wait
    from jobs.engine.runtime.spark_session import build_session
    from segment_io.generate import GenerateSpec, generate_log_dir

    log_dir = Path(tmp) / "logs"
    start, day = 1_700_000_000_000, 86_400_000
    generate_log_dir(GenerateSpec(topics=("warm",), partitions=2, records=2_000, superseded_share=0.5,
                                  tombstone_share=0.05, transactional_share=0.3, aborted_share=0.3,
                                  segment_bytes=64 << 10, start_ms=start, span_ms=day), log_dir)
    spark = build_session(app_name="segjobs-class-archive", master="local[2]")
    settings = ("*:cleanup.policy=compact", "*:min.cleanable.dirty.ratio=0.01")
    api.inspect(log_dir, api.InspectOptions(overrides=settings), now=start + 2 * day, spark=spark)
    api.compact(log_dir, api.CompactOptions(overrides=settings), now=start + 2 * day, spark=spark)
    stop_and_wait(spark)


# The process jobs.engine.runtime.class_archive.make_archive starts, with a scratch directory.
if __name__ == "__main__":
    archive_exercise(sys.argv[1])
