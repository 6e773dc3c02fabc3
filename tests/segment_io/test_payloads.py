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
from segment_io.errors import CorruptRecordError, InvalidRecordsError
from segment_io.format import V2_HEADER_SIZE, BatchHeaders
from segment_io.payloads import KeptPayloads
from segment_io.schema import REF_POSITION_MASK, ref_lengths, ref_positions
from tests.segment_io.test_value_refs import segments_st
from tests.support.builders import LogBuilder, rec
from tests.support.hypothesis_budget import examples


def _buffer(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.uint8)


def _found(store: KeptPayloads, segment: int, positions: list[int]) -> list[bytes | None]:
    """The kept payload of each batch at ``positions``, as bytes (None where none is kept)."""
    buffers, which, starts, ends = store.locate(segment, np.array(positions, np.int64))
    return [None if w < 0 else bytes(buffers[w][a:b]) for w, a, b in zip(which.tolist(), starts.tolist(),
                                                                          ends.tolist())]


def test_a_buffer_is_kept_whole_within_the_budget_or_not_at_all() -> None:
    store = KeptPayloads(100)
    assert store.offer(7, np.array([0, 500]), _buffer(80), np.array([0, 30]), np.array([30, 80]))
    assert store.held_bytes == 80
    # 80 + 30 > 100: refused whole, nothing of it kept
    assert not store.offer(7, np.array([900]), _buffer(30), np.array([0]), np.array([30]))
    assert store.held_bytes == 80
    assert _found(store, 7, [900]) == [None]
    assert _found(store, 7, [500, 0, 61, 500]) == [bytes(range(30, 80)), bytes(range(30)), None,
                                                   bytes(range(30, 80))]
    assert _found(store, 8, [0]) == [None]  # another segment's batch at the same position
    # several buffers of one segment: each batch found in its own
    assert store.offer(7, np.array([1000, 1200]), _buffer(20), np.array([0, 5]), np.array([5, 20]))
    assert _found(store, 7, [1200, 0, 1000]) == [bytes(range(5, 20)), bytes(range(30)), bytes(range(5))]


def test_dropping_a_segment_frees_its_budget() -> None:
    store = KeptPayloads(100)
    store.offer(1, np.array([0]), _buffer(60), np.array([0]), np.array([60]))
    store.offer(2, np.array([0]), _buffer(40), np.array([0]), np.array([40]))
    store.drop(1)
    assert store.held_bytes == 40 and _found(store, 1, [0]) == [None]
    assert store.offer(3, np.array([0]), _buffer(60), np.array([0]), np.array([60]))
    store.drop(99)  # nothing kept for it: nothing happens
    store.clear()
    assert store.held_bytes == 0 and _found(store, 2, [0]) == [None]


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
    found = _found(store, 5, headers.position[packed].tolist())
    for b, payload in zip(packed.tolist(), found):
        start, end = int(headers.position[b]) + V2_HEADER_SIZE, int(headers.position[b] + headers.size[b])
        assert payload == bytes(compression.decompress(codec, data[start:end]))
    assert _found(store, 5, headers.position[headers.codec == 0].tolist()) == [None]  # read from the segment
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
    inflate = encode_module._plan_payloads

    def counting(src, positions, *args, **kwargs):  # type: ignore[no-untyped-def]
        decompressed_again.append(len(positions))
        return inflate(src, positions, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(encode_module, "_plan_payloads", counting)
        assert encode_batches(kept_rows, codec=codec, sources=sources, payloads=store).to_bytes() == want
        parts = iter_encoded_parts(kept_rows, codec=codec, sources=sources, part_bytes=700, payloads=store)
        assert b"".join(p.to_bytes() for p in parts) == want
    if budget is None:  # the default budget holds every payload of these small logs
        assert decompressed_again == []
    if budget == 0:
        assert store.held_bytes == 0


def _lz4_decoded(batches: int, records: int, value: str) -> tuple[bytes, KeptPayloads, pa.Table, BatchHeaders]:
    """A segment of ``batches`` LZ4 batches of ``records`` records each, decoded with references, its payloads kept:
    (its bytes, the store, the rows, the headers)."""
    log = LogBuilder()
    for i in range(batches):
        log.batch([rec(f"k{j}", f"{value} {i}-{j} " * (900 // len(value))) for j in range(records)], codec=3)
    data = encode_batches(log.table()).to_bytes()
    store = KeptPayloads()
    rows, headers = decode_segment_and_headers(data, segment_base_offset=0, value_refs=True, payloads=store)
    return data, store, rows, headers


def _with_refs(records: pa.Table, refs: list[int | None]) -> pa.Table:
    i = records.schema.get_field_index("value")
    return records.set_column(i, records.schema.field(i), pa.array(refs, records.schema.field(i).type))


@pytest.mark.parametrize("carried", [False, True], ids=["measured", "carried"])
@pytest.mark.parametrize("kept", [True, False])
def test_a_reference_past_its_own_payload_is_an_error_in_a_shared_buffer(kept: bool, carried: bool) -> None:
    """The payloads of a piece share one buffer (kept by the decode, or decompressed again by the encoder); a
    reference is still checked against its own batch's payload, not the whole buffer (where it would find the
    next batch's bytes); and one too large to add to a position is an error, not a wrapped read. References made
    by hand without their values' lengths are refused as the encoder measures them; ones that carry a length, as
    the decoder's do, when their value is copied (from payloads decompressed again a run at a time)."""
    data, store, records, headers = _lz4_decoded(3, 4, "value")
    buffers, which, starts, _ = store.locate(0, headers.position)
    assert len(set(which.tolist())) == 1 and len(buffers) == 1  # one buffer for all three batches
    decoded = records["value"].to_numpy()
    assert (ref_lengths(decoded) > 0).all()  # the decoder's references carry their lengths
    refs = (decoded if carried else ref_positions(decoded)).tolist()
    # the second batch's first value, a valid place in the buffer, named relative to the first batch's payload;
    # then a place as far as a reference can name (with the length of a real value where it carries one)
    huge = (refs[4] | REF_POSITION_MASK) - 7 if carried else 2**63 - 8
    for bad in (int(starts[1] - starts[0]) + refs[4], huge):
        broken = _with_refs(records, [bad, *refs[1:]])
        partly = broken.filter(pa.array([r != 1 for r in range(broken.num_rows)]))  # the first batch is rewritten
        with pytest.raises(CorruptRecordError if carried else InvalidRecordsError,
                           match=r"record at offset 0 in segment 0 is no longer" if carried else
                           r"value reference .* in segment 0 "):
            encode_batches(partly, sources={0: data}, payloads=store if kept else None)


def test_a_bad_reference_names_its_own_segment() -> None:
    sources, tables = {}, []
    for base in (0, 100):
        log = LogBuilder(start_offset=base)
        log.batch([rec("a", "1" * 40), rec("b", "2" * 40)], codec=0)
        sources[base] = encode_batches(log.table()).to_bytes()
        tables.append(decode_segment_and_headers(sources[base], segment_base_offset=base, value_refs=True)[0])
    records = pa.concat_tables(tables)
    refs = records["value"].to_pylist()
    broken = _with_refs(records, [len(sources[0]) + 9, *refs[1:]])
    partly = broken.filter(pa.array([True, False, True, False]))  # both batches rewritten
    with pytest.raises(InvalidRecordsError, match=r"in segment 0 \(batch at byte 0\)"):
        encode_batches(partly, sources=sources)


def test_the_budget_counts_what_is_held_and_no_more_than_half_again_the_payloads() -> None:
    """A decoder's buffer is sized from what the frames may inflate to (an LZ4 frame has no content size: a whole
    64 KiB block per small batch); the store counts the allocation it keeps alive, and a decode hands it a copy of
    just the payloads when that allocation is over half again as large."""
    _, store, _, headers = _lz4_decoded(40, 3, "v")
    buffers, which, starts, ends = store.locate(0, headers.position)
    assert (which >= 0).all()
    payload_bytes = int((ends - starts).sum())
    held = sum(b.base.nbytes if isinstance(b.base, np.ndarray) else b.nbytes for b in buffers)
    assert store.held_bytes == held
    assert payload_bytes <= held <= 1.5 * payload_bytes
    assert store.offer(1, np.array([0]), _buffer(100)[:10], np.array([0]), np.array([10]))
    assert store.held_bytes == held + 100  # a view holds its whole base


def test_only_a_reference_flagged_as_carrying_a_length_is_read_as_position_and_length() -> None:
    """A plain position, however large (a value past 4 GiB in a file, or one with the flag's bit set but no
    length above it, which no decoder makes), is never taken apart into a smaller position and a length: the
    encoder measures it where it lies, and refuses it when it is not there."""
    from segment_io import _encode_kernels as kernels
    from segment_io.schema import REF_CARRIES_LENGTH, REF_POSITION_BITS

    past_4_gib = (1 << 32) + 1
    carried = REF_CARRIES_LENGTH | (3 + 1) << REF_POSITION_BITS | 1
    flag_alone = REF_CARRIES_LENGTH | 1  # its low bits name the value at byte 1, its length field is empty
    refs = np.array([past_4_gib, carried, 5, flag_alone], np.int64)
    assert ref_positions(refs).tolist() == [past_4_gib, 1, 5, flag_alone]
    assert ref_lengths(refs).tolist() == [-1, 3, -1, -1]
    buf = np.frombuffer(b"\x00\x06abc\x00\x00", np.uint8)  # at byte 1: a value of 3 bytes
    one = np.zeros(1, np.int64)
    for ref, bad in ((past_4_gib, 0), (flag_alone, 0), (carried, -1)):
        lengths = np.zeros(1, np.int64)
        assert kernels.ref_value_lengths(buf, np.array([ref]), one * 0, one + len(buf), np.ones(1, np.bool_),
                                         np.zeros(1, np.int64), lengths) == bad
    assert lengths.tolist() == [3]
