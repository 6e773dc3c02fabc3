"""`segjobs warm-up` writes the bytecode of segjobs' own modules, so that an environment that forbids Python to write
it (PYTHONDONTWRITEBYTECODE, common in container images) does not make every driver and Spark worker daemon compile
them from source again. Checked on a package of its own in a temporary directory, imported by a new interpreter."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.commands.warmup import package_dirs, write_bytecode


def _package(root: Path, modules: dict[str, str]) -> Path:
    package = root / "warmpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in modules.items():
        (package / f"{name}.py").write_text(text)
    return package


def _bytecode(source: Path) -> Path:
    return Path(importlib.util.cache_from_source(str(source)))


def _imports_from_bytecode(root: Path, module: str) -> bool:
    """Whether a new interpreter that may not write bytecode loads ``module`` from its bytecode file."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(root))
    proc = subprocess.run([sys.executable, "-v", "-c", f"import {module}"], env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    source = root / Path(*module.split(".")).with_suffix(".py")
    return any(line.startswith("# ") and line.endswith(f" matches {source}") for line in proc.stderr.splitlines())


@pytest.fixture(autouse=True)
def _no_bytecode_written_by_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    # as under PYTHONDONTWRITEBYTECODE: only write_bytecode may write it
    monkeypatch.setattr(sys, "dont_write_bytecode", True)


def test_a_process_that_may_not_write_bytecode_reads_what_warm_up_wrote(tmp_path: Path) -> None:
    package = _package(tmp_path, {"rules": "LIMIT = 3\n"})
    assert not _imports_from_bytecode(tmp_path, "warmpkg.rules")  # compiled from source, nothing written

    said: list[str] = []
    assert write_bytecode([package], said.append) == 0
    assert said == []
    assert _bytecode(package / "rules.py").is_file()
    assert _imports_from_bytecode(tmp_path, "warmpkg.rules")


def test_bytecode_already_current_is_left_alone_and_an_edited_module_is_written_again(tmp_path: Path) -> None:
    package = _package(tmp_path, {"rules": "LIMIT = 3\n"})
    write_bytecode([package], print)
    written = _bytecode(package / "rules.py")
    before = written.stat().st_mtime_ns
    os.utime(written, ns=(before - 10**9, before - 10**9))  # so that a rewrite would show
    write_bytecode([package], print)
    assert written.stat().st_mtime_ns == before - 10**9  # a read-only install of a wheel gets no warning

    source = package / "rules.py"
    source.write_text("LIMIT = 4  # a longer line: another size\n")
    assert not _imports_from_bytecode(tmp_path, "warmpkg.rules")  # stale: Python compiles the source again
    write_bytecode([package], print)
    assert _imports_from_bytecode(tmp_path, "warmpkg.rules")


def test_a_module_that_cannot_be_compiled_is_named_and_the_others_are_written(tmp_path: Path) -> None:
    package = _package(tmp_path, {"broken": "def f(:\n", "rules": "LIMIT = 3\n"})
    said: list[str] = []
    assert write_bytecode([package], said.append) == 1
    assert len(said) == 1 and said[0].startswith(f"bytecode not written for {package / 'broken.py'}: "), said
    assert _bytecode(package / "rules.py").is_file() and not _bytecode(package / "broken.py").exists()


IMPORTED_FILES = """
import importlib, sys
for module in sys.argv[1:]:
    importlib.import_module(module)
print("\\n".join(f for f in (getattr(m, "__file__", None) for m in list(sys.modules.values())) if f))
"""


def test_every_project_module_a_run_imports_lies_in_a_package_warm_up_compiles() -> None:
    # a new top-level package a run imports would otherwise be compiled from source by every process again; asked of
    # a new interpreter, which imports what a run's driver and a worker's task import and nothing a test does
    from tests.support.paths import REPO

    proc = subprocess.run([sys.executable, "-c", IMPORTED_FILES, "jobs.commands.compact",
                           "jobs.engine.compact.cleaning"], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=True)
    repo, roots = REPO.resolve(), [r.resolve() for r in package_dirs()]
    files = [Path(line).resolve() for line in proc.stdout.splitlines() if line]
    # the project's own modules: in the checkout, not its virtualenv (.venv) in it
    project = [f for f in files if f.is_relative_to(repo) and not f.relative_to(repo).parts[0].startswith(".")]
    outside = [f for f in project if not any(f.is_relative_to(r) for r in roots)]
    assert project and not outside, outside
