"""Log-dir layout: the one place that knows how Kafka names partition directories and segment files.

``<log dir>/<topic>-<partition>/<20-digit base offset>.<suffix>`` plus per-dir checkpoint files.
Topics may contain dashes and dots, so a partition directory splits at its *last* dash.
"""

from __future__ import annotations

import re

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
#: Suffixes Kafka appends while replacing or deleting files.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
TRANSIENT_SUFFIXES = (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"
LOCK_FILE = ".lock"

_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
# Kafka also renames directories of deleted / future partitions: <topic>-<p>.<uuid>-delete / -future
_SEGMENT_FILE = re.compile(r"^(?P<base>\d{20})(?P<suffix>\.[a-z]+)(?P<transient>(\.cleaned|\.swap|\.deleted)?)$")


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``"my.topic-with-dash-3"`` -> ``("my.topic-with-dash", 3)``; None for anything else (including
    ``-delete`` and ``-future`` directories a broker leaves while moving or deleting a partition)."""
    m = _PARTITION_DIR.match(name)
    if not m:
        return None
    return m.group("topic"), int(m.group("partition"))


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def segment_file_name(base_offset: int, suffix: str = ".log") -> str:
    """``(42, ".index")`` -> ``"00000000000000000042.index"``."""
    if base_offset < 0:
        raise ValueError(f"negative base offset {base_offset}")
    return f"{base_offset:020d}{suffix}"


def parse_segment_file(name: str) -> tuple[int, str, str] | None:
    """``"00000000000000000042.log.swap"`` -> ``(42, ".log", ".swap")``; None when not a segment file."""
    m = _SEGMENT_FILE.match(name)
    if not m:
        return None
    return int(m.group("base")), m.group("suffix"), m.group("transient") or ""
