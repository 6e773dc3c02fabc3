"""The log-dir lock (local, broker-compatible) and the S3 lease."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from jobs.logdir.lock import (
    DEFAULT_TTL_MS,
    TTL_ENV,
    Holder,
    LeaseLost,
    acquire,
    lease_ttl_ms,
    lease_uri,
    work_uri,
    writer_at_work,
)
from jobs.rules.timeutil import wall_clock_ms
from segment_io.errors import LockHeldError, UsageError
from segment_io.storage import LocalStorage, S3Storage
from tests.support.lock_holders import (
    FOREIGN_HOLD_SCRIPT,
    HOLD_SCRIPT,
    NOW,
    hold_in_subprocess,
    lease_of_a_killed_process,
    release_holder,
)

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


def test_local_lock_conflicts_across_processes_and_names_the_segjobs_holder(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    proc = hold_in_subprocess(log_dir)
    try:
        assert (log_dir / ".lock").read_bytes() == b""  # nothing foreign in the broker's lock file
        doc = json.loads((tmp_path / "logs.segjobs" / "lock-holder.json").read_text())
        assert doc["holder"]["pid"] == proc.pid and doc["holder"]["run_id"] == "held-run"
        assert doc["acquired_ms"] == NOW and doc["holder"]["host"] == socket.gethostname()
        with pytest.raises(LockHeldError) as info:
            with acquire(LocalStorage(), str(log_dir), now_ms=NOW):
                pass
        assert (f".lock is held by segjobs run held-run (pid {proc.pid} on host {socket.gethostname()} since "
                f"2023-11-14T22:13:20.000Z)") in str(info.value)
    finally:
        release_holder(proc)
    with acquire(LocalStorage(), str(log_dir), now_ms=NOW) as lease:
        assert lease.uri == str(log_dir / ".lock")
    assert os.listdir(log_dir) == [".lock"]  # only what a broker creates itself
    assert (log_dir / ".lock").read_bytes() == b""
    assert not (tmp_path / "logs.segjobs").exists()  # the holder file, and the dir made only for it, are gone


def test_local_lock_held_by_something_else_is_not_blamed_on_segjobs(tmp_path):
    """A broker writes no holder file; a stale one (a segjobs run killed earlier) names a dead process."""
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (tmp_path / "logs.segjobs").mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = {"format": 1, "log_dir": str(log_dir), "acquired_ms": NOW,
             "holder": {"host": socket.gethostname(), "pid": int(dead.stdout), "run_id": "killed-run"}}
    for holder_file in (None, stale):
        if holder_file is not None:
            (tmp_path / "logs.segjobs" / "lock-holder.json").write_text(json.dumps(holder_file))
        proc = hold_in_subprocess(log_dir, FOREIGN_HOLD_SCRIPT)
        try:
            with pytest.raises(LockHeldError, match=re.escape("held by a process that is not segjobs: a running "
                                                              "Kafka broker?")):
                with acquire(LocalStorage(), str(log_dir), now_ms=NOW):
                    pass
        finally:
            release_holder(proc)
    with acquire(LocalStorage(), str(log_dir), now_ms=NOW, holder=Holder.this_process("next-run")):
        doc = json.loads((tmp_path / "logs.segjobs" / "lock-holder.json").read_text())
        assert doc["holder"]["run_id"] == "next-run"  # the stale file is overwritten by the new holder


def test_local_lock_refuses_a_second_acquire_in_the_same_process(tmp_path):
    with acquire(LocalStorage(), str(tmp_path), now_ms=NOW, holder=Holder.this_process("me")):
        with pytest.raises(LockHeldError, match=rf"held by segjobs run me \(pid {os.getpid()} on host"):
            with acquire(LocalStorage(), str(tmp_path) + "/", now_ms=NOW):
                pass
        # the refused attempt must not have dropped our lock: another process still cannot take it
        child = subprocess.run([sys.executable, "-c", HOLD_SCRIPT, str(tmp_path)], input="", text=True,
                               capture_output=True, env=dict(os.environ, PYTHONPATH=os.getcwd()), timeout=60)
        assert child.returncode != 0 and "LockHeldError" in child.stderr
    with acquire(LocalStorage(), str(tmp_path), now_ms=NOW):
        pass  # released on exit


def test_who_holds_the_lock_is_read_without_taking_it(tmp_path):
    """For the runs that take no lock (inspect, dry runs): a segjobs run, a process that is not segjobs, this
    process, nobody; and the probe never drops a lock this process holds (closing any descriptor of the file would)."""
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    storage = LocalStorage()
    assert writer_at_work(storage, str(log_dir), NOW) is None  # no .lock yet
    foreign = "by a process that is not segjobs (pid {pid}) (a running Kafka broker?)"
    for script, who in ((HOLD_SCRIPT, "by segjobs run held-run (pid {pid}"), (FOREIGN_HOLD_SCRIPT, foreign)):
        proc = hold_in_subprocess(log_dir, script)
        try:
            said = writer_at_work(storage, str(log_dir), NOW)
            assert said is not None and said.startswith(f"{log_dir / '.lock'} is held {who.format(pid=proc.pid)}"), said
        finally:
            release_holder(proc)
    assert writer_at_work(storage, str(log_dir), NOW) is None  # released: nobody
    with acquire(storage, str(log_dir), now_ms=NOW, holder=Holder.this_process("me")):
        assert writer_at_work(storage, str(log_dir), NOW) == f"{log_dir / '.lock'} is held by this process"
        child = subprocess.run([sys.executable, "-c", HOLD_SCRIPT, str(log_dir)], input="", text=True,
                               capture_output=True, env=dict(os.environ, PYTHONPATH=os.getcwd()), timeout=60)
        assert child.returncode != 0 and "LockHeldError" in child.stderr  # still ours


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
        assert doc["holder"] == {"host": "driver-1", "pid": 42, "run_id": "run-a", "process": None}
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


def test_s3_who_holds_the_lease_is_read_without_taking_it(s3):
    storage, log_dir = s3
    assert writer_at_work(storage, log_dir, NOW) is None
    with acquire(storage, log_dir, now_ms=NOW, ttl_ms=TTL, holder=Holder(host="host-a", pid=1, run_id="run-a")):
        said = writer_at_work(storage, log_dir, NOW + 1)
        assert said is not None and said.startswith(f"the lease {lease_uri(storage, log_dir)} is held by") \
            and "run-a" in said, said
        assert writer_at_work(storage, log_dir, NOW + TTL) is None  # expired: nobody is at work under it
    assert writer_at_work(storage, log_dir, NOW + 1) is None


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
    script = textwrap.dedent(f"""
        import pickle, sys
        from jobs.logdir.lock import acquire
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


# --------------------------------------------------------------------------------------------- holders, TTL


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    out = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(out.stdout)


def test_holder_liveness_sees_dead_reused_and_foreign_processes():
    me = Holder.this_process()
    assert me.process is not None and me.alive() is True
    boot, ns, start = me.process.split("|")
    assert Holder(pid=_dead_pid(), process=None).alive() is False
    # the pid is alive but belongs to a process that started at another tick: the holder is gone
    assert Holder(pid=os.getpid(), process=f"{boot}|{ns}|{int(start) + 1}").alive() is False
    # the host rebooted since the lease was written: every process of then is gone
    assert Holder(pid=os.getpid(), process=f"not-this-boot|{ns}|{start}").alive() is False
    # another pid namespace (a container with the same host name) or another host: cannot tell
    assert Holder(pid=os.getpid(), process=f"{boot}|pid:[1]|{start}").alive() is None
    assert Holder(host="elsewhere", pid=os.getpid()).alive() is None


def test_lease_ttl_comes_from_the_argument_the_environment_or_the_default(monkeypatch):
    monkeypatch.delenv(TTL_ENV, raising=False)
    assert lease_ttl_ms() == DEFAULT_TTL_MS == 120_000
    monkeypatch.setenv(TTL_ENV, "5m")
    assert lease_ttl_ms() == 300_000
    assert lease_ttl_ms("90s") == 90_000  # an explicit value (a CLI option) wins over the environment
    monkeypatch.setenv(TTL_ENV, "45000")
    assert lease_ttl_ms() == 45_000
    for bad in ("soon", "-1", "500ms", "2 fortnights"):
        monkeypatch.setenv(TTL_ENV, bad)
        with pytest.raises(UsageError, match=TTL_ENV):
            lease_ttl_ms()


# --------------------------------------------------------------------------------------------- heartbeat, breaking


def _wait_for(predicate, what: str, timeout_s: float = 60.0) -> None:
    """Poll until ``predicate()``; the deadline only bounds a hang, it is not what the test measures."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_s3_heartbeat_renews_the_lease_until_release(s3):
    storage, log_dir = s3
    with acquire(storage, log_dir, now_ms=wall_clock_ms(), ttl_ms=1500, clock=wall_clock_ms) as lease:
        first = json.loads(storage.read(lease.uri))["expires_ms"]
        _wait_for(lambda: json.loads(storage.read(lease.uri))["expires_ms"] > first, "a renewal")
        lease.check(wall_clock_ms())  # still ours: the object's etag is the one the heartbeat last wrote
        assert lease.lost is None
        thread = lease._thread
    assert not thread.is_alive()  # stopped before the release, which then found its etag
    assert not storage.exists(lease_uri(storage, log_dir))


def test_s3_a_stolen_lease_stops_the_run_before_its_next_commit(s3):
    storage, log_dir = s3
    uri = lease_uri(storage, log_dir)
    with pytest.raises(LeaseLost, match="taken over by segjobs run thief"):
        with acquire(storage, log_dir, now_ms=wall_clock_ms(), ttl_ms=TTL, clock=wall_clock_ms) as lease:
            lease.check(wall_clock_ms())
            thief = {"format": 1, "log_dir": log_dir, "acquired_ms": NOW, "expires_ms": NOW + 10 * TTL,
                     "holder": {"host": "other", "pid": 7, "run_id": "thief"}}
            storage.write_atomic(uri, json.dumps(thief).encode())
            lease.check(wall_clock_ms())  # seen at once, long before the heartbeat's next beat
    assert json.loads(storage.read(uri))["holder"]["run_id"] == "thief"  # our release left it alone


def test_s3_heartbeat_notices_a_takeover(s3):
    storage, log_dir = s3
    uri = lease_uri(storage, log_dir)
    stolen = b'{"holder": {"host": "h", "pid": 1, "run_id": "x"}, "acquired_ms": 0, "expires_ms": 0}'
    with pytest.raises(LockHeldError, match="taken over"):  # the release, which finds another etag
        with acquire(storage, log_dir, now_ms=wall_clock_ms(), ttl_ms=1500, clock=wall_clock_ms) as lease:
            storage.write_atomic(uri, stolen)
            _wait_for(lambda: lease.lost is not None, "the heartbeat to notice")
            assert "taken over" in lease.lost
            with pytest.raises(LeaseLost):
                lease.check(wall_clock_ms())
    assert storage.read(uri) == stolen


def test_s3_lease_of_a_dead_process_on_this_host_is_broken_at_once(s3):
    storage, log_dir = s3
    dead_pid = lease_of_a_killed_process(storage, log_dir, ttl_ms=10 * 3_600_000)
    with acquire(storage, log_dir, now_ms=NOW + 1, ttl_ms=TTL, holder=Holder.this_process("heir")) as lease:
        assert lease.notice is not None
        assert f"(pid {dead_pid} on host {socket.gethostname()} since 2023-11-14T22:13:20.000Z)" in lease.notice
        assert f"its process (pid {dead_pid} on this host) is gone" in lease.notice
        assert json.loads(storage.read(lease.uri))["holder"]["run_id"] == "heir"
        assert lease.took_over is None  # a holder known to be gone is fenced off from nothing


def test_s3_live_holder_is_refused_with_the_break_lease_command_and_break_needs_its_run_id(s3):
    storage, log_dir = s3
    other_host = Holder(host="other-host", pid=4242, run_id="run-far")
    held = acquire(storage, log_dir, now_ms=NOW, ttl_ms=TTL, holder=other_host)
    held.__enter__()  # its process "died" on the other host: nobody here can tell
    uri = lease_uri(storage, log_dir)
    before = storage.read(uri)
    with pytest.raises(LockHeldError) as info:
        with acquire(storage, log_dir, now_ms=NOW + 1, ttl_ms=TTL):
            pass
    assert ("is locked by segjobs run run-far (pid 4242 on host other-host since 2023-11-14T22:13:20.000Z) until "
            "2023-11-14T22:14:20.000Z") in str(info.value)
    assert f"segjobs recover --log-dir {log_dir} --break-lease run-far" in str(info.value)
    with pytest.raises(LockHeldError, match="--break-lease run-near does not name the holder: the lease is held "
                                            "by segjobs run run-far"):
        with acquire(storage, log_dir, now_ms=NOW + 1, ttl_ms=TTL, break_run_id="run-near"):
            pass
    assert storage.read(uri) == before  # refusals leave the lease as it was
    with acquire(storage, log_dir, now_ms=NOW + 1, ttl_ms=TTL, break_run_id="run-far",
                 holder=Holder.this_process("breaker")) as lease:
        assert "took over the lease of segjobs run run-far (pid 4242 on host other-host" in lease.notice
        assert lease.notice.endswith("broken by --break-lease")
        assert lease.took_over == "run-far"  # it may still be at work: recovery keeps its recent stagings
    with pytest.raises(LockHeldError, match="taken over"):
        held.__exit__(None, None, None)  # the broken run, were it alive, would learn it at its release


def test_s3_live_holder_on_this_host_is_refused(s3):
    storage, log_dir = s3
    with acquire(storage, log_dir, now_ms=NOW, ttl_ms=TTL, holder=Holder.this_process("alive")):
        with pytest.raises(LockHeldError, match=r"\(its process is still running on this host\)"):
            with acquire(storage, log_dir, now_ms=NOW + 1, ttl_ms=TTL):
                pass


def test_break_lease_is_refused_on_a_local_log_dir(tmp_path):
    with pytest.raises(UsageError, match="nothing to break"):
        with acquire(LocalStorage(), str(tmp_path), now_ms=NOW, break_run_id="x"):
            pass


# --------------------------------------------------------------------------------------------- lost answers


@pytest.fixture()
def lossy_s3(s3_bucket):
    """The S3 store through a proxy that loses the answers it is told to (:mod:`tests.support.lossy_proxy`)."""
    from dataclasses import replace

    from tests.support.lossy_proxy import LossyProxy

    endpoint, bucket = s3_bucket
    with LossyProxy(endpoint.endpoint_url) as proxy:
        storage = S3Storage(replace(endpoint.storage_options(), endpoint_url=proxy.endpoint_url))
        yield storage, f"s3://{bucket}/kafka/logs", proxy


def test_s3_a_renewal_whose_answer_was_lost_keeps_the_lease(lossy_s3):
    """The renewal's conditional PUT applies, its answer is lost, botocore retries and gets 412: the lease still
    names this run, renewed as asked, so the run goes on (no "taken over" with no other run there), and its
    next check and its release find the lease its own."""
    storage, log_dir, proxy = lossy_s3
    uri = lease_uri(storage, log_dir)
    with acquire(storage, log_dir, now_ms=NOW, ttl_ms=TTL, holder=Holder(run_id="run-a")) as lease:
        proxy.drop("PUT", "/kafka/logs.segjobs/lease.json")
        lease.renew(NOW + 1_000)
        assert len(proxy.dropped) == 1 and proxy.dropped[0].startswith("PUT "), proxy.dropped
        assert json.loads(storage.read(uri))["expires_ms"] == lease.expires_ms == NOW + 1_000 + TTL
        assert lease.etag == storage.stat(uri).etag
        lease.check(NOW + 2_000)
        assert lease.lost is None
    assert not storage.exists(uri)


def test_s3_a_lease_taken_whose_answer_was_lost_is_held(lossy_s3):
    """The same for taking a fresh lease (If-None-Match) and for taking over an expired one (If-Match)."""
    storage, log_dir, proxy = lossy_s3
    uri = lease_uri(storage, log_dir)
    proxy.drop("PUT", "/kafka/logs.segjobs/lease.json")
    dead = acquire(storage, log_dir, now_ms=NOW, ttl_ms=TTL, holder=Holder(host="other-host", pid=1, run_id="run-a"))
    lease = dead.__enter__()  # never released: the holder "died" (keep the reference, or GC would release it)
    assert len(proxy.dropped) == 1 and lease.etag == storage.stat(uri).etag
    proxy.drop("PUT", "/kafka/logs.segjobs/lease.json")
    with acquire(storage, log_dir, now_ms=NOW + TTL, ttl_ms=TTL, holder=Holder(run_id="run-b")) as heir:
        assert len(proxy.dropped) == 2 and heir.took_over == "run-a" and "it expired" in (heir.notice or "")
        assert json.loads(storage.read(uri))["holder"]["run_id"] == "run-b" and heir.etag == storage.stat(uri).etag
        with pytest.raises(LeaseLost, match="taken over by segjobs run run-b"):
            lease.check(NOW + TTL + 1)
    assert not storage.exists(uri)
