"""The proof's comparison (ops/proof/engine_outputs.py): two runs that differ only in what differs by nature
(wall-clock instants, durations, run ids, file times) agree; any other byte, a key's order included, is a
difference."""

from __future__ import annotations

from pathlib import Path

from ops.proof.engine_outputs import compare, counts

EVENT = ('{"ts":"2026-11-29T04:%s.672Z","command":"compact","elapsed_s":%s,"level":"info","event":"compact.partition",'
         '"message":"orders-0: measured in %ss [1/5, 5.7 MB of 36.5 MB, ETA %ss]","records_removed":4928}\n')
REPORT = '{\n  "run_id": "%s",\n  "started_ms": %s,\n  "records_removed": %s,\n  "task_seconds": %s\n}\n'


def _write(root: Path, *, minute: str, elapsed: str, took: str, run_id: str, started: str, removed: str = "4928",
           report: str = REPORT, jvm_line: str = "") -> Path:
    root.mkdir()
    (root / "05-compact.err").write_text(jvm_line + EVENT % (minute, elapsed, took, took))
    (root / "05-compact.report.json").write_text(report % (run_id, started, removed, took))
    (root / "05-compact.out").write_text(f"elapsed {took}s; 36.5 MB in scope, {elapsed} MB/s excluding start-up\n")
    return root


def test_runs_that_differ_only_by_nature_agree(tmp_path):
    a = _write(tmp_path / "a", minute="17:51", elapsed="0.002", took="0.333", run_id="d03ca207caab4e5fb270429aaaa50944",
               started="1795925846545")
    b = _write(tmp_path / "b", minute="32:29", elapsed="0.04", took="1.5", run_id="49cf689ff9f24ba6862415e7c3999bc4",
               started="1795926738950")
    assert compare(a, b) == 0


def test_a_jvm_line_on_stderr_is_a_difference(tmp_path):
    # segjobs' JVMs say nothing on stderr (conf/log4j2.properties): a line of theirs is a change, not noise
    a = _write(tmp_path / "a", minute="17:51", elapsed="0.002", took="0.333", run_id="d03ca207caab4e5fb270429aaaa50944",
               started="1795925846545")
    b = _write(tmp_path / "b", minute="17:51", elapsed="0.002", took="0.333", run_id="d03ca207caab4e5fb270429aaaa50944",
               started="1795925846545", jvm_line="26/11/29 04:32:29 WARN NativeCodeLoader: no native library\n")
    assert compare(a, b) == 1


def test_a_changed_number_is_a_difference(tmp_path, capsys):
    same = dict(minute="17:51", elapsed="0.002", took="0.333", run_id="d03ca207caab4e5fb270429aaaa50944",
                started="1795925846545")
    a = _write(tmp_path / "a", **same)
    b = _write(tmp_path / "b", **same, removed="4927")
    assert compare(a, b) == 1
    assert '"records_removed": 4927' in capsys.readouterr().out


def test_a_changed_key_order_is_a_difference(tmp_path):
    same = dict(minute="17:51", elapsed="0.002", took="0.333", run_id="d03ca207caab4e5fb270429aaaa50944",
                started="1795925846545")
    a = _write(tmp_path / "a", **same)
    # the same keys and values, run_id and started_ms swapped (the template fills them in its own order)
    swapped = '{\n  "started_ms": %s,\n  "run_id": "%s",\n  "records_removed": %s,\n  "task_seconds": %s\n}\n'
    b = _write(tmp_path / "b", **{**same, "run_id": same["started"], "started": same["run_id"]}, report=swapped)
    assert compare(a, b) == 1


def test_a_file_only_one_run_wrote_is_a_difference(tmp_path):
    same = dict(minute="17:51", elapsed="0.002", took="0.333", run_id="d03ca207caab4e5fb270429aaaa50944",
                started="1795925846545")
    a = _write(tmp_path / "a", **same)
    b = _write(tmp_path / "b", **same)
    (b / "06-extra.out").write_text("")
    assert compare(a, b) == 1


def test_counts_name_the_three_numbers(tmp_path):
    engine = tmp_path / "jobs" / "engine"
    engine.mkdir(parents=True)
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    (engine / "m.py").write_text(f'def long():\n    import os\n{body}\n\n\ndef short(d):\n    return d.get("k")\n')
    assert counts(tmp_path) == 'functions over 80 lines: 1, .get(" in jobs/engine: 1, function-level imports: 1'


def test_the_wall_clock_is_masked_but_not_the_demos_now(tmp_path):
    """A plan made at another wall-clock instant agrees; a plan for another ``--now`` (the demo's, in 2023) does
    not."""
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for root, made, now in ((a, "2026-11-29T04:19:52.393Z", "2023-11-23T22:13:20.000Z"),
                            (b, "2026-11-29T04:38:10.714Z", "2023-11-23T22:13:20.000Z"),
                            (c, "2026-11-29T04:38:10.714Z", "2023-11-24T22:13:20.000Z")):
        root.mkdir()
        (root / "10-retain.err").write_text(f'{{"event":"plan.applying","message":"applying the plan (made {made} by '
                                            f'run 8635c85c9bff; --now {now})"}}\n')
    assert compare(a, b) == 0
    assert compare(a, c) == 1
