# segjobs: `make demo` runs the nightly compaction on a generated demo log dir; `make test` runs the suite.
# Both create (or reuse) .venv and install everything the project needs.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEMO_DIR ?= demo-data
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
# Local runs (demo, tests) need no network beyond loopback.
export SPARK_LOCAL_IP ?= 127.0.0.1

# What the checks cover: lint (ruff) runs on the code and its tests; types (mypy) and the import contracts
# (import-linter) on the packages, as configured in pyproject.toml.
LINT_PATHS := jobs segment_io tests benchmarks notebooks ops
# Property tests try as many examples as this hypothesis profile says (tests/conftest.py): dev or ci.
export HYPOTHESIS_PROFILE ?= dev

.PHONY: all venv java check lint types imports test test-fast demo bench package cluster-test clean help

help:
	@echo "make demo   generate a demo log dir under $(DEMO_DIR)/ and run two nights of compact + retain on it (creates .venv on first use)"
	@echo "make test   lint, type and import checks, then the whole test suite (creates .venv on first use)"
	@echo "make test-fast  the checks, then the tests that need no Spark, no S3 endpoint and are not slow"
	@echo "make check  only the checks: ruff, mypy, import-linter"
	@echo "make bench  run the benchmarks in benchmarks/ (heavy; not part of the suite)"
	@echo "make package       build dist/segjobs-*.whl and dist/segjobs-env.tar.gz (the executors' environment)"
	@echo "make cluster-test  package, then run the jobs on a real Spark standalone cluster on 127.0.0.1"

java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "error: Java is required by Spark but was not found on PATH." >&2; \
	  echo "       Install Java 17, e.g. on Debian/Ubuntu: apt-get install openjdk-17-jre-headless" >&2; \
	  exit 1; }

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check $(LINT_PATHS)

types: $(STAMP)
	$(PY) -m mypy

imports: $(STAMP)
	$(VENV)/bin/lint-imports --no-cache --no-logo

# Fast and first: a lint, type or layering error fails the run in seconds, before the tests' minutes.
check: lint types imports

# pytest exits 5 when it runs no test (nothing collected, or everything deselected): make fails on it as on
# any other non-zero status, so a selection that matches nothing never passes as green.
test: java $(STAMP) check
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 tests

test-fast: $(STAMP) check
	$(PY) -m pytest -q -p no:cacheprovider -x -m "not spark and not s3 and not slow" tests

demo: java $(STAMP)
	$(PY) -m jobs.commands.demo --dir $(DEMO_DIR)

bench: java $(STAMP)
	$(PY) -m benchmarks.run

# The wheel and the environment archive spark-submit ships to executors (README: Running on a Spark cluster).
# EXECUTOR_PYTHON_PREFIX=/usr builds an archive for nodes whose Python is /usr/bin/python3.X.
package: $(STAMP)
	$(PY) ops/package_env.py --dist dist --build build $(if $(EXECUTOR_PYTHON_PREFIX),--python-prefix $(EXECUTOR_PYTHON_PREFIX))

# A Spark standalone master and two workers on 127.0.0.1 run the packaged jobs (tests/ops/test_standalone_cluster.py).
cluster-test: java package
	SEGJOBS_DIST=$(abspath dist) $(PY) -m pytest -q -p no:cacheprovider tests/ops/test_standalone_cluster.py

clean:
	rm -rf $(DEMO_DIR) bench-data .pytest_cache build dist
