"""The lock and the lease through the CLI (issue 8, items 6 and 7): who is named when a run is refused, a dead
run's S3 lease broken on the same host or with ``recover --break-lease``, a lease lost mid-run, and a
compaction killed with SIGKILL mid-commit (local disk and S3), after which ``recover`` needs no waiting and
the next ``compact`` leaves exactly what a clean run leaves.

A refused run must have done nothing: every refusal is checked against the bytes of the log dir and its work
dir before and after.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jobs.commands.cli import main
from jobs.logdir.lock import Holder, acquire, lease_uri
from jobs.rules.timeutil import wall_clock_ms
from segment_io.storage import S3Storage
from tests.support.compaction_faults import (
    CONFIG,
    NOW,
    TOPIC,
    build_partition,
    compact_with_fault,
    differences_but_stamped_markers,
)
from tests.support.lock_holders import (
    FOREIGN_HOLD_SCRIPT,
    hold_in_subprocess,
    lease_of_a_killed_process,
    release_holder,
)
from tests.support.s3_objects import PREFIX, contents, put_objects

HOST = socket.gethostname()


def _tree(*dirs: Path) -> dict[str, bytes]:
    """Every file under ``dirs``: ``<dir name>/<path inside it>`` -> bytes."""
    return {f"{d.name}/{p.relative_to(d)}": p.read_bytes() for d in dirs if d.exists() for p in sorted(d.rglob("*"))
            if p.is_file()}


def _files(d: Path) -> dict[str, bytes]:
    """Every file under ``d``: path inside it -> bytes (comparable between two log dirs)."""
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture()
def config(tmp_path) -> Path:
    path = tmp_path / "t.toml"
    path.write_text(CONFIG)
    return path


def _s3_args(endpoint, bucket: str) -> list[str]:
    return ["--log-dir", f"s3://{bucket}/{PREFIX}", "--s3-endpoint", endpoint.endpoint_url]


# --------------------------------------------------------------------------------------------------
# Item 7: the local lock names its holder
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["compact", "recover"])
def test_a_run_refused_by_a_segjobs_run_names_it_and_changes_nothing(command, tmp_path, config, capsys):
    log_dir = tmp_path / "logs"
    build_partition(log_dir / f"{TOPIC}-0")
    proc = hold_in_subprocess(log_dir)
    try:
        before = _tree(log_dir)  # with the .lock the holder created
        held = _tree(log_dir, tmp_path / "logs.segjobs")
        extra = ["--config", str(config)] if command == "compact" else []
        code = main([command, "--log-dir", str(log_dir), "--now", NOW, *extra])
        err = capsys.readouterr().err
        assert code == 2, err
        assert (f"{log_dir}/.lock is held by segjobs run held-run (pid {proc.pid} on host {HOST} since "
                f"2023-11-14T22:13:20.000Z); wait for it to finish or stop it") in err
        assert _tree(log_dir, tmp_path / "logs.segjobs") == held
    finally:
        release_holder(proc)
    assert _tree(log_dir) == before


def test_a_run_refused_by_another_process_suspects_a_broker(tmp_path, config, capsys):
    log_dir = tmp_path / "logs"
    build_partition(log_dir / f"{TOPIC}-0")
    proc = hold_in_subprocess(log_dir, FOREIGN_HOLD_SCRIPT)
    before = _tree(log_dir)
    try:
        code = main(["compact", "--log-dir", str(log_dir), "--config", str(config), "--now", NOW])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "held by a process that is not segjobs: a running Kafka broker? Stop it or choose another log dir" in err
    finally:
        release_holder(proc)
    assert _tree(log_dir) == before
    assert not (tmp_path / "logs.segjobs").exists()


def test_break_lease_on_a_local_log_dir_is_a_usage_error(tmp_path, capsys):
    log_dir = tmp_path / "logs"
    build_partition(log_dir / f"{TOPIC}-0")
    assert main(["recover", "--log-dir", str(log_dir), "--break-lease", "abc"]) == 2
    assert "nothing to break" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# Item 6: the S3 lease
# --------------------------------------------------------------------------------------------------


@pytest.mark.s3
def test_recover_breaks_the_lease_of_a_run_killed_on_this_host_without_waiting(s3_bucket_env, tmp_path, capsys):
    endpoint, bucket = s3_bucket_env
    build_partition(tmp_path / "logs" / f"{TOPIC}-0")
    put_objects(endpoint, bucket, tmp_path / "logs")
    storage = S3Storage(endpoint.storage_options())
    log_dir = f"s3://{bucket}/{PREFIX}"
    # taken now, for an hour: expiry cannot be why it is taken over
    dead_pid = lease_of_a_killed_process(storage, log_dir, ttl_ms=3_600_000, now_ms=wall_clock_ms())
    before = contents(endpoint, bucket)
    assert main(["recover", *_s3_args(endpoint, bucket), "--now", NOW]) == 0
    err = capsys.readouterr().err
    assert "took over the lease of segjobs run" in err and f"(pid {dead_pid} on host {HOST} since " in err, err
    assert err.rstrip().endswith(f"its process (pid {dead_pid} on this host) is gone"), err
    assert contents(endpoint, bucket) == before  # nothing to recover here
    assert not storage.exists(lease_uri(storage, log_dir))  # released


@pytest.mark.s3
def test_a_live_lease_elsewhere_is_refused_until_broken_by_its_run_id(s3_bucket_env, tmp_path, config, capsys):
    endpoint, bucket = s3_bucket_env
    build_partition(tmp_path / "logs" / f"{TOPIC}-0")
    put_objects(endpoint, bucket, tmp_path / "logs")
    storage = S3Storage(endpoint.storage_options())
    log_dir = f"s3://{bucket}/{PREFIX}"
    far = acquire(storage, log_dir, now_ms=wall_clock_ms(), ttl_ms=3_600_000,
                  holder=Holder(host="other-host", pid=4242, run_id="run-far"))
    far.__enter__()  # never released: it died on a host this one cannot look at
    everything = contents(endpoint, bucket, "")

    for argv in (["compact", *_s3_args(endpoint, bucket), "--config", str(config), "--now", NOW],
                 ["recover", *_s3_args(endpoint, bucket)],
                 ["recover", *_s3_args(endpoint, bucket), "--break-lease", "run-near"]):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, err
        assert "segjobs run run-far (pid 4242 on host other-host since " in err, err
        assert contents(endpoint, bucket, "") == everything  # refused: not one byte changed
    assert f"segjobs recover --log-dir {log_dir} --break-lease run-far" in main_err(
        ["recover", *_s3_args(endpoint, bucket)], capsys)

    assert main(["recover", *_s3_args(endpoint, bucket), "--break-lease", "run-far"]) == 0
    err = capsys.readouterr().err
    assert "took over the lease of segjobs run run-far (pid 4242 on host other-host since" in err
    assert "broken by --break-lease" in err
    assert not storage.exists(lease_uri(storage, log_dir))
    assert contents(endpoint, bucket) == {k[len(PREFIX) + 1:]: v for k, v in everything.items()
                                          if k.startswith(PREFIX + "/")}


def main_err(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err


@pytest.mark.s3
def test_a_bad_lease_ttl_is_a_usage_error_before_anything_is_done(s3_bucket_env, tmp_path, config, capsys, monkeypatch):
    endpoint, bucket = s3_bucket_env
    build_partition(tmp_path / "logs" / f"{TOPIC}-0")
    put_objects(endpoint, bucket, tmp_path / "logs")
    monkeypatch.setenv("SEGJOBS_LEASE_TTL", "a while")
    everything = contents(endpoint, bucket, "")
    assert main(["compact", *_s3_args(endpoint, bucket), "--config", str(config), "--now", NOW]) == 2
    assert "SEGJOBS_LEASE_TTL='a while'" in capsys.readouterr().err
    monkeypatch.delenv("SEGJOBS_LEASE_TTL")
    err = main_err(["compact", *_s3_args(endpoint, bucket), "--config", str(config), "--now", NOW,
                    "--lease-ttl", "10ms"], capsys)
    assert "lease TTL='10ms'" in err and "at least" in err
    assert contents(endpoint, bucket, "") == everything


@pytest.mark.s3
def test_a_run_whose_lease_is_taken_over_stops_before_its_next_commit(spark, s3_bucket_env, tmp_path, config, capsys):
    endpoint, bucket = s3_bucket_env
    for p in (0, 1):
        build_partition(tmp_path / "logs" / f"{TOPIC}-{p}")
    put_objects(endpoint, bucket, tmp_path / "logs")
    source = contents(endpoint, bucket)
    storage = S3Storage(endpoint.storage_options())
    log_dir = f"s3://{bucket}/{PREFIX}"
    thief = json.dumps({"format": 1, "log_dir": log_dir, "acquired_ms": 0, "expires_ms": 4_000_000_000_000,
                        "holder": {"host": "other-host", "pid": 7, "run_id": "thief"}}).encode()

    def steal_during_the_first_commit(partition: str, step: str) -> None:
        if step == "write-intent" and not storage.exists(lease_uri(storage, log_dir) + ".stolen"):
            storage.write_atomic(lease_uri(storage, log_dir), thief)
            storage.write_atomic(lease_uri(storage, log_dir) + ".stolen", b"")

    code = compact_with_fault([*_s3_args(endpoint, bucket), "--config", str(config), "--now", NOW],
                              steal_during_the_first_commit)
    err = capsys.readouterr().err
    assert code == 1, err
    assert "LOST THE LEASE, stopped before the next commit" in err and "taken over by segjobs run thief" in err
    after = contents(endpoint, bucket)
    # the commit under way when the lease went finished (each commit is crash-safe on its own); the next
    # partition was not touched, and no cleaner checkpoint was written after the lease was lost
    assert {k: v for k, v in after.items() if k.startswith(f"{TOPIC}-1/")} == \
        {k: v for k, v in source.items() if k.startswith(f"{TOPIC}-1/")}
    assert {k for k in after if k.startswith(f"{TOPIC}-0/")} != {k for k in source if k.startswith(f"{TOPIC}-0/")}
    assert "cleaner-offset-checkpoint" not in after
    assert storage.read(lease_uri(storage, log_dir)) == thief  # the thief's lease stays


# --------------------------------------------------------------------------------------------------
# Item 6: kill -9 mid-commit, then recover without waiting, then compact
# --------------------------------------------------------------------------------------------------

#: ``segjobs compact`` with a wait point: at the first commit step named by PAUSE_AT it says so on stdout and
#: blocks, so the parent's SIGKILL lands at exactly that step.
_PAUSING_COMPACT = textwrap.dedent("""
    import os, sys
    from tests.support.compaction_faults import compact_with_fault

    def pause(partition, step):
        if step.startswith(os.environ["PAUSE_AT"]):
            print("paused at " + step + " of " + partition, flush=True)
            sys.stdin.read()  # until killed

    sys.exit(compact_with_fault(sys.argv[1:], pause))
""")


def _compact_killed_at(step_prefix: str, argv: list[str], timeout_s: float = 300.0,
                       before_kill: Callable[[str], bool] | None = None) -> tuple[int, str]:
    """Run ``segjobs compact argv`` in a process group of its own, SIGKILL the whole group (driver, JVM,
    workers) once the commit reaches ``step_prefix``; returns the driver's pid and the partition whose commit
    paused there. ``before_kill(partition)``: waited for (polled) while the commit is paused, the run's other
    tasks still running, before the kill."""
    proc = subprocess.Popen([sys.executable, "-c", _PAUSING_COMPACT, *argv], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True,
                            env=dict(os.environ, PAUSE_AT=step_prefix, PYTHONPATH=os.getcwd(),
                                     SEGJOBS_LEASE_TTL="1h"))  # expiry must not be why the lease is broken
    try:
        deadline = time.monotonic() + timeout_s
        line = ""
        while not line.startswith("paused at "):
            assert time.monotonic() < deadline and proc.poll() is None, f"compact never paused: {line!r}"
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                line = proc.stdout.readline()
        paused = line.rsplit(" of ", 1)[1].strip()
        while before_kill is not None and not before_kill(paused):
            assert time.monotonic() < deadline, f"paused at {paused}, then waited in vain"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)  # reaped, so its pid is gone for good
    return proc.pid, paused


def _s3_snapshot(endpoint, bucket: str, prefix: str) -> dict[str, bytes]:
    return contents(endpoint, bucket, prefix + "/")


@pytest.mark.slow
@pytest.mark.scenario
@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_a_compaction_killed_mid_commit_is_completed_by_recover_and_the_next_run(store, spark, tmp_path, config,
                                                                                capsys, request):
    # the partition committed first is killed mid-commit; the other's new segments are staged, never committed
    for p in (0, 1):
        build_partition(tmp_path / "src" / f"{TOPIC}-{p}")
        build_partition(tmp_path / "ref" / f"{TOPIC}-{p}")
    compact_args = ["--config", str(config), "--now", NOW, "--quiet"]
    if store == "local":
        log_dir, ref_dir = tmp_path / "src", tmp_path / "ref"
        args, ref_args = ["--log-dir", str(log_dir)], ["--log-dir", str(ref_dir)]
        pause_at = "swap-to-live:"
        snapshot = lambda: _files(log_dir)  # noqa: E731
        reference = lambda: _files(ref_dir)  # noqa: E731
        work = lambda: _tree(tmp_path / "src.segjobs")  # noqa: E731
    else:
        endpoint, bucket = request.getfixturevalue("s3_bucket_env")
        put_objects(endpoint, bucket, tmp_path / "src")
        ref_prefix = "kafka/reference"
        client = endpoint.client()
        for p in sorted((tmp_path / "ref").rglob("*")):
            if p.is_file():
                client.put_object(Bucket=bucket, Key=f"{ref_prefix}/{p.relative_to(tmp_path / 'ref')}",
                                  Body=p.read_bytes())
        args = _s3_args(endpoint, bucket)
        ref_args = ["--log-dir", f"s3://{bucket}/{ref_prefix}", "--s3-endpoint", endpoint.endpoint_url]
        pause_at = "delete-old:"
        snapshot = lambda: _s3_snapshot(endpoint, bucket, PREFIX)  # noqa: E731
        reference = lambda: _s3_snapshot(endpoint, bucket, ref_prefix)  # noqa: E731
        work = lambda: _s3_snapshot(endpoint, bucket, PREFIX + ".segjobs")  # noqa: E731

    # the reference: a clean run
    assert main(["compact", *ref_args, *compact_args]) == 0
    clean = reference()
    assert clean != snapshot()

    def staged_of(partition: str, files) -> list[str]:
        return [k for k in files if f"/{partition}/" in k and ("/staging/" in k or "/staged/" in k)]

    def other(partition: str) -> str:
        return f"{TOPIC}-1" if partition == f"{TOPIC}-0" else f"{TOPIC}-0"

    # the partitions' tasks may end in either order: the kill waits, while the first commit is paused, for the
    # other partition's task to have staged its output
    killed_pid, paused = _compact_killed_at(pause_at, [*args, *compact_args],
                                            before_kill=lambda paused: bool(staged_of(other(paused), work())))
    crashed_work = work()
    staged_for_other = staged_of(other(paused), crashed_work)
    assert staged_for_other, sorted(crashed_work)  # the second partition's output, staged and never committed

    # recover at once: on S3 the lease (TTL 1h) names a process that is gone; locally the kernel dropped the lock
    assert main(["recover", *args, "--now", NOW]) == 0
    out, err = capsys.readouterr()
    if store == "s3":
        assert f"its process (pid {killed_pid} on this host) is gone" in err, err
        storage = S3Storage(request.getfixturevalue("s3_bucket_env")[0].storage_options())
        assert not storage.exists(lease_uri(storage, args[1]))
    else:
        assert not (tmp_path / "src.segjobs" / "lock-holder.json").exists()
    removed = {line.split()[1] for line in out.splitlines()
               if line.startswith("delete-staged ") and f"/{other(paused)}/" in line}
    assert len(removed) == len(staged_for_other) and all(any(r.endswith(k) for r in removed) for k in staged_for_other)
    assert not [k for k in work() if "/staging/" in k or "/staged/" in k or k.endswith("replace.json")]

    assert main(["compact", *args, *compact_args]) == 0
    # the clean run's bytes, but for the paused partition, whose replace the killed run had completed: cleaned once
    # more, its abort marker gets the delete horizon the clean run's next night would give it (Kafka stamps on the
    # next clean)
    assert differences_but_stamped_markers(clean, snapshot(), {paused}) == []


@pytest.mark.s3
def test_recover_stops_before_the_next_partition_once_its_lease_is_taken_over(s3_bucket_env, tmp_path, capsys,
                                                                              monkeypatch):
    import jobs.logdir.recover

    endpoint, bucket = s3_bucket_env
    for p in (0, 1):
        build_partition(tmp_path / "logs" / f"{TOPIC}-{p}")
    put_objects(endpoint, bucket, tmp_path / "logs")
    client = endpoint.client()
    for p in (0, 1):  # staged objects of a commit that never reached its intent: recovery deletes them
        client.put_object(Bucket=bucket, Key=f"{PREFIX}.segjobs/commit/{TOPIC}-{p}/staged/00000000000000000000.log",
                          Body=b"staged")
    storage = S3Storage(endpoint.storage_options())
    log_dir = f"s3://{bucket}/{PREFIX}"
    thief = json.dumps({"format": 1, "log_dir": log_dir, "acquired_ms": 0, "expires_ms": 4_000_000_000_000,
                        "holder": {"host": "other-host", "pid": 7, "run_id": "thief"}}).encode()
    real = jobs.logdir.recover.apply_plan  # what recover_log_dir runs for each partition it changes

    def stolen_after_the_first(*args, **kwargs):
        real(*args, **kwargs)
        storage.write_atomic(lease_uri(storage, log_dir), thief)

    monkeypatch.setattr(jobs.logdir.recover, "apply_plan", stolen_after_the_first)
    assert main(["recover", *_s3_args(endpoint, bucket)]) == 1
    err = capsys.readouterr().err
    assert "LOST THE LEASE, stopped before the next partition" in err and "taken over by segjobs run thief" in err
    work = contents(endpoint, bucket, PREFIX + ".segjobs/")
    assert f"commit/{TOPIC}-0/staged/00000000000000000000.log" not in work  # recovered before the loss
    assert work[f"commit/{TOPIC}-1/staged/00000000000000000000.log"] == b"staged"  # not touched after it
    assert storage.read(lease_uri(storage, log_dir)) == thief
