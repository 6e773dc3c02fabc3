"""The compacted topics among the real broker fixtures (tests/data/kafka-real), and a --now past every horizon
in them: what the tests that compact real broker-written partitions run over."""

from __future__ import annotations

#: (fixture dir, partition dir) pairs; partition names are unique across the list
PARTITIONS = [
    ("donaldy-kafka2.7-compacted-offsets/kafka-logs", "__consumer_offsets-8"),
    ("donaldy-kafka2.7-compacted-offsets/kafka-logs", "__consumer_offsets-17"),
    ("donaldy-kafka2.7-compacted-offsets/kafka-logs", "__consumer_offsets-28"),
    ("donaldy-kafka2.7-compacted-offsets/kafka-logs", "__consumer_offsets-39"),
    ("itumelengmogase-ksqldb-txn-state/kafka-data", "__transaction_state-44"),
    ("itumelengmogase-ksqldb-txn-state/kafka-data", "_confluent-ksql-default__command_topic-0"),
    ("itumelengmogase-ksqldb-txn-state/kafka-data", "_schemas-0"),
    ("danielowo-ksqldb-kraft-txn/kafka_data", "CURRENTLOCATION-0"),
    ("rjmfernandes-cp7.6-kraft-lz4/data",
     "_confluent-controlcenter-7-6-0-1-aggregate-topic-partition-store-changelog-0"),
    ("rjmfernandes-cp7.6-kraft-lz4/data", "connect-offsets-8"),
    ("rjmfernandes-cp7.6-kraft-lz4/data", "__consumer_offsets-34"),
]
#: long after every fixture was written: no producer is still active, every horizon stamped now is later
NOW = "2030-01-01T00:00:00Z"
