"""`segjobs dump` and `segjobs generate` as users run them (no Spark involved)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from jobs.commands.cli import main
from segment_io.decode import read_segment
from segment_io.format import scan_batches
from tests.support.replay import read_partition

FIXTURE_WITH_HEADERS = "shinhagunn-record-headers/data/kafka/mytopic-0"


def _generate(out: Path, *extra: str) -> int:
    return main(["generate", "--out", str(out), "--topics", "orders,user.events-v2", "--partitions", "2",
                 "--records", "3000", "--segment-bytes", "64KiB", "--transactional", "0.3", "--aborted", "0.5",
                 "--tombstones", "0.1", "--headers", "--quiet", *extra])


def test_generate_writes_a_broker_style_log_dir_that_kafka_python_reads(tmp_path: Path, capsys) -> None:
    out = tmp_path / "logs"
    assert _generate(out, "--codec", "lz4", "--value-style", "text") == 0
    summary = capsys.readouterr().out
    assert "4 partitions" in summary and "12000 records" in summary
    names = sorted(p.name for p in out.iterdir())
    assert names == ["cleaner-offset-checkpoint", "log-start-offset-checkpoint", "orders-0", "orders-1",
                     "user.events-v2-0", "user.events-v2-1"]
    part = out / "user.events-v2-1"
    logs = sorted(part.glob("*.log"))
    assert len(logs) > 1, "segments roll at --segment-bytes"
    assert all(p.with_suffix(".index").exists() and p.with_suffix(".timeindex").exists() for p in logs)
    assert (part / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    # an independent reader sees every record, offsets contiguous, markers after transactional batches
    batches = read_partition(part)
    offsets = [r.offset for b in batches for r in b.records]
    assert offsets == list(range(len(offsets)))
    data = [r for b in batches if not b.control for r in b.records]
    assert len(data) == 3000
    assert any(b.control for b in batches) and any(b.transactional and not b.control for b in batches)
    assert sum(r.value is None for r in data) > 0  # tombstones
    assert len({r.key for r in data}) == 1500  # --superseded 0.5 (default): exactly half the records are keys
    assert all(r.headers for r in data)
    # the same seed gives the same bytes
    again = tmp_path / "again"
    assert _generate(again, "--codec", "lz4", "--value-style", "text") == 0
    assert logs[0].read_bytes() == (again / "user.events-v2-1" / logs[0].name).read_bytes()


def test_generate_refuses_a_non_empty_out_naming_append_and_append_adds_topics(tmp_path: Path, capsys) -> None:
    from jobs.rules.config import ConfigSet
    from segment_io.checkpoint import read_offset_checkpoint
    from segment_io.storage import open_storage

    out = tmp_path / "logs"
    assert _generate(out) == 0
    config = tmp_path / "logs.topics.toml"
    written = config.read_text()
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert _generate(out) == 2
    assert capsys.readouterr().err == (
        f"segjobs generate: error: --out {out} is not empty (it holds cleaner-offset-checkpoint, "
        f"log-start-offset-checkpoint, orders-0, orders-1, user.events-v2-0 and 1 more): give a new or empty "
        f"directory, or pass --append to add these topics to the log dir in it; nothing was written\n")
    assert sorted(p.name for p in out.iterdir()) == before and config.read_text() == written
    # --append: a topic there keeps its partition count (another is refused before anything is written) ...
    assert main(["generate", "--out", str(out), "--append", "--topics", "clicks,orders", "--partitions", "3",
                 "--quiet"]) == 2
    assert "--partitions 3: orders has 2 partition(s) in the log dir already" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == before
    assert main(["generate", "--out", str(out), "--append", "--topics", "clicks", "--partitions", "1",
                 "--records", "100", "--quiet"]) == 0
    # ... the others and their checkpoint entries are kept, and the topics config covers all of them
    assert sorted(p.name for p in out.iterdir()) == sorted([*before, "clicks-0"])
    storage = open_storage(str(out))
    assert set(read_offset_checkpoint(storage, str(out / "log-start-offset-checkpoint"))) == {
        ("orders", 0), ("orders", 1), ("user.events-v2", 0), ("user.events-v2", 1), ("clicks", 0)}
    assert config.read_text().startswith(written)
    configs = ConfigSet.load(config)
    for topic in ("orders", "user.events-v2", "clicks"):
        assert configs.for_topic(topic).compact and configs.for_topic(topic).segment_bytes == (
            64 << 10 if topic != "clicks" else 1 << 20)


def test_generate_append_continues_existing_partitions_as_a_producer_would(tmp_path: Path, capsys) -> None:
    """--append to a topic already there: new segments after the last one, offsets continuing from the log end
    offset, transactions with new producer ids, the leader epoch, checkpoints and topics config kept, timestamps
    after the newest; the partitions still pass dump --verify."""
    from segment_io.checkpoint import read_offset_checkpoint
    from segment_io.storage import open_storage

    out = tmp_path / "logs"
    assert _generate(out) == 0
    config = tmp_path / "logs.topics.toml"
    written = config.read_text()
    part = out / "orders-1"
    old_files = {p.name: p.read_bytes() for p in part.iterdir()}
    old = read_partition(part)
    old_end = old[-1].records[-1].offset + 1
    checkpoint = read_offset_checkpoint(open_storage(str(out)), str(out / "log-start-offset-checkpoint"))
    capsys.readouterr()
    assert main(["generate", "--out", str(out), "--append", "--topics", "orders", "--records", "500",
                 "--segment-bytes", "16KiB", "--transactional", "0.3", "--aborted", "0.5", "--quiet"]) == 0
    assert "appended to orders-0, orders-1 after their log end offsets" in capsys.readouterr().out
    # the old files are untouched; the new segments start at the old log end offset
    assert {p.name: p.read_bytes() for p in part.iterdir() if p.name in old_files} == old_files
    new_logs = sorted(p.name for p in part.glob("*.log") if p.name not in old_files)
    assert len(new_logs) > 1 and new_logs[0] == f"{old_end:020d}.log"
    batches = read_partition(part)
    offsets = [r.offset for b in batches for r in b.records]
    assert offsets == list(range(len(offsets)))
    added = batches[len(old):]
    assert sum(len(b.records) for b in added if not b.control) == 500
    old_pids = {b.producer_id for b in old if b.producer_id >= 0}
    new_pids = [b.producer_id for b in added if b.transactional and not b.control]
    assert new_pids and min(new_pids) > max(old_pids) and len(set(new_pids)) == len(new_pids)
    assert all(b.producer_epoch == 0 for b in added if b.transactional)
    assert min(r.timestamp for b in added for r in b.records) > max(r.timestamp for b in old for r in b.records)
    assert {b.leader_epoch for b in added} == {0}
    assert (part / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    assert read_offset_checkpoint(open_storage(str(out)), str(out / "log-start-offset-checkpoint")) == checkpoint
    assert config.read_text() == written  # orders' table stays as it was, not written twice
    for p in ("orders-0", "orders-1", "user.events-v2-0"):
        assert main(["dump", "--verify", str(out / p)]) == 0, capsys.readouterr()


@pytest.mark.parametrize("start", [[], ["--start", "2026-11-20"]])
def test_generate_append_refuses_a_partition_it_cannot_append_to_before_writing(tmp_path: Path, capsys,
                                                                               start: list[str]) -> None:
    # a last batch cut short: a usage error (exit 2) naming it, nothing written, whether --start is given or not
    out = tmp_path / "logs"
    assert _generate(out) == 0
    last = sorted((out / "orders-1").glob("*.log"))[-1]
    last.write_bytes(last.read_bytes()[:-5])
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    capsys.readouterr()
    assert main(["generate", "--out", str(out), "--append", "--topics", "orders", "--records", "10", "--quiet",
                 *start]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"segjobs generate: error: --append: {last}: its last ")
    assert "are no whole batch (one cut short, or zeros a broker preallocated)" in err
    assert err.endswith("records cannot be appended after them; nothing was written\n")
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("damage", ["files but no segment", "a file for a partition directory"])
def test_generate_append_refuses_any_partition_of_any_group_before_writing_the_first(tmp_path: Path, capsys,
                                                                                     damage: str) -> None:
    # the topics are written in groups of equal partition counts; a partition of a later group that cannot be
    # written was found only when its group's turn came, after the earlier groups were written (exit 2 all the
    # same, or a NotADirectoryError traceback): now every partition is checked before the first is written
    out = tmp_path / "logs"
    assert main(["generate", "--out", str(out), "--topics", "users", "--partitions", "1", "--records", "10",
                 "--quiet"]) == 0
    if damage == "files but no segment":  # a third topic, its group last: 3 partitions, the last without segment
        assert main(["generate", "--out", str(out), "--append", "--topics", "events", "--partitions", "3",
                     "--records", "10", "--quiet"]) == 0
        for f in (out / "events-2").iterdir():
            if f.name != "leader-epoch-checkpoint":
                f.unlink()
        topics, bad = "users,clicks,events", out / "events-2"
    else:  # a new topic of 2 partitions (its group after users' 1), a file where its partition 1 goes
        (out / "clicks-1").write_text("not a partition\n")
        topics, bad = "users,clicks", out / "clicks-1"
    before = _files(tmp_path)
    capsys.readouterr()
    assert main(["generate", "--out", str(out), "--append", "--topics", topics, "--records", "10", "--quiet"]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("segjobs generate: error: ") and str(bad) in line, line
    assert line.endswith("; nothing was written"), line
    assert _files(tmp_path) == before and not (out / "clicks-0").exists()


@pytest.mark.parametrize("flag", ["--out", "--config-out"])
def test_generate_below_a_file_is_refused_before_writing(tmp_path: Path, capsys, flag: str) -> None:
    # was: NotADirectoryError from mkdir, a traceback, exit 1
    (tmp_path / "notes").write_text("mine\n")
    below = tmp_path / "notes" / "logs"
    argv = ["--out", str(below)] if flag == "--out" else ["--out", str(tmp_path / "logs"), "--config-out",
                                                          str(below / "t.toml")]
    assert main(["generate", *argv, "--records", "10", "--quiet"]) == 2
    target = below if flag == "--out" else below / "t.toml"
    assert _one_error_line(capsys) == (f"segjobs generate: error: {flag} {target}: {tmp_path / 'notes'} is a file, "
                                       f"not a directory; nothing was written")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]


def test_generate_into_a_directory_the_machine_refuses_is_refused_before_writing(tmp_path: Path, capsys) -> None:
    from tests.support.mounts import read_only

    (tmp_path / "ro").mkdir()
    with read_only(tmp_path / "ro"):
        assert main(["generate", "--out", str(tmp_path / "ro"), "--records", "10", "--quiet"]) == 2
        line = _one_error_line(capsys)
    assert line.startswith(f"segjobs generate: error: --out {tmp_path / 'ro'}: creating a file in it failed: "
                           f"Read-only file system (EROFS): "), line
    assert line.endswith("; nothing was written") and list((tmp_path / "ro").iterdir()) == []


def test_generate_on_a_filesystem_that_fills_up_is_one_error_line_naming_the_file(tmp_path: Path, capsys) -> None:
    # the machine refuses a write once generating began: exit 1 (what was written stays), one line, no traceback
    from tests.support.mounts import tmpfs

    with tmpfs(tmp_path / "small", 256 << 10) as small:
        assert main(["generate", "--out", str(small / "logs"), "--records", "20000", "--config-out", "none",
                     "--quiet"]) == 1
        line = _one_error_line(capsys)
    assert line.startswith(f"segjobs generate: error: {small / 'logs'}/"), line
    assert "No space left on device (ENOSPC)" in line and line.endswith(f"what was written before stays in --out "
                                                                        f"{small / 'logs'}"), line


def test_generate_counts_markers_apart_on_its_partition_lines(tmp_path: Path, capsys) -> None:
    # they said 'orders-0: 30093 records' for --records 30000, where the total says '(+93 markers)'
    assert main(["generate", "--out", str(tmp_path / "g"), "--topics", "a", "--partitions", "1", "--records", "1000",
                 "--transactional", "0.5"]) == 0
    out, err = capsys.readouterr()
    err += out
    line = next(x for x in err.splitlines() if x.strip().startswith("a-0:"))
    assert line.strip().startswith("a-0: 1000 records (+") and " markers), " in line, line


def test_generate_writes_its_topics_config_beside_the_log_dir_and_says_how_to_run(tmp_path: Path, capsys) -> None:
    out = tmp_path / "logs"
    assert main(["generate", "--out", str(out), "--records", "100", "--start", "2026-11-20", "--span", "2d",
                 "--quiet"]) == 0
    stdout = capsys.readouterr().out.splitlines()
    assert stdout[1:] == [f"topics config: {out}.topics.toml (cleanup.policy=compact for orders); e.g.",
                          f"  segjobs compact --log-dir {out} --config {out}.topics.toml "
                          f"--now 2026-11-23T00:00:00.000Z"]
    assert not [p for p in out.iterdir() if p.is_file() and "toml" in p.name]  # nothing foreign in the log dir
    # an existing file is not overwritten; 'none' writes no config and says which --now follows the data
    assert main(["generate", "--out", str(tmp_path / "two"), "--config-out", f"{out}.topics.toml"]) == 2
    assert "--config-out" in capsys.readouterr().err and not (tmp_path / "two").exists()
    assert main(["generate", "--out", str(tmp_path / "two"), "--records", "100", "--config-out", "none",
                 "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "timestamps run from 2023-11-14T22:13:20.000Z to 2023-11-21T22:13:20.000Z: run the jobs with e.g. "
        "--now 2023-11-22T22:13:20.000Z")
    assert not (tmp_path / "two.topics.toml").exists()


def test_generate_help_says_which_timestamps_it_writes_and_how_to_choose(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "by default from 2023-11-14T22:13:20Z over 7 days" in text
    assert "give the jobs --now" in text and "--start 2026-11-20" in text
    assert "--append" in text and "--config-out" in text


@pytest.mark.parametrize("bad", [["--superseded", "1.5"], ["--segment-bytes", "12 parsecs"], ["--codec", "brotli"]])
def test_generate_rejects_bad_arguments(tmp_path: Path, bad: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--out", str(tmp_path), *bad])
    assert exc.value.code == 2


def test_dump_prints_one_line_per_batch_and_records_with_deep(kafka_real: Path, capsys) -> None:
    part = kafka_real / FIXTURE_WITH_HEADERS
    assert main(["dump", str(part)]) == 0
    out = capsys.readouterr().out.splitlines()
    log = sorted(part.glob("*.log"))[0]
    headers = scan_batches(log.read_bytes())
    batch_lines = [line for line in out if line.startswith("baseOffset:")]
    assert len(batch_lines) == len(headers)
    assert all("crcValid: true" in line for line in batch_lines)
    assert f"baseOffset: {int(headers.base_offset[0])} lastOffset: {int(headers.last_offset[0])}" in batch_lines[0]

    assert main(["dump", "--deep", str(log)]) == 0
    deep = capsys.readouterr().out.splitlines()
    records = [line for line in deep if line.startswith("| offset:")]
    assert len(records) == read_segment(log).num_rows
    assert "headerKeys: [myTestHeader]" in records[0]


def test_dump_jsonl_has_offsets_timestamps_keys_values_and_headers(kafka_real: Path, capsys) -> None:
    part = kafka_real / FIXTURE_WITH_HEADERS
    assert main(["dump", "--format", "jsonl", str(part)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    table = read_segment(sorted(part.glob("*.log"))[0]).to_pylist()
    assert len(rows) == len(table)
    for got, want in zip(rows, table):
        assert got["topic"] == "mytopic" and got["partition"] == 0
        assert got["offset"] == want["offset"] and got["timestamp"] == want["timestamp"]
        assert got["key"] == (None if want["key"] is None else base64.b64encode(want["key"]).decode())
        assert got["value"] == (None if want["value"] is None else base64.b64encode(want["value"]).decode())
        assert [h["key"] for h in got["headers"]] == [h["key"] for h in want["headers"]]


@pytest.mark.slow
def test_dump_verify_passes_on_real_fixtures_and_fails_on_each_kind_of_damage(kafka_real: Path, tmp_path: Path,
                                                                            capsys) -> None:
    src = kafka_real / "ronem123-kraft3.9-multiseg"
    parts = sorted({p.parent for p in src.rglob("*.log")})
    assert parts
    for part in parts:
        assert main(["dump", "--verify", str(part)]) == 0, capsys.readouterr().err
    capsys.readouterr()

    part = parts[0]
    log = sorted(part.glob("*.log"))[0]
    good = log.read_bytes()
    h = scan_batches(good)

    def damaged(name: str, data: bytes, suffix: str = ".log") -> Path:
        d = tmp_path / name / part.name
        d.mkdir(parents=True)
        for f in part.iterdir():
            if f.is_file() and f.name.startswith(log.stem):
                (d / f.name).write_bytes(f.read_bytes())
        (d / (log.stem + suffix)).write_bytes(data)
        return d

    flipped = bytearray(good)
    flipped[int(h.position[-1]) + 70] ^= 0xFF  # a record byte of the last batch: CRC mismatch
    cut = good[:-5]  # what a crash leaves: a truncated last batch
    for name, d, expected in [
        ("crc", damaged("crc", bytes(flipped)), "CRC-32C mismatch"),
        ("tail", damaged("tail", cut), "do not form a whole batch"),
    ]:
        assert main(["dump", "--verify", str(d)]) == 1, name
        err = capsys.readouterr().err
        assert expected in err or expected.lower() in err.lower(), (name, err)
        assert "verify: " in err and "problem" in err
    index = (part / (log.stem + ".index")).read_bytes()
    if len(index) >= 8:
        bad_index = bytearray(index)
        bad_index[4:8] = (len(good) + 100).to_bytes(4, "big")  # first entry points past the log's end
        d = damaged("index", bytes(bad_index), ".index")
        assert main(["dump", "--verify", str(d)]) == 1
        assert ".index" in capsys.readouterr().err


def test_dump_shows_the_batches_before_damage_and_names_each_problem_once(kafka_real: Path, tmp_path: Path,
                                                                        capsys) -> None:
    # the tool for looking at damage shows what reads (it showed nothing of a segment with garbage after its
    # batches), and --verify names a cut-short tail once (it was named twice: by the scan and by the CRC check)
    log = sorted((kafka_real / "ronem123-kraft3.9-multiseg").rglob("*.log"))[0]
    good = log.read_bytes()
    batches = len(scan_batches(good))
    for name, tail, problem, verify_code in [("garbage", bytes(range(17, 117)), "invalid magic byte", 1),
                                             ("cut", good[:40], "do not form a whole batch", 1),
                                             ("zeros", bytes(4096), "are all zero (space a broker preallocated", 1)]:
        part = tmp_path / name / "t-0"
        part.mkdir(parents=True)
        (part / log.name).write_bytes(good + tail)
        for verify in ([], ["--verify"]):
            code = main(["dump", *verify, str(part / log.name)])
            out, err = capsys.readouterr()
            assert code == (verify_code if verify else 0), (name, verify, err)
            assert out.count("baseOffset:") == batches, (name, verify)
            assert err.count("problem: ") == 1 and problem in err, (name, verify, err)


def test_dump_of_a_file_of_zeros_not_named_log_exits_2(tmp_path: Path, capsys) -> None:
    # zeros frame as the tail a broker preallocates, but nothing says a file of them is a segment
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(4096))
    assert main(["dump", str(blob)]) == 2
    assert "it starts with zero bytes, and is not named .log" in capsys.readouterr().err


def test_dump_names_a_missing_path(tmp_path: Path, capsys) -> None:
    assert main(["dump", str(tmp_path / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_dump_prints_index_files_entry_by_entry(kafka_real: Path, capsys) -> None:
    from segment_io.index import read_offset_index, read_time_index

    index = kafka_real / ("rjmfernandes-cp7.6-kraft-lz4/data/_confluent-controlcenter-7-6-0-1-aggregate-topic-"
                          "partition-store-changelog-0/00000000000000000000.index")
    assert main(["dump", str(index), str(index.with_suffix(".timeindex"))]) == 0
    out = capsys.readouterr().out.splitlines()
    offsets = read_offset_index(index.read_bytes())
    times = read_time_index(index.with_suffix(".timeindex").read_bytes())
    assert f"{len(offsets)} offset index entries" in out[0]
    assert out[1] == f"offset: {int(offsets.relative_offset[0])} position: {int(offsets.position[0])}"
    assert sum(line.startswith("timestamp: ") for line in out) == len(times)


def test_dump_takes_the_dir_of_a_topic_with_dots(tmp_path: Path, capsys) -> None:
    assert main(["generate", "--out", str(tmp_path), "--topics", "com.acme.orders", "--partitions", "1",
                 "--records", "120", "--quiet"]) == 0
    assert main(["dump", "--verify", str(tmp_path / "com.acme.orders-0")]) == 0
    assert "baseOffset: 0" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------
# What dump refuses, and the files it reads besides segments
# --------------------------------------------------------------------------------------------------


def test_dump_of_a_log_dir_names_a_partition_to_dump_instead(tmp_path: Path, capsys) -> None:
    out = tmp_path / "logs"
    assert _generate(out) == 0
    capsys.readouterr()
    assert main(["dump", str(out)]) == 2
    stdout, err = capsys.readouterr()
    assert stdout == ""
    assert f"{out} is a log dir, not a partition dir or segment file" in err
    assert f"`segjobs dump {out}/orders-0`" in err and "orders-0, orders-1, user.events-v2-0" in err


@pytest.mark.parametrize("name, content, words", [
    ("notes.txt", b"hello", "is not a Kafka segment, index or checkpoint file (5 bytes: shorter than a batch header)"),
    ("data.bin", b"\x00" * 8 + b"\x00\x00\x00\x40" + b"\x00" * 4 + b"\x07" + b"\x00" * 100,
     "byte 0 does not start a batch: invalid magic byte 7"),
    ("meta.properties", b"version=1\nbroker.id=0\ncluster.id=abc\n", "is not a Kafka segment"),
    ("00000000000000000000.snapshot", b"\x00\x01" + b"\x00" * 40, "producer-state snapshot"),
])
def test_dump_of_a_file_that_is_no_segment_index_or_checkpoint_exits_2(tmp_path: Path, capsys, kafka_real: Path,
                                                                     name: str, content: bytes, words: str) -> None:
    bad = tmp_path / name
    bad.write_bytes(content)
    good = sorted((kafka_real / FIXTURE_WITH_HEADERS).glob("*.log"))[0]
    # checked before anything is dumped: a good file first on the command line prints nothing either
    assert main(["dump", str(good), str(bad)]) == 2
    stdout, err = capsys.readouterr()
    assert stdout == ""
    assert words in err and "dump reads .log segments" in err


def test_dump_of_a_log_named_file_without_a_single_batch_exits_1(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "00000000000000000000.log"
    bad.write_bytes(b"this is text, not a Kafka record batch, whatever its name says")
    assert main(["dump", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "byte 0" in err and "invalid magic byte" in err and "1 file(s) could not be read at all" in err
    empty = tmp_path / "00000000000000000042.log"
    empty.write_bytes(b"")  # an empty segment is a valid segment (a broker rolls them)
    assert main(["dump", str(empty)]) == 0


def test_a_segment_under_another_name_is_dumped(tmp_path: Path, kafka_real: Path, capsys) -> None:
    log = sorted((kafka_real / FIXTURE_WITH_HEADERS).glob("*.log"))[0]
    copy = tmp_path / "download.bin"
    copy.write_bytes(log.read_bytes())
    assert main(["dump", str(copy)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("baseOffset:")]
    assert len(lines) == len(scan_batches(log.read_bytes()))


def test_dump_reads_checkpoint_files(tmp_path: Path, capsys) -> None:
    out = tmp_path / "logs"
    assert _generate(out) == 0
    (out / "cleaner-offset-checkpoint").write_text("0\n2\norders 1 40\nuser.events-v2 0 7\n")
    capsys.readouterr()
    epochs = out / "orders-1" / "leader-epoch-checkpoint"
    assert main(["dump", str(out / "cleaner-offset-checkpoint"), str(epochs)]) == 0
    stdout = capsys.readouterr().out.splitlines()
    assert stdout[0].endswith("cleaner-offset-checkpoint: 2 partitions")
    assert stdout[1:3] == ["partition: orders-1 offset: 40", "partition: user.events-v2-0 offset: 7"]
    assert stdout[3].endswith("leader-epoch-checkpoint: 1 leader epochs") and stdout[4] == "epoch: 0 startOffset: 0"
    # a checkpoint that does not parse is a file dump could not read: exit 1 (with or without --verify)
    (out / "log-start-offset-checkpoint").write_text("0\n1\norders one 5\n")
    assert main(["dump", str(out / "log-start-offset-checkpoint")]) == 1
    assert "line 3" in capsys.readouterr().err
