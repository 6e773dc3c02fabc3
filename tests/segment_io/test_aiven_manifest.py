"""segment_io.aiven_manifest: the packed chunk sizes of a variable chunk index, and manifests that do not hold
together (the fixtures' manifests are read in tests/segment_io/test_remote_layout.py)."""

from __future__ import annotations

import base64
import json
import struct

import cramjam
import pytest

from segment_io.aiven_manifest import CorruptRemoteObject, parse_manifest, unpack_chunk_sizes
from tests.support.aiven_store import pack_chunk_sizes

INDEXES = {"offset": {"position": 0, "size": 8}, "timestamp": {"position": 8, "size": 12},
           "producerSnapshot": {"position": 20, "size": 0}, "leaderEpoch": {"position": 20, "size": 10},
           "transaction": None}


@pytest.mark.parametrize("sizes", [[], [7], [5, 1], [1000000, 1000010, 1000020, 3],
                                   [300, 70000, 9], [1, 20_000_000, 2], [0, 2**31 - 1, 5]])
def test_chunk_sizes_round_trip_through_their_packed_form(sizes: list[int]) -> None:
    assert list(unpack_chunk_sizes(pack_chunk_sizes(sizes), uri="m")) == sizes


def test_the_packed_form_is_count_base_width_values_and_the_last_in_full() -> None:
    packed = struct.pack(">iiB", 3, 1000000, 1) + bytes([0, 10]) + struct.pack(">i", 3)
    assert unpack_chunk_sizes(packed, uri="m") == (1000000, 1000010, 3)
    with pytest.raises(CorruptRemoteObject, match=r"m, byte 8: chunk index .*value width 5"):
        unpack_chunk_sizes(struct.pack(">iiB", 3, 0, 5) + bytes(14), uri="m")
    with pytest.raises(CorruptRemoteObject, match="13 bytes, 15 expected"):
        unpack_chunk_sizes(packed[:-2], uri="m")


def _manifest(chunk_index: dict, **extra: object) -> bytes:  # type: ignore[type-arg]
    return json.dumps({"version": "1", "chunkIndex": chunk_index, "segmentIndexes": INDEXES, "compression": True,
                       **extra}).encode()


def _variable(sizes: list[int], size: int, chunk: int = 100) -> dict:  # type: ignore[type-arg]
    packed = base64.b64encode(bytes(cramjam.zstd.compress(pack_chunk_sizes(sizes)))).decode()
    return {"type": "variable", "originalChunkSize": chunk, "originalFileSize": size, "transformedChunks": packed}


def test_a_variable_chunk_index_gives_each_chunk_its_place() -> None:
    m = parse_manifest(_manifest(_variable([40, 30, 9], 250)), uri="m")
    assert [(c.original_position, c.original_size, c.stored_position, c.stored_size) for c in m.chunks()] == [
        (0, 100, 0, 40), (100, 100, 40, 30), (200, 50, 70, 9)]
    assert (m.stored_size, m.indexes_size, sorted(m.indexes)) == (
        79, 30, ["leaderEpoch", "offset", "producerSnapshot", "timestamp"])


def test_a_fixed_chunk_index_has_every_chunk_of_one_size_but_the_last() -> None:
    index = {"type": "fixed", "originalChunkSize": 100, "originalFileSize": 250, "transformedChunkSize": 100,
             "finalTransformedChunkSize": 50}
    assert parse_manifest(_manifest(index, compression=False), uri="m").stored_chunk_sizes == (100, 100, 50)


@pytest.mark.parametrize(("index", "message"), [
    (_variable([40, 30], 250), "the chunk index lists 2 chunk"),
    ({"type": "ragged", "originalChunkSize": 1, "originalFileSize": 1}, "chunkIndex.type 'ragged'"),
    ({"type": "fixed", "originalChunkSize": 0, "originalFileSize": 1}, "originalChunkSize is 0"),
    ({"type": "variable", "originalChunkSize": 100, "originalFileSize": 250, "transformedChunks": "!!"},
     "not base64 of a zstd frame"),
])
def test_a_manifest_that_does_not_hold_together_names_itself(index: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(CorruptRemoteObject, match=f"s3://b/x.rsm-manifest: .*{message}"):
        parse_manifest(_manifest(index), uri="s3://b/x.rsm-manifest")


def test_a_packed_index_inflating_beyond_what_its_chunks_need_is_refused() -> None:
    bomb = base64.b64encode(bytes(cramjam.zstd.compress(bytes(1 << 20)))).decode()
    index = {"type": "variable", "originalChunkSize": 100, "originalFileSize": 250, "transformedChunks": bomb}
    with pytest.raises(CorruptRemoteObject, match="a zstd frame of at most 25 bytes"):
        parse_manifest(_manifest(index), uri="m")
