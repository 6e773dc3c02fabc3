"""The Spark driver JVM's class archive (:mod:`jobs.engine.runtime.class_archive`): keyed by the JVM build and Spark's
jars, used only when the key matches, and harmless when the JVM finds it unusable all the same."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.engine.runtime import class_archive
from tests.support.builders import LogBuilder, rec, write_log
from tests.support.paths import REPO


@pytest.fixture()
def fake_install(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """A SPARK_HOME with two jars and a JAVA_HOME with a java; the archives go to a directory of the test's."""
    spark_home, java_home = tmp_path / "spark", tmp_path / "jdk"
    (spark_home / "jars").mkdir(parents=True)
    for jar in ("spark-core.jar", "scala-library.jar"):
        (spark_home / "jars" / jar).write_bytes(b"jar " + jar.encode())
    (java_home / "bin").mkdir(parents=True)
    (java_home / "bin" / "java").write_text("#!/bin/sh\n")
    (java_home / "lib" / "server").mkdir(parents=True)
    (java_home / "lib" / "modules").write_bytes(b"modules")
    (java_home / "lib" / "server" / "libjvm.so").write_bytes(b"jvm")
    monkeypatch.setenv("SPARK_HOME", str(spark_home))
    monkeypatch.setenv("JAVA_HOME", str(java_home))
    monkeypatch.setenv(class_archive.ARCHIVE_DIR_ENV, str(tmp_path / "archives"))
    monkeypatch.delenv(class_archive.ARCHIVE_ENV, raising=False)
    return spark_home, java_home


def test_the_key_follows_the_jvm_build_and_sparks_jars(fake_install: tuple[Path, Path]) -> None:
    spark_home, java_home = fake_install
    key = class_archive.archive_key()
    assert key and class_archive.archive_key() == key
    (spark_home / "jars" / "delta.jar").write_bytes(b"another jar")  # a Spark upgrade or a new package
    assert class_archive.archive_key() not in (None, key)
    key = class_archive.archive_key()
    (java_home / "lib" / "server" / "libjvm.so").write_bytes(b"a patched jvm")  # a Java update
    assert class_archive.archive_key() not in (None, key)


def test_an_archive_is_used_only_for_its_key(fake_install: tuple[Path, Path], monkeypatch) -> None:
    spark_home, _ = fake_install
    assert class_archive.java_options() == ""  # none made yet
    path = class_archive.archive_path()
    assert path is not None
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    assert class_archive.java_options().startswith(f"-XX:SharedArchiveFile={path} ")
    monkeypatch.setenv(class_archive.ARCHIVE_ENV, "0")
    assert class_archive.java_options() == ""
    monkeypatch.delenv(class_archive.ARCHIVE_ENV)
    (spark_home / "jars" / "spark-core.jar").write_bytes(b"jar of the next Spark")  # the archive is now stale
    assert class_archive.java_options() == ""


def _stale_archive(path: Path, tmp_path: Path) -> None:
    """A real dynamic archive, made by this Java for another class path: what a stale archive looks like."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "A.java").write_text("public class A { public static void main(String[] a) {} }\n")
    subprocess.run(["javac", "-d", str(src), str(src / "A.java")], check=True)
    subprocess.run(["jar", "cf", str(tmp_path / "a.jar"), "-C", str(src), "A.class"], check=True)
    subprocess.run(["java", f"-XX:ArchiveClassesAtExit={path}", "-cp", str(tmp_path / "a.jar"), "A"], check=True,
                   capture_output=True)
    assert path.is_file()


@pytest.mark.scenario
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["garbage", "other class path"])
def test_an_archive_the_jvm_cannot_use_neither_breaks_a_run_nor_prints(tmp_path: Path, kind: str) -> None:
    """The archive at this install's key is unusable (a broken file; one made for another class path): the
    run's JVM goes without it, and the run prints what it prints without an archive."""
    if kind == "other class path" and not (shutil.which("javac") and shutil.which("jar")):
        pytest.skip("no javac and jar to make a foreign archive with")
    logs = tmp_path / "logs"
    log = LogBuilder("orders", 0, timestamp=1_700_000_000_000)
    log.batch([rec("k", "v1"), rec("k", "v2")]).roll().batch([rec("k", "active")])
    write_log(log.table(), logs / "orders-0")
    archives = tmp_path / "archives"
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_GATEWAY_PORT", class_archive.ARCHIVE_ENV)}
    env.update({class_archive.ARCHIVE_DIR_ENV: str(archives), "PYSPARK_PYTHON": sys.executable})
    key_code = "from jobs.engine.runtime.class_archive import archive_path; print(archive_path())"
    path = Path(subprocess.run([sys.executable, "-c", key_code], env=env, capture_output=True, text=True,
                               check=True).stdout.strip())
    archives.mkdir()
    if kind == "garbage":
        path.write_bytes(b"not an archive" * 100)
    else:
        _stale_archive(path, tmp_path)
    proc = subprocess.run([sys.executable, "-m", "jobs", "compact", "--log-dir", str(logs), "--now",
                           "2026-11-22T03:00:00Z", "--set", "*:cleanup.policy=compact", "--master", "local[1]"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "1 of 1 partition(s) selected" in proc.stdout
    jvm_lines = [line for line in proc.stdout.splitlines() + proc.stderr.splitlines()
                 if not line.startswith("[compact")
                 and ("cds" in line.lower() or "archive" in line.lower() or "error" in line.lower()
                      or "warning" in line.lower())]
    assert jvm_lines == []
