"""The jobs on the cluster of network namespaces (:mod:`tests.ops.netns_cluster`) and what a faulted run is
compared with: one clean run of the same job on a copy of the same log dir (``local[2]`` in the test process,
same ``--now``). Shared by the cluster's test modules; the fixtures that start the cluster are in
``tests/ops/conftest.py`` (one cluster for all of them)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tests.ops.netns_cluster import NetnsCluster, netns_unavailable
from tests.support.compaction_faults import differences_but_stamped_markers
from tests.support.s3_objects import PREFIX, contents, put_objects

REPO = Path(__file__).resolve().parents[2]
NOW = "2023-11-30T00:00:00Z"
CONFIG = '[defaults]\n"cleanup.policy" = "compact"\n"min.cleanable.dirty.ratio" = "0.01"\n'
WORK_PREFIX = PREFIX + ".segjobs/"
#: What a job may leave under the work prefix once it ends: its lease (released) and ledgers; never staging.
STAGING_MARKS = ("/staged/", "staging/", "external-sort/", ".segjobs-staging/")
#: The names of external sort's work files (piece files of the key pass, bucket files of the reduce).
SORT_FILE_MARKS = (".rows", ".map")
OUTCOME_FIELDS = ("action", "records_before", "records_after", "segments_before", "segments_after", "bytes_removed")


@dataclass
class Run:
    """A job on the cluster: where its log dir is, what it reported, what its driver said."""

    bucket: str
    report: dict
    log: str
    returncode: int


class Jobs:
    """Runs a job (``compact`` unless told) on the cluster and, once per command and argument list, the clean run
    it must equal."""

    def __init__(self, cluster: NetnsCluster, source: Path, root: Path) -> None:
        self.cluster, self.source, self.root = cluster, source, root
        self.config = root / "topics.toml"
        self.config.write_text(CONFIG)
        self._clean: dict[tuple[str, ...], Run] = {}
        self._n = 0

    @property
    def endpoint(self) -> str:
        assert self.cluster.moto is not None
        return self.cluster.moto.endpoint_url

    def bucket(self, hint: str) -> str:
        assert self.cluster.moto is not None
        bucket = self.cluster.moto.create_bucket(hint)
        put_objects(self.cluster.moto, bucket, self.source)
        return bucket

    def argv(self, bucket: str, extra: tuple[str, ...], report: Path, *, quiet: bool = True,
             command: str = "compact") -> list[str]:
        """``command``'s arguments; ``table`` writes its table beside the log dir (:func:`table_uri`) and has no
        config, ``--now`` nor report."""
        common = ["--log-dir", f"s3://{bucket}/{PREFIX}", "--s3-endpoint", self.endpoint,
                  *(["--quiet"] if quiet else [])]
        if command == "table":
            return [*common, "--table", table_uri(bucket, extra), *extra]
        return [*common, "--config", str(self.config), "--now", NOW, "--report", str(report), *extra]

    def clean(self, extra: tuple[str, ...], command: str = "compact") -> Run:
        """The clean run of ``command *extra`` (local[2], this process)."""
        key = (command, *extra)
        if key not in self._clean:
            from jobs.commands.cli import main

            bucket = self.bucket("clean")
            report = self.root / f"clean-{len(self._clean)}.json"
            rc = main([command, *self.argv(bucket, extra, report, command=command)])
            assert rc == 0, f"the clean run failed: exit {rc}"
            self._clean[key] = Run(bucket, json.loads(report.read_text()) if report.exists() else {}, "", rc)
        return self._clean[key]

    def start(self, host: str, bucket: str, extra: tuple[str, ...], conf: dict[str, str] | None = None,
              command: str = "compact", quiet: bool = True) -> tuple[subprocess.Popen, Path, Path]:
        """``command`` submitted from ``host`` (running; see :meth:`finish`); ``quiet=False``: its progress lines
        in its log too."""
        self._n += 1
        report, log = self.root / f"run-{self._n}.json", self.root / f"run-{self._n}.log"
        cmd = self.cluster.submit_command(REPO / "jobs" / f"{command}.py",
                                          self.argv(bucket, extra, report, quiet=quiet, command=command), conf=conf)
        return self.cluster.start_driver(host, cmd, log), report, log

    def finish(self, proc: subprocess.Popen, bucket: str, report: Path, log: Path, timeout_s: float = 900) -> Run:
        try:
            rc = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the driver timed out:\n{log.read_text(errors='replace')[-4000:]}") from None
        finally:
            os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
        text = log.read_text(errors="replace")
        doc = json.loads(report.read_text()) if report.exists() else {}
        return Run(bucket, doc, text, rc)

    def run(self, host: str, bucket: str, extra: tuple[str, ...], conf: dict[str, str] | None = None,
            during: Callable[[], None] | None = None, command: str = "compact", quiet: bool = True) -> Run:
        """``command`` from ``host``; ``during`` runs (on a thread) while it does: the fault."""
        proc, report, log = self.start(host, bucket, extra, conf, command, quiet)
        failed: list[BaseException] = []

        def inject() -> None:
            try:
                assert during is not None
                during()
            except BaseException as exc:  # noqa: BLE001 - re-raised by the test's thread
                failed.append(exc)

        fault = threading.Thread(target=inject, daemon=True) if during is not None else None
        if fault is not None:
            fault.start()
        run = self.finish(proc, bucket, report, log)
        if fault is not None:
            fault.join(60)
            if failed:
                raise AssertionError(f"the fault was not injected: {failed[0]!r}\n{run.log[-3000:]}") from failed[0]
        return run


def table_uri(bucket: str, extra: tuple[str, ...]) -> str:
    """Where ``table --topic T`` (in ``extra``) keeps its Delta table: beside the log dir, in its bucket."""
    return f"s3://{bucket}/lake/{extra[extra.index('--topic') + 1]}"


def table_rows(cluster: NetnsCluster, bucket: str, extra: tuple[str, ...]) -> tuple[int, list[dict]]:
    """The version of the Delta table of ``table *extra`` in ``bucket`` and its rows, by partition and key."""
    from deltalake import DeltaTable

    from jobs.engine.report.run_report import delta_storage_options

    assert cluster.moto is not None
    uri = table_uri(bucket, extra)
    table = DeltaTable(uri, storage_options=delta_storage_options(uri, cluster.moto.storage_options()))
    rows = table.to_pyarrow_table().to_pylist()
    return table.version(), sorted(rows, key=lambda r: (r["partition"], r["key"]))


def outcomes(report: dict) -> dict[str, dict]:
    """What the report says was done to each partition; a partition named twice fails here."""
    names = [f"{e['topic']}-{e['partition']}" for e in report["partitions"]]
    assert len(names) == len(set(names)), f"partitions counted more than once: {sorted(names)}"
    return {f"{e['topic']}-{e['partition']}": {k: e.get(k) for k in OUTCOME_FIELDS} for e in report["partitions"]}


def staging_left(cluster: NetnsCluster, bucket: str) -> list[str]:
    """Staging objects and external-sort files under the work prefix (none may be left once a run ends)."""
    assert cluster.moto is not None
    client = cluster.moto.client()
    uploads = client.list_multipart_uploads(Bucket=bucket, Prefix=WORK_PREFIX).get("Uploads", [])
    return [k for k in work_keys(cluster, bucket) if any(m in k for m in STAGING_MARKS)] + \
        [f"upload {u['Key']}" for u in uploads]


def recover_late_staging(jobs: Jobs, bucket: str, run: Run, name: str) -> None:
    """What task attempts of ``run`` staged after it ended (a losing speculative copy still being killed, an
    executor on a host cut off and back): only under that run's own staging, and removed by the next run's
    recovery, which this runs from another host (``segjobs recover``)."""
    late = staging_left(jobs.cluster, bucket)
    assert all(f"/staged/{run.report['run_id']}/" in key for key in late), late
    log = jobs.cluster.root / f"recover-{name}.log"
    rc = jobs.cluster.run_driver("driver-1", [sys.executable, "-m", "jobs", "recover", "--log-dir",
                                              f"s3://{bucket}/{PREFIX}", "--s3-endpoint", jobs.endpoint], log)
    assert rc == 0, log.read_text()


def sort_files_on_hosts(cluster: NetnsCluster) -> list[str]:
    """External-sort work files anywhere in the hosts' own directories (their local, work and Spark dirs): a
    sort's files live on the log dir's storage only, never on the host that wrote them."""
    def sort_file(p: Path) -> bool:
        return p.name.startswith(("piece-", "bucket-")) and p.name.endswith(SORT_FILE_MARKS)

    return sorted(str(p.relative_to(cluster.root)) for p in cluster.root.rglob("*")
                  if p.is_file() and (sort_file(p) or "external-sort" in p.parts))


def assert_like_clean_run(jobs: Jobs, run: Run, extra: tuple[str, ...], *, command: str = "compact",
                          cleaned_twice: frozenset[str] = frozenset()) -> None:
    """The run's log dir, report and work prefix against the clean run's. ``cleaned_twice``: the partitions a
    killed run had replaced before this rerun, which cleans them once more as Kafka's cleaner does after an
    interrupted clean (their transaction markers gain a delete horizon: all that may differ there), and whose
    outcome in the report is a second clean's."""
    assert run.returncode == 0, f"exit {run.returncode}\n{run.log[-5000:]}\n{jobs.cluster.executor_logs()}"
    clean = jobs.clean(extra, command)
    assert jobs.cluster.moto is not None
    got = contents(jobs.cluster.moto, run.bucket)
    want = contents(jobs.cluster.moto, clean.bucket)
    assert differences_but_stamped_markers(want, got, set(cleaned_twice)) == []
    assert staging_left(jobs.cluster, run.bucket) == []
    got_outcomes, want_outcomes = outcomes(run.report), outcomes(clean.report)
    assert sorted(got_outcomes) == sorted(want_outcomes)
    assert {p: o for p, o in got_outcomes.items() if p not in cleaned_twice} == \
        {p: o for p, o in want_outcomes.items() if p not in cleaned_twice}
    changed = "compacted" if command == "compact" else "deleted"
    assert any(o["action"] == changed for o in got_outcomes.values()), got_outcomes


def work_keys(cluster: NetnsCluster, bucket: str) -> list[str]:
    assert cluster.moto is not None
    client = cluster.moto.client()
    return [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=WORK_PREFIX)
            for o in page.get("Contents", [])]


def wait_for_key(cluster: NetnsCluster, bucket: str, mark: str, timeout_s: float = 600) -> str:
    """The first object under the work prefix whose key holds ``mark``, once there is one: the stage that writes
    it is under way (its other tasks still run: six partitions on three executors)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [k for k in work_keys(cluster, bucket) if mark in k]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no object with {mark!r} under s3://{bucket}/{WORK_PREFIX} within {timeout_s:.0f} s")


def kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # ended by itself meanwhile


def kill_executors(cluster: NetnsCluster) -> list[int]:
    """SIGKILL every executor JVM of the cluster; returns their pids."""
    killed = []
    for worker in cluster.workers:
        pids = cluster.executor_pids(worker)
        kill(pids)
        killed.extend(pids)
    return killed


def cluster_marks() -> list[pytest.MarkDecorator]:
    """The marks of a module of cluster tests: skipped, saying why, outside ``make cluster-test`` or where network
    namespaces cannot be made; slow."""
    reason = ("runs in `make cluster-test` (SEGJOBS_DIST names make package's output)"
              if not os.environ.get("SEGJOBS_DIST") else netns_unavailable())
    return [pytest.mark.skipif(reason is not None, reason=f"cluster of network namespaces: {reason}"),
            pytest.mark.slow]


def moto_requests(cluster: NetnsCluster, bucket: str, method: str, mark: str, *,
                  since: int = 0) -> list[tuple[str, str]]:
    """The (host, key) of every ``method`` request on a key of ``bucket`` holding ``mark`` that moto_server's
    request log holds from byte ``since`` on, in the order moto answered them (the log names the client's address;
    requests of other clients than the cluster's hosts are left out)."""
    by_address = {h.address: h.name for h in cluster.hosts.values()}
    line = re.compile(rf'^(\S+) .*"{method} /{re.escape(bucket)}/(\S*{re.escape(mark)}\S*)', re.M)
    text = cluster.moto_log.read_bytes()[since:].decode(errors="replace") if cluster.moto_log.exists() else ""
    return [(by_address[m.group(1)], m.group(2)) for m in line.finditer(text) if m.group(1) in by_address]


def wait_for_request(cluster: NetnsCluster, bucket: str, method: str, mark: str, hosts: list[str],
                     timeout_s: float = 600) -> str:
    """The first of ``hosts`` that moto_server answered a ``method`` request of on a key of ``bucket`` holding
    ``mark``, once one has: that host is at work on that key."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [host for host, _ in moto_requests(cluster, bucket, method, mark) if host in hosts]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no {method} of a key with {mark!r} in {bucket} from {hosts} within {timeout_s:.0f} s")


#: Spark's warning for a task lost with its executor (killed, or its host cut off), naming the executor's host.
LOST_TASK = re.compile(r"Lost task \d+\.\d+ in stage [\d.]+ \(TID \d+\) \((\S+) executor \d+\): ExecutorLostFailure")


#: The driver's error for an executor it lost (killed, its host cut off: the master's word or a heartbeat's
#: silence, whichever comes first), naming the executor's host.
LOST_EXECUTOR = re.compile(r"Lost executor \d+ on (\S+?): ")


def lost_executor_hosts(cluster: NetnsCluster, log: str) -> list[str]:
    """The hosts (worker names) of the executors the driver's ``log`` says were lost."""
    by_address = {h.address: h.name for h in cluster.hosts.values()}
    return [by_address.get(m.group(1), m.group(1)) for m in LOST_EXECUTOR.finditer(log)]


def lost_task_hosts(cluster: NetnsCluster, log: str) -> list[str]:
    """The hosts (worker names) of the tasks the driver's ``log`` says were lost with their executor."""
    by_address = {h.address: h.name for h in cluster.hosts.values()}
    return [by_address.get(m.group(1), m.group(1)) for m in LOST_TASK.finditer(log)]
