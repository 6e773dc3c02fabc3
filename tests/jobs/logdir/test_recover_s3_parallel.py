"""Recovery over many S3 partitions: read-only checks run ahead in parallel, changes stay in partition order.

On the moto endpoint: many partitions, some left with leftovers of interrupted runs. Recovery with
``io_concurrency`` 8 must give the same reports (dry run and real run) and the same bucket as recovery one
partition at a time, run its checks on several partitions at once, and, once the lease is lost, still stop
before the next partition it would change.
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import jobs.engine.frame.job
import jobs.logdir.recover
from jobs.logdir.lock import LeaseLost
from jobs.logdir.recover import RecoveryReport, recover_log_dir
from segment_io.storage import S3Storage
from tests.support.compaction_faults import TOPIC, build_partition
from tests.support.s3_objects import PREFIX, contents

pytestmark = pytest.mark.s3

PARTITIONS = 40
NOW = 1_800_000_000_000
#: partitions left with something to settle, and what: a staged object of a commit that never reached its
#: intent, a temporary file of an interrupted write, a .deleted segment the ledger does not know
DIRTY = {3: "staged", 4: "temp", 17: "deleted", 18: "staged", 29: "temp", 30: "staged", 38: "deleted"}


def _fill(endpoint, bucket: str, tmp_path: Path) -> None:
    """``PARTITIONS`` copies of one partition, with the leftovers of :data:`DIRTY`."""
    local = tmp_path / "one"
    if not local.exists():
        build_partition(local)
    files = {p.name: p.read_bytes() for p in sorted(local.iterdir()) if p.is_file()}
    client = endpoint.client()
    puts = []
    for i in range(PARTITIONS):
        name = f"{TOPIC}-{i}"
        puts += [(f"{PREFIX}/{name}/{n}", data) for n, data in files.items()]
        kind = DIRTY.get(i)
        if kind == "staged":
            puts.append((f"{PREFIX}.segjobs/commit/{name}/staged/00000000000000000000.log", b"staged"))
        elif kind == "temp":
            puts.append((f"{PREFIX}/{name}/00000000000000000000.log.segjobs-0123456789ab.tmp", b"partial"))
        elif kind == "deleted":
            puts.append((f"{PREFIX}/{name}/00000000000000000000.log.deleted", files["00000000000000000000.log"]))
    with ThreadPoolExecutor(8) as pool:  # within the client's 10 connections
        list(pool.map(lambda kv: client.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), puts))


def _lines(reports: list[RecoveryReport]) -> list[str]:
    """A recovery's output, with the bucket name left out (each run has its own bucket)."""
    return [f"{r.partition_uri.split('/', 3)[3]}: {a.describe().split('/', 3)[3]}"
            for r in reports for a in r.actions] + [e for r in reports for e in r.problems + r.notes] + [
        f"{r.partition_uri}: {r.error}" for r in reports if r.error]


class _CountingS3(S3Storage):
    """S3 storage that records the most listings it had in flight at once."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.in_flight = self.most_in_flight = 0
        self.guard = threading.Lock()

    def list(self, prefix, *, recursive=False, irregular=False):
        with self.guard:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return super().list(prefix, recursive=recursive, irregular=irregular)
        finally:
            with self.guard:
                self.in_flight -= 1


@pytest.mark.scenario
def test_parallel_recovery_reports_and_does_what_a_serial_one_does(s3_bucket, tmp_path):
    endpoint, serial_bucket = s3_bucket
    parallel_bucket = endpoint.create_bucket("parallel")
    for bucket in (serial_bucket, parallel_bucket):
        _fill(endpoint, bucket, tmp_path)
    serial = S3Storage(endpoint.storage_options(), io_concurrency=1)
    parallel = _CountingS3(endpoint.storage_options(), io_concurrency=8)

    def recover(storage, bucket, dry_run):
        return recover_log_dir(storage, f"s3://{bucket}/{PREFIX}", now_ms=NOW, dry_run=dry_run)

    serial_dry = _lines(recover(serial, serial_bucket, True))
    parallel_dry = _lines(recover(parallel, parallel_bucket, True))
    assert parallel_dry == serial_dry
    # the checks overlapped, within the bound (8 checks, and the ordered changes in the calling thread)
    assert 1 < parallel.most_in_flight <= 8 + 1
    assert {line.split(":")[0] for line in serial_dry} == {f"{PREFIX}/{TOPIC}-{i}" for i in DIRTY}
    assert contents(endpoint, parallel_bucket, "") == contents(endpoint, serial_bucket, "")  # a dry run changes nothing

    serial_real = _lines(recover(serial, serial_bucket, False))
    assert _lines(recover(parallel, parallel_bucket, False)) == serial_real == serial_dry  # the dry run was exact
    assert contents(endpoint, parallel_bucket, "") == contents(endpoint, serial_bucket, "")
    assert not [r for r in recover_log_dir(parallel, f"s3://{parallel_bucket}/{PREFIX}", now_ms=NOW) if r.changed]


def test_a_lost_lease_stops_parallel_recovery_before_the_next_partition_it_changes(s3_bucket, tmp_path, monkeypatch):
    endpoint, bucket = s3_bucket
    _fill(endpoint, bucket, tmp_path)
    storage = S3Storage(endpoint.storage_options(), io_concurrency=8)
    checked: list[str] = []
    lost = threading.Event()
    changed: list[str] = []
    real_step, real_check = jobs.logdir.recover.apply_plan, jobs.logdir.recover.plan_partition

    def step(storage_, plan, *args, **kwargs):  # the writing step: the lease is lost after the second
        real_step(storage_, plan, *args, **kwargs)
        changed.append(plan.partition_uri.rsplit("/", 1)[1])
        if len(changed) == 2:
            lost.set()

    def would_act(storage_, partition_uri, *args, **kwargs):
        checked.append(partition_uri.rsplit("/", 1)[1])
        return real_check(storage_, partition_uri, *args, **kwargs)

    def check() -> None:
        if lost.is_set():
            raise LeaseLost("taken over")

    monkeypatch.setattr(jobs.logdir.recover, "apply_plan", step)
    monkeypatch.setattr(jobs.logdir.recover, "plan_partition", would_act)
    with pytest.raises(LeaseLost):
        recover_log_dir(storage, f"s3://{bucket}/{PREFIX}", now_ms=NOW, check=check)
    dirty = sorted((f"{TOPIC}-{i}" for i in DIRTY), key=lambda n: n)  # name order, as recovery goes
    assert changed == dirty[:2]
    # the reads ran ahead of the changes: one listing cleared every clean partition, before and after the one where
    # recovery stopped, without a check of its own; the partitions it could not clear were checked by the rules
    assert set(dirty[:3]) <= set(checked) <= set(dirty)
    # ... but nothing after the loss was changed: every later leftover is still there
    objects = contents(endpoint, bucket, "")
    for i, kind in DIRTY.items():
        name = f"{TOPIC}-{i}"
        if name in changed:
            continue
        if kind == "staged":
            assert f"{PREFIX}.segjobs/commit/{name}/staged/00000000000000000000.log" in objects
        elif kind == "temp":
            assert f"{PREFIX}/{name}/00000000000000000000.log.segjobs-0123456789ab.tmp" in objects
        else:
            assert not [k for k in objects if k.startswith(f"{PREFIX}.segjobs/commit/{name}/")]


class _Requests:
    """The S3 requests a storage sends, as (operation, key or prefix), counted at the client (botocore's own
    event hook: every request that reaches the endpoint, nothing in its place)."""

    def __init__(self, storage: S3Storage) -> None:
        self.seen: list[tuple[str, str]] = []
        self.guard = threading.Lock()
        storage._client.meta.events.register("before-parameter-build.s3", self._record)

    def _record(self, model, params, **_) -> None:
        with self.guard:
            self.seen.append((model.name, str(params.get("Key") or params.get("Prefix") or "")))

    def partitions_named(self) -> set[str]:
        """The partitions some request named by key or prefix (in the log dir or in their commit dirs)."""
        return {m.group(1) for _, key in self.seen for m in [re.search(rf"/({TOPIC}-\d+)/", key)] if m}


@pytest.mark.parametrize("dry_run", [True, False])
def test_recovery_clears_clean_partitions_from_one_listing_without_a_request_of_their_own(s3_bucket, tmp_path,
                                                                                         dry_run):
    endpoint, bucket = s3_bucket
    _fill(endpoint, bucket, tmp_path)
    storage = S3Storage(endpoint.storage_options(), io_concurrency=8)
    requests = _Requests(storage)
    reports = recover_log_dir(storage, f"s3://{bucket}/{PREFIX}", now_ms=NOW, dry_run=dry_run)
    # every partition with leftovers is still found and settled (or, in a dry run, reported) ...
    assert {r.partition_uri.rsplit("/", 1)[1] for r in reports if r.changed} == {f"{TOPIC}-{i}" for i in DIRTY}
    # ... and only those were read one by one: the 33 clean ones cost the listings' pages, not ~8 requests each
    assert requests.partitions_named() == {f"{TOPIC}-{i}" for i in DIRTY}
    per_run = [r for r in requests.seen if not any(f"{TOPIC}-{i}/" in r[1] for i in DIRTY)]
    assert len(per_run) <= 12, per_run


#: How many header scans are in flight, and the most seen at once: module-level, because the task runner ships
#: task functions as Spark does (pickled), and a closure's copy would count into cells of its own.
_IN_FLIGHT: list[int] = []
_MOST_IN_FLIGHT = [0]
_REAL_SCAN = jobs.engine.frame.job.scan_task


def _counted_scan(item):
    _IN_FLIGHT.append(1)
    try:
        _MOST_IN_FLIGHT[0] = max(_MOST_IN_FLIGHT[0], len(_IN_FLIGHT))
        return _REAL_SCAN(item)
    finally:
        _IN_FLIGHT.pop()


@pytest.mark.scenario
def test_header_scans_over_many_s3_partitions_overlap_and_plan_what_serial_scans_plan(s3_bucket, tmp_path,
                                                                                      monkeypatch):
    from jobs import api
    from jobs.engine.runtime.tasks import InProcessTasks

    endpoint, bucket = s3_bucket
    _fill(endpoint, bucket, tmp_path)
    log_dir = f"s3://{bucket}/{PREFIX}"
    monkeypatch.setattr(jobs.engine.frame.job, "scan_task", _counted_scan)

    def plan(concurrency: int) -> tuple[list, int]:
        monkeypatch.setenv("SEGJOBS_S3_CONCURRENCY", str(concurrency))
        _MOST_IN_FLIGHT[0] = 0
        result = api.compact(log_dir, api.CompactOptions(storage=endpoint.storage_options(), dry_run=True,
                                                         overrides=["*:cleanup.policy=compact"]),
                             now=NOW, seams=api.Seams(runner=InProcessTasks()))
        assert result.exit_code == 0, result.errors
        return result.report.partitions, _MOST_IN_FLIGHT[0]

    serial, serial_most = plan(1)
    parallel, parallel_most = plan(8)
    assert len(serial) == PARTITIONS
    timing = {"task_seconds"}  # how long each took: the only field that may differ
    assert [{k: v for k, v in e.items() if k not in timing} for e in parallel] == \
        [{k: v for k, v in e.items() if k not in timing} for e in serial]
    assert serial_most == 1 and 1 < parallel_most <= 8


def _upload_small(endpoint, bucket: str, tmp_path: Path, partitions: int = 30) -> None:
    """``partitions`` generated partitions of topic ``small``, each one active segment of 10 records."""
    from segment_io.generate import GenerateSpec, generate_log_dir

    generate_log_dir(GenerateSpec(topics=("small",), partitions=partitions, records=10, batch_records=10),
                     str(tmp_path / "small"))
    client = endpoint.client()
    for f in sorted(p for p in (tmp_path / "small").rglob("*") if p.is_file()):
        client.put_object(Bucket=bucket, Key=f"{PREFIX}/{f.relative_to(tmp_path / 'small').as_posix()}",
                          Body=f.read_bytes())


def _compact_counting(endpoint, bucket: str, monkeypatch, dry_run: bool):
    """``api.compact`` over the bucket's log dir (topic ``small`` compacted), and every request its S3 clients
    sent, as (operation, key or prefix, delimiter, continued): the real clients, with botocore's own hook
    recording each request."""
    from jobs import api
    from jobs.engine.runtime.tasks import InProcessTasks

    seen: list[tuple[str, str, str, bool]] = []
    make_client = S3Storage._make_client

    def counted(self, *args, **kwargs):
        made = make_client(self, *args, **kwargs)
        made.meta.events.register("before-parameter-build.s3", lambda model, params, **_: seen.append(
            (model.name, str(params.get("Key") or params.get("Prefix") or ""), str(params.get("Delimiter", "")),
             "ContinuationToken" in params)))
        return made

    monkeypatch.setattr(S3Storage, "_make_client", counted)
    result = api.compact(f"s3://{bucket}/{PREFIX}",
                         api.CompactOptions(storage=endpoint.storage_options(), dry_run=dry_run,
                                            overrides=["small:cleanup.policy=compact"]),
                         now=NOW, seams=api.Seams(runner=InProcessTasks()))
    assert result.exit_code == 0, result.errors
    return result, seen


def _log_dir_listings(seen) -> list[str]:
    """The listings of the whole log dir a run started (first pages): ``recursive`` or ``delimited``."""
    return ["delimited" if delim else "recursive" for op, key, delim, more in seen
            if op == "ListObjectsV2" and key == f"{PREFIX}/" and not more]


@pytest.mark.parametrize("leftover", [False, True])
def test_a_run_lists_the_whole_log_dir_once_under_the_lock_unless_recovery_changed_it(s3_bucket, tmp_path, monkeypatch,
                                                                                leftover):
    endpoint, bucket = s3_bucket
    _upload_small(endpoint, bucket, tmp_path)
    if leftover:
        endpoint.client().put_object(Bucket=bucket, Key=f"{PREFIX}/small-3/00000000000000000000.log.segjobs-"
                                                        f"0123456789ab.tmp", Body=b"partial")
    result, seen = _compact_counting(endpoint, bucket, monkeypatch, dry_run=False)
    assert result.report.recovered_partitions == int(leftover)
    # before the lock, its top level (the scope's and the configs' checks: exit code 2 promises nothing was done);
    # then the whole of it once under the lock for recovery and the scans alike, again only if recovery changed it
    assert _log_dir_listings(seen) == ["delimited"] + ["recursive"] * (2 if leftover else 1)
    result, seen = _compact_counting(endpoint, bucket, monkeypatch, dry_run=True)  # no lock, no recovery
    assert _log_dir_listings(seen) == ["delimited", "recursive"]
    seen.clear()  # `segjobs recover`: its top level before the lock, the whole of it once under the lock
    from jobs import api

    recovered = api.recover(f"s3://{bucket}/{PREFIX}", api.RecoverOptions(storage=endpoint.storage_options()),
                            now=NOW)
    assert recovered.exit_code == 0 and _log_dir_listings(seen) == ["delimited", "recursive"]


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_compaction_run_with_nothing_due_reads_no_object_of_a_partition_it_cannot_select(s3_bucket, tmp_path,
                                                                                          monkeypatch, dry_run):
    """Recovery's listing clears the clean partitions, and the selection scan reads nothing of a partition whose
    only segment is the active one: a run over them costs its listings' pages, not requests per partition."""
    endpoint, bucket = s3_bucket
    _fill(endpoint, bucket, tmp_path)  # PARTITIONS partitions of three segments, some with leftovers
    _upload_small(endpoint, bucket, tmp_path)
    result, seen = _compact_counting(endpoint, bucket, monkeypatch, dry_run)
    small = {e["partition"]: e for e in result.report.partitions if e["topic"] == "small"}
    assert len(small) == 30 and not [e for e in small.values() if e["selected"]]
    assert {e["action"] for e in small.values()} == {"skipped"}
    named = {m.group(1) for _, key, *_ in seen for m in [re.search(r"/(small-\d+)/", key)] if m}
    assert named == set(), sorted(seen)[:20]
    # the other topic's partitions were read as before (their closed segments, and those with leftovers)
    assert any(re.search(rf"/{TOPIC}-\d+/", key) for _, key, *_ in seen)
