"""Buffers used again (:class:`segment_io.buffer_pool.BufferPool`): a buffer is handed out again only once
nothing refers to it (no view, memoryview or Arrow buffer), about the size asked for, and the pool never keeps
more than its allowance; decodes that keep payloads for the encoder decompress into reused buffers without
touching the payloads another decode still keeps."""

from __future__ import annotations

import gc
from typing import Callable

import numpy as np
import pyarrow as pa
import pytest

from segment_io import decode_v2
from segment_io.buffer_pool import MIN_POOLED_BYTES, BufferPool
from segment_io.decode import decode_segment_and_headers
from segment_io.encode import encode_batches
from segment_io.payloads import KeptPayloads
from tests.support.builders import LogBuilder, rec

MIB = 1 << 20


def _owner(buf: np.ndarray) -> int:
    """The identity of the allocation ``buf`` lies in."""
    return id(buf if buf.base is None else buf.base)


def test_a_buffer_is_handed_out_again_only_once_nothing_refers_to_it() -> None:
    pool = BufferPool(100 * MIB)
    first = pool.empty(4 * MIB)
    owner = _owner(first)
    holders = [first[10:20], first.data, pa.py_buffer(first[100:200]), np.frombuffer(first.data, np.uint8)]
    del first
    for holder in list(holders):
        other = pool.empty(4 * MIB)
        assert _owner(other) != owner  # still referred to: a new buffer
        del other
        holders.remove(holder)
        del holder
    gc.collect()
    assert _owner(pool.empty(4 * MIB)) == owner  # nothing refers to it any more


def test_a_free_buffer_serves_requests_of_about_its_size() -> None:
    pool = BufferPool(100 * MIB)
    owner = _owner(pool.empty(8 * MIB))
    assert _owner(pool.empty(7 * MIB)) == owner  # a little smaller: the same buffer, its first bytes
    again = pool.empty(7 * MIB)
    assert _owner(again) == owner and len(again) == 7 * MIB
    del again
    assert _owner(pool.empty(2 * MIB)) != owner  # far smaller: it would hold four times what is needed
    assert _owner(pool.empty(9 * MIB)) != owner  # larger: does not fit


def test_small_requests_are_plain_allocations() -> None:
    pool = BufferPool(100 * MIB)
    small = pool.empty(MIN_POOLED_BYTES - 1)
    assert len(small) == MIN_POOLED_BYTES - 1 and pool.kept_bytes == 0


def test_the_pool_keeps_at_most_its_allowance_letting_go_of_free_buffers_first() -> None:
    pool = BufferPool(10 * MIB)
    held = [pool.empty(4 * MIB), pool.empty(4 * MIB)]
    assert pool.kept_bytes == 8 * MIB
    beyond = pool.empty(4 * MIB)  # no room: allocated, not kept
    assert pool.kept_bytes == 8 * MIB and len(beyond) == 4 * MIB
    held.pop()
    # one 4 MiB buffer is free but a 6 MiB one does not fit it: it is let go to make room
    six = pool.empty(6 * MIB)
    assert pool.kept_bytes == 10 * MIB
    assert _owner(six) not in {_owner(h) for h in held}
    pool.clear()
    assert pool.kept_bytes == 0
    assert len(six) == 6 * MIB and len(held[0]) == 4 * MIB  # what callers hold lives on


def _compressed_segment(base: int, tag: str) -> bytes:
    log = LogBuilder(start_offset=base)
    for i in range(60):
        log.batch([rec(f"k{j}", f"{tag} value {i}-{j} " * 300) for j in range(8)], codec=1 + i % 4)
    return encode_batches(log.table()).to_bytes()


def test_decodes_reuse_buffers_but_never_one_whose_payloads_are_still_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two segments decoded one after the other, each keeping its payloads for the encoder: the second may not
    decompress into the first's buffers while the first's store holds them, and both encode the bytes of an
    encode that decompresses every payload again. Once the first store lets go, a decode reuses its buffers."""
    pool = BufferPool(64 * MIB)
    monkeypatch.setattr(decode_v2, "PAYLOAD_BUFFERS", pool)
    handed: list[tuple[int, int]] = []  # (allocation, bytes asked for) of every buffer the pool handed out
    monkeypatch.setattr(pool, "empty", _counting(pool.empty, handed))
    monkeypatch.setattr("segment_io.buffer_pool.MIN_POOLED_BYTES", 1)
    sources = {0: _compressed_segment(0, "first"), 1000: _compressed_segment(1000, "later")}
    stores = {base: KeptPayloads() for base in sources}
    tables = {base: decode_segment_and_headers(data, segment_base_offset=base, value_refs=True,
                                               payloads=stores[base])[0] for base, data in sources.items()}
    kept_in = {base: {_owner(buf) for seg in store._segments.values() for buf in seg.buffers}
               for base, store in stores.items()}
    assert kept_in[0] and kept_in[1000] and not kept_in[0] & kept_in[1000]
    assert kept_in[0] | kept_in[1000] <= {owner for owner, _ in handed}  # all of them from the pool
    for base, table in tables.items():
        kept = table.filter(pa.array(np.arange(table.num_rows) % 3 != 0))
        want = encode_batches(kept, sources=sources).to_bytes()
        assert encode_batches(kept, sources=sources, payloads=stores[base]).to_bytes() == want
    stores[0].clear()
    del tables
    gc.collect()
    handed.clear()
    decode_segment_and_headers(sources[0], segment_base_offset=0, value_refs=True, payloads=KeptPayloads())
    assert {owner for owner, _ in handed} & kept_in[0]  # the freed ones are used again
    assert not {owner for owner, _ in handed} & kept_in[1000]  # never those still kept


def _counting(empty: Callable[[int], np.ndarray], handed: list[tuple[int, int]]) -> Callable[[int], np.ndarray]:
    def counted(n: int) -> np.ndarray:
        buf = empty(n)
        handed.append((_owner(buf), n))
        return buf
    return counted
