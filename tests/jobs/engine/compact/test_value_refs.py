"""The cleaning task decodes values as references into the mapped segments (``value_refs``) and the encoder copies
the kept ones from there: the files a compaction writes must be the very bytes it wrote when values were copied
into Arrow. Checked on a partition whose cleaned group mixes a legacy (magic 1) segment, whose values are
copied, with v2 segments of every codec, headers, tombstones and transactions, over two runs (the first stamps
delete horizons, the second, past them, rewrites the stamped batches), with both strategies. The whole job
runs in this process (no Spark)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

import jobs.engine.compact.cleaning
import segment_io.decode
from jobs import api
from segment_io.format import V2_HEADER_SIZE
from segment_io.layout import partition_dir_name, segment_file_name
from tests.support.builders import LogBuilder, rec, write_log

TOPIC, PARTITION = "refs", 0
NOW1 = 1_700_000_000_000
RETENTION = 3_600_000
NOW2 = NOW1 + RETENTION + 1


def _legacy_segment(path: Path, count: int) -> None:
    """``count`` magic-1 messages at offsets 0.. with keys k0..k3 (so most are superseded), one a tombstone."""
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp=NOW1 - 10_000 + i, key=f"k{i % 4}".encode(),
                       value=None if i == 5 else f"legacy-{i}".encode() * 3)
    path.write_bytes(bytes(builder.build()))


def _partition(root: Path, codecs: tuple[int, ...] = (0, 1, 2, 3, 4, 0), *, legacy: bool = True) -> Path:
    """A partition of v2 batches of ``codecs`` (headers, tombstones, transactions) over two closed segments, after a
    legacy (magic 1) segment when ``legacy``."""
    pdir = root / partition_dir_name(TOPIC, PARTITION)
    pdir.mkdir(parents=True)
    start = 0
    if legacy:
        _legacy_segment(pdir / segment_file_name(0), 8)
        start = 8
    log = LogBuilder(TOPIC, PARTITION, start_offset=start, timestamp=NOW1 - 5_000)
    for i, codec in enumerate(codecs):
        log.batch([rec(f"k{(i + j) % 5}", None if j == 2 else f"v{i}-{j}" * 20, headers=[("h", b"x")] * (j % 2))
                   for j in range(5)], codec=codec)
        log.txn_batch(7, 0, [rec(f"k{i}", f"t{i}")], base_sequence=i, codec=codec)
        (log.commit if i % 2 else log.abort)(7, 0)
        if i == 2:
            log.roll()
    write_log(log.table(), pdir)
    end = log.next_offset
    (pdir / segment_file_name(end)).write_bytes(b"")  # the active segment: everything before it is cleanable
    config = root.parent / f"{root.name}.toml"
    config.write_text(f'[defaults]\n"cleanup.policy" = "compact"\n"delete.retention.ms" = {RETENTION}\n')
    return pdir


def _compact(log_dir: Path, now: int, strategy: str) -> None:
    options = api.CompactOptions(config=str(log_dir.parent / f"{log_dir.name}.toml"),
                                 partitions=(partition_dir_name(TOPIC, PARTITION),), strategy=strategy,
                                 progress=lambda line: None)
    result = api.compact(log_dir, options, now=now, seams=api.Seams(runner=api.InProcessTasks()))
    assert result.exit_code == 0, result.errors


def _files(pdir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(pdir.iterdir()) if p.is_file()}


@pytest.mark.parametrize("strategy", ["memory", "external-sort"])
def test_output_is_the_same_bytes_as_with_copied_values(tmp_path: Path, strategy: str, monkeypatch) -> None:
    referenced = tmp_path / "referenced"
    pdir = _partition(referenced)
    copied = tmp_path / "copied"
    shutil.copytree(referenced, copied)
    shutil.copy(tmp_path / "referenced.toml", tmp_path / "copied.toml")
    decode = segment_io.decode.decode_segment_and_headers
    calls: list[bool] = []

    def spy(*args, **kwargs):
        calls.append(kwargs.get("value_refs", False))
        return decode(*args, **kwargs)

    def without_refs(*args, **kwargs):
        return decode(*args, **{**kwargs, "value_refs": False})

    rounds = []
    for now in (NOW1, NOW2):
        with monkeypatch.context() as m:
            m.setattr(jobs.engine.compact.cleaning, "decode_segment_and_headers", spy)  # as the cleaning task calls it
            _compact(referenced, now, strategy)
        with monkeypatch.context() as m:
            m.setattr(jobs.engine.compact.cleaning, "decode_segment_and_headers", without_refs)
            _compact(copied, now, strategy)
        rounds.append(_files(pdir))
        assert rounds[-1] == _files(copied / pdir.name)
    assert calls and all(calls)  # the task asked for references
    assert rounds[0] != rounds[1]  # the second run rewrote the batches the first stamped
    assert segment_file_name(0) in rounds[1]  # the legacy segment's group was cleaned, not dropped


@pytest.mark.parametrize("strategy", ["memory", "external-sort"])
def test_a_partition_task_keeps_no_decompressed_payload_for_its_rewrite(tmp_path: Path, strategy: str,
                                                                        monkeypatch) -> None:
    """A partition's cleaning task lets each decompressed payload go after its decode and decompresses again, part by
    part, the payloads its rewrite needs: keeping them (segment_io.payloads) made it hold a second copy of its
    records' bytes in new memory, which cost more than decompressing twice (docs/performance.md). Both runs rewrite
    batches, and write the same files as a run whose decode copies every value out of its payload."""
    import segment_io.encode
    import segment_io.payloads

    log_dir = tmp_path / "log"
    # compressed batches only: every rewritten batch's values are references into its decompressed payload
    pdir = _partition(log_dir, (1, 2, 3, 4, 3, 4), legacy=False)
    copied = tmp_path / "copied"
    shutil.copytree(log_dir, copied)
    shutil.copy(tmp_path / "log.toml", tmp_path / "copied.toml")
    decode = segment_io.decode.decode_segment_and_headers

    def without_refs(*args, **kwargs):
        return decode(*args, **{**kwargs, "value_refs": False})

    inflate = segment_io.encode._plan_payloads
    offer = segment_io.payloads.KeptPayloads.offer
    calls = {"decompressed again": 0, "offered": 0}

    def decompressing(*args, **kwargs):
        calls["decompressed again"] += 1
        return inflate(*args, **kwargs)

    def offering(*args, **kwargs):
        calls["offered"] += 1
        return offer(*args, **kwargs)

    monkeypatch.setattr(segment_io.payloads.KeptPayloads, "offer", offering)
    rounds = []
    for now in (NOW1, NOW2):
        with monkeypatch.context() as m:
            m.setattr(segment_io.encode, "_plan_payloads", decompressing)
            _compact(log_dir, now, strategy)
        with monkeypatch.context() as m:
            m.setattr(jobs.engine.compact.cleaning, "decode_segment_and_headers", without_refs)
            _compact(copied, now, strategy)
        rounds.append(_files(pdir))
        assert rounds[-1] == _files(copied / pdir.name)
    assert rounds[0] != rounds[1]  # the second run rewrote the batches the first stamped
    assert calls["decompressed again"] > 0
    assert calls["offered"] == 0


@pytest.mark.parametrize("strategy", ["memory", "external-sort"])
def test_the_rewrite_decompresses_again_within_the_runs_bound(tmp_path: Path, strategy: str, monkeypatch) -> None:
    """A run that raises ``max_batch_bytes`` above the process's (``SEGJOBS_MAX_BATCH_BYTES``) decodes its batches
    within the run's bound, and its rewrite, which decompresses them again, holds them to the same bound: a payload
    over the process's bound but within the run's is cleaned, not reported as oversized at its rewrite."""
    from segment_io.compression import MAX_BATCH_BYTES_ENV

    log_dir = tmp_path / "log"
    pdir = _partition(log_dir, (1, 2, 3, 4, 3, 4), legacy=False)
    before = _files(pdir)
    monkeypatch.setenv(MAX_BATCH_BYTES_ENV, "64")  # far below every batch's records
    options = api.CompactOptions(config=str(tmp_path / "log.toml"), partitions=(partition_dir_name(TOPIC, PARTITION),),
                                 strategy=strategy, max_batch_bytes=1 << 20, progress=lambda line: None)
    result = api.compact(log_dir, options, now=NOW1, seams=api.Seams(runner=api.InProcessTasks()))
    assert result.exit_code == 0, result.errors
    assert _files(pdir) != before  # its batches were rewritten


@pytest.mark.parametrize("codec", [0, 3])
def test_a_segment_changed_under_the_rewrite_is_reported_for_its_file(tmp_path: Path, codec: int,
                                                                       monkeypatch) -> None:
    """The second segment's batches changed after the cleaning task decoded them, before the encoder copies their
    kept values (what a mapped file rewritten by another process shows; here the bytes the task hands the encoder
    are swapped): the partition fails with an error that names that file, the batch's position and a record's
    offset (the encoder knows its sources only by base offset), and nothing of it is committed."""
    log_dir = tmp_path / "log"
    pdir = _partition(log_dir, (codec,) * 6, legacy=False)
    second = sorted(p for p in pdir.glob("*.log") if p.stat().st_size)[1]
    base = int(second.stem)
    before = _files(pdir)
    write = jobs.engine.compact.cleaning.write_segment

    def changing_the_source_first(*args, **kwargs):
        data = bytearray(kwargs["sources"][base])
        data[V2_HEADER_SIZE:] = b"\xff" * (len(data) - V2_HEADER_SIZE)  # all after the first batch's header
        return write(*args, **{**kwargs, "sources": {**kwargs["sources"], base: bytes(data)}})

    monkeypatch.setattr(jobs.engine.compact.cleaning, "write_segment", changing_the_source_first)
    options = api.CompactOptions(config=str(tmp_path / "log.toml"), partitions=(partition_dir_name(TOPIC, PARTITION),),
                                 strategy="memory", progress=lambda line: None)
    result = api.compact(log_dir, options, now=NOW1, seams=api.Seams(runner=api.InProcessTasks()))
    assert result.exit_code == 1
    [error] = result.errors
    assert error["kind"] == "CorruptRecordError" and error["file"] == str(second), error
    assert error["position"] is not None and error["offset"] >= base, error
    assert _files(pdir) == before  # nothing committed
