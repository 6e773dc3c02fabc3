"""Decompression bombs: a compressed batch that inflates past the per-batch bound is a located
OversizedBatchError, and decoding it never holds much more than the bound in memory.

The 2 GiB bombs are built by streaming 1 MiB chunks into the real zstd compressor (a few seconds, a few MiB of
memory); the file is a normal batch followed by the bomb, so the error must name the bomb's own byte position
and base offset. ``segjobs dump --verify`` runs as a subprocess under an address-space limit, and its peak
RSS is read from the kernel's accounting for exactly that child (``os.wait4``).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from segment_io import compression
from segment_io.compression import (
    DEFAULT_MAX_BATCH_BYTES,
    GZIP,
    MAX_BATCH_BYTES_ENV,
    ZSTD,
)
from segment_io.decode import (
    decode_key_hashes_bytes,
    decode_segment_bytes,
    iter_segment,
    read_key_hashes,
    read_segment,
    verify_segment_crcs,
)
from segment_io.encode import encode_batches
from segment_io.errors import (
    ConfigError,
    CorruptRecordError,
    OversizedBatchError,
    RecordCountMismatchError,
)
from tests.support.bombs import (
    VARIANTS,
    inflating_payload,
    records_payload,
    v2_batch_around,
)
from tests.support.builders import LogBuilder, rec
from tests.support.legacy_messages import legacy_message

REPO = Path(__file__).resolve().parents[2]
GIB = 1 << 30
BOMB_OFFSET = 3
#: The issue's target for ``dump --verify`` of a 2 GiB bomb (before the fix: 4.3 GB).
PEAK_RSS_LIMIT = 1_500_000_000
#: What the kernel may charge the child beyond the bound: one payload slice is at most bound + 1 bytes.
SLACK = 96 << 20


def _normal_batch() -> bytes:
    log = LogBuilder("bombs", 0, timestamp=1_000_000)
    log.batch([rec("a", "1"), rec("b", "2"), rec("c", "3")])
    return encode_batches(log.table()).to_bytes()


def _segment(tmp: Path, payload: bytes, *, codec: int = ZSTD, count: int = 1) -> tuple[Path, int]:
    """A partition dir holding one segment: a normal batch (offsets 0-2), then ``payload`` as a batch at
    offset 3. Returns the segment path and the bomb batch's byte position."""
    first = _normal_batch()
    part = tmp / "bombs-0"
    part.mkdir(parents=True)
    path = part / "00000000000000000000.log"
    path.write_bytes(first + v2_batch_around(payload, codec=codec, count=count, base_offset=BOMB_OFFSET,
                                             timestamp=1_000_001))
    return path, len(first)


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> dict[str, tuple[Path, int]]:
    """2 GiB zstd bombs: ``compressed`` (no content size, compressed blocks: the size shows only while
    inflating, as Java's streaming writer leaves it) and ``declared`` (zeros with the content size in the
    frame header), plus ``normal`` (a genuine compressed batch in the bomb's place)."""
    root = tmp_path_factory.mktemp("bombs")
    out = {
        # 37 bytes do not divide 128 KiB: zstd writes compressed blocks, not RLE ones
        "compressed": _segment(root / "compressed", inflating_payload("zstd-no-content-size", 2 * GIB,
                                                                      b"0123456789abcdefghijklmnopqrstuvwxyz!")),
        "declared": _segment(root / "declared", inflating_payload("zstd-content-size", 2 * GIB)),
    }
    # the same layout with a genuine compressed batch instead of the bomb: what the same code path costs anyway
    records = records_payload(1000)
    out["normal"] = _segment(root / "normal", inflating_payload("zstd-no-content-size", len(records), records))
    return out


def _run_dump(*args: str) -> tuple[int, str, str, int]:
    """``python -m jobs dump ARGS`` under a 4 GiB address-space limit (a regression dies instead of taking the
    machine's memory). Returns exit code, stdout, stderr and the child's peak RSS in bytes."""

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 * GIB, 4 * GIB))

    env = {k: v for k, v in os.environ.items() if k != MAX_BATCH_BYTES_ENV}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        # files, not pipes: Popen.communicate would reap the child before wait4 could read its usage
        proc = subprocess.Popen([sys.executable, "-m", "jobs", "dump", *args], cwd=REPO, env=env, stdout=out,
                                stderr=err, preexec_fn=limit_memory)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read().decode(), err.read().decode(), usage.ru_maxrss * 1024


@pytest.mark.slow
def test_dump_verify_of_2gib_bombs_exits_1_naming_the_batch_within_bounded_memory(bombs) -> None:
    rc, _, err, baseline = _run_dump("--verify", str(bombs["normal"][0]))
    assert rc == 0, err

    path, position = bombs["compressed"]
    rc, out, err, peak = _run_dump("--verify", str(path))
    assert rc == 1, err
    assert out.count("crcValid: true") == 2  # both batches are intact as bytes
    assert (f"problem: {path}, byte {position}, offset {BOMB_OFFSET}: zstd payload inflates past the per-batch "
            f"bound of {DEFAULT_MAX_BATCH_BYTES} bytes (256 MiB)") in err
    assert MAX_BATCH_BYTES_ENV in err and "--max-batch-bytes" in err
    assert "verify: 1 problem(s)" in err
    assert peak < PEAK_RSS_LIMIT, f"peak RSS {peak / 1e6:.0f} MB"
    assert peak - baseline < DEFAULT_MAX_BATCH_BYTES + SLACK, f"{peak / 1e6:.0f} MB vs {baseline / 1e6:.0f} MB"

    path, position = bombs["declared"]
    rc, _, err, peak = _run_dump("--verify", str(path))
    assert rc == 1, err
    assert (f"problem: {path}, byte {position}, offset {BOMB_OFFSET}: zstd payload's frames declare at least "
            f"{2 * GIB} bytes, over the per-batch bound") in err
    # refused from the frame header: nothing allocated for the payload at all
    assert peak - baseline < SLACK, f"{peak / 1e6:.0f} MB vs {baseline / 1e6:.0f} MB"


@pytest.mark.slow
def test_dump_max_batch_bytes_raises_the_bound_and_rejects_nonsense(bombs, tmp_path) -> None:
    path, position = _segment(tmp_path, inflating_payload("gzip", 3 << 20), codec=GZIP)
    rc, _, err, _ = _run_dump("--verify", "--max-batch-bytes", str(1 << 20), str(path))
    assert rc == 1 and f"byte {position}, offset {BOMB_OFFSET}: gzip payload inflates past the per-batch bound " \
                       f"of {1 << 20} bytes (1 MiB)" in err
    # a bound above the payload lets it inflate: zeros are no records, which is reported as such instead
    rc, _, err, _ = _run_dump("--verify", "--max-batch-bytes", "4MiB", str(path))
    assert rc == 1 and "record size 0" in err and "bound" not in err
    rc, _, err, _ = _run_dump("--verify", "--max-batch-bytes", "0", str(path))
    assert rc == 2 and "--max-batch-bytes: must be positive" in err, err


def _peak_rss_increase(fn) -> int:
    """Bytes by which the process's peak RSS rose above its RSS before ``fn`` ran (Linux: the peak is reset
    through /proc/self/clear_refs)."""

    def status(field: str) -> int:
        with open("/proc/self/status") as f:
            line = next(x for x in f if x.startswith(field + ":"))
        return int(line.split()[1]) * 1024

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status("VmRSS")
    fn()
    return status("VmHWM") - before


@pytest.mark.parametrize("reader", [read_segment, read_key_hashes, lambda p: list(iter_segment(p, batch_rows=1))],
                         ids=["read_segment", "read_key_hashes", "iter_segment"])
def test_reading_a_2gib_bomb_raises_a_located_error_without_allocating_the_payload(bombs, reader) -> None:
    path, position = bombs["compressed"]
    errors: list[OversizedBatchError] = []

    def read() -> None:
        with pytest.raises(OversizedBatchError) as info:
            reader(str(path))
        errors.append(info.value)

    grew = _peak_rss_increase(read)
    (err,) = errors
    assert (err.path, err.position, err.offset) == (str(path), position, BOMB_OFFSET)
    assert f"{path}, byte {position}, offset {BOMB_OFFSET}: zstd payload inflates past" in str(err)
    assert grew < DEFAULT_MAX_BATCH_BYTES + SLACK, f"peak RSS rose by {grew / 1e6:.0f} MB"


# --------------------------------------------------------------------------------------------------
# The bound: default, per call, environment
# --------------------------------------------------------------------------------------------------


def _genuine(value_size: int, variant: str = "zstd-no-content-size") -> bytes:
    """A valid one-record batch (offset 5) whose value is ``value_size`` zero bytes, compressed as
    ``variant``."""
    payload = records_payload(value_size)
    return v2_batch_around(inflating_payload(variant, len(payload), payload), codec=VARIANTS[variant], count=1,
                           base_offset=5)


def test_a_genuine_batch_decodes_up_to_the_bound_and_is_refused_past_it(monkeypatch) -> None:
    monkeypatch.delenv(MAX_BATCH_BYTES_ENV, raising=False)
    data = _genuine(3 << 20)
    inflated = len(records_payload(3 << 20))
    table = decode_segment_bytes(data)
    assert table["offset"].to_pylist() == [5] and table["value"][0].as_py() == bytes(3 << 20)
    assert decode_segment_bytes(data, max_batch_bytes=inflated).num_rows == 1  # the bound is inclusive
    for call in (lambda: decode_segment_bytes(data, path="p", max_batch_bytes=inflated - 1),
                 lambda: decode_key_hashes_bytes(data, path="p", max_batch_bytes=inflated - 1)):
        with pytest.raises(OversizedBatchError) as info:
            call()
        assert (info.value.path, info.value.position, info.value.offset) == ("p", 0, 5)
        assert f"bound of {inflated - 1} bytes" in info.value.detail


def test_the_environment_sets_the_default_and_an_explicit_bound_beats_it(monkeypatch) -> None:
    data = _genuine(1 << 20)
    monkeypatch.setenv(MAX_BATCH_BYTES_ENV, str(512 << 10))
    assert compression.max_batch_bytes() == 512 << 10
    with pytest.raises(OversizedBatchError, match=f"bound of {512 << 10} bytes"):
        decode_segment_bytes(data)
    assert decode_segment_bytes(data, max_batch_bytes=2 << 20).num_rows == 1
    monkeypatch.setenv(MAX_BATCH_BYTES_ENV, "1.5MiB")  # sizes take units, as everywhere in segjobs
    assert decode_segment_bytes(data).num_rows == 1
    monkeypatch.setenv(MAX_BATCH_BYTES_ENV, "lots")
    with pytest.raises(ConfigError, match=MAX_BATCH_BYTES_ENV):
        decode_segment_bytes(data)
    monkeypatch.setenv(MAX_BATCH_BYTES_ENV, "0")
    with pytest.raises(ConfigError, match="positive"):
        decode_segment_bytes(data)
    with pytest.raises(ConfigError, match="max_batch_bytes"):
        decode_segment_bytes(data, max_batch_bytes=-1)
    monkeypatch.delenv(MAX_BATCH_BYTES_ENV)
    assert compression.max_batch_bytes() == DEFAULT_MAX_BATCH_BYTES == 256 << 20


def test_an_empty_batch_whose_payload_inflates_is_a_record_count_error() -> None:
    data = v2_batch_around(inflating_payload("gzip", 100), codec=GZIP, count=0, base_offset=9)
    with pytest.raises(RecordCountMismatchError, match="declares 0 records, which cannot inflate past 0 bytes"):
        decode_segment_bytes(data)
    empty = v2_batch_around(inflating_payload("gzip", 0), codec=GZIP, count=0, base_offset=9)
    assert decode_segment_bytes(empty).num_rows == 0


def test_a_legacy_compressed_wrapper_is_bounded_too() -> None:
    inner = legacy_message(1, 0, b"k", bytes(200_000), timestamp=5)
    wrapper = legacy_message(1, 0, None, inflating_payload("gzip", len(inner), inner), attributes=GZIP,
                             timestamp=5)
    data = legacy_message(1, 0, b"x", b"y", timestamp=4)  # an uncompressed message first
    segment = data + _shift_offset(wrapper, 1)
    table = decode_segment_bytes(segment)
    assert table["offset"].to_pylist() == [0, 1] and len(table["value"][1].as_py()) == 200_000
    with pytest.raises(OversizedBatchError) as info:
        decode_segment_bytes(segment, path="p", max_batch_bytes=100_000)
    assert (info.value.position, info.value.offset) == (len(data), 1)
    assert "gzip payload inflates past the per-batch bound of 100000 bytes" in str(info.value)
    # the CRC check decompresses the wrapper to check its inner messages: within the bound, and an oversized
    # wrapper is not a CRC problem (decoding reports it)
    assert verify_segment_crcs(segment, max_batch_bytes=100_000) == []


def _shift_offset(message: bytes, offset: int) -> bytes:
    return offset.to_bytes(8, "big") + message[8:]


# --------------------------------------------------------------------------------------------------
# Many batches: pieces of bounded size, errors in batch order
# --------------------------------------------------------------------------------------------------


def test_decoding_in_pieces_of_decompressed_bytes_gives_the_same_records(monkeypatch) -> None:
    import random

    from segment_io import decode_v2
    from tests.support.kafka_python_batches import random_records, v2_batch

    rng = random.Random(8)
    data = b"".join(v2_batch(codec, random_records(rng, 5), base_offset=10 * i)
                    for i, codec in enumerate([1, 2, 0, 3, 4, 4, 0, 1, 3, 2]))
    whole = decode_segment_bytes(data)
    hashes = decode_key_hashes_bytes(data)
    # every compressed batch in a piece of its own: the chunk budget is smaller than any payload
    monkeypatch.setattr(decode_v2, "_PAYLOAD_BYTES", 1)
    assert decode_segment_bytes(data).equals(whole)
    assert decode_key_hashes_bytes(data).equals(hashes)
    assert whole.num_rows == 50 and set(whole["codec"].to_pylist()) == {0, 1, 2, 3, 4}


@pytest.mark.parametrize("run_bytes", [1, 3000, 1 << 20])
def test_a_piece_read_in_runs_gives_the_same_records_value_references_and_key_hashes(monkeypatch,
                                                                                      run_bytes: int) -> None:
    import random

    from segment_io import compression
    from segment_io.decode import decode_segment_and_headers
    from segment_io.encode import resolve_value_refs
    from tests.support.kafka_python_batches import random_records, v2_batch

    rng = random.Random(9)
    codecs = [1, 2, 0, 3, 4, 4, 0, 0, 1, 3, 2, 4, 0]  # uncompressed batches between, before and after the others
    data = b"".join(v2_batch(codec, random_records(rng, 7), base_offset=10 * i) for i, codec in enumerate(codecs))
    monkeypatch.setattr(compression, "RUN_BYTES", 1 << 30)  # every piece in one run: as before runs
    whole = decode_segment_bytes(data)
    refs = decode_segment_and_headers(data, segment_base_offset=0, value_refs=True)[0]
    hashes = decode_key_hashes_bytes(data)
    # a run for each compressed batch (1 byte), a few batches a run, or every payload in one run (the decode's
    # runs, and the runs the encoder copies the referenced values from)
    monkeypatch.setattr(compression, "RUN_BYTES", run_bytes)
    in_runs = decode_segment_bytes(data)
    assert in_runs.equals(whole) and in_runs["value"].num_chunks == 1  # one chunk: the runs joined
    refs_in_runs = decode_segment_and_headers(data, segment_base_offset=0, value_refs=True)[0]
    assert refs_in_runs.equals(refs)
    assert resolve_value_refs(refs_in_runs, {0: data})["value"].equals(whole["value"])
    assert decode_key_hashes_bytes(data).equals(hashes)
    assert whole.num_rows == 91 and sum(len(h) for h in whole["headers"].to_pylist()) > 0


def test_errors_come_in_batch_order_even_when_a_later_batch_is_refused_unread() -> None:
    zeros = v2_batch_around(inflating_payload("zstd-no-content-size", 1000), codec=ZSTD, count=1, base_offset=0)
    bomb = v2_batch_around(inflating_payload("zstd-content-size", 8 << 20), codec=ZSTD, count=1, base_offset=1)
    with pytest.raises(CorruptRecordError) as info:
        decode_segment_bytes(zeros + bomb, max_batch_bytes=1 << 20)
    assert not isinstance(info.value, OversizedBatchError)  # the first batch's records are the first problem
    assert (info.value.position, info.value.offset) == (0, 0) and "record size 0" in info.value.detail
    # the other way round (offsets still increasing: a segment whose offsets go back is refused for that first)
    bomb_first = v2_batch_around(inflating_payload("zstd-content-size", 8 << 20), codec=ZSTD, count=1, base_offset=0)
    zeros_after = v2_batch_around(inflating_payload("zstd-no-content-size", 1000), codec=ZSTD, count=1, base_offset=1)
    with pytest.raises(OversizedBatchError) as info:
        decode_segment_bytes(bomb_first + zeros_after, max_batch_bytes=1 << 20)
    assert (info.value.position, info.value.offset) == (0, 0)
