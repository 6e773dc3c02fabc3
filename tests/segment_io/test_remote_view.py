"""segment_io.remote_view: remote segments read as the Kafka segment files they were. The Aiven trees are the
broker-written LocalTieredStorage segments laid out in Aiven's format (tests/data/kafka-tiered-aiven/SOURCES.md),
so the oracle of every view is the broker's own file."""

from __future__ import annotations

import json
import shutil
import tracemalloc
from pathlib import Path

import pytest

from segment_io.aiven_manifest import CorruptRemoteObject, parse_manifest
from segment_io.decode import decode_segment_bytes
from segment_io.format import scan_batches
from segment_io.remote_view import RemoteSegmentStorage, is_view, parse_view, view_uri
from segment_io.storage import open_storage
from tests.support.aiven_store import _chunk_index

DATA = Path(__file__).resolve().parents[1] / "data"
LTS = DATA / "kafka-tiered" / "kafka-4.1.1" / "remote" / "kafka-tiered-storage"
AIVEN = DATA / "kafka-tiered-aiven"
KEPT_40 = "00000000000000000040-E3CMBtq9QIK_WAp48okV7Q"


def _broker_file(suffix: str) -> bytes:
    return next(LTS.glob(f"kept-0-*/{KEPT_40}{suffix}")).read_bytes()


def _aiven_log(variant: str, root: Path = AIVEN) -> str:
    return str(next((root / variant).glob(f"kept-*/0/{KEPT_40}.log")))


@pytest.mark.parametrize("variant", ["plain", "compressed"])
def test_an_aiven_segment_and_its_indexes_read_as_the_broker_s_files(variant: str) -> None:
    store = RemoteSegmentStorage()
    log = _aiven_log(variant)
    for part, suffix in (("log", ".log"), ("index", ".index"), ("timeindex", ".timeindex")):
        uri = view_uri("aiven", part, log)
        assert store.read(uri) == _broker_file(suffix)
        assert store.stat(uri).size == len(_broker_file(suffix))
    whole = _broker_file(".log")
    # ranges across chunk boundaries restore only what they cover
    for start, length in ((0, 61), (500, 30), (511, 2), (1000, 1000), (1400, 500)):
        assert store.read_range(view_uri("aiven", "log", log), start, length) == whole[start:start + length]


def test_open_storage_opens_views_and_they_parse_back() -> None:
    uri = view_uri("aiven", "log", _aiven_log("plain"), 45)
    assert is_view(uri) and parse_view(uri).keep_last == 45 and parse_view(uri).log_uri == _aiven_log("plain")
    assert open_storage(uri).read(view_uri("aiven", "log", _aiven_log("plain"))) == _broker_file(".log")


@pytest.mark.parametrize("layout", ["aiven", "local-tiered-storage"])
def test_a_cut_segment_keeps_its_offsets_up_to_the_cut_and_cuts_the_batch_holding_it(layout: str) -> None:
    log = _aiven_log("compressed") if layout == "aiven" else str(next(LTS.glob(f"kept-0-*/{KEPT_40}.log")))
    store = RemoteSegmentStorage()
    whole = decode_segment_bytes(_broker_file(".log"))
    for keep_last in (44, 59, 40):
        data = store.read(view_uri(layout, "log", log, keep_last))
        cut = decode_segment_bytes(data)
        assert cut.column("offset").to_pylist() == list(range(40, keep_last + 1))
        assert cut.column("value").to_pylist() == whole.column("value").to_pylist()[:keep_last - 39]
        headers = scan_batches(data)  # valid batches, each as Kafka frames them
        assert int(headers.last_offset.max()) == keep_last
        assert store.stat(view_uri(layout, "log", log, keep_last)).size == len(data)


def test_a_corrupt_chunk_names_the_object_and_its_position(tmp_path: Path) -> None:
    shutil.copytree(AIVEN / "compressed", tmp_path / "compressed")
    log = _aiven_log("compressed", tmp_path)
    manifest = parse_manifest(Path(log[:-4] + ".rsm-manifest").read_bytes(), uri="m")
    second = list(manifest.chunks())[1]
    data = bytearray(Path(log).read_bytes())
    data[second.stored_position:second.stored_position + 4] = b"\0\0\0\0"
    Path(log).write_bytes(bytes(data))
    store = RemoteSegmentStorage()
    assert store.read_range(view_uri("aiven", "log", log), 0, 100) == _broker_file(".log")[:100]  # chunk 0 is fine
    with pytest.raises(CorruptRemoteObject) as caught:
        store.read(view_uri("aiven", "log", log))
    assert (caught.value.path, caught.value.position) == (log, second.stored_position)
    assert "chunk 1 (segment bytes 512-1023)" in str(caught.value)


def test_a_log_object_of_another_size_than_its_manifest_says_is_refused_naming_both(tmp_path: Path) -> None:
    shutil.copytree(AIVEN / "plain", tmp_path / "plain")
    log = _aiven_log("plain", tmp_path)
    Path(log).write_bytes(Path(log).read_bytes()[:-10])
    with pytest.raises(CorruptRemoteObject, match=r"1451 bytes, its manifest \(.*\.rsm-manifest\) says 1461"):
        RemoteSegmentStorage().read(view_uri("aiven", "log", log))


def test_a_whole_read_of_a_chunked_segment_holds_the_segment_once(tmp_path: Path) -> None:
    # a 16 MiB segment in 1 MiB zstd chunks: restoring it takes the buffer it is returned in and a chunk or a few
    size, chunk = 16 << 20, 1 << 20
    segment = (b"".join(n.to_bytes(4, "big") for n in range(4096)) * (size // 16384))[:size]
    index, stored = _chunk_index(segment, chunk, True)
    base = tmp_path / "big-AAAAAAAAAAAAAAAAAAAAAA" / "0" / f"{0:020d}-AAAAAAAAAAAAAAAAAAAAAA"
    base.parent.mkdir(parents=True)
    Path(f"{base}.log").write_bytes(stored)
    Path(f"{base}.indexes").write_bytes(b"")
    nothing = {"position": 0, "size": 0}
    Path(f"{base}.rsm-manifest").write_text(json.dumps({
        "version": "1", "chunkIndex": index, "compression": True,
        "segmentIndexes": {k: nothing for k in ("offset", "timestamp", "producerSnapshot", "leaderEpoch")}}))
    store, uri = RemoteSegmentStorage(), view_uri("aiven", "log", f"{base}.log")
    tracemalloc.start()
    try:
        data = store.read(uri)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert data == segment
    assert peak < size + 4 * chunk + len(stored)  # (the segment twice would be 32 MiB)
