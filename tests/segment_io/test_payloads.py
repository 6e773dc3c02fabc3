"""Decompressed payloads a decode keeps for the encoder (:class:`segment_io.payloads.KeptPayloads`): the store
keeps whole buffers within its budget and finds each batch's payload by position; a decode offers exactly the
payloads its value references point into; and the encoder, given them, writes the very bytes it writes when it
decompresses every payload again, without decompressing a kept one (random logs of every codec, any kept
subset, any budget, whole and part by part)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import segment_io.payloads
from segment_io import compression
from segment_io import encode as encode_module
from segment_io.decode import decode_segment_and_headers
from segment_io.encode import encode_batches
from segment_io.encode_stream import iter_encoded_parts
from segment_io.format import V2_HEADER_SIZE
from segment_io.payloads import KeptPayloads
from tests.segment_io.test_value_refs import segments_st
from tests.support.builders import LogBuilder, rec
from tests.support.hypothesis_budget import examples


def _buffer(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.uint8)


def test_a_buffer_is_kept_whole_within_the_budget_or_not_at_all() -> None:
    store = KeptPayloads(100)
    assert store.offer(7, np.array([0, 500]), _buffer(80), np.array([0, 30]), np.array([30, 80]))
    assert store.held_bytes == 80
    # 80 + 30 > 100: refused whole, nothing of it kept
    assert not store.offer(7, np.array([900]), _buffer(30), np.array([0]), np.array([30]))
    assert store.held_bytes == 80
    assert store.find(7, np.array([900])) == [None]
    found = store.find(7, np.array([500, 0, 61, 500]))
    assert [None if f is None else bytes(f) for f in found] == [bytes(range(30, 80)), bytes(range(30)), None,
                                                                 bytes(range(30, 80))]
    assert store.find(8, np.array([0])) == [None]  # another segment's batch at the same position


def test_dropping_a_segment_frees_its_budget() -> None:
    store = KeptPayloads(100)
    store.offer(1, np.array([0]), _buffer(60), np.array([0]), np.array([60]))
    store.offer(2, np.array([0]), _buffer(40), np.array([0]), np.array([40]))
    store.drop(1)
    assert store.held_bytes == 40 and store.find(1, np.array([0])) == [None]
    assert store.offer(3, np.array([0]), _buffer(60), np.array([0]), np.array([60]))
    store.drop(99)  # nothing kept for it: nothing happens
    store.clear()
    assert store.held_bytes == 0 and store.find(2, np.array([0])) == [None]


def test_the_default_budget_is_read_when_the_store_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segment_io.payloads, "DEFAULT_KEPT_PAYLOAD_BYTES", 10)
    assert KeptPayloads().budget_bytes == 10
    assert KeptPayloads(0).budget_bytes == 0


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_decode_offers_each_compressed_batch_payload(codec: int) -> None:
    log = LogBuilder()
    for i in range(4):
        log.batch([rec(f"k{j}", f"value {i}-{j} " * (5 + j)) for j in range(6)], codec=codec if i != 2 else 0)
    data = encode_batches(log.table()).to_bytes()
    store = KeptPayloads()
    _, headers = decode_segment_and_headers(data, segment_base_offset=5, value_refs=True, payloads=store)
    packed = np.flatnonzero(headers.codec != 0)
    assert len(packed) == 3
    found = store.find(5, headers.position[packed])
    for b, payload in zip(packed.tolist(), found):
        start, end = int(headers.position[b]) + V2_HEADER_SIZE, int(headers.position[b] + headers.size[b])
        assert payload is not None
        assert bytes(payload) == bytes(compression.decompress(codec, data[start:end]))
    assert store.find(5, headers.position[headers.codec == 0]) == [None]  # uncompressed: read from the segment
    # without references there is nothing to point into, so nothing is kept
    copied = KeptPayloads()
    decode_segment_and_headers(data, segment_base_offset=5, payloads=copied)
    assert copied.held_bytes == 0


def _decoded(sources: dict[int, bytes], store: KeptPayloads | None) -> pa.Table:
    return pa.concat_tables([decode_segment_and_headers(data, segment_base_offset=base, value_refs=True,
                                                        payloads=store)[0] for base, data in sources.items()])


@settings(max_examples=examples(1.0), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments_st(), st.integers(0, 2**32 - 1), st.sampled_from([0, 200, 2_000, None]),
       st.sampled_from([None, None, 0, 3, 4]))
def test_kept_payloads_encode_the_same_bytes(sources: dict[int, bytes], seed: int, budget: int | None,
                                             codec: int | None) -> None:
    """Whatever the budget keeps (nothing, some buffers, all of them), the bytes are those of an encode that
    decompresses every payload again; with everything kept, no payload is decompressed again."""
    store = KeptPayloads(budget)
    records = _decoded(sources, store)
    keep = pa.array(np.random.default_rng(seed).random(records.num_rows) < 0.6)
    kept_rows = records.filter(keep)
    want = encode_batches(kept_rows, codec=codec, sources=sources).to_bytes()
    decompressed_again: list[int] = []
    inflate = encode_module._payloads

    def counting(src, positions, codecs, segment):  # type: ignore[no-untyped-def]
        decompressed_again.append(len(positions))
        return inflate(src, positions, codecs, segment)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(encode_module, "_payloads", counting)
        assert encode_batches(kept_rows, codec=codec, sources=sources, payloads=store).to_bytes() == want
        parts = iter_encoded_parts(kept_rows, codec=codec, sources=sources, part_bytes=700, payloads=store)
        assert b"".join(p.to_bytes() for p in parts) == want
    if budget is None:  # the default budget holds every payload of these small logs
        assert decompressed_again == []
    if budget == 0:
        assert store.held_bytes == 0
