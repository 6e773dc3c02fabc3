"""The pre-flight checks of --log-dir: a log dir (or its work dir) that cannot be written is found before any work.

Real filesystems only: a read-only bind mount and the immutable attribute stop writes even for root, where the
mode bits and ``os.access`` would say yes (the tests run as root). Where the kernel refuses the mount or
``chattr``, the test is skipped and says why (:mod:`tests.support.mounts`, :mod:`tests.support.immutable`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jobs import api
from jobs.commands.cli import main
from jobs.logdir.checks import check_log_dir_writable
from segment_io.errors import NotWritableError
from segment_io.storage import LocalStorage
from tests.support.compaction_faults import NOW, TOPIC, build_partition
from tests.support.immutable import immutable
from tests.support.mounts import read_only

#: retention due on every closed segment, so that a run that got past the check would delete something
RETAIN_CONFIG = '[defaults]\n"cleanup.policy" = "compact,delete"\n"retention.ms" = "1"\n'


def _tree(*dirs: Path) -> dict[str, bytes]:
    return {f"{d.name}/{p.relative_to(d)}": p.read_bytes() for d in dirs if d.exists() for p in sorted(d.rglob("*"))
            if p.is_file()}


@pytest.fixture()
def config(tmp_path) -> Path:
    path = tmp_path / "t.toml"
    path.write_text(RETAIN_CONFIG)
    return path


def _argv(command: str, log_dir: Path, config: Path, *extra: str) -> list[str]:
    # the safety limit would refuse the retention this config makes due: let it through, the point is the writing
    configured = ["--config", str(config), "--max-delete-fraction", "1"] if command != "recover" else []
    return [command, "--log-dir", str(log_dir), "--now", NOW, *configured, *extra]


@pytest.mark.parametrize("command", ["retain", "compact", "recover"])
def test_a_read_only_log_dir_is_refused_before_any_work_with_exit_code_2(command, tmp_path, config, capsys):
    log_dir = tmp_path / "logs"
    build_partition(log_dir / f"{TOPIC}-0")
    before = _tree(log_dir, tmp_path / "logs.segjobs")
    with read_only(log_dir):
        code = main(_argv(command, log_dir, config))
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"the log dir is not writable: {log_dir}: creating a file in it failed: Read-only file system (EROFS)" in err
    assert "remount it read-write" in err and "nothing was done" in err
    assert "bug" not in err and "Traceback" not in err
    assert _tree(log_dir, tmp_path / "logs.segjobs") == before  # no lock, no work dir, nothing


@pytest.mark.parametrize("command", ["retain", "compact", "recover"])
def test_the_dry_runs_of_a_read_only_log_dir_still_run(spark, command, tmp_path, config, capsys):
    log_dir = tmp_path / "logs"
    build_partition(log_dir / f"{TOPIC}-0")
    with read_only(log_dir):
        code = main(_argv(command, log_dir, config, "--dry-run"))
    assert code == 0, capsys.readouterr().err


def test_inspect_of_a_read_only_log_dir_still_runs(tmp_path):
    log_dir = tmp_path / "logs"
    build_partition(log_dir / f"{TOPIC}-0")
    with read_only(log_dir):
        result = api.inspect(log_dir, api.InspectOptions(overrides=("*:cleanup.policy=compact",), progress=None),
                             now=int(NOW), seams=api.Seams(runner=api.InProcessTasks()))
    assert result.exit_code == 0 and [p.name for p in result.partitions] == [f"{TOPIC}-0"]


def test_an_immutable_work_dir_is_refused_naming_it(tmp_path, config, capsys):
    log_dir = tmp_path / "logs"
    build_partition(log_dir / f"{TOPIC}-0")
    work = tmp_path / "logs.segjobs"
    work.mkdir()
    before = _tree(log_dir)
    with immutable([work]):
        code = main(_argv("compact", log_dir, config))
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"the log dir's work dir is not writable: {work}: creating a file in it failed" in err
    assert "(EPERM)" in err and "chattr -i" in err
    assert _tree(log_dir) == before


def test_a_work_dir_that_cannot_be_created_is_refused_naming_where(tmp_path):
    base = tmp_path / "base"
    log_dir = base / "logs"
    build_partition(log_dir / f"{TOPIC}-0")
    with immutable([base]):  # the log dir can be written, but not the directory its work dir is created in
        with pytest.raises(NotWritableError) as caught:
            check_log_dir_writable(LocalStorage(), str(log_dir), "retain")
    assert str(caught.value).startswith(f"the log dir's work dir is not writable: {base} (where the work dir "
                                        f"{base}/logs.segjobs is to be created): creating a file in it failed")
    assert caught.value.exit_code == 2


def test_a_directory_where_files_are_created_but_not_removed_is_not_writable(tmp_path):
    log_dir = tmp_path / "logs"
    build_partition(log_dir / f"{TOPIC}-0")
    if subprocess.run(["chattr", "+a", str(log_dir)], capture_output=True).returncode != 0:
        pytest.skip("chattr +a is not available here (needs root and a filesystem with the append-only attribute)")
    try:
        with pytest.raises(NotWritableError) as caught:
            check_log_dir_writable(LocalStorage(), str(log_dir), "compact")
    finally:
        subprocess.run(["chattr", "-a", str(log_dir)], check=True)
    assert "removing a file from it" in str(caught.value) and "(EPERM)" in str(caught.value)


def test_a_writable_log_dir_passes_and_keeps_no_probe(tmp_path):
    log_dir = tmp_path / "logs"
    build_partition(log_dir / f"{TOPIC}-0")
    before = _tree(log_dir)
    check_log_dir_writable(LocalStorage(), str(log_dir), "compact")
    assert _tree(log_dir) == before and not (tmp_path / "logs.segjobs").exists()



@pytest.mark.parametrize("command", ["compact", "retain", "inspect"])
def test_a_brokers_log_dir_without_partitions_is_nothing_to_do_and_a_bare_empty_dir_a_mistake(command, tmp_path,
                                                                                              capsys):
    """A log dir holding a broker's files (meta.properties, checkpoints) and no partition (all moved away) is a run
    with nothing to do (exit 0, said), and a --config table naming a topic there is no typo to refuse; an empty
    directory with none of a broker's files is still a usage error (a wrong path or an unmounted volume)."""
    bare = tmp_path / "bare"
    bare.mkdir()
    broker = tmp_path / "broker"
    broker.mkdir()
    (broker / "meta.properties").write_text("version=1\nnode.id=1\n")
    (broker / "cleaner-offset-checkpoint").write_text("0\n0\n")
    config = tmp_path / "t.toml"
    config.write_text('[topics."orders"]\n"cleanup.policy" = "compact"\n')
    common = ["--now", str(NOW), "--config", str(config), "--quiet"]
    capsys.readouterr()
    assert main([command, "--log-dir", str(broker), *common]) == 0
    err = capsys.readouterr().err
    assert f"{broker} holds no partition directory (its broker files say it is a log dir): nothing to do" in err
    assert '[topics."orders"] names no topic' in err and "it has no effect" in err  # a warning, not exit 2
    assert sorted(p.name for p in broker.iterdir() if not p.name.startswith(".")) == ["cleaner-offset-checkpoint",
                                                                                       "meta.properties"]
    assert main([command, "--log-dir", str(bare), *common]) == 2
    assert "no partition directories (<topic>-<n>) found" in capsys.readouterr().err
