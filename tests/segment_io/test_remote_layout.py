"""segment_io.remote_layout: LocalTieredStorage's tree as a real broker wrote it, and what is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from segment_io.errors import UsageError
from segment_io.remote_layout import LocalTieredStorageLayout, detect_root, layout_named
from segment_io.storage import open_storage

REMOTE = Path(__file__).resolve().parents[1] / "data" / "kafka-tiered" / "kafka-4.1.1" / "remote"


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
    with pytest.raises(UsageError, match="remote layout 'aiven' is not supported; supported: local-tiered-storage"):
        layout_named("aiven")
