"""segment_io.remote_layout: LocalTieredStorage's tree as a real broker wrote it, and what is refused."""

from __future__ import annotations

import base64
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from segment_io.aiven_manifest import CorruptRemoteObject, UnsupportedManifest
from segment_io.errors import UsageError
from segment_io.remote_layout import INDEX_KINDS, AivenLayout, LocalTieredStorageLayout, detect_root, layout_named
from segment_io.storage import open_storage

REMOTE = Path(__file__).resolve().parents[1] / "data" / "kafka-tiered" / "kafka-4.1.1" / "remote"
AIVEN = Path(__file__).resolve().parents[1] / "data" / "kafka-tiered-aiven"


def test_every_object_of_a_real_tree_is_placed() -> None:
    layout = layout_named("local-tiered-storage")
    store = open_storage(str(REMOTE))
    root = detect_root(store, str(REMOTE), layout)
    assert root.endswith("/kafka-tiered-storage")
    listing = layout.list(store, root)
    assert listing.unrecognised == []
    segments = listing.by_segment()
    assert len(segments) == 11 and all(len(objs) == 5 for objs in segments.values())
    kept = sorted(o.start_offset for o in listing.objects if o.topic == "kept" and o.suffix == ".log")
    assert kept == list(range(0, 120, 20))
    first = next(o for o in listing.objects if o.segment_id == "6QRGyTw3TG2Bem_F3n_zdw" and o.suffix == ".log")
    assert (first.topic_id, first.partition, first.size) == ("3hkKp7BATom3_tVt48rN_Q", 0, 1461)
    assert detect_root(store, root, layout) == root  # the inner directory may be given too


def test_files_that_are_no_object_of_the_layout_are_listed_apart(tmp_path: Path) -> None:
    root = tmp_path / "kafka-tiered-storage"
    shutil.copytree(REMOTE / "kafka-tiered-storage", root)
    pdir = next(root.iterdir())
    (pdir / "notes.txt").write_text("x")
    (pdir / "00000000000000000000-6QRGyTw3TG2Bem_F3n_zdw.unknownsuffix").write_text("x")
    (root / "top-level-file").write_text("x")
    listing = LocalTieredStorageLayout().list(open_storage(str(root)), str(root))
    assert sorted(Path(f.uri).name for f in listing.unrecognised) == [
        "00000000000000000000-6QRGyTw3TG2Bem_F3n_zdw.unknownsuffix", "notes.txt", "top-level-file"]


def test_a_transaction_index_is_required_only_where_the_metadata_says_there_is_one() -> None:
    layout = LocalTieredStorageLayout()
    assert ".txnindex" not in layout.required_suffixes(True)
    assert ".txnindex" in layout.required_suffixes(False)


def test_other_layouts_are_refused_by_name() -> None:
    with pytest.raises(UsageError, match="remote layout 'gcs-plugin' is not supported; supported: aiven, "
                                         "local-tiered-storage"):
        layout_named("gcs-plugin")


# ---------------------------------------------------------------------------------------------------- Aiven's


def _segments(layout, root: Path):  # type: ignore[no-untyped-def]
    listing = layout.list(open_storage(str(root)), str(root))
    return listing, {key: {o.suffix: o for o in objs} for key, objs in listing.by_segment().items()}


@pytest.mark.parametrize("variant", ["compressed", "plain"])
def test_every_object_of_an_aiven_tree_is_placed(variant: str) -> None:
    listing, segments = _segments(layout_named("aiven"), AIVEN / variant)
    assert listing.unrecognised == [] and len(segments) == 11
    assert all(sorted(objs) == [".indexes", ".log", ".rsm-manifest"] for objs in segments.values())
    first = segments[("3hkKp7BATom3_tVt48rN_Q", 0, "6QRGyTw3TG2Bem_F3n_zdw")][".log"]
    assert (first.topic, first.start_offset) == ("kept", 0)
    assert AivenLayout().required_suffixes(False) == AivenLayout().required_suffixes(True)


def test_aiven_keys_take_topic_names_with_dashes_and_leave_other_files_alone(tmp_path: Path) -> None:
    layout = AivenLayout()
    root = str(tmp_path)
    store = open_storage(root)
    uid = "AAAAAAAAAAAAAAAAAAAAAA"
    for rel in (f"my-topic-{uid}/3/00000000000000000100-{uid}.log", f"my-topic-{uid}/3/x.log",
                f"my-topic-{uid}/00000000000000000100-{uid}.log", f"my-topic-{uid}/3/00000000000000000100-{uid}.index"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    listing = layout.list(store, root)
    assert [(o.topic, o.topic_id, o.partition, o.start_offset) for o in listing.objects] == [("my-topic", uid, 3, 100)]
    assert len(listing.unrecognised) == 3


@pytest.mark.parametrize("variant", ["compressed", "plain"])
def test_an_aiven_segment_reads_back_byte_identical_with_its_indexes(variant: str) -> None:
    """The chunked (and compressed) .log gives the segment LocalTieredStorage holds, byte for byte, and each index
    its file."""
    _, aiven = _segments(AivenLayout(), AIVEN / variant)
    lts_root = REMOTE / "kafka-tiered-storage"
    _, lts = _segments(LocalTieredStorageLayout(), lts_root)
    store = open_storage(str(AIVEN))
    assert aiven.keys() == lts.keys()
    for key, objs in aiven.items():
        original = Path(lts[key][".log"].uri).read_bytes()
        assert AivenLayout().read_segment(store, objs) == original, key
        for kind in INDEX_KINDS:
            expected = LocalTieredStorageLayout().read_index(store, lts[key], kind)
            assert AivenLayout().read_index(store, objs, kind) == expected, (key, kind)
    if variant == "compressed":  # the fixture is what it claims: several chunks, each smaller than it was
        manifest = AivenLayout().manifest(store, objs)
        assert manifest.compression and len(manifest.stored_chunk_sizes) == 3
        assert manifest.stored_size < manifest.original_size


def _copy(tmp_path: Path, variant: str = "compressed") -> dict:  # type: ignore[type-arg]
    shutil.copytree(AIVEN / variant, tmp_path / variant)
    return _segments(AivenLayout(), tmp_path / variant)[1]


def test_a_damaged_chunk_is_refused_naming_the_object_and_the_chunk(tmp_path: Path) -> None:
    objs = next(iter(_copy(tmp_path).values()))
    log = Path(objs[".log"].uri)
    data = bytearray(log.read_bytes())
    data[-5] ^= 0xFF  # inside the last chunk's zstd frame
    log.write_bytes(bytes(data))
    with pytest.raises(CorruptRemoteObject, match=rf"{log}, byte \d+: chunk 2 \(segment bytes 1024-1460\)"):
        AivenLayout().read_segment(open_storage(str(tmp_path)), objs)


def test_a_chunk_that_inflates_beyond_its_size_is_refused(tmp_path: Path) -> None:
    import cramjam

    objs = next(iter(_copy(tmp_path).values()))
    manifest_path = Path(objs[".rsm-manifest"].uri)
    doc = json.loads(manifest_path.read_text())
    # one chunk whose frame holds 2 MB of zeros, where the manifest says 512 bytes
    from tests.support.aiven_store import pack_chunk_sizes

    bomb = bytes(cramjam.zstd.compress(b"\0" * (2 << 20)))
    packed = bytes(cramjam.zstd.compress(pack_chunk_sizes([len(bomb)])))
    doc["chunkIndex"] = {"type": "variable", "originalChunkSize": 512, "originalFileSize": 512,
                         "transformedChunks": base64.b64encode(packed).decode()}
    manifest_path.write_text(json.dumps(doc))
    Path(objs[".log"].uri).write_bytes(bomb)
    with pytest.raises(CorruptRemoteObject, match=r"chunk 0 .*does not decompress as zstd to 512 bytes"):
        AivenLayout().read_segment(open_storage(str(tmp_path)), objs)


@pytest.mark.parametrize(("change", "message"), [
    ({"encryption": {"dataKey": "k:AAAA", "aad": "CgsMDQ=="}}, "the segment is encrypted"),
    ({"version": "2"}, "manifest version '2' is not supported"),
])
def test_encrypted_segments_and_unknown_manifest_versions_are_refused(tmp_path: Path, change: dict,  # type: ignore[type-arg]
                                                                     message: str) -> None:
    objs = next(iter(_copy(tmp_path).values()))
    manifest_path = Path(objs[".rsm-manifest"].uri)
    manifest_path.write_text(json.dumps(json.loads(manifest_path.read_text()) | change))
    store = open_storage(str(tmp_path))
    for read in (lambda: AivenLayout().read_segment(store, objs), lambda: AivenLayout().check_segment(store, objs, 1),
                 lambda: AivenLayout().read_index(store, objs, "offset")):
        with pytest.raises(UnsupportedManifest, match=f"{manifest_path}: {message}") as info:
            read()
        assert info.value.exit_code == 2


def test_sizes_are_checked_against_the_manifest(tmp_path: Path) -> None:
    objs = next(iter(_copy(tmp_path).values()))
    store = open_storage(str(tmp_path))
    layout = AivenLayout()
    manifest = layout.manifest(store, objs)
    assert layout.check_segment(store, objs, 1461) == []
    assert layout.check_segment(store, objs, 1000) == [
        (".rsm-manifest", "of a segment of 1461 bytes, the metadata says 1000")]
    cut = {**objs, ".log": replace(objs[".log"], size=10), ".indexes": replace(objs[".indexes"], size=0)}
    assert layout.check_segment(store, cut, 1461) == [
        (".log", f"10 bytes, the manifest says {manifest.stored_size}"),
        (".indexes", f"0 bytes, the manifest says {manifest.indexes_size}")]
    Path(objs[".rsm-manifest"].uri).write_text("{not json")
    (problem,) = layout.check_segment(store, objs, 1461)
    assert problem[0] == ".rsm-manifest" and problem[1].startswith("unreadable: not a JSON manifest")
