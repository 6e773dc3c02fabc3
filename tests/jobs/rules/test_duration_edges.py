"""Every duration key of the topic config at its int64 edges, through whole jobs (tasks in this process).

``delete.retention.ms = 2^63-1`` used to be accepted and then fail the partition on every run ("invalid negative
delete horizon"): ``now + delete.retention.ms`` overflowed a long. Kafka's own sum wraps negative and
``MemoryRecordsBuilder`` writes no negative horizon, so the tombstones simply never expire; segjobs does the
same. Each key of the config table measured in ms (and each inert ``*.ms`` key) is run here at its smallest and
largest accepted value and at 0/1 where those are accepted: compaction twice (the second pass sees the horizons
the first stamped), then retention, and every run must end without a partition error. Values one step outside a
key's range must be refused up front (exit code 2 on the command line: nothing was done).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs import api
from jobs.rules.cleaner import delete_horizon
from jobs.rules.config import INERT_KEYS, ConfigSet
from jobs.rules.kafka_defaults import KAFKA_DEFAULTS, LONG_MAX, LONG_MIN
from segment_io.errors import ConfigError
from tests.support.builders import LogBuilder, rec, tombstone, write_log
from tests.support.hypothesis_budget import examples

T0 = 1_700_000_000_000
DAY = 86_400_000
NOW = T0 + 30 * DAY
TOPIC = "edges"
HORIZON_BIT = 0x40  #: the v2 delete-horizon attribute bit, spelled out as the oracle reads it

#: the keys with an effect that count milliseconds, from the one table of keys
DURATION_KEYS = sorted(k for k, d in KAFKA_DEFAULTS.items() if d.unit == "ms")
INERT_DURATION_KEYS = sorted(k for k in INERT_KEYS if k.endswith(".ms"))


def _edges(key: str) -> list[int]:
    d = KAFKA_DEFAULTS[key]
    lo = int(d.lo if d.lo is not None else LONG_MIN)
    hi = int(d.hi if d.hi is not None else LONG_MAX)
    return sorted({v for v in (lo, lo + 1, 0, 1, hi - 1, hi) if lo <= v <= hi})


CASES = [(k, v) for k in DURATION_KEYS for v in _edges(k)]


def _settings(key: str, value: int) -> dict[str, object]:
    # the delete-fraction limit is not what these runs are about (retention.ms at 0 deletes most of the log)
    # and time retention is off unless it is the key under test, so that the compactions see the old segments
    settings: dict[str, object] = {"cleanup.policy": "compact,delete", "segjobs.max.delete.fraction": 1.0,
                                   "retention.ms": -1, key: value}
    if key == "min.compaction.lag.ms":
        settings["max.compaction.lag.ms"] = LONG_MAX  # Kafka requires min <= max
    if key == "max.compaction.lag.ms":
        settings["min.compaction.lag.ms"] = 0
    return settings


def _build(log_dir: Path) -> None:
    """Old segments with duplicates, tombstones and a committed transaction, then a recent active segment."""
    log = LogBuilder(TOPIC, 0, timestamp=T0)
    log.batch([rec("a", "1"), rec("b", "1")]).batch([tombstone("b")])
    log.txn_batch(7, 0, [rec("c", "1")]).commit(7, 0)
    log.roll().batch([rec("a", "2"), tombstone("c")])
    log.roll().batch([rec("d", "1", timestamp=NOW - 1000)])
    write_log(log.table(), log_dir / f"{TOPIC}-0")


def _seams() -> api.Seams:
    return api.Seams(runner=api.InProcessTasks())


def _errors(result: api.JobResult) -> list:
    return list(result.report.errors)


@pytest.mark.parametrize(("key", "value"), CASES, ids=[f"{k}={v}" for k, v in CASES])
def test_every_duration_key_at_its_edges_runs_clean(tmp_path, key, value):
    _build(tmp_path / "logs")
    config = ConfigSet.from_mapping({"defaults": _settings(key, value)})
    options = dict(config=config, progress=None)
    for now in (NOW, NOW + 2 * DAY):  # the second compaction sees the horizons the first stamped
        compacted = api.compact(tmp_path / "logs", api.CompactOptions(**options, partitions=(f"{TOPIC}-0",)),
                                now=now, seams=_seams())
        assert _errors(compacted) == [], (key, value, compacted.report.errors)
        # retention deletes by size too, so that file.delete.delay.ms has .deleted files to time
        retained = api.retain(tmp_path / "logs", api.RetainOptions(**options, overrides=("*:retention.bytes=1",)),
                              now=now, seams=_seams())
        assert _errors(retained) == [], (key, value, retained.report.errors)
        inspected = api.inspect(tmp_path / "logs", api.InspectOptions(**options), now=now, seams=_seams())
        assert _errors(inspected) == [], (key, value, inspected.report.errors)


@pytest.mark.parametrize("key", DURATION_KEYS)
def test_one_step_outside_a_duration_keys_range_is_refused_up_front(key):
    d = KAFKA_DEFAULTS[key]
    outside = [v for v in (None if d.lo is None else int(d.lo) - 1, None if d.hi is None else int(d.hi) + 1)
               if v is not None]
    assert outside, key
    for value in outside:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            ConfigSet.from_mapping({"defaults": _settings(key, value)})


@pytest.mark.parametrize("key", INERT_DURATION_KEYS)
@pytest.mark.parametrize("value", [LONG_MIN, -1, 0, 1, LONG_MAX])
def test_inert_duration_keys_at_the_edges_load_and_change_nothing(key, value):
    config = ConfigSet.from_mapping({"defaults": {key: value}}).for_topic(TOPIC)
    assert dict(config.inert_settings) == {key: str(value)}
    assert config.to_settings() | {key: None} == ConfigSet.from_mapping({}).for_topic(TOPIC).to_settings() | {key: None}


def test_a_tombstone_under_the_largest_delete_retention_is_kept_unstamped(tmp_path):
    """Kafka's horizon for delete.retention.ms = 2^63-1 wraps negative, and a negative horizon is not written:
    the tombstone's batch keeps no horizon and the tombstone survives every later clean, at any now."""
    from tests.support.replay import read_partition

    _build(tmp_path / "logs")
    config = ConfigSet.from_mapping({"defaults": {"cleanup.policy": "compact", "delete.retention.ms": LONG_MAX}})
    for now in (NOW, NOW + 400 * DAY):
        result = api.compact(tmp_path / "logs", api.CompactOptions(config=config, progress=None,
                                                                    partitions=(f"{TOPIC}-0",)),
                             now=now, seams=_seams())
        assert _errors(result) == []
    batches = read_partition(tmp_path / "logs" / f"{TOPIC}-0")
    tombstones = [r for b in batches for r in b.records if r.value is None]
    assert {r.key for r in tombstones} == {b"b", b"c"}
    assert not any(b.attributes & HORIZON_BIT for b in batches)


@settings(max_examples=examples(2), deadline=None)  # a pure function: cheap examples
@given(now=st.integers(0, LONG_MAX), retention=st.integers(0, LONG_MAX))
def test_the_delete_horizon_is_kafkas_or_none(now, retention):
    horizon = delete_horizon(now, retention)
    java_sum = (now + retention + 2**63) % 2**64 - 2**63  # a Java long sum
    assert horizon == (java_sum if java_sum >= 0 else None)
