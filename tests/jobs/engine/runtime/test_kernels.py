"""The compiled kernels' cache (issue 18 item 8): `segjobs warm-up` (run by `make venv`) compiles every kernel
the jobs use into numba's on-disk cache, a later process finds them there, and a run that finds the cache cold
says "compiling kernels (once)" instead of looking slow. Run in subprocesses whose NUMBA_CACHE_DIR is a fresh
directory: a cold cache, without touching the install's own."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.engine.runtime.kernels import COLD_NOTICE, KERNEL_MODULES, cached_kernels
from segment_io.generate import GenerateSpec, generate_log_dir
from tests.support.paths import REPO

RETAIN_IN_PROCESS = """
import sys
from jobs import api
from jobs.engine.report.events import stderr_sink
api.retain(sys.argv[1], api.RetainOptions(dry_run=True, progress=stderr_sink("text")), now=1_700_000_000_000,
           seams=api.Seams(runner=api.InProcessTasks()))
"""


def python(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_every_module_with_a_cached_kernel_is_warmed_up_and_checked() -> None:
    # a new module with numba kernels must be in KERNEL_MODULES, or the cold-cache check would not see it
    with_kernels = sorted(".".join(path.relative_to(REPO).with_suffix("").parts)
                          for package in ("segment_io", "jobs") for path in (REPO / package).rglob("*.py")
                          if re.search(r"@(numba\.)?njit\([^)]*cache=True", path.read_text()))
    assert with_kernels == sorted(KERNEL_MODULES)
    from segment_io import _crc_kernels, _lz4_kernels, _zstd_kernels

    usable = (set(KERNEL_MODULES) - (set() if _crc_kernels.HARDWARE else {"segment_io._crc_kernels"})
              - (set() if _lz4_kernels.LINKED else {"segment_io._lz4_kernels"})
              - (set() if _zstd_kernels.LINKED else {"segment_io._zstd_kernels"}))
    assert {name.rsplit(".", 1)[0] for name in cached_kernels()} == usable


def test_a_cache_is_cold_while_most_kernels_have_no_cached_code() -> None:
    from jobs.engine.runtime.kernels import mostly_cold

    assert mostly_cold({"a": 0, "b": 0, "c": 0, "d": 0})
    assert mostly_cold({"a": 2, "b": 0, "c": 0, "d": 0})  # a light job compiled one
    assert not mostly_cold({"a": 1, "b": 1, "c": 0, "d": 0})
    assert not mostly_cold({"a": 1, "b": 1, "c": 1, "d": 0})  # a rarely needed one left: warm
    assert not mostly_cold({})


def test_kernels_made_of_an_instruction_the_processor_lacks_are_neither_counted_nor_loaded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # compiling them for such a processor would abort the process (an LLVM error, not an exception)
    from segment_io import _crc_kernels

    monkeypatch.setattr(_crc_kernels, "HARDWARE", False)
    assert not [name for name in cached_kernels() if name.startswith("segment_io._crc_kernels.")]


@pytest.mark.parametrize("module_name", ["segment_io._lz4_kernels", "segment_io._zstd_kernels"])
def test_kernels_that_call_a_library_not_found_are_neither_counted_nor_loaded(
        module_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # compiling or loading them without the codec's functions given to the linker fails on a symbol it cannot
    # resolve
    import importlib

    module = importlib.import_module(module_name)
    assert [name for name in cached_kernels() if name.startswith(f"{module_name}.")] or not module.LINKED
    monkeypatch.setattr(module, "LINKED", False)
    assert not [name for name in cached_kernels() if name.startswith(f"{module_name}.")]


def test_only_versions_compiled_for_this_process_s_target_count_as_cached() -> None:
    # a cache shared with another CPU, or filled before NUMBA_CPU_NAME/FEATURES changed, holds versions this
    # process would compile rather than load (and preloading them could abort it)
    from types import SimpleNamespace

    from jobs.engine.runtime.kernels import _cached_signatures

    here, elsewhere = ("x86_64", "znver4", "+crc32"), ("x86_64", "generic", "")
    index = {("sig-a", here, "h"): "a.nbc", ("sig-b", elsewhere, "h"): "b.nbc", ("sig-c", here, "h"): "c.nbc"}
    dispatcher = SimpleNamespace(
        _cache=SimpleNamespace(_cache_file=SimpleNamespace(_load_index=lambda: index)),
        targetctx=SimpleNamespace(codegen=lambda: SimpleNamespace(magic_tuple=lambda: here)))
    assert _cached_signatures(dispatcher) == ["sig-a", "sig-c"]


@pytest.mark.scenario
@pytest.mark.slow
def test_warm_up_fills_a_cold_cache_and_a_cold_run_says_it_compiles(tmp_path: Path) -> None:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    check = "from jobs.engine.runtime.kernels import kernels_cold; print(kernels_cold())"
    assert python(env, "-c", check).stdout.strip() == "True"

    # a job on a cold cache says so before it starts (this one compiles only the header scan's kernels)
    log_dir = tmp_path / "logs"
    generate_log_dir(GenerateSpec(records=200, partitions=1), log_dir)
    proc = python(env, "-c", RETAIN_IN_PROCESS, str(log_dir))
    assert proc.returncode == 0, proc.stderr
    assert COLD_NOTICE in proc.stderr
    # what it compiled leaves the cache cold for the jobs that need the rest (and for the warm-up's notice)
    assert python(env, "-c", check).stdout.strip() == "True"

    warm = python(env, "-m", "jobs", "warm-up", "--no-class-archive")
    assert warm.returncode == 0, warm.stderr
    assert warm.stderr.startswith("compiling kernels (once; about a minute)...")
    total = len(cached_kernels())
    ready = warm.stdout.strip()
    assert ready.startswith("kernels ready: ") and f" of {total} cached (" in ready, ready
    # all but the kernels only rare inputs or processors need: a payload planned on its own, CRCs by table (no CRC32
    # instruction), values measured where they lie (references that carry no length: made by hand, a value past
    # 4 GiB into its file or over 1 GiB), the decode's scan then fill of a whole run (a run of records past 2 GiB,
    # which int32 offsets cannot address in one pass)
    rare = {"segment_io._decode_kernels.plan_payload", "segment_io._encode_kernels.table_crcs",
            "segment_io._encode_kernels.ref_value_lengths", "segment_io._decode_kernels.scan_records",
            "segment_io._decode_kernels.fill_records"}
    uncached = python(env, "-c", "from jobs.engine.runtime.kernels import cached_kernels; "
                                 "print(sorted(k for k, v in cached_kernels().items() if not v))").stdout.strip()
    assert set(ast.literal_eval(uncached)) <= rare, ready
    assert int(ready.split()[2]) >= total - len(rare), ready

    # a new process finds them: nothing is compiled again, and jobs start without the notice
    assert python(env, "-c", check).stdout.strip() == "False"
    again = python(env, "-m", "jobs", "warm-up", "--no-class-archive")
    assert " (0 compiled now) " in again.stdout, again.stdout
    proc = python(env, "-c", RETAIN_IN_PROCESS, str(log_dir))
    assert proc.returncode == 0 and COLD_NOTICE not in proc.stderr, proc.stderr


# --------------------------------------------------------------------------------------------------
# Kernels reach the workers through module-level functions (issue 24 item 2): a task function that carried a
# dispatcher by value would make every worker compile it again.
# --------------------------------------------------------------------------------------------------


def _task_functions() -> list:
    """Every function the jobs ship to executors as a task."""
    from jobs.engine.compact import cleaning, external_sort
    from jobs.engine.frame import job as frame
    from jobs.engine.inspect import driver as inspection
    from jobs.engine.retain import driver as retention

    return [frame.scan_task, cleaning.compact_partition, retention._after_retention_task,
            inspection.inspect_partition, external_sort.read_piece, external_sort.reduce_bucket_item,
            external_sort.clean_group_item]


@pytest.mark.parametrize("fn", _task_functions(), ids=lambda fn: fn.__name__)
def test_every_task_function_ships_by_reference(fn) -> None:
    from jobs.engine.runtime.tasks import BinTask, ship_function

    assert ship_function(fn) is fn  # by reference: the worker imports its module and finds the cached kernels
    assert ship_function(BinTask(fn)).fn is fn  # as a streamed bin's task


def test_a_task_function_carrying_a_kernel_by_value_is_refused() -> None:
    import functools

    import numpy as np

    from jobs.engine.runtime.tasks import InProcessTasks, NumbaKernelInTask, ship_function
    from jobs.rules.offset_map import _rehash

    def closure(n: int) -> int:  # a nested function pickles by value, with the kernel it calls
        return int(_rehash(np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
                           np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)) is None)

    with pytest.raises(NumbaKernelInTask, match=r"closure.*offset_map\._rehash"):
        ship_function(closure)
    with pytest.raises(NumbaKernelInTask):
        ship_function(functools.partial(_rehash, np.zeros(1, np.int64)))
    # the runner the drivers' tests use ships its functions the same way, so each of those tests checks its job
    with pytest.raises(NumbaKernelInTask):
        InProcessTasks().map(closure, [1])
    with pytest.raises(NumbaKernelInTask):
        list(InProcessTasks().stream(closure, [1]))
