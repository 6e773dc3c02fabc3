"""Values decoded as references into the segment bytes (``value_refs``) encode to the very bytes that copied
values do: for random logs (every codec, headers, tombstones, keyless records, transactions and their
markers, both timestamp types, delete horizons), with the rows of any subset of records kept, through the
whole-input encoder and the part-by-part one, with and without a codec override; after the cleaner's rounds;
and on the real broker-written fixtures. Misuse (no sources, a reference that points nowhere) is an error,
never silently written bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segment_io import _crc_kernels as crc_kernels
from segment_io import encode as encode_module
from segment_io.decode import decode_segment_and_headers, decode_segment_bytes
from segment_io.encode import encode_batches, resolve_value_refs
from segment_io.encode_stream import iter_encoded_parts
from segment_io.errors import CorruptRecordError, InvalidRecordsError, UsageError
from segment_io.format import V2_HEADER_SIZE
from segment_io.schema import VALUE_REF_TYPE, ref_lengths, ref_positions
from tests.support.builders import LogBuilder, rec, write_log
from tests.support.cleaning import clean_log
from tests.support.corpus import fixture_files
from tests.support.hypothesis_budget import examples

NOW1 = 1_700_000_000_000
RETENTION = 86_400_000
NOW2 = NOW1 + RETENTION + 1
KEYS = st.sampled_from([b"a", b"b", b"c", b"d", b"a", b"b", None])
VALUES = st.sampled_from([b"", b"v", b"value-2", b"x" * 300, None])
HEADERS = st.sampled_from([(), (("h", b"1"),), (("h", None), ("trace", b""))])
CODECS = st.sampled_from([0, 0, 1, 2, 3, 4])
records_st = st.lists(st.tuples(KEYS, VALUES, HEADERS), min_size=1, max_size=6)


@st.composite
def segments_st(draw: st.DrawFn) -> dict[int, bytes]:
    """A random partition as segment bytes by base offset (the encoder writes them, as a producer would)."""
    log = LogBuilder("t", 0, timestamp=NOW1 - 1_000_000)
    open_txn: set[int] = set()
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["data", "data", "txn", "roll"] + ["end"] * bool(open_txn)))
        recs = [rec(k, v, headers=list(h)) for k, v, h in draw(records_st)] if kind in ("data", "txn") else []
        if kind == "data":
            horizon = draw(st.sampled_from([None, None, NOW1 - 5, NOW1 + 5]))
            log.batch(recs, codec=draw(CODECS), timestamp_type=draw(st.sampled_from([0, 0, 1])),
                      delete_horizon_ms=horizon)
        elif kind == "txn":
            pid = draw(st.sampled_from([1, 2]))
            open_txn.add(pid)
            log.txn_batch(pid, 0, recs, codec=draw(CODECS))
        elif kind == "end":
            pid = draw(st.sampled_from(sorted(open_txn)))
            open_txn.discard(pid)
            (log.commit if draw(st.booleans()) else log.abort)(pid, 0)
        elif log.next_offset > log.segment_base_offset:
            log.roll()
    if log.next_offset == 0:
        log.batch([rec("a", "v")])
    table = log.table()
    out = {}
    for base in sorted(set(table["segment_base_offset"].to_pylist())):
        rows = table.filter(pa.compute.equal(table["segment_base_offset"], base))
        out[base] = encode_batches(rows).to_bytes()
    return out


def _decoded(sources: dict[int, bytes], refs: bool) -> pa.Table:
    return pa.concat_tables([decode_segment_and_headers(data, segment_base_offset=base, value_refs=refs)[0]
                             for base, data in sources.items()])


def _both_ways(copied: pa.Table, referenced: pa.Table, sources: dict[int, bytes], *,
               empty_batches: pa.Table | None = None, codec: int | None = None) -> bytes:
    """The encoding of both tables, asserted equal (also part by part, in small parts, and without the CRC32
    instruction, whose absence gives small batches their CRC from tables once their values are in)."""
    want = encode_batches(copied, empty_batches=empty_batches, codec=codec, sources=sources).to_bytes()
    got = encode_batches(referenced, empty_batches=empty_batches, codec=codec, sources=sources).to_bytes()
    assert got == want
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(crc_kernels, "HARDWARE", False)
        assert encode_batches(referenced, empty_batches=empty_batches, codec=codec, sources=sources).to_bytes() == want
    parts = iter_encoded_parts(referenced, empty_batches=empty_batches, codec=codec, sources=sources,
                               part_bytes=700)
    assert b"".join(p.to_bytes() for p in parts) == want
    return want


@settings(max_examples=examples(1.0), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments_st(), st.integers(0, 2**32 - 1), st.sampled_from([None, None, 0, 1, 2, 3, 4]))
def test_any_kept_subset_encodes_the_same_bytes(sources: dict[int, bytes], seed: int, codec: int | None) -> None:
    copied, referenced = _decoded(sources, False), _decoded(sources, True)
    assert referenced.schema.field("value").type == VALUE_REF_TYPE
    assert resolve_value_refs(referenced, sources).equals(copied)
    # each reference carries its value's length, as the decoder read it
    live = copied["value"].is_valid().to_numpy(zero_copy_only=False)
    refs = referenced["value"].to_numpy(zero_copy_only=False)
    lengths = pc.binary_length(copied["value"]).to_numpy(zero_copy_only=False)
    assert (ref_lengths(refs[live].astype(np.int64)) == lengths[live]).all()
    keep = pa.array(np.random.default_rng(seed).random(copied.num_rows) < 0.6)
    _both_ways(copied.filter(keep), referenced.filter(keep), sources, codec=codec)


@settings(max_examples=examples(0.5), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments_st())
def test_cleaner_rounds_encode_the_same_bytes(sources: dict[int, bytes]) -> None:
    """Two rounds as the compaction task runs them: the first stamps horizons, the second (past them) meets
    the stamped batches in its source and drops tombstones and settled markers."""
    for now in (NOW1, NOW2):
        runs = {}
        for refs in (False, True):
            records = _decoded(sources, refs)
            end = int(records["offset"][-1].as_py()) + 1
            runs[refs] = clean_log(records, now_ms=now, first_dirty_offset=0, first_uncleanable_offset=end,
                                   max_keys=1000, delete_retention_ms=RETENTION).result
        out = _both_ways(runs[False].records, runs[True].records, sources, empty_batches=runs[False].empty_batches)
        first = min(sources)
        sources = {first: out}
        if not decode_segment_bytes(out).num_rows:
            return


@pytest.mark.slow
def test_real_fixtures_encode_the_same_bytes(kafka_real: Path) -> None:
    """Every broker-written v2 segment: any kept subset re-encodes the same with references as with copies,
    and one cleaning round does too. Segments with legacy batches come back with copied values."""
    seen = 0
    for path in fixture_files(kafka_real):
        data = path.read_bytes()
        copied, headers = decode_segment_and_headers(data, path=str(path), segment_base_offset=0)
        referenced, _ = decode_segment_and_headers(data, path=str(path), segment_base_offset=0, value_refs=True)
        sources = {0: data}
        if not np.all(headers.magic == 2):
            assert referenced.equals(copied)
            continue
        if copied.num_rows == 0:
            continue
        seen += 1
        for seed in range(3):
            keep = pa.array(np.random.default_rng(seed).random(copied.num_rows) < 0.5)
            _both_ways(copied.filter(keep), referenced.filter(keep), sources)
        end = int(copied["offset"][-1].as_py()) + 1
        cleaned = [clean_log(t, now_ms=NOW2, first_dirty_offset=0, first_uncleanable_offset=end, max_keys=1 << 20,
                             delete_retention_ms=RETENTION).result for t in (copied, referenced)]
        _both_ways(cleaned[0].records, cleaned[1].records, sources, empty_batches=cleaned[0].empty_batches)
    assert seen > 30


def _one_segment(tmp_path: Path, codec: int = 0) -> tuple[bytes, pa.Table]:
    log = LogBuilder()
    log.batch([rec("a", "1" * 40), rec("b", None), rec("c", "3" * 20)], codec=codec)
    path = write_log(log.table(), tmp_path)[0]
    data = path.read_bytes()
    return data, decode_segment_and_headers(data, segment_base_offset=0, value_refs=True)[0]


def test_references_need_their_sources(tmp_path: Path) -> None:
    data, referenced = _one_segment(tmp_path)
    part = referenced.slice(0, 2)  # a partly kept batch: encoded, not copied
    with pytest.raises(UsageError, match="sources"):
        encode_batches(part)
    with pytest.raises(UsageError, match="sources"):
        list(iter_encoded_parts(part))
    with pytest.raises(UsageError, match="segment 0"):
        encode_batches(part, sources={5: data})


@pytest.mark.parametrize("codec", [0, 3])
def test_sources_other_than_the_decoded_bytes_are_an_error_that_says_so(codec: int) -> None:
    """Each segment given as the other's bytes: the references carry the lengths read from the right ones, so
    the copy finds values of other lengths there and refuses them, naming both causes it cannot tell apart."""
    log = LogBuilder("t", 0)
    log.batch([rec(f"k{i}", "v" * (10 + i)) for i in range(4)], codec=codec)
    log.roll()
    log.batch([rec(f"j{i}", "w" * (30 + 3 * i)) for i in range(4)], codec=codec)
    table = log.table()
    sources = {base: encode_batches(table.filter(pc.equal(table["segment_base_offset"], base))).to_bytes()
               for base in (0, 4)}
    kept = _decoded(sources, refs=True).filter(pa.array([True, False, True, True] + [False] * 4))
    with pytest.raises(CorruptRecordError, match="not those its references were decoded from"):
        encode_batches(kept, sources={0: sources[4], 4: sources[0]})


@pytest.mark.parametrize("carried", [True, False])
@pytest.mark.parametrize("codec", [1, 3, 4])
def test_a_payload_that_no_longer_decompresses_is_an_error_naming_its_batch_and_record(codec: int,
                                                                                      carried: bool) -> None:
    """The second batch's payload overwritten after the decode: the copy of its kept values, which decompresses it
    again, fails with the batch's position and the offset of its first kept record, whether the references carry
    their lengths (the payload decompressed as the values are copied) or not (decompressed before sizing)."""
    log = LogBuilder("t", 0)
    for prefix in "kj":
        log.batch([rec(f"{prefix}{i}", f"{prefix}-value-{i}" * 20) for i in range(5)], codec=codec)
    data = encode_batches(log.table()).to_bytes()
    decoded = _decoded({0: data}, refs=True).filter(pa.array([True, False] * 5))  # both batches rewritten
    if not carried:
        i = decoded.schema.get_field_index("value")
        plain = pa.array(ref_positions(decoded["value"].fill_null(0).to_numpy()), VALUE_REF_TYPE,
                         mask=decoded["value"].is_null().to_numpy(zero_copy_only=False))
        decoded = decoded.set_column(i, decoded.schema.field(i), plain)
    second = int(decoded["batch_position"][decoded.num_rows - 1].as_py())
    damaged = bytearray(data)
    damaged[second + V2_HEADER_SIZE:] = b"\xff" * (len(data) - second - V2_HEADER_SIZE)
    with pytest.raises(CorruptRecordError, match=f"batch at byte {second} of segment 0") as raised:
        encode_batches(decoded, sources={0: bytes(damaged)})
    assert raised.value.position == second and raised.value.offset == 6  # the batch's first kept record


@pytest.mark.parametrize("codec", [0, 1])
def test_a_reference_that_points_nowhere_is_an_error(tmp_path: Path, codec: int) -> None:
    data, referenced = _one_segment(tmp_path, codec)
    i = referenced.schema.get_field_index("value")
    at = int(ref_positions(np.array(referenced["value"][0].as_py())))
    # before the bytes, past them, at the end, and one byte early (the key 'a': a negative length, a null); made
    # by hand, without the lengths the decoder's references carry: the encoder measures each value where it lies
    for bad in (-1, len(data) + 5, len(data), at - 1):
        refs = pa.array([bad, None, 3], VALUE_REF_TYPE)
        broken = referenced.set_column(i, referenced.schema.field(i), refs).slice(0, 2)
        with pytest.raises(InvalidRecordsError, match="value reference"):
            encode_batches(broken, sources={0: data})


def test_a_segment_with_legacy_batches_is_decoded_with_copied_values(kafka_real: Path) -> None:
    legacy = [p for p in fixture_files(kafka_real)
              if not np.all(decode_segment_and_headers(p.read_bytes(), segment_base_offset=0)[1].magic == 2)]
    if not legacy:
        pytest.skip("no legacy segment among the fixtures")
    table, _ = decode_segment_and_headers(legacy[0].read_bytes(), segment_base_offset=0, value_refs=True)
    assert table.schema.field("value").type == pa.binary()


class _DirtyNumpy:
    """numpy, but ``empty`` hands out arrays whose every byte is 0xAB, not the zeroed pages it often gets."""

    def __getattr__(self, name: str) -> object:
        return getattr(np, name)

    @staticmethod
    def empty(*args: object, **kwargs: object) -> np.ndarray:
        out = np.empty(*args, **kwargs)  # type: ignore[call-overload]
        out.reshape(-1).view(np.uint8)[:] = 0xAB
        return out


def test_no_byte_of_the_new_batches_is_left_unwritten(monkeypatch) -> None:
    """Every byte the encoder allocates without filling is 0xAB: the batches it writes from references are still
    the very bytes it writes from copied values (a byte left unwritten would be 0xAB, not what a zeroed page holds)."""
    log = LogBuilder("t", 0, timestamp=NOW1)
    for i in range(30):
        log.batch([rec(f"k{j}", "v" * (i * 37 % 900) if j % 4 else None, headers=[("h", b"1")] * (j % 2))
                   for j in range(5)], codec=[0, 0, 3][i % 3])
        if i % 10 == 9:
            log.roll()
    table = log.table()
    sources = {base: encode_batches(table.filter(pa.compute.equal(table["segment_base_offset"], base))).to_bytes()
               for base in sorted(set(table["segment_base_offset"].to_pylist()))}
    copied, referenced = _decoded(sources, False), _decoded(sources, True)
    keep = pa.array(np.arange(copied.num_rows) % 3 != 0)
    want = encode_batches(copied.filter(keep), sources=sources).to_bytes()
    monkeypatch.setattr(encode_module, "np", _DirtyNumpy())
    assert encode_batches(referenced.filter(keep), sources=sources).to_bytes() == want
    monkeypatch.setattr(crc_kernels, "HARDWARE", False)
    assert encode_batches(referenced.filter(keep), sources=sources).to_bytes() == want
