"""Packing the splits of a read into Spark tasks: many small segments are read by one task, not one task each.

A Spark task costs tens of milliseconds of its own (scheduling, shipping the reader, a Python worker's turn,
an Arrow stream back to the JVM) whatever it reads; over a log dir of a thousand small segments, one task per
segment spends nearly all of its time on that. So consecutive splits (in listing order: partition, then
offset) are packed into one :class:`PackedSplit` up to ``maxSplitBytes``, each split weighing its bytes plus
:data:`SPLIT_OPEN_COST_BYTES` (what opening one more file or object costs, in bytes a task could have read
meanwhile), as Spark's own file sources weigh files with ``spark.sql.files.openCostInBytes``. A split as large
as the target gets a task of its own, as before.

Packing is a pure function of the planned splits; every split keeps its own bounds, so pruning and pushdown
work on packed splits exactly as on single ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pyspark.sql.datasource import InputPartition

from segment_io.spark.options import SPLIT_OPEN_COST_BYTES
from segment_io.spark.planning import SegmentSplit


@dataclass(frozen=True)
class PackedSplit(InputPartition):
    """Consecutive splits read one after another by one task."""

    splits: tuple[SegmentSplit, ...]

    @property
    def bytes(self) -> int:
        """The bytes of segments this task reads."""
        return sum(s.end - s.start for s in self.splits)


def split_weight(split: SegmentSplit) -> int:
    """What reading ``split`` costs a task, in bytes: its bytes plus the cost of opening it."""
    return split.end - split.start + SPLIT_OPEN_COST_BYTES


def pack_splits(splits: Sequence[SegmentSplit], target_bytes: int) -> list[PackedSplit]:
    """``splits`` in their order, grouped into runs of consecutive splits weighing at most ``target_bytes``
    together (:func:`split_weight`); a split that alone weighs more forms a run of its own. Every split is in
    exactly one run, in order."""
    packed: list[PackedSplit] = []
    run: list[SegmentSplit] = []
    weight = 0
    for split in splits:
        w = split_weight(split)
        if run and weight + w > target_bytes:
            packed.append(PackedSplit(tuple(run)))
            run, weight = [], 0
        run.append(split)
        weight += w
    if run:
        packed.append(PackedSplit(tuple(run)))
    return packed


__all__ = ["SPLIT_OPEN_COST_BYTES", "PackedSplit", "pack_splits", "split_weight"]
