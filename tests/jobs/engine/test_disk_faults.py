"""The machine's faults during a run: disk full, quota, read-only, permissions; a log dir on its own mount.

They are the environment's, not the data's nor segjobs': a task or a commit that meets one reports that
partition's failure as a :class:`~segment_io.errors.StorageEnvironmentError` naming the path, the errno, the space
needed where known and the fix, and the other partitions go on; nothing is reported as a segjobs bug. A log dir
that is a mount point of its own gets its new segments staged on its own filesystem, so that every move of the
commit is a rename. Real filesystems where the kernel lets the tests mount them (:mod:`tests.support.mounts`),
else an injected ``OSError`` through a storage the task is given.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import BinaryIO

import pytest

from jobs import api
from jobs.engine.compact.cleaning import CompactTask, compact_partition
from jobs.engine.scan import scan_partition
from jobs.logdir.commit import STAGING_BESIDE_DIR, RenameCommitter, committer_for
from jobs.logdir.lock import work_uri
from jobs.rules.config import TopicConfig
from jobs.rules.map_capacity import max_keys_for_buffer
from jobs.rules.plan_compact import plan_compaction
from segment_io.compression import DEFAULT_MAX_BATCH_BYTES
from segment_io.errors import StorageEnvironmentError
from segment_io.layout import list_log_dir
from segment_io.storage import LocalStorage
from segment_io.storage.local import storage_error
from tests.support.builders import LogBuilder, rec, tombstone, write_log
from tests.support.mounts import fill, read_only, tmpfs
from tests.support.replay import comparable, latest_records

T0 = 1_700_000_000_000
NOW = T0 + 10 * 86_400_000
OVERRIDES = ("*:cleanup.policy=compact", "*:segment.bytes=300")
ENVIRONMENT_ERRNOS = {errno.ENOSPC: "ENOSPC", errno.EDQUOT: "EDQUOT", errno.EROFS: "EROFS", errno.EACCES: "EACCES",
                      errno.EPERM: "EPERM"}


def build(partition_dir: Path, *, groups: int = 1, value_bytes: int = 1) -> None:
    """``groups`` pairs of dirty segments (each pair one group under segment.bytes=300), then the active one."""
    log = LogBuilder("t", int(partition_dir.name.rsplit("-", 1)[1]), timestamp=T0)
    v = "v" * value_bytes
    for g in range(groups):
        if g:
            log.roll()
        log.batch([rec(f"k{g}", v), rec(f"j{g}", v)]).batch([rec(f"k{g}", v + "2")])
        log.roll().batch([tombstone(f"j{g}")]).batch([rec(f"k{g}", v + "3")])
    log.roll().batch([rec("z", "active")])
    write_log(log.table(), partition_dir)


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".lock"}


def compact(log_dir: Path, **options) -> api.CompactResult:
    return api.compact(log_dir, api.CompactOptions(overrides=OVERRIDES, progress=None, **options), now=NOW,
                       seams=api.Seams(runner=api.InProcessTasks()))


# --------------------------------------------------------------------------------------------------
# What an OSError of the machine becomes
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(ENVIRONMENT_ERRNOS))
def test_an_os_error_of_the_machine_says_so_with_the_path_and_the_fix(tmp_path, code):
    path = str(tmp_path / "t-0" / "00000000000000000000.log")
    err = storage_error(OSError(code, os.strerror(code), path), path)
    assert isinstance(err, StorageEnvironmentError) and err.errno_name == ENVIRONMENT_ERRNOS[code]
    text = str(err)
    assert path in text and ENVIRONMENT_ERRNOS[code] in text and "not of the data or of segjobs" in text
    assert "bug" not in text
    if code in (errno.ENOSPC, errno.EDQUOT):
        assert err.free_bytes is not None and f"{err.free_bytes} bytes free" in text
        assert "1234 bytes needed" in str(err.needing(1234))


def test_an_os_error_that_is_not_the_machines_stays_a_plain_storage_error(tmp_path):
    err = storage_error(OSError(errno.EIO, os.strerror(errno.EIO), str(tmp_path)), str(tmp_path))
    assert not isinstance(err, StorageEnvironmentError) and str(tmp_path) in str(err)


class _RefusingWrites(LocalStorage):
    """A local store on which every write of file data fails with one errno, as a full, read-only or forbidden
    filesystem would make it (the storage seam a task is given)."""

    def __init__(self, code: int) -> None:
        self.code = code

    def open_write(self, uri: str, *, durable: bool = True, uncached: bool = False):  # type: ignore[override]
        inner = super().open_write(uri, durable=durable, uncached=uncached)
        code = self.code

        class Failing:
            def __enter__(self) -> BinaryIO:
                f = inner.__enter__()

                def write(data: bytes) -> int:
                    raise OSError(code, os.strerror(code))

                f.write = write  # type: ignore[method-assign]
                return f

            def __exit__(self, *exc) -> bool | None:
                return inner.__exit__(*exc)

        return Failing()


@pytest.mark.parametrize("code", sorted(ENVIRONMENT_ERRNOS))
def test_each_errno_class_in_a_task_is_the_partitions_environment_failure(tmp_path, code):
    build(tmp_path / "logs" / "t-0", value_bytes=200)
    storage = _RefusingWrites(code)
    listing = list_log_dir(storage, str(tmp_path / "logs")).partitions[("t", 0)]
    scan = scan_partition(storage, listing, now_ms=NOW)
    config = TopicConfig.from_settings({"cleanup.policy": "compact", "segment.bytes": 100_000})
    plan = plan_compaction(scan.state, config, NOW, requested=True)
    committer = committer_for(storage, work_uri(str(tmp_path / "logs")), log_dir=str(tmp_path / "logs"))
    before = tree(tmp_path / "logs")
    out = compact_partition(CompactTask(storage, listing, scan.state, plan, config, scan.txn, NOW,
                                        max_keys_for_buffer(1 << 20), False, committer,
                                        DEFAULT_MAX_BATCH_BYTES))
    assert out.error is not None
    assert out.error.kind == "StorageEnvironmentError", out.error
    assert ENVIRONMENT_ERRNOS[code] in out.error.detail and "bug" not in out.error.detail
    assert out.error.file and out.error.file.startswith(str(tmp_path / "logs"))
    if code in (errno.ENOSPC, errno.EDQUOT):
        assert "bytes needed" in out.error.detail  # the new segment's size
    assert tree(tmp_path / "logs") == before  # nothing staged is left behind


# --------------------------------------------------------------------------------------------------
# Real filesystems
# --------------------------------------------------------------------------------------------------


def test_a_read_only_partition_fails_alone_and_the_others_are_compacted(tmp_path):
    logs = tmp_path / "logs"
    for p in (0, 1):
        build(logs / f"t-{p}")
    source = {p: comparable(latest_records(logs / f"t-{p}")) for p in (0, 1)}
    before = tree(logs / "t-0")
    with read_only(logs / "t-0"):
        result = compact(logs)
    assert result.exit_code == 1
    by_partition = {p.partition: p for p in result.partitions}
    assert by_partition[1].action == "compacted"
    assert by_partition[0].action == "error"
    [error] = result.errors
    assert error["kind"] == "StorageEnvironmentError" and "EROFS" in error["detail"]
    assert str(logs / "t-0") in (error.get("file") or "")
    assert tree(logs / "t-0") == before  # untouched, byte for byte
    assert {p: comparable(latest_records(logs / f"t-{p}")) for p in (0, 1)} == source


def test_a_log_dir_on_its_own_mount_stages_beside_its_partitions_and_commits_by_rename(tmp_path):
    logs = tmp_path / "logs"
    seen: list[tuple[list[str], list[str]]] = []

    def look(partition: str, step: str) -> None:
        if step == "write-intent":  # the group was promoted: its .cleaned files are there
            part = logs / partition
            seen.append(([p.name for p in part.iterdir() if p.name.endswith(".cleaned")],
                         [str(p) for p in Path(work_uri(str(logs))).rglob("*") if p.is_file()
                          and "staging" in p.parts]))

    with tmpfs(logs, 8 << 20):
        build(logs / "t-0", groups=2)
        source = comparable(latest_records(logs / "t-0"))
        committer = committer_for(LocalStorage(), work_uri(str(logs)), log_dir=str(logs))
        assert isinstance(committer, RenameCommitter) and committer.stage_beside
        inodes_before = {p.name: p.stat().st_ino for p in (logs / "t-0").iterdir()}
        result = api.compact(logs, api.CompactOptions(overrides=OVERRIDES, progress=None), now=NOW,
                             seams=api.Seams(runner=api.InProcessTasks(), fault=look))
        assert result.exit_code == 0 and [p.action for p in result.partitions] == ["compacted"]
        assert len(seen) == 2 and all(cleaned and not staged for cleaned, staged in seen)
        assert comparable(latest_records(logs / "t-0")) == source
        assert not [p for p in (logs / "t-0").iterdir() if p.name == STAGING_BESIDE_DIR or p.name.endswith(".cleaned")]
        assert set(inodes_before) != {p.name for p in (logs / "t-0").iterdir()}


def test_staging_files_a_crash_left_beside_the_partitions_go_with_the_next_recovery(tmp_path):
    logs = tmp_path / "logs"
    with tmpfs(logs, 8 << 20):
        build(logs / "t-0")
        before = tree(logs)
        (logs / "t-0" / STAGING_BESIDE_DIR).mkdir()
        (logs / "t-0" / STAGING_BESIDE_DIR / "00000000000000000000.log").write_bytes(b"half a segment")
        result = api.recover(logs, now=NOW)
        assert tree(logs) == before
        assert any(a.action == "delete-staged" for r in result.reports for a in r.actions)


def test_no_empty_staging_or_commit_dir_is_left_after_a_run_and_a_non_empty_one_stays(tmp_path):
    logs = tmp_path / "logs"
    for p in (0, 1):
        build(logs / f"t-{p}")
    work = Path(work_uri(str(logs)))
    assert compact(logs).exit_code == 0
    assert not (work / "staging").exists()
    assert [d for d in work.rglob("*") if d.is_dir() and not any(d.iterdir())] == []
    # empty dirs an older run left are removed by the next recovery; a directory that holds anything stays
    (work / "staging" / "t-0").mkdir(parents=True)
    (work / "commit" / "t-1").mkdir(parents=True)
    keep = work / "commit" / "t-0" / "deleted.json"
    keep.parent.mkdir(parents=True, exist_ok=True)
    keep.write_text("{}")
    api.recover(logs, now=NOW)
    assert not (work / "staging").exists() and not (work / "commit" / "t-1").exists()
    assert keep.exists()


def _keyed(partition_dir: Path, keys: int) -> None:
    """Two dirty segments rewriting ``keys`` keys, then the active one: external sort spills a row per key."""
    log = LogBuilder("t", int(partition_dir.name.rsplit("-", 1)[1]), timestamp=T0)
    for round_ in range(2):
        if round_:
            log.roll()
        log.batch([rec(f"k{i}", f"v{round_}") for i in range(keys)])
    log.roll().batch([rec("z", "active")])
    write_log(log.table(), partition_dir)


@pytest.mark.slow
def test_a_full_work_dir_fails_the_external_sort_as_the_machines_fault_and_the_summary_says_so(tmp_path):
    logs = tmp_path / "logs"
    _keyed(logs / "t-0", 20_000)  # its pieces need some 1.3 MB of work files: more than the work dir has
    _keyed(logs / "t-1", 3)  # its pieces fit
    before = tree(logs / "t-0")
    source = comparable(latest_records(logs / "t-1"))
    lines: list[str] = []
    with tmpfs(tmp_path / "logs.segjobs", 1 << 20) as work:
        free = fill(work, 160 << 10)
        result = api.compact(logs, api.CompactOptions(overrides=OVERRIDES, strategy="external-sort",
                                                      progress=lines.append),
                             now=NOW, seams=api.Seams(runner=api.InProcessTasks()))
        free.unlink()
    assert result.exit_code == 1
    by_partition = {p.partition: p for p in result.partitions}
    assert by_partition[1].action == "compacted" and by_partition[0].action == "error", (result.errors, lines)
    [error] = result.errors
    assert error["kind"] == "StorageEnvironmentError", error
    detail = error["detail"]
    assert "No space left on device (ENOSPC)" in detail and "bytes needed" in detail and "bytes free" in detail
    assert f"the work dir {work}" in detail and "--strategy memory" in detail and "bug" not in detail
    assert tree(logs / "t-0") == before  # untouched, byte for byte
    assert comparable(latest_records(logs / "t-1")) == source
    [rewritten] = [line for line in lines if "segment group(s)" in line]
    assert "of 1 partition(s) rewritten" in rewritten
    assert "1 partition(s) not compacted: t-0 (StorageEnvironmentError: No space left on device" in rewritten
    assert any("t-0: NOT COMPACTED (the machine refused), left untouched" in line for line in lines), lines
