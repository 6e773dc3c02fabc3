"""Where the repository and the suite's data files are, for tests that read them or run commands from the root."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
# Real broker-written segments, kept in the repository (tests/data/kafka-real/SOURCES.md says what each covers).
KAFKA_REAL = DATA / "kafka-real"
# Describe output of kafka-configs.sh and kafka-topics.sh (tests/data/kafka-describe/README.md says what it is).
KAFKA_DESCRIBE = DATA / "kafka-describe"
