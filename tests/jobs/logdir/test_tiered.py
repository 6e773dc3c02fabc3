"""jobs.logdir.tiered: a log dir's tiered partitions listed as the segment files of one log each, on what a real Kafka
4.1.1 broker with LocalTieredStorage wrote (tests/data/kafka-tiered/SOURCES.md) and the same remote segments in
Aiven's layout (tests/data/kafka-tiered-aiven/SOURCES.md). The oracle is the broker's own segment files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from jobs.logdir.tiered import RemoteOptions, tiered_listing
from segment_io.decode import decode_segment_bytes
from segment_io.layout import list_log_dir
from segment_io.remote_view import is_view, parse_view
from segment_io.storage import LocalStorage
from tests.support.builders import LogBuilder, rec, write_log

DATA = Path(__file__).resolve().parents[2] / "data"
FIXTURE = DATA / "kafka-tiered" / "kafka-4.1.1"
AIVEN = DATA / "kafka-tiered-aiven"


def _listing(logs: Path, remote: RemoteOptions):  # type: ignore[no-untyped-def]
    storage = LocalStorage()
    return tiered_listing(storage, list_log_dir(storage, str(logs)), remote)


def test_aiven_segments_are_listed_as_views_of_the_broker_s_files() -> None:
    tiered = _listing(FIXTURE / "logs", RemoteOptions(str(AIVEN / "compressed"), "aiven"))
    assert tiered.errors == {} and sorted(tiered.tiered) == [("expiring", 0), ("kept", 0)]
    segments = tiered.listing.partitions[("kept", 0)].segments
    assert [s.base_offset for s in segments] == [0, 20, 40, 60, 80, 100, 120]
    broker = sorted((FIXTURE / "remote" / "kafka-tiered-storage").glob("kept-0-*/*"))
    for segment in segments[:-1]:
        assert is_view(segment.log.uri) and parse_view(segment.log.uri).layout == "aiven"
        stem = f"{segment.base_offset:020d}-"
        for files, suffix in ((segment.log, ".log"), (segment.index, ".index"), (segment.timeindex, ".timeindex")):
            assert files is not None
            expected = next(f for f in broker if f.name.startswith(stem) and f.name.endswith(suffix)).read_bytes()
            assert (files.size, tiered.storage.read(files.uri)) == (len(expected), expected)
        assert segment.txnindex is None  # the broker wrote none: the manifest gives it size 0


@pytest.mark.parametrize("layout", ["local-tiered-storage", "aiven"])
def test_a_remote_segment_the_local_log_starts_inside_is_listed_cut_below_it(tmp_path: Path, layout: str) -> None:
    shutil.copytree(FIXTURE, tmp_path / "node")
    log = LogBuilder("kept", 0, start_offset=107)
    log.batch([rec("k", f"local-{n}") for n in range(107, 120)])
    write_log(log.table(), tmp_path / "node" / "logs" / "kept-0")
    root = tmp_path / "node" / "remote" if layout == "local-tiered-storage" else AIVEN / "plain"
    tiered = _listing(tmp_path / "node" / "logs", RemoteOptions(str(root), layout))
    assert tiered.errors == {}
    segments = tiered.listing.partitions[("kept", 0)].segments
    assert [s.base_offset for s in segments] == [0, 20, 40, 60, 80, 100, 107, 120]
    cut = segments[5]
    assert parse_view(cut.log.uri).keep_last == 106 and cut.index is None and cut.timeindex is None
    data = tiered.storage.read(cut.log.uri)
    assert len(data) == cut.log.size
    assert decode_segment_bytes(data).column("offset").to_pylist() == list(range(100, 107))
