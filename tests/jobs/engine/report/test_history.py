"""`segjobs history --ledger URI`: the last runs of the Delta ledger and the bytes reclaimed per topic, read with
deltalake (no Spark), from a local path and from S3 (moto_server); and the ledger the real jobs write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.commands.cli import main
from jobs.engine.report.ledger import read_history
from jobs.engine.report.run_report import RunReport
from tests.support.ledger import DAY, T0, append_run
from tests.support.s3 import ACCESS_KEY, REGION, SECRET_KEY


@pytest.fixture()
def ledger(tmp_path: Path) -> tuple[str, list[RunReport]]:
    return _ledger(str(tmp_path / "ledger"))


def _ledger(uri: str) -> tuple[str, list[RunReport]]:
    runs = [
        append_run(uri, "retain", 1, [("clicks", 0, "delete", 4000), ("clicks", 1, "none", 0),
                                      ("orders", 0, "none", 0)]),
        append_run(uri, "compact", 1, [("orders", 0, "compacted", 1500), ("users", 0, "error", 0),
                                       ("users", 1, "unchanged", 0)]),
        append_run(uri, "retain", 2, [("clicks", 0, "delete", 2000), ("clicks", 1, "refused", 0),
                                      ("orders", 0, "none", 0)]),
        append_run(uri, "compact", 2, [("orders", 0, "would compact", 700), ("users", 0, "would compact", 300)],
                   dry_run=True),
    ]
    return uri, runs


def test_table_lists_the_last_runs_newest_first_and_bytes_per_topic(ledger, capsys) -> None:
    uri, runs = ledger
    assert main(["history", "--ledger", uri]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"last 4 of 4 run(s) in {uri}, newest first:"
    body = lines[3:7]
    assert [line.split()[0] for line in body] == [r.run_id[:12] for r in reversed(runs)]
    assert body[0].split()[2:5] == ["compact", "2023-11-16T22:13:20Z", "yes"]  # the dry run
    assert "1 refused" in body[1] and "1 error" in body[2] and body[3].split()[5] == "ok"
    assert body[0].endswith("1.0 KB") and body[3].endswith("4.0 KB")
    # per topic: the real runs only (the dry run's 700 + 300 bytes are not counted)
    per_topic = out.split("reclaimed per topic by these runs (dry runs left out):\n")[1].splitlines()
    assert per_topic[0].split() == ["topic", "runs", "reclaimed", "by", "compact", "by", "retain", "records", "removed"]
    assert per_topic[2].split() == ["clicks", "2", "6.0", "KB", "0", "B", "6.0", "KB", "60"]
    assert per_topic[3].split() == ["orders", "3", "1.5", "KB", "1.5", "KB", "0", "B", "15"]
    assert per_topic[4].split() == ["users", "1", "0", "B", "0", "B", "0", "B", "0"]


def test_json_and_last(ledger, capsys) -> None:
    uri, runs = ledger
    assert main(["history", "--ledger", uri, "--last", "2", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["total_runs"] == 4 and [r["run_id"] for r in doc["runs"]] == [runs[3].run_id, runs[2].run_id]
    newest, retain2 = doc["runs"]
    assert (newest["command"], newest["dry_run"], newest["bytes_reclaimed"], newest["outcome"]) == \
        ("compact", True, 1000, "ok")
    assert (retain2["partitions"], retain2["changed"], retain2["bytes_reclaimed"], retain2["failures"]) == \
        (3, 1, 2000, {"refused": 1})
    assert retain2["now"] == "2023-11-16T22:13:20.000Z" and retain2["now_ms"] == T0 + 2 * DAY
    # per topic over those two runs, without the dry run: only retain night 2
    assert doc["topics"] == [{"topic": "clicks", "log_dir": "/var/kafka/logs", "runs": 1, "bytes_reclaimed": 2000,
                              "records_removed": 20, "by_command": {"retain": 2000}},
                             {"topic": "orders", "log_dir": "/var/kafka/logs", "runs": 1, "bytes_reclaimed": 0,
                              "records_removed": 0, "by_command": {"retain": 0}}]


def test_one_topic_name_in_two_log_dirs_is_two_rows(tmp_path: Path, capsys) -> None:
    # was: the bytes of both clusters' "orders" added up in one row (and one colour of the chart), as if one topic
    uri = str(tmp_path / "ledger")
    append_run(uri, "compact", 1, [("orders", 0, "compacted", 3000), ("users", 0, "compacted", 100)], log_dir="/a")
    append_run(uri, "compact", 1, [("orders", 0, "compacted", 5000)], log_dir="/b")
    append_run(uri, "retain", 2, [("orders", 0, "delete", 700)], log_dir="/b")
    assert main(["history", "--ledger", uri, "--format", "json"]) == 0
    topics = json.loads(capsys.readouterr().out)["topics"]
    assert [(t["topic"], t["log_dir"], t["runs"], t["bytes_reclaimed"], t["by_command"]) for t in topics] == [
        ("orders", "/b", 2, 5700, {"compact": 5000, "retain": 700}), ("orders", "/a", 1, 3000, {"compact": 3000}),
        ("users", "/a", 1, 100, {"compact": 100})]
    assert main(["history", "--ledger", uri]) == 0
    per_topic = capsys.readouterr().out.split("(dry runs left out):\n")[1].splitlines()
    assert per_topic[0].split()[:5] == ["topic", "log", "dir", "runs", "reclaimed"]
    assert [line.split()[:3] for line in per_topic[2:]] == [["orders", "/b", "2"], ["orders", "/a", "1"],
                                                           ["users", "/a", "1"]]
    from jobs.engine.report import plots

    history = read_history(uri)
    legend = plots.reclaimed_per_run_chart(history).axes[0].get_legend().get_texts()
    assert sorted(t.get_text() for t in legend) == ["orders (/a)", "orders (/b)", "users (/a)"]


def test_one_log_dir_keeps_the_tables_as_they_were(ledger) -> None:
    history = read_history(ledger[0])
    assert not history.several_log_dirs
    assert set(history.run_topic_frame()["series"]) == {"clicks", "orders", "users"}


def test_run_topic_frame_feeds_the_chart(ledger) -> None:
    from jobs.engine.report import plots

    uri, runs = ledger
    history = read_history(uri)
    frame = history.run_topic_frame()
    assert list(dict.fromkeys(frame["run_id"])) == [r.run_id for r in runs]  # oldest first
    assert frame.groupby("run_id")["bytes_removed"].sum().to_dict() == {
        runs[0].run_id: 4000, runs[1].run_id: 1500, runs[2].run_id: 2000, runs[3].run_id: 1000}
    fig = plots.reclaimed_per_run_chart(history)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()][-1] == "2023-11-16T22:13 compact (dry run)"
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == ["clicks", "orders", "users"]


def test_a_missing_ledger_is_a_usage_error(tmp_path: Path, capsys) -> None:
    assert main(["history", "--ledger", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert "no Delta table there" in err and "--ledger" in err


def test_a_delta_table_that_is_not_a_ledger(tmp_path: Path, capsys) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(str(tmp_path / "other"), pa.table({"x": [1, 2]}))
    assert main(["history", "--ledger", str(tmp_path / "other")]) == 2
    assert "not a segjobs ledger" in capsys.readouterr().err


def _damage(table: Path, how: str) -> str:
    """Damage the ledger at ``table`` in one way; what the error must say of it."""
    log = sorted((table / "_delta_log").glob("*.json"))
    data = sorted(table.glob("*.parquet"))
    if how == "a commit that is no JSON":
        log[-1].write_text("garbage{\n")
        return "Json error"
    if how == "its first commit missing":
        log[0].unlink()
        return "No table metadata or protocol found"
    if how == "a data file missing":
        data[0].unlink()
        return f"{data[0].name} not found"
    data[0].write_bytes(b"not parquet at all")  # a data file that is no Parquet
    return f"{data[0].name}': Parquet magic bytes not found"


@pytest.mark.parametrize("how", ["a commit that is no JSON", "its first commit missing", "a data file missing",
                                 "a data file that is no Parquet"])
def test_a_damaged_ledger_is_one_error_line_naming_the_table_and_what_is_wrong(tmp_path, capsys, monkeypatch,
                                                                                how) -> None:
    # was: deltalake's or pyarrow's exception with a traceback (and a Rust backtrace under RUST_BACKTRACE), exit 1
    monkeypatch.setenv("RUST_BACKTRACE", "1")
    # the damage below is done to the files deltalake writes: not through a Delta-enabled Spark session an earlier
    # test left running (make test-compat's delta venv), whose table a reader may read from its .crc files instead
    monkeypatch.setattr("jobs.engine.report.run_report.delta_session", lambda uri: None)
    uri = _ledger(str(tmp_path / "ledger"))[0]
    words = _damage(Path(uri), how)
    assert main(["history", "--ledger", uri]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"segjobs history: error: --ledger {uri}: its Delta table cannot be read ("), lines[0]
    assert words in lines[0] and lines[0].endswith("; nothing was printed"), lines[0]


def test_last_must_be_positive(ledger, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["history", "--ledger", ledger[0], "--last", "0"])
    assert e.value.code == 2 and "1 or more" in capsys.readouterr().err


@pytest.mark.s3
def test_history_reads_a_ledger_on_s3(s3_bucket, monkeypatch, capsys) -> None:
    endpoint, bucket = s3_bucket
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "SEGJOBS_S3_ENDPOINT", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    uri = f"s3://{bucket}/segjobs/ledger"
    run = append_run(uri, "retain", 1, [("clicks", 0, "delete", 4000)], options=endpoint.storage_options())
    assert main(["history", "--ledger", uri, "--s3-endpoint", endpoint.endpoint_url, "--s3-region", REGION,
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in doc["runs"]] == [run.run_id] and doc["topics"][0]["bytes_reclaimed"] == 4000
    # a bucket that does not exist: exit 2 within seconds, naming the option
    assert main(["history", "--ledger", f"s3://{bucket}-missing/ledger", "--s3-endpoint", endpoint.endpoint_url,
                 "--s3-region", REGION]) == 2
    err = capsys.readouterr().err
    assert f"--ledger s3://{bucket}-missing/ledger" in err and "does not exist" in err


@pytest.mark.spark
def test_history_of_the_ledger_the_jobs_write(tmp_path: Path, spark, capsys) -> None:
    """compact and retain with --ledger, then history: the bytes it shows are the reports' bytes_removed."""
    from tests.support.builders import LogBuilder, rec, tombstone, write_log

    log = LogBuilder("t", 0, timestamp=T0)
    log.batch([rec("k", "1"), rec("j", "1")]).batch([rec("k", "2")])
    log.roll().batch([tombstone("j")]).batch([rec("k", "3")])
    log.roll().batch([rec("z", "active")])
    write_log(log.table(), tmp_path / "logs" / "t-0")
    config = tmp_path / "topics.toml"
    config.write_text('[defaults]\n"cleanup.policy" = "compact"\n"segment.bytes" = 300\n')
    ledger_uri = str(tmp_path / "ledger")
    reports = {}
    for command in ("retain", "compact"):
        report = tmp_path / f"{command}.json"
        assert main([command, "--log-dir", str(tmp_path / "logs"), "--config", str(config), "--now",
                     str(T0 + 10 * DAY), "--ledger", ledger_uri, "--report", str(report), "--quiet"]) == 0
        reports[command] = json.loads(report.read_text())
    capsys.readouterr()
    assert main(["history", "--ledger", ledger_uri, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["command"] for r in doc["runs"]] == ["compact", "retain"]
    compact = doc["runs"][0]
    assert compact["run_id"] == reports["compact"]["run_id"]
    assert compact["bytes_reclaimed"] == reports["compact"]["partitions"][0]["bytes_removed"] > 0
    assert compact["records_removed"] == reports["compact"]["partitions"][0]["records_removed"] > 0
    assert doc["topics"][0]["by_command"]["compact"] == compact["bytes_reclaimed"]


def test_html_into_missing_directories_is_created_only_once_the_ledger_is_read(tmp_path, capsys) -> None:
    # was: --html's directories were created before the ledger was read, and stayed when it could not be
    page = tmp_path / "reports" / "nightly" / "history.html"
    assert main(["history", "--ledger", str(tmp_path / "no-ledger"), "--html", str(page)]) == 2
    assert "no-ledger" in capsys.readouterr().err and not (tmp_path / "reports").exists()
    uri = _ledger(str(tmp_path / "ledger"))[0]
    assert main(["history", "--ledger", uri, "--html", str(page)]) == 0
    err = capsys.readouterr().err
    assert page.is_file() and f"--html: created the missing directory {page.parent}" in err, err
