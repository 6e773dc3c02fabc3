"""``segjobs dump --remote``: a tiered partition dumped as one log, on what a real Kafka 4.1.1 broker with
LocalTieredStorage wrote (tests/data/kafka-tiered/SOURCES.md). Expected records are the ones the fixture generator
produced (tests.support.tiered_broker.produced_record), never dump's own reading."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

from jobs.commands.cli import main
from segment_io.aiven_manifest import parse_manifest
from tests.support.builders import LogBuilder, rec, write_log
from tests.support.tiered_broker import produced_record

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "kafka-tiered" / "kafka-4.1.1"
#: the same remote segments in Aiven's layout (tests/data/kafka-tiered-aiven/SOURCES.md)
AIVEN = Path(__file__).resolve().parents[2] / "data" / "kafka-tiered-aiven"
KEPT_40 = "00000000000000000040-E3CMBtq9QIK_WAp48okV7Q"  # kept's remote segment 40-59


@pytest.fixture
def node(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "node")
    return tmp_path / "node"


def _jsonl(capsys, *args: str) -> tuple[int, list[tuple[int, bytes, bytes]]]:  # type: ignore[no-untyped-def]
    rc = main(["dump", "--format", "jsonl", *args])
    lines = capsys.readouterr().out.splitlines()
    rows = [json.loads(line) for line in lines]
    return rc, [(r["offset"], base64.b64decode(r["key"]), base64.b64decode(r["value"])) for r in rows]


def _produced(topic: str, first: int, last: int) -> list[tuple[int, bytes, bytes]]:
    return [(n, *produced_record(topic, n)) for n in range(first, last + 1)]


def test_a_tiered_partition_dumps_as_the_records_the_broker_was_given(capsys) -> None:
    rc, rows = _jsonl(capsys, "--remote", str(FIXTURE / "remote"), str(FIXTURE / "logs" / "kept-0"))
    assert rc == 0 and rows == _produced("kept", 0, 119)
    rc, rows = _jsonl(capsys, "--remote", str(FIXTURE / "remote"), str(FIXTURE / "logs" / "expiring-0"))
    assert rc == 0 and rows == _produced("expiring", 20, 119)
    # without --remote, only the local tail: an empty active segment
    assert _jsonl(capsys, str(FIXTURE / "logs" / "kept-0")) == (0, [])


def test_the_text_dump_names_each_remote_segment_and_verify_checks_its_indexes(capsys) -> None:
    rc = main(["dump", "--verify", "--remote", str(FIXTURE / "remote"), str(FIXTURE / "logs" / "kept-0")])
    captured = capsys.readouterr()
    assert rc == 0 and captured.err.strip() == "verify: OK"
    dumping = [line for line in captured.out.splitlines() if line.startswith("Dumping ")]
    assert len(dumping) == 7
    assert dumping[2] == (f"Dumping {FIXTURE}/remote/kafka-tiered-storage/kept-0-3hkKp7BATom3_tVt48rN_Q/{KEPT_40}.log: "
                          f"remote segment E3CMBtq9QIK_WAp48okV7Q (offsets 40-59)")
    assert dumping[-1] == f"Dumping {FIXTURE}/logs/kept-0/00000000000000000120.log"


def test_a_remote_segment_overlapping_the_local_tail_shows_only_its_offsets_below_it(node: Path, capsys) -> None:
    log = LogBuilder("kept", 0, start_offset=105)
    log.batch([rec(produced_record("kept", n)[0], f"local-{n}") for n in range(105, 120)])
    write_log(log.table(), node / "logs" / "kept-0")
    rc, rows = _jsonl(capsys, "--remote", str(node / "remote"), str(node / "logs" / "kept-0"))
    assert rc == 0
    assert rows == _produced("kept", 0, 104) + [(n, produced_record("kept", n)[0], f"local-{n}".encode())
                                                 for n in range(105, 120)]
    main(["dump", "--remote", str(node / "remote"), str(node / "logs" / "kept-0")])
    out = capsys.readouterr().out
    assert "remote segment aobG7UP8QpyBk-sRSf8O_Q (offsets 100-119, keeping 100-104)" in out
    # the remote batch 100-119 is shown (it holds the kept offsets), then the local one from 105
    assert out.count("baseOffset: 100 lastOffset: 119") == 1 and "baseOffset: 105 lastOffset: 119" in out


def test_a_missing_remote_object_is_a_problem_naming_it_and_other_paths_are_still_dumped(node: Path, capsys) -> None:
    path = next((node / "remote" / "kafka-tiered-storage").glob("kept-0-*")) / f"{KEPT_40}.log"
    path.unlink()
    rc, rows = _jsonl(capsys, "--remote", str(node / "remote"), str(node / "logs" / "kept-0"),
                      str(node / "logs" / "expiring-0"))
    assert rc == 1 and rows == _produced("expiring", 20, 119)
    rc = main(["dump", "--remote", str(node / "remote"), str(node / "logs" / "kept-0")])
    err = capsys.readouterr().err
    assert rc == 1
    assert (f"problem: remote segment E3CMBtq9QIK_WAp48okV7Q (offsets 40-59): its segment object "
            f"({node}/remote/kafka-tiered-storage/{path.parent.name}/{path.name}) is absent") in err


def test_remote_layout_without_remote_and_an_unknown_layout_are_refused(capsys) -> None:
    assert main(["dump", "--remote-layout", "other", str(FIXTURE / "logs" / "kept-0")]) == 2
    assert "--remote-layout needs --remote" in capsys.readouterr().err
    assert main(["dump", "--remote", str(FIXTURE / "remote"), "--remote-layout", "other",
                 str(FIXTURE / "logs" / "kept-0")]) == 2
    assert "remote layout 'other' is not supported; supported: aiven, local-tiered-storage" in capsys.readouterr().err


@pytest.mark.parametrize("variant", ["plain", "compressed"])
def test_a_tiered_partition_in_aiven_s_layout_dumps_as_the_records_the_broker_was_given(capsys, variant: str) -> None:
    aiven = ["--remote", str(AIVEN / variant), "--remote-layout", "aiven"]
    rc, rows = _jsonl(capsys, *aiven, str(FIXTURE / "logs" / "kept-0"))
    assert rc == 0 and rows == _produced("kept", 0, 119)
    rc = main(["dump", "--verify", *aiven, str(FIXTURE / "logs" / "expiring-0")])
    captured = capsys.readouterr()
    assert rc == 0 and captured.err.strip() == "verify: OK"  # the indexes the manifest places agree with the log
    dumping = [line for line in captured.out.splitlines() if line.startswith("Dumping ")]
    segment = next((AIVEN / variant).glob("expiring-*/0/00000000000000000020-*.log"))
    assert dumping[0] == f"Dumping {segment}: remote segment r7XKimLiQa6HtrByQZy1HA (offsets 20-39)"


def test_a_corrupt_aiven_chunk_is_a_problem_naming_the_object_and_other_paths_are_still_dumped(
        tmp_path: Path, capsys) -> None:
    shutil.copytree(AIVEN / "compressed", tmp_path / "aiven")
    log = next((tmp_path / "aiven").glob(f"kept-*/0/{KEPT_40}.log"))
    second = list(parse_manifest(log.with_suffix(".rsm-manifest").read_bytes(), uri="m").chunks())[1]
    data = bytearray(log.read_bytes())
    data[second.stored_position:second.stored_position + 4] = b"\0\0\0\0"
    log.write_bytes(bytes(data))
    rc, rows = _jsonl(capsys, "--remote", str(tmp_path / "aiven"), "--remote-layout", "aiven",
                      str(FIXTURE / "logs" / "kept-0"), str(FIXTURE / "logs" / "expiring-0"))
    assert rc == 1
    assert [r[0] for r in rows] == [*range(0, 40), *range(60, 120), *range(20, 120)]
    assert main(["dump", "--remote", str(tmp_path / "aiven"), "--remote-layout", "aiven",
                 str(FIXTURE / "logs" / "kept-0")]) == 1
    err = capsys.readouterr().err
    assert f"problem: {log}, byte {second.stored_position}: chunk 1 (segment bytes 512-1023)" in err
    assert "1 file(s) could not be read at all" in err
