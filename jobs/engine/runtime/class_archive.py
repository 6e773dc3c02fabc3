"""The Spark driver JVM's class-data-sharing archive (Java's dynamic AppCDS archive).

A local run's driver JVM loads, parses and verifies some ten thousand classes from Spark's jars before it can
run a task: most of its seconds of start-up CPU. ``segjobs warm-up`` (which ``make venv`` runs) runs one small
compaction on Spark with ``-XX:ArchiveClassesAtExit``, so the JVM writes the classes it loaded into an archive
as it exits; every later JVM :func:`jobs.engine.runtime.spark_session.build_session` launches maps them from it
(``-XX:SharedArchiveFile``) instead.

An archive is valid only for the JVM build and the class path it was made with, so its file name carries a key
of both (:func:`archive_key`: the JDK's path and the size and time of its class image and its ``libjvm``;
Spark's jars by name, size and time): after an upgrade of Java or Spark no archive has the new key and runs go
without one (as fast as before the warm-up, no slower) until the next warm-up makes one. Should the JVM still
find an archive unusable, it runs without it, and says nothing (its ``cds`` log is off). The archives live in
:func:`archive_dir` (the virtualenv's ``share/segjobs/jvm``); $SEGJOBS_SPARK_CLASS_ARCHIVE=0 runs without them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

#: Environment variable: ``0`` runs the driver JVM without the archive.
ARCHIVE_ENV = "SEGJOBS_SPARK_CLASS_ARCHIVE"
#: Environment variable: where the archives are (default: ``share/segjobs/jvm`` of this Python's prefix, the venv).
ARCHIVE_DIR_ENV = "SEGJOBS_CLASS_ARCHIVE_DIR"
#: Set by :func:`make_archive` for the JVM that writes the archive (its path), and only for it.
_DUMP_ENV = "SEGJOBS_SPARK_CLASS_ARCHIVE_DUMP"
#: The JVM's own messages about an archive it cannot use (on stdout by default): off.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def archive_dir() -> Path:
    """Where the archives are kept: $SEGJOBS_CLASS_ARCHIVE_DIR, else ``<sys.prefix>/share/segjobs/jvm``."""
    return Path(os.environ.get(ARCHIVE_DIR_ENV, "").strip() or Path(sys.prefix) / "share" / "segjobs" / "jvm")


def _java() -> Path | None:
    """The java Spark's launcher runs ($JAVA_HOME/bin/java, else java on PATH), symbolic links resolved."""
    home = os.environ.get("JAVA_HOME", "").strip()
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(java).resolve() if java and os.path.isfile(java) else None


def _spark_jars() -> Path | None:
    try:
        from pyspark.find_spark_home import _find_spark_home

        jars = Path(_find_spark_home()) / "jars"
    except Exception:  # noqa: BLE001 - no Spark found: no archive (Spark's own start reports the problem)
        return None
    return jars if jars.is_dir() else None


def _stat_line(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return f"{path} -"
    return f"{path} {st.st_size} {st.st_mtime_ns}"


def archive_key() -> str | None:
    """A digest of what an archive is valid for: the JVM build (the JDK's path, its ``lib/modules`` class image
    and ``libjvm.so``) and Spark's class path (every jar's name, size and time). None when there is no java
    or no Spark."""
    java, jars = _java(), _spark_jars()
    if java is None or jars is None:
        return None
    jdk = java.parent.parent
    lines = [str(java), _stat_line(jdk / "lib" / "modules"), _stat_line(jdk / "lib" / "server" / "libjvm.so")]
    lines += sorted(_stat_line(jar) for jar in jars.glob("*.jar"))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:24]


def archive_path(key: str | None = None) -> Path | None:
    """The archive for this JVM and Spark (whether it exists or not); None when :func:`archive_key` is."""
    key = key or archive_key()
    return archive_dir() / f"spark-driver-{key}.jsa" if key else None


def java_options() -> str:
    """The driver JVM's options for the archive: write it at exit (in :func:`make_archive`'s JVM), else use it
    when this JVM and Spark have one (and $SEGJOBS_SPARK_CLASS_ARCHIVE is not ``0``), else none."""
    dump = os.environ.get(_DUMP_ENV, "").strip()
    if dump:
        return f"-XX:ArchiveClassesAtExit={dump} {_QUIET}"
    if os.environ.get(ARCHIVE_ENV, "").strip() == "0":
        return ""
    path = archive_path()
    return f"-XX:SharedArchiveFile={path} {_QUIET}" if path is not None and path.is_file() else ""


def make_archive(say: Callable[[str], None], exercise: Sequence[str], *, timeout_s: float = 600) -> Path | None:
    """Write this JVM's and Spark's archive (replacing older ones): ``exercise`` (a command, given a scratch
    directory as its last argument) runs in a fresh process with the environment that makes the JVM it
    launches write the archive at exit; it builds a session with
    :func:`jobs.engine.runtime.spark_session.build_session`, runs what a run runs on it, then calls
    :func:`stop_and_wait`. Returns the archive's path, or None (after saying why) when there is no java or
    Spark, or the JVM did not write it: runs then go without one."""
    path = archive_path()
    if path is None:
        say("  class archive: skipped (no java or no Spark found)")
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="segjobs-class-archive-") as tmp:
        partial = Path(tmp) / path.name
        env = {**os.environ, _DUMP_ENV: str(partial), "PYSPARK_PYTHON": sys.executable}
        env.pop(ARCHIVE_ENV, None)
        env.pop("PYSPARK_GATEWAY_PORT", None)
        proc = subprocess.run([*exercise, tmp], env=env, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0 or not partial.is_file():
            say(f"  class archive: not written (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
            return None
        for old in path.parent.glob("spark-driver-*.jsa"):
            old.unlink()
        os.replace(partial, path)
    return path


def stop_and_wait(spark: Any) -> None:
    """Stop ``spark`` and its JVM, and wait for the JVM to exit: the JVM of :func:`make_archive`'s exercise
    writes the archive as it exits."""
    spark.stop()
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    if proc is not None:
        proc.stdin.close()  # the gateway JVM exits at the end of its stdin, writing the archive first
        proc.wait(timeout=300)
