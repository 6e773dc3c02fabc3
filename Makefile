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
LINT_PATHS := jobs segment_io tests benchmarks notebooks ops conf
# Property tests try as many examples as this hypothesis profile says (tests/conftest.py): dev or ci.
export HYPOTHESIS_PROFILE ?= dev

.PHONY: all venv java chromium check lint types imports test test-fast test-scenarios test-compat compat-envs demo bench package cluster-test clean help airflow-test docs venv-delta broker-jars broker-test

# `make airflow-test` installs Apache Airflow and its Spark provider into their own virtualenv (never the
# project's): the pins of conf/airflow/requirements.txt, held by the constraints file of this Python version
# when there is one (Airflow's published constraints are not reachable from CI; this one was resolved from
# PyPI). The install is redone only when those files change.
AIRFLOW_VENV ?= .venv-airflow
AIRFLOW_PY := $(AIRFLOW_VENV)/bin/python
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed
PYTHON_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
AIRFLOW_CONSTRAINTS ?= $(wildcard conf/airflow/constraints-$(PYTHON_VERSION).txt)

help:
	@echo "make venv   create .venv and install everything (dev tools and JupyterLab included), let .venv/bin/spark-submit find its Spark, compile the kernels once"
	@echo "make demo   generate a demo log dir under $(DEMO_DIR)/ and run two nights of retain + compact on it (creates .venv on first use)"
	@echo "make test   lint, type and import checks, then the whole test suite (creates .venv on first use)"
	@echo "make test-fast  the checks, then the tests that need no Spark, no S3 endpoint and are not slow"
	@echo "make test-scenarios  the heavy scenarios make test leaves out: spark-submit, notebook, demo, backfills, crash matrices"
	@echo "make test-compat  the Spark tests that matter most against each pyspark of conf/compat/ (floor 4.0, 4.2 with delta-spark, ceiling 4.3), each in a venv of its own"
	@echo "make check  only the checks: ruff, mypy, import-linter"
	@echo "make docs   build the documentation site (docs/, mkdocs.yml) into build/site with mkdocs build --strict"
	@echo "make chromium  install Debian's chromium when missing (make test does: the HTML report tests use it)"
	@echo "make bench  run the benchmarks in benchmarks/ (heavy; not part of the suite)"
	@echo "make package       build dist/segjobs-*.whl and dist/segjobs-env.tar.gz (the executors' environment)"
	@echo "make cluster-test  package, then run the jobs on a real Spark standalone cluster on 127.0.0.1, then on one of several hosts (network namespaces, root) with faults"
	@echo "make airflow-test  install Airflow 3 + the Spark provider into $(AIRFLOW_VENV)/ and run the DAGs of conf/airflow for real"
	@echo "make venv-delta    create $(DELTA_VENV)/ with segjobs[delta] (delta-spark and the pyspark it supports), to try segjobs table's Spark writer and Spark SQL over the table"
	@echo "make broker-test   fetch Apache Kafka $(KAFKA_VERSION)'s jars (Maven) and run segjobs against a real broker and Kafka's own cleaner"

java:
	@{ test -n "$$JAVA_HOME" && test -x "$$JAVA_HOME/bin/java"; } || { test -z "$$JAVA_HOME" && command -v java >/dev/null 2>&1; } || { \
	  echo "error: Java is required by Spark but was not found (JAVA_HOME/bin/java, else java on PATH)." >&2; \
	  echo "       Install Java 17 (apt-get install openjdk-17-jre-headless) or set JAVA_HOME" >&2; \
	  exit 1; }

# The HTML reports' tests (tests/jobs/engine/report/test_html.py) look at the pages in headless Chromium: Debian's
# package, installed here when missing (CI starts from a fresh machine).
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  echo "Chromium not found: installing Debian's chromium package (apt-get), for the HTML report tests" >&2; \
	  command -v apt-get >/dev/null 2>&1 || { \
	    echo "error: no apt-get here: install Chromium (chromium or chromium-browser on PATH) yourself" >&2; exit 1; }; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# `.venv/bin/spark-submit` (and pyspark) find their Spark by running find_spark_home.py with $PYSPARK_PYTHON,
# else python3 from PATH: without the venv activated that is the system's Python, which has no pyspark
# ("Could not find valid SPARK_HOME", exit 127). That script also looks for a spark-distribution directory
# beside itself: this link makes it find the venv's pyspark whatever Python runs it.
SPARK_DIST := $(VENV)/bin/spark-distribution
$(SPARK_DIST): $(STAMP)
	ln -sfn "$$($(PY) -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" $(SPARK_DIST)

# numba compiles the kernels on first use (about a minute) and caches them beside their modules: compile them
# now, so that no job's first run pays for it (jobs.engine.runtime.kernels, `segjobs warm-up`). Redone when a kernel changes.
KERNELS := $(VENV)/.kernels
KERNEL_SOURCES := segment_io/_decode_kernels.py segment_io/_encode_kernels.py segment_io/hashing.py \
                  jobs/rules/offset_map.py jobs/rules/transactions.py
$(KERNELS): $(STAMP) $(KERNEL_SOURCES)
	$(PY) -m jobs warm-up
	@touch $(KERNELS)

venv: $(STAMP) $(SPARK_DIST) $(KERNELS)

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
# `make test` is every test but the heavy scenarios (marker `scenario`: whole-process runs such as spark-submit,
# the notebook, the demo and three backfilled nights, JVM start-ups with a broken class archive, and the crash
# matrices that kill a run at every step of every partition); `make test-scenarios` runs those, and CI runs both.
# `make test`, `make test-scenarios` and `make test-fast` run the tests on $(TEST_WORKERS) processes (pytest-xdist):
# every test of the Spark session on one of them (tests/conftest.py puts them in one group), so that a run still
# starts one Spark session, and the rest (S3 on a moto_server of each worker's own, local disk, rules, whole-process
# runs in a temporary directory of their own) on whichever is free.
# TEST_WORKERS=0 runs them in this process, one after the other.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

test: java chromium venv check
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST) --durations=15 -m "not broker and not scenario" tests

test-scenarios: java chromium venv
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST) --durations=15 -m "scenario and not broker" tests

test-fast: venv check
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST) -x -m "not spark and not s3 and not slow and not broker and not scenario" tests

# The documentation site: docs/ and mkdocs.yml, with the pages generated from the code (ops/mkdocs_hooks.py) and
# the API reference from the docstrings. --strict: a broken link, a missing anchor or an unresolved reference
# fails the build. The output (build/site) is ignored, like the rest of build/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# `make test-compat`: the tests that depend most on Spark's APIs (the data source, both compaction strategies,
# retention, the Python API, spark-submit, the Delta ledger through delta-spark) against every pyspark of
# conf/compat/<env>.txt, each in its own venv under $(COMPAT_DIR)/ (the project's .venv keeps the newest
# pyspark). pyspark is an sdist: the first install of a version builds its wheel (a minute or two), later ones
# reuse pip's wheel cache. A venv is reinstalled only when its requirements or pyproject.toml change.
# In the delta venv SEGJOBS_REQUIRE_DELTA makes a missing delta-spark an error, not a skip; there the session loads
# Delta's jars from Maven through spark.jars.packages into the project's .cache/ivy (resolved once, then reused).
COMPAT_DIR ?= .venv-compat
COMPAT_ENVS ?= floor delta ceiling
COMPAT_TESTS ?= tests/segment_io/test_spark_source.py tests/segment_io/test_kafka_schema.py \
    tests/jobs/engine/compact/test_job.py tests/jobs/engine/compact/test_external_sort.py \
    tests/jobs/engine/retain/test_job.py tests/jobs/test_api.py tests/jobs/test_spark_submit_cluster.py \
    tests/jobs/engine/report/test_history.py tests/jobs/engine/runtime/test_delta_spark.py \
    tests/jobs/engine/table/test_delta_spark.py tests/segment_io/test_spark_latest.py

$(COMPAT_DIR)/%/.installed: conf/compat/%.txt pyproject.toml
	@test -x $(COMPAT_DIR)/$*/bin/python || $(PYTHON) -m venv $(COMPAT_DIR)/$*
	$(COMPAT_DIR)/$*/bin/python -m pip install --quiet --upgrade pip
	$(COMPAT_DIR)/$*/bin/python -m pip install --quiet -e '.[dev]' -r conf/compat/$*.txt
	@touch $@

# The envs test-compat runs, on one line (.ci/run leaves out one that would repeat make test).
compat-envs:
	@echo $(COMPAT_ENVS)

test-compat: java $(foreach e,$(COMPAT_ENVS),$(COMPAT_DIR)/$(e)/.installed)
	@set -e; for e in $(COMPAT_ENVS); do \
	  py=$(abspath $(COMPAT_DIR))/$$e/bin/python; \
	  echo "== test-compat $$e: pyspark $$($$py -c 'import pyspark; print(pyspark.__version__)')"; \
	  PYSPARK_PYTHON=$$py PYSPARK_DRIVER_PYTHON=$$py SEGJOBS_REQUIRE_DELTA=$$(test $$e = delta && echo 1) \
	    $$py -m pytest -q -p no:cacheprovider --durations=5 $(COMPAT_TESTS); \
	done

$(AIRFLOW_STAMP): conf/airflow/requirements.txt $(AIRFLOW_CONSTRAINTS)
	@test -x $(AIRFLOW_PY) || $(PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_PY) -m pip install --quiet --upgrade pip
	$(AIRFLOW_PY) -m pip install --quiet -r conf/airflow/requirements.txt 'pytest>=8,<10' \
	    $(if $(AIRFLOW_CONSTRAINTS),-c $(AIRFLOW_CONSTRAINTS))
	@touch $(AIRFLOW_STAMP)

# The DAGs run in Airflow's interpreter; their spark-submit, segjobs and the reference CLI runs are the
# project's (.venv). SEGJOBS_REQUIRE_AIRFLOW makes a missing Airflow an error, not a skip, and pytest fails
# (exit 5) if it collects no test.
airflow-test: java venv $(AIRFLOW_STAMP)
	SEGJOBS_REQUIRE_AIRFLOW=1 SEGJOBS_PROJECT_PYTHON=$(abspath $(PY)) \
	    $(AIRFLOW_PY) -m pytest -q -p no:cacheprovider tests/ops/test_airflow_dags.py

# `make venv-delta`: a venv of its own (the project's .venv keeps the newest pyspark, which delta-spark does not
# support yet) with the `delta` extra: delta-spark and a pyspark it supports. Delta's jars are not in it: Spark
# fetches them from Maven the first time a session asks for them (--packages, printed below), into ~/.ivy2.
# Reinstalled only when pyproject.toml changes.
DELTA_VENV ?= .venv-delta
DELTA_STAMP := $(DELTA_VENV)/.installed
$(DELTA_STAMP): pyproject.toml
	@test -x $(DELTA_VENV)/bin/python || $(PYTHON) -m venv $(DELTA_VENV)
	$(DELTA_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(DELTA_VENV)/bin/python -m pip install --quiet -e '.[delta]'
	ln -sfn "$$($(DELTA_VENV)/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" \
	    $(DELTA_VENV)/bin/spark-distribution
	@touch $@

venv-delta: java $(DELTA_STAMP)
	@pkg=$$($(DELTA_VENV)/bin/python -c 'from jobs.engine.runtime.delta_spark import DELTA_SPARK_PACKAGE as p; print(p)'); \
	  conf="--conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog"; \
	  echo "$(DELTA_VENV) is ready: pyspark $$($(DELTA_VENV)/bin/python -c 'import pyspark; print(pyspark.__version__)'), delta-spark with $$pkg. Try:"; \
	  echo "  $(DELTA_VENV)/bin/spark-submit --packages $$pkg $$conf jobs/table.py --log-dir LOG_DIR --topic TOPIC --table TABLE"; \
	  echo "  $(DELTA_VENV)/bin/pyspark --packages $$pkg $$conf     # then: spark.sql(\"SELECT * FROM delta.\`TABLE\`\").show()"
# `make broker-test`: a real Apache Kafka broker (one KRaft node on 127.0.0.1, in a temporary dir, never left
# running) with Kafka's own jars: the version of ops/broker/pom.xml and its transitive closure, resolved from Maven
# Central into the ignored .cache/ (the Maven repository in .cache/m2, the jars in .cache/kafka-<version>/),
# again only when the pom changes. SEGJOBS_REQUIRE_BROKER makes missing Java, jars or client an error, not a skip.
KAFKA_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' ops/broker/pom.xml)
KAFKA_JARS := .cache/kafka-$(KAFKA_VERSION)
KAFKA_STAMP := $(KAFKA_JARS)/.resolved
$(KAFKA_STAMP): ops/broker/pom.xml
	@command -v mvn >/dev/null 2>&1 || { \
	  echo "error: Maven (mvn) fetches Kafka's jars for make broker-test: apt-get install maven" >&2; exit 1; }
	rm -rf $(KAFKA_JARS)
	mvn -q -B -f ops/broker/pom.xml -Dmaven.repo.local=$(abspath .cache/m2) dependency:copy-dependencies \
	    -DincludeScope=runtime -DoutputDirectory=$(abspath $(KAFKA_JARS))
	@touch $@

broker-jars: $(KAFKA_STAMP)

broker-test: java venv $(KAFKA_STAMP)
	SEGJOBS_REQUIRE_BROKER=1 $(PY) -m pytest -q -p no:cacheprovider -rs -m broker tests/compat/test_live_broker.py \
	    tests/compat/test_live_tiered.py

demo: java venv
	$(PY) -m jobs.commands.demo --dir $(DEMO_DIR)

bench: java venv
	$(PY) -m benchmarks.run

# The wheel and the environment archive spark-submit ships to executors (docs/operations/cluster.md).
# EXECUTOR_PYTHON_PREFIX=/usr builds an archive for nodes whose Python is /usr/bin/python3.X.
package: $(STAMP)
	$(PY) ops/package_env.py --dist dist --build build $(if $(EXECUTOR_PYTHON_PREFIX),--python-prefix $(EXECUTOR_PYTHON_PREFIX))

# A Spark standalone master and two workers on 127.0.0.1 run the packaged jobs (tests/ops/test_standalone_cluster.py);
# then a master, three workers and two driver hosts, each in a network namespace, run them with faults
# (tests/ops/test_netns_*.py: needs root, skips saying why without namespaces).
cluster-test: java package
	SEGJOBS_DIST=$(abspath dist) $(PY) -m pytest -q -p no:cacheprovider tests/ops/test_standalone_cluster.py tests/ops/test_netns_cluster.py \
	  tests/ops/test_netns_faults.py tests/ops/test_netns_table.py

clean:
	rm -rf $(DEMO_DIR) bench-data .pytest_cache build dist
