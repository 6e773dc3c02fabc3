"""A task's spool (``segment_io.storage.spool``): an object read twice is fetched once, the copies go when the
task is done with them, and where the spool cannot help the reads go to the store as before."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from segment_io.storage import LocalStorage
from segment_io.storage import spool as spool_module
from segment_io.storage.spool import PREFIX, HostSpool, TaskSpool, sweep_stale
from segment_io.storage.traffic import metered

DATA = bytes(range(256)) * 4096  # 1 MiB


@pytest.fixture()
def s3(s3_bucket):
    from segment_io.storage.s3 import S3Storage

    endpoint, bucket = s3_bucket
    storage = S3Storage(endpoint.storage_options())
    uris = [f"s3://{bucket}/t-0/{i:020d}.log" for i in range(3)]
    for uri in uris:
        storage.write_atomic(uri, DATA)
    return storage, uris


def _listed(storage, uris):
    """The listing's entries (URI, size, ETag) of ``uris``, in their order."""
    by_uri = {f.uri: f for f in storage.list(uris[0].rsplit("/", 1)[0])}
    return [by_uri[u] for u in uris]


@pytest.mark.s3
def test_an_object_read_twice_is_fetched_once_and_its_copy_goes_when_released(s3, tmp_path: Path) -> None:
    storage, uris = s3
    with metered() as t, TaskSpool(storage, _listed(storage, uris[:2]), root=str(tmp_path)) as spool:
        assert spool.active
        for _ in range(2):
            for uri in uris:  # the third is not held: read from the store each time
                with spool.mapped(uri) as data:
                    assert bytes(data) == DATA
        assert len(os.listdir(spool.dir)) == 2
        spool.release(uris[0])
        assert len(os.listdir(spool.dir)) == 1
        with spool.mapped(uris[0]) as data:  # released: from the store again
            assert bytes(data) == DATA
    assert (t.get, t.get_bytes) == (2 + 2 + 1, 5 * len(DATA))
    assert os.listdir(tmp_path) == []  # closed: the spool's directory is gone


@pytest.mark.s3
def test_without_the_room_for_its_copies_the_spool_reads_from_the_store(s3, tmp_path: Path, monkeypatch) -> None:
    storage, uris = s3
    monkeypatch.setattr(spool_module, "FREE_MARGIN_BYTES", 1 << 60)
    with metered() as t, TaskSpool(storage, _listed(storage, uris), root=str(tmp_path)) as spool:
        assert not spool.active
        for _ in range(2):
            with spool.mapped(uris[0]) as data:
                assert bytes(data) == DATA
    assert t.get == 2 and os.listdir(tmp_path) == []


@pytest.mark.s3
def test_a_copy_that_cannot_be_written_is_read_from_the_store(s3, tmp_path: Path, monkeypatch) -> None:
    storage, uris = s3

    def disk_full(uri: str, path: str, etag: str | None = None) -> int:
        Path(path).write_bytes(b"partial")
        raise OSError(28, "No space left on device")

    with TaskSpool(storage, _listed(storage, uris), root=str(tmp_path)) as spool:
        monkeypatch.setattr(storage, "download", disk_full)
        with spool.mapped(uris[0]) as data:
            assert bytes(data) == DATA
        assert os.listdir(spool.dir) == []  # the partial copy removed


def test_on_local_disk_there_is_nothing_to_spool(tmp_path: Path) -> None:
    f = tmp_path / "00000000000000000000.log"
    f.write_bytes(DATA)
    with TaskSpool(LocalStorage(), LocalStorage().list(str(tmp_path)), root=str(tmp_path / "spool")) as spool:
        assert not spool.active
        with spool.mapped(str(f)) as data:
            assert bytes(data) == DATA
    assert not (tmp_path / "spool").exists()


def test_a_dead_process_s_old_spool_is_swept_and_no_other(tmp_path: Path) -> None:
    host = spool_module._host()
    dead_pid = 2 ** 22 + 12345  # above Linux's pid_max: no such process
    dirs = {
        "dead, old": f"{PREFIX}{host}-{dead_pid}-a",
        "dead, recent": f"{PREFIX}{host}-{dead_pid}-b",
        "alive, old": f"{PREFIX}{host}-{os.getppid()}-c",
        "another host's": f"{PREFIX}other{host}-{dead_pid}-d",
        "not a spool": f"elsewhere-{dead_pid}",
    }
    old = time.time() - spool_module.STALE_AFTER_S - 60
    for what, name in dirs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "0-copy").write_bytes(b"x")
        if "recent" not in what:
            os.utime(tmp_path / name, (old, old))
    sweep_stale(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == sorted(n for w, n in dirs.items() if w != "dead, old")


@pytest.mark.s3
def test_a_host_spool_keeps_one_copy_of_the_listed_object_until_discarded(s3, tmp_path: Path, monkeypatch) -> None:
    storage, uris = s3
    monkeypatch.setattr(spool_module, "spool_root", lambda: str(tmp_path))
    (listed,) = storage.list(uris[0].rsplit("/", 1)[0])[:1]
    host = HostSpool("run1")
    with metered() as t:
        path = host.fetch(storage, listed)
        assert path is not None and Path(path).read_bytes() == DATA
        assert host.fetch(storage, listed) == path == host.find(listed)  # there: no second GET
    assert (t.get, t.get_bytes) == (1, len(DATA))
    assert [p.name for p in tmp_path.iterdir()] == ["segjobs-run-run1"]
    host.discard([listed])
    assert host.find(listed) is None and list((tmp_path / "segjobs-run-run1").iterdir()) == []
    # another run's spool, or another version of the object, is another copy
    assert HostSpool("run2").find(listed) is None


@pytest.mark.s3
def test_a_host_spool_fetches_only_the_listed_version(s3, tmp_path: Path, monkeypatch) -> None:
    from segment_io.errors import PreconditionFailedError

    storage, uris = s3
    monkeypatch.setattr(spool_module, "spool_root", lambda: str(tmp_path))
    (listed,) = [f for f in storage.list(uris[0].rsplit("/", 1)[0]) if f.uri == uris[0]]
    storage.write_atomic(uris[0], DATA[::-1])  # replaced after the listing
    with pytest.raises(PreconditionFailedError, match="changed after the run listed it") as e:
        HostSpool("run1").fetch(storage, listed)
    assert e.value.uri == uris[0]
    assert list((tmp_path / "segjobs-run-run1").iterdir()) == []  # no copy, no temporary file


@pytest.mark.s3
def test_a_host_spool_without_room_or_an_etag_keeps_nothing(s3, tmp_path: Path, monkeypatch) -> None:
    storage, uris = s3
    monkeypatch.setattr(spool_module, "spool_root", lambda: str(tmp_path))
    (listed,) = [f for f in storage.list(uris[0].rsplit("/", 1)[0]) if f.uri == uris[0]]
    assert HostSpool("run1").fetch(storage, replace(listed, etag=None)) is None
    monkeypatch.setattr(spool_module, "FREE_MARGIN_BYTES", 1 << 60)
    with metered() as t:
        assert HostSpool("run1").fetch(storage, listed) is None
    assert t.requests == 0


def test_a_day_old_run_spool_is_swept(tmp_path: Path) -> None:
    old, recent = tmp_path / "segjobs-run-old", tmp_path / "segjobs-run-recent"
    for d in (old, recent):
        d.mkdir()
        (d / "copy").write_bytes(b"x")
    stamp = time.time() - spool_module.RUN_STALE_AFTER_S - 60
    os.utime(old, (stamp, stamp))
    sweep_stale(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["segjobs-run-recent"]


@pytest.mark.s3
def test_a_task_spool_fetches_only_the_listed_version(s3, tmp_path: Path) -> None:
    from segment_io.errors import PreconditionFailedError

    storage, uris = s3
    listed = _listed(storage, uris)
    storage.write_atomic(uris[0], DATA[::-1])  # replaced after the listing
    with TaskSpool(storage, listed, root=str(tmp_path)) as spool:
        with pytest.raises(PreconditionFailedError, match="changed after the run listed it"):
            with spool.mapped(uris[0]):
                pass
        with spool.mapped(uris[1]) as data:  # the others are read as listed
            assert bytes(data) == DATA


@pytest.mark.s3
def test_a_failed_fetch_leaves_no_partial_copy(s3, tmp_path: Path, monkeypatch) -> None:
    from segment_io.errors import StorageError

    storage, uris = s3
    monkeypatch.setattr(spool_module, "spool_root", lambda: str(tmp_path))
    (listed,) = _listed(storage, uris[:1])

    def cut(uri: str, path: str, etag: str | None = None) -> int:
        Path(path).write_bytes(DATA[:100])
        raise StorageError("S3 request failed: Connection was closed before we received a valid response", uri=uri)

    monkeypatch.setattr(storage, "download", cut)
    with pytest.raises(StorageError):
        HostSpool("run1").fetch(storage, listed)
    assert list((tmp_path / "segjobs-run-run1").iterdir()) == []
    HostSpool("run1").remove()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.s3
def test_a_task_finds_the_copies_of_the_process_that_made_the_spool_under_that_process_s_root(
        s3, tmp_path: Path, monkeypatch) -> None:
    """The driver's scans write under its spool root; Spark's Python workers on the same host have a root of their
    own (``SPARK_LOCAL_DIRS``): a spool made by the driver and pickled into a task finds, opens, discards and removes
    the driver's copies too."""
    import pickle

    storage, uris = s3
    driver_root, worker_root = tmp_path / "driver", tmp_path / "worker"
    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(driver_root))
    driver_root.mkdir()
    made = HostSpool("run1")
    first, second = _listed(storage, uris[:2])
    driver_copy = made.fetch(storage, first)
    assert driver_copy is not None and Path(driver_copy).is_relative_to(driver_root)
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(worker_root))  # now a Python worker's process
    task = pickle.loads(pickle.dumps(made))
    assert task.find(first) == driver_copy
    with task.open(first) as f:
        assert f.read() == DATA
    worker_copy = task.fetch(storage, second)  # what a task fetches goes under its own root
    assert worker_copy is not None and Path(worker_copy).is_relative_to(worker_root)
    task.discard([first])
    assert task.find(first) is None and not Path(driver_copy).exists()
    task.remove()
    assert not (driver_root / "segjobs-run-run1").exists() and not (worker_root / "segjobs-run-run1").exists()


@pytest.mark.s3
def test_the_driver_finds_a_worker_s_copies_under_the_root_the_worker_names(s3, tmp_path: Path, monkeypatch) -> None:
    """The reverse way (a table's dedupe on disk): a Python worker's copies are under its own root, which the driver
    looks under only when told; then it finds them, and removes them with the run's."""
    storage, uris = s3
    driver_root, worker_root = tmp_path / "driver", tmp_path / "worker"
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(driver_root))
    driver = HostSpool("run1")
    (listed,) = _listed(storage, uris[:1])
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(worker_root))  # the worker's process
    worker_copy = driver.fetch(storage, listed)
    named = driver.local_root
    assert worker_copy is not None and named == str(worker_root)
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(driver_root))  # the driver again
    assert driver.find(listed) is None
    assert driver.find(listed, also=[named]) == worker_copy
    driver.remove()
    assert Path(worker_copy).exists()  # not told where: not removed
    driver.remove(also=[named])
    assert not (worker_root / "segjobs-run-run1").exists()


@pytest.mark.s3
def test_a_task_spool_reads_an_adopted_copy_without_a_fetch_and_removes_it(s3, tmp_path: Path, monkeypatch) -> None:
    storage, uris = s3
    monkeypatch.setattr(spool_module, "spool_root", lambda: str(tmp_path / "scans"))
    first, second = _listed(storage, uris[:2])
    scans = HostSpool("run1")
    copy = scans.fetch(storage, first)
    assert copy is not None
    with metered() as t:
        with TaskSpool(storage, [first, second], root=str(tmp_path / "tasks"), adopted={first.uri: copy}) as spool:
            for _ in range(2):
                for uri in uris[:2]:
                    with spool.mapped(uri) as data:
                        assert bytes(data) == DATA
            assert Path(copy).exists()
    assert (t.get, t.get_bytes) == (1, len(DATA))  # the second object alone, once
    assert not Path(copy).exists() and os.listdir(tmp_path / "tasks") == []  # closed: both copies gone
    # every object adopted: no directory of its own; URIs it does not hold are not taken
    copy = scans.fetch(storage, first)
    assert copy is not None
    with TaskSpool(storage, [first], root=str(tmp_path / "tasks"), adopted={first.uri: copy, "s3://x/y": copy}) as s:
        assert s.active and s.dir is None and os.listdir(tmp_path / "tasks") == []
        with metered() as t, s.mapped(first.uri) as data:
            assert bytes(data) == DATA
        assert t.requests == 0
    # without room for copies of its own, the adopted ones are still read from disk, and the rest from the store
    copy = scans.fetch(storage, first)
    assert copy is not None
    monkeypatch.setattr(spool_module, "FREE_MARGIN_BYTES", 1 << 60)
    with metered() as t, TaskSpool(storage, [first, second], adopted={first.uri: copy}) as spool:
        assert spool.active and spool.dir is None
        for uri in uris[:2]:
            with spool.mapped(uri) as data:
                assert bytes(data) == DATA
    assert (t.get, t.get_bytes) == (1, len(DATA))
    assert not Path(copy).exists()


@pytest.mark.s3
def test_an_adopted_copy_that_is_gone_is_fetched_as_if_never_there(s3, tmp_path: Path, monkeypatch) -> None:
    """An adopted copy removed before it is read (a day-old run dir swept by another process, say) is fetched into
    the spool's own directory, once."""
    storage, uris = s3
    monkeypatch.setattr(spool_module, "spool_root", lambda: str(tmp_path / "scans"))
    first, second = _listed(storage, uris[:2])
    copy = HostSpool("run1").fetch(storage, first)
    assert copy is not None
    with TaskSpool(storage, [first, second], root=str(tmp_path / "tasks"), adopted={first.uri: copy}) as spool:
        os.unlink(copy)
        with metered() as t:
            for _ in range(2):
                with spool.mapped(first.uri) as data:
                    assert bytes(data) == DATA
        assert (t.get, t.get_bytes) == (1, len(DATA))


def test_adopted_copies_on_local_disk_are_not_taken(tmp_path: Path) -> None:
    """On local disk nothing is spooled: the log dir's own file is read, never a copy."""
    (tmp_path / "a.log").write_bytes(DATA)
    (tmp_path / "copy").write_bytes(b"stale")
    storage = LocalStorage()
    (listed,) = [f for f in storage.list(str(tmp_path)) if f.uri.endswith("a.log")]
    with TaskSpool(storage, [listed], adopted={listed.uri: str(tmp_path / "copy")}) as spool:
        assert not spool.active
        with spool.mapped(listed.uri) as data:
            assert bytes(data) == DATA
    assert (tmp_path / "copy").exists()


def test_a_host_spool_knows_whether_it_runs_on_the_host_that_made_it(monkeypatch) -> None:
    import pickle

    made = HostSpool("run1")
    assert made.on_origin_host
    monkeypatch.setattr(spool_module, "_host", lambda: "another-host")
    assert not pickle.loads(pickle.dumps(made)).on_origin_host
