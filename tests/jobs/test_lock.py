"""The log-dir lock (local, broker-compatible) and the S3 lease."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jobs.lock import Holder, acquire, lease_uri, work_uri
from segment_io.errors import LockHeldError, UsageError
from segment_io.storage import LocalStorage, S3Storage

NOW = 1_700_000_000_000
TTL = 60_000

# --------------------------------------------------------------------------------------------- work_uri


def test_work_uri_is_a_sibling_never_inside():
    assert work_uri("/data/kafka-logs") == "/data/kafka-logs.segjobs"
    assert work_uri("/data/kafka-logs/") == "/data/kafka-logs.segjobs"
    assert work_uri("s3://bucket/kafka/logs/") == "s3://bucket/kafka/logs.segjobs"
    assert work_uri("file:///data/logs") == "file:///data/logs.segjobs"
    for log_dir in ("s3://b/kafka/logs", "/data/kafka-logs"):
        assert not work_uri(log_dir).startswith(log_dir.rstrip("/") + "/")
    for root in ("/", "s3://bucket", "s3://bucket/", "file:///"):
        with pytest.raises(UsageError):
            work_uri(root)


# --------------------------------------------------------------------------------------------- local


_HOLD_SCRIPT = textwrap.dedent("""
    import sys
    from jobs.lock import acquire
    from segment_io.storage import LocalStorage
    with acquire(LocalStorage(), sys.argv[1], now_ms=0):
        print("held", flush=True)
        sys.stdin.read()  # hold until the parent closes our stdin
""")


def _hold_in_subprocess(log_dir: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD_SCRIPT, str(log_dir)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert proc.stdout.readline().strip() == "held"
    return proc


def _release(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0


def test_local_lock_conflicts_across_processes(tmp_path):
    proc = _hold_in_subprocess(tmp_path)
    try:
        with pytest.raises(LockHeldError, match=r"\.lock is locked by another process"):
            with acquire(LocalStorage(), str(tmp_path), now_ms=NOW):
                pass
    finally:
        _release(proc)
    with acquire(LocalStorage(), str(tmp_path), now_ms=NOW) as lease:
        assert lease.uri == str(tmp_path / ".lock")
    assert os.listdir(tmp_path) == [".lock"]  # only what a broker creates itself


def test_local_lock_refuses_a_second_acquire_in_the_same_process(tmp_path):
    with acquire(LocalStorage(), str(tmp_path), now_ms=NOW):
        with pytest.raises(LockHeldError):
            with acquire(LocalStorage(), str(tmp_path) + "/", now_ms=NOW):
                pass
        # the refused attempt must not have dropped our lock: another process still cannot take it
        child = subprocess.run([sys.executable, "-c", _HOLD_SCRIPT, str(tmp_path)], input="", text=True,
                               capture_output=True, env=dict(os.environ, PYTHONPATH=os.getcwd()), timeout=60)
        assert child.returncode != 0 and "LockHeldError" in child.stderr
    with acquire(LocalStorage(), str(tmp_path), now_ms=NOW):
        pass  # released on exit


def test_local_lock_needs_an_existing_dir(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        with acquire(LocalStorage(), str(tmp_path / "missing"), now_ms=NOW):
            pass


_JAVA_PROBE = """
import java.io.File;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.file.StandardOpenOption;

public class Probe {
    // Opens and tries to lock the file the way Kafka's FileLock does; "hold" keeps it until stdin closes.
    public static void main(String[] args) throws Exception {
        FileChannel ch = FileChannel.open(new File(args[0]).toPath(), StandardOpenOption.CREATE,
                StandardOpenOption.READ, StandardOpenOption.WRITE);
        FileLock lock = ch.tryLock();
        System.out.println(lock == null ? "busy" : "locked");
        System.out.flush();
        if (lock != null && args.length > 1) { System.in.read(); }
    }
}
"""


@pytest.fixture(scope="module")
def java_probe(tmp_path_factory) -> list[str]:
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH to play the broker")
    src = tmp_path_factory.mktemp("probe") / "Probe.java"
    src.write_text(_JAVA_PROBE)
    return [java, str(src)]  # single-file source launch (JDK 11+)


def test_local_lock_conflicts_with_javas_filechannel_trylock(tmp_path, java_probe):
    """The broker's lock (Java FileChannel.tryLock on <dir>/.lock) and ours exclude each other, both ways."""
    lock_file = str(tmp_path / ".lock")
    with acquire(LocalStorage(), str(tmp_path), now_ms=NOW):
        out = subprocess.run(java_probe + [lock_file], capture_output=True, text=True, timeout=120)
        assert out.stdout.strip() == "busy", out.stderr

    broker = subprocess.Popen(java_probe + [lock_file, "hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert broker.stdout.readline().strip() == "locked"
        with pytest.raises(LockHeldError, match="Kafka broker"):
            with acquire(LocalStorage(), str(tmp_path), now_ms=NOW):
                pass
    finally:
        broker.stdin.close()
        broker.wait(timeout=30)
    with acquire(LocalStorage(), str(tmp_path), now_ms=NOW):
        pass


# --------------------------------------------------------------------------------------------- S3 lease


@pytest.fixture()
def s3(s3_bucket) -> tuple[S3Storage, str]:
    endpoint, bucket = s3_bucket
    return S3Storage(endpoint.storage_options()), f"s3://{bucket}/kafka/logs"


def test_s3_lease_lives_beside_the_log_dir_and_holds_json(s3):
    storage, log_dir = s3
    me = Holder(host="driver-1", pid=42, run_id="run-a")
    with acquire(storage, log_dir, now_ms=NOW, ttl_ms=TTL, holder=me) as lease:
        assert lease.uri == f"{log_dir}.segjobs/lease.json" == lease_uri(storage, log_dir)
        assert storage.list(log_dir, recursive=True) == []  # nothing inside the log dir
        doc = json.loads(storage.read(lease.uri))
        assert doc["holder"] == {"host": "driver-1", "pid": 42, "run_id": "run-a"}
        assert (doc["acquired_ms"], doc["expires_ms"]) == (NOW, NOW + TTL)
        assert lease.etag == storage.stat(lease.uri).etag
    assert not storage.exists(lease.uri)  # released


def test_s3_second_run_is_refused_with_holder_and_expiry(s3):
    storage, log_dir = s3
    first = Holder(host="host-a", pid=1, run_id="run-first")
    with acquire(storage, log_dir, now_ms=NOW, ttl_ms=TTL, holder=first):
        with pytest.raises(LockHeldError) as info:
            with acquire(storage, log_dir, now_ms=NOW + TTL - 1, ttl_ms=TTL, holder=Holder(run_id="run-second")):
                pass
        message = str(info.value)
        assert "run-first" in message and "host-a" in message and "pid 1" in message
        assert f"expires_ms={NOW + TTL}" in message and "2023-11-14T22:14:20" in message
        assert storage.exists(lease_uri(storage, log_dir))  # the refused run left the lease alone


def test_s3_expired_lease_is_taken_over_and_the_old_holder_notices(s3):
    storage, log_dir = s3
    old = acquire(storage, log_dir, now_ms=NOW, ttl_ms=TTL, holder=Holder(run_id="old"))
    old_lease = old.__enter__()
    with acquire(storage, log_dir, now_ms=NOW + TTL, ttl_ms=TTL, holder=Holder(run_id="new")) as new_lease:
        assert json.loads(storage.read(new_lease.uri))["holder"]["run_id"] == "new"
        with pytest.raises(LockHeldError, match="taken over"):
            old_lease.renew(NOW + TTL + 1)
        with pytest.raises(LockHeldError, match="taken over"):
            old.__exit__(None, None, None)  # the old run's release must not delete the new lease
        assert json.loads(storage.read(new_lease.uri))["holder"]["run_id"] == "new"
    assert not storage.exists(new_lease.uri)


def test_s3_racing_takeovers_only_one_wins(s3, monkeypatch):
    """Two runs both read the same expired lease. Racer 2 is interrupted just before its If-Match write,
    racer 1 takes the lease over in that gap; racer 2's write then fails its condition."""
    storage, log_dir = s3
    uri = lease_uri(storage, log_dir)
    dead = acquire(storage, log_dir, now_ms=NOW, ttl_ms=TTL, holder=Holder(run_id="dead"))
    dead.__enter__()  # never released: the holder "died" (keep the reference, or GC would release it)
    later = NOW + 2 * TTL
    real_put_if_match = storage.put_if_match
    etags_tried: list[str | None] = []
    winner = []

    def interleaved(target: str, data: bytes, etag: str | None) -> str:
        etags_tried.append(etag)
        if len(etags_tried) == 1:  # racer 2, about to write: racer 1 runs its whole takeover first
            cm = acquire(storage, log_dir, now_ms=later, ttl_ms=TTL, holder=Holder(run_id="racer-1"))
            winner.append((cm, cm.__enter__()))
        return real_put_if_match(target, data, etag)

    monkeypatch.setattr(storage, "put_if_match", interleaved)
    with pytest.raises(LockHeldError, match="taken over by another run at the same moment"):
        with acquire(storage, log_dir, now_ms=later, ttl_ms=TTL, holder=Holder(run_id="racer-2")):
            pass
    assert etags_tried[0] == etags_tried[1]  # both racers conditioned on the same expired lease
    assert json.loads(storage.read(uri))["holder"]["run_id"] == "racer-1"
    cm, lease = winner[0]
    assert lease.etag == storage.stat(uri).etag
    cm.__exit__(None, None, None)
    assert not storage.exists(uri)


def test_s3_renew_extends_and_release_after_failure_keeps_the_error(s3):
    storage, log_dir = s3
    with pytest.raises(RuntimeError, match="job failed"):
        with acquire(storage, log_dir, now_ms=NOW, ttl_ms=TTL) as lease:
            lease.renew(NOW + 10, ttl_ms=5 * TTL)
            assert json.loads(storage.read(lease.uri))["expires_ms"] == NOW + 10 + 5 * TTL
            assert lease.expires_ms == NOW + 10 + 5 * TTL
            with pytest.raises(LockHeldError, match="until"):
                with acquire(storage, log_dir, now_ms=NOW + 2 * TTL):  # not expired thanks to the renewal
                    pass
            raise RuntimeError("job failed")
    assert not storage.exists(lease_uri(storage, log_dir))  # released even though the run failed


def test_s3_unreadable_lease_is_never_taken_over(s3):
    storage, log_dir = s3
    storage.write_atomic(lease_uri(storage, log_dir), b"{not json")
    with pytest.raises(LockHeldError, match="unreadable lease"):
        with acquire(storage, log_dir, now_ms=NOW + 10**12):
            pass


def test_s3_lease_conflict_between_processes(s3, s3_bucket):
    """A lease taken in one process blocks another process (leases are objects, not per-process locks)."""
    storage, log_dir = s3
    endpoint, _ = s3_bucket
    script = textwrap.dedent(f"""
        import pickle, sys
        from jobs.lock import acquire
        from segment_io.errors import LockHeldError
        storage = pickle.loads(sys.stdin.buffer.read())
        try:
            with acquire(storage, {log_dir!r}, now_ms={NOW + 1}):
                print("acquired")
        except LockHeldError as e:
            print("refused:", e)
    """)
    import pickle

    with acquire(storage, log_dir, now_ms=NOW, ttl_ms=TTL, holder=Holder(run_id="parent-run")):
        out = subprocess.run([sys.executable, "-c", script], input=pickle.dumps(storage), capture_output=True,
                             timeout=60, env=dict(os.environ, PYTHONPATH=os.getcwd()))
        assert out.stdout.decode().startswith("refused:") and "parent-run" in out.stdout.decode(), out.stderr
