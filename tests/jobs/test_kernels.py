"""The compiled kernels' cache (issue 18 item 8): `segjobs warm-up` (run by `make venv`) compiles every kernel
the jobs use into numba's on-disk cache, a later process finds them there, and a run that finds the cache cold
says "compiling kernels (once)" instead of looking slow. Run in subprocesses whose NUMBA_CACHE_DIR is a fresh
directory: a cold cache, without touching the install's own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.engine.kernels import COLD_NOTICE, KERNEL_MODULES, cached_kernels
from segment_io.generate import GenerateSpec, generate_log_dir

REPO = Path(__file__).resolve().parents[2]

RETAIN_IN_PROCESS = """
import sys
from jobs import api
from jobs.engine.events import stderr_sink
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
    assert {name.rsplit(".", 1)[0] for name in cached_kernels()} == set(KERNEL_MODULES)


@pytest.mark.slow
def test_warm_up_fills_a_cold_cache_and_a_cold_run_says_it_compiles(tmp_path: Path) -> None:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    check = "from jobs.engine.kernels import kernels_cold; print(kernels_cold())"
    assert python(env, "-c", check).stdout.strip() == "True"

    # a job on a cold cache says so before it starts (this one compiles only the header scan's kernels)
    log_dir = tmp_path / "logs"
    generate_log_dir(GenerateSpec(records=200, partitions=1), log_dir)
    proc = python(env, "-c", RETAIN_IN_PROCESS, str(log_dir))
    assert proc.returncode == 0, proc.stderr
    assert COLD_NOTICE in proc.stderr

    warm = python(env, "-m", "jobs", "warm-up")
    assert warm.returncode == 0, warm.stderr
    assert warm.stderr.startswith("compiling kernels (once; about a minute)...")
    total = len(cached_kernels())
    ready = warm.stdout.strip()
    assert ready.startswith("kernels ready: ") and f" of {total} cached (" in ready, ready
    assert int(ready.split()[2]) >= total - 2, ready  # all but the rarely needed ones

    # a new process finds them: nothing is compiled again, and jobs start without the notice
    assert python(env, "-c", check).stdout.strip() == "False"
    again = python(env, "-m", "jobs", "warm-up")
    assert " (0 compiled now) " in again.stdout, again.stdout
    proc = python(env, "-c", RETAIN_IN_PROCESS, str(log_dir))
    assert proc.returncode == 0 and COLD_NOTICE not in proc.stderr, proc.stderr
