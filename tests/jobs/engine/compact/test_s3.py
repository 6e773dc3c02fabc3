"""The compaction job on S3 (moto_server, a real HTTP endpoint): a plain run, and the commit interrupted at
every step of the S3 replace protocol, then ``segjobs recover`` and a fresh compact. The scheme is the
local one (see ``test_compact_faults``): one copy of the same partition per step, the i-th partition's
replace stopped at the i-th step through the run's fault seam (``Seams.fault``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.commands.cli import main
from jobs.engine.runtime.seams import FaultHook
from tests.support.compaction_faults import (
    CONFIG,
    NOW,
    TOPIC,
    build_partition,
    check_partition,
    compact_with_fault,
    fault_at_every_step,
    live_logs,
    recording,
    transient,
)
from tests.support.s3_objects import PREFIX, contents, put_objects, replace_all_objects


def _run(endpoint, bucket: str, config: Path, command: str = "compact", *extra: str,
         fault: FaultHook | None = None) -> int:
    argv = ["--log-dir", f"s3://{bucket}/{PREFIX}", "--s3-endpoint", endpoint.endpoint_url, "--now", NOW]
    if command == "compact":
        argv += ["--config", str(config), "--quiet"]
    if fault is not None:
        return compact_with_fault([*argv, *extra], fault)
    return main([command, *argv, *extra])


@pytest.mark.scenario
def test_interrupted_at_every_step_on_s3_then_recover_then_compact(spark, s3_bucket_env, tmp_path, capsys):
    endpoint, bucket = s3_bucket_env
    config = tmp_path / "t.toml"
    config.write_text(CONFIG)

    # the reference: one partition compacted without a fault, recording the S3 commit's steps
    build_partition(tmp_path / "ref" / f"{TOPIC}-0")
    put_objects(endpoint, bucket, tmp_path / "ref")
    source = contents(endpoint, bucket)
    source_logs = [source[k] for k in sorted(k for k in source if k.endswith(".log"))]
    steps: list[str] = []
    assert _run(endpoint, bucket, config, fault=recording(steps)) == 0
    done = contents(endpoint, bucket)
    result_logs = [done[k] for k in sorted(k for k in done if k.endswith(".log"))]
    assert len(result_logs) == 2 and result_logs != source_logs
    assert check_partition(done, f"{TOPIC}-0", source_logs, result_logs, allow_either=False) == "new"
    assert {s.split(":")[0] for s in steps} == {"write-intent", "copy-new", "delete-old", "remove-intent",
                                                "delete-staged"}
    # nothing of segjobs' own is left beside the log dir's files, and the work prefix holds no staged object
    assert not [k for k in contents(endpoint, bucket, PREFIX + ".segjobs/") if "/staged/" in k]

    # every step interrupted, one partition each
    for i in range(len(steps)):
        build_partition(tmp_path / "many" / f"{TOPIC}-{i}")
    replace_all_objects(endpoint, bucket, tmp_path / "many")
    assert _run(endpoint, bucket, config, fault=fault_at_every_step(steps)) == 1

    assert _run(endpoint, bucket, config, "recover") == 0
    recovered = contents(endpoint, bucket)
    assert transient(recovered) == []
    work = contents(endpoint, bucket, PREFIX + ".segjobs/")
    assert not [k for k in work if k.endswith("replace.json") or "/staged/" in k], sorted(work)
    outcome = {steps[i]: check_partition(recovered, f"{TOPIC}-{i}", source_logs, result_logs, allow_either=True)
               for i in range(len(steps))}
    # the intent PUT is the commit point: before it the old segments stay, after it the new ones win
    assert outcome["write-intent"] == "old"
    assert all(v == "new" for s, v in outcome.items() if s != "write-intent")
    capsys.readouterr()

    assert _run(endpoint, bucket, config) == 0
    final = contents(endpoint, bucket)
    for i in range(len(steps)):
        name = f"{TOPIC}-{i}"
        if outcome[steps[i]] == "old":  # rolled back, now compacted like the reference
            assert check_partition(final, name, source_logs, result_logs, allow_either=False) == "new", steps[i]
        else:  # completed by recovery, then cleaned once more (no checkpoint was written): the oracle checks
            check_partition(final, name, source_logs, live_logs(final, name), allow_either=False)
    assert transient(final) == []


def test_external_sort_on_s3_commits_the_memory_result(spark, s3_bucket_env, tmp_path):
    """The key pass, the group maps (objects under the work prefix) and the rewrite work through S3 too, and
    nothing of the maps is left behind."""
    endpoint, bucket = s3_bucket_env
    config = tmp_path / "t.toml"
    config.write_text(CONFIG)
    build_partition(tmp_path / "s3" / f"{TOPIC}-0")
    put_objects(endpoint, bucket, tmp_path / "s3")
    assert _run(endpoint, bucket, config, "compact", "--strategy", "external-sort") == 0
    done = contents(endpoint, bucket)
    local = tmp_path / "local"
    build_partition(local / f"{TOPIC}-0")
    assert main(["compact", "--log-dir", str(local), "--config", str(config), "--now", NOW, "--quiet",
                 "--strategy", "memory"]) == 0
    expected = {str(p.relative_to(local)): p.read_bytes() for p in local.rglob("*") if p.is_file()}
    assert live_logs(done, f"{TOPIC}-0") == live_logs(expected, f"{TOPIC}-0")
    assert not [k for k in contents(endpoint, bucket, PREFIX + ".segjobs/") if "/external-sort/" in k]


def test_a_late_attempt_staging_again_after_the_commit_leaves_no_staged_object(spark, s3_bucket_env, tmp_path):
    """A task attempt that outlives its task (the loser of a speculative race, a retried task's first attempt on an
    executor taken for lost) may put its copy of a staged segment after the driver committed the winner's and
    deleted it. Here that PUT lands between the commit's deletes of two staged objects: the run deletes what it
    staged and no intent refers to before it ends, so nothing of it is left under the work prefix."""
    endpoint, bucket = s3_bucket_env
    config = tmp_path / "t.toml"
    config.write_text(CONFIG)
    build_partition(tmp_path / "s3" / f"{TOPIC}-0")
    put_objects(endpoint, bucket, tmp_path / "s3")
    source = contents(endpoint, bucket)
    source_logs = [source[k] for k in sorted(k for k in source if k.endswith(".log"))]
    client = endpoint.client()
    late: dict[str, bytes] = {}
    put_back: list[str] = []

    def fault(partition: str, step: str) -> None:
        if not step.startswith("delete-staged:"):
            return
        if not late:  # the first staged object, about to be deleted: what the late attempt will put again
            name = step.split(":", 1)[1]
            staged = contents(endpoint, bucket, f"{PREFIX}.segjobs/commit/{partition}/staged/")
            key = next(k for k in staged if k.endswith("/" + name))
            late[f"{PREFIX}.segjobs/commit/{partition}/staged/{key}"] = staged[key]
        elif not put_back:  # it is deleted now: the late attempt's PUT lands
            for key, data in late.items():
                client.put_object(Bucket=bucket, Key=key, Body=data)
                put_back.append(key)

    assert _run(endpoint, bucket, config, fault=fault) == 0
    assert put_back, "the late attempt's PUT did not happen"
    done = contents(endpoint, bucket)
    check_partition(done, f"{TOPIC}-0", source_logs, live_logs(done, f"{TOPIC}-0"), allow_either=False)
    assert [k for k in contents(endpoint, bucket, PREFIX + ".segjobs/") if "/staged/" in k] == []
