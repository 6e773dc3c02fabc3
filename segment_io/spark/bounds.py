"""What a read may return: scope (topics, partitions) and inclusive offset / timestamp ranges.

Reader options and pushed-down Spark filters both narrow one :class:`RowBounds`; planning uses it to skip
whole splits, the reader to skip batches and to filter rows. Skipping is only ever done on bounds that are
certain (see :mod:`segment_io.spark.planning`), so a row that matches is never dropped.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from typing import Any, Iterable, TypeGuard

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from segment_io.spark.filters import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)
from segment_io.spark.options import ReadOptions

#: Columns whose filters are taken over by the source.
_RANGE_COLUMNS = ("offset", "timestamp")
_SCOPE_COLUMNS = ("topic", "partition")


@dataclass(frozen=True)
class RowBounds:
    """Conjunction of constraints on rows. ``None`` means unbounded; ranges are inclusive."""

    topic_globs: tuple[str, ...] = ()
    partitions: frozenset[tuple[str, int]] = frozenset()
    #: From pushed filters: every set must contain the value (an intersection of ``=`` / ``IN`` filters).
    topic_sets: tuple[frozenset[str], ...] = ()
    partition_sets: tuple[frozenset[int], ...] = ()
    offset_min: int | None = None
    offset_max: int | None = None
    timestamp_min: int | None = None
    timestamp_max: int | None = None

    @classmethod
    def from_options(cls, options: ReadOptions) -> "RowBounds":
        """The bounds the reader options set (ending bounds are exclusive there, inclusive here)."""
        return cls(
            topic_globs=options.topic_globs,
            partitions=options.partitions,
            offset_min=options.starting_offset,
            offset_max=None if options.ending_offset is None else options.ending_offset - 1,
            timestamp_min=options.starting_timestamp,
            timestamp_max=None if options.ending_timestamp is None else options.ending_timestamp - 1,
        )

    # ------------------------------------------------------------------ scope

    def wants_topic(self, topic: str) -> bool:
        """Whether any partition of ``topic`` may hold matching rows."""
        if self.topic_globs and not any(fnmatch.fnmatchcase(topic, g) for g in self.topic_globs):
            return False
        if self.partitions and not any(t == topic for t, _ in self.partitions):
            return False
        return all(topic in s for s in self.topic_sets)

    def wants_partition(self, topic: str, partition: int) -> bool:
        """Whether partition ``topic-partition`` may hold matching rows."""
        if not self.wants_topic(topic):
            return False
        if self.partitions and (topic, partition) not in self.partitions:
            return False
        return all(partition in s for s in self.partition_sets)

    # ------------------------------------------------------------------ ranges

    @property
    def has_row_ranges(self) -> bool:
        """Whether rows must be filtered by offset or timestamp."""
        return any(v is not None for v in (self.offset_min, self.offset_max, self.timestamp_min, self.timestamp_max))

    @property
    def filters_rows(self) -> bool:
        """Whether :meth:`row_mask` filters rows (an offset or timestamp range is bounded)."""
        return any(bound is not None for bound in (self.offset_min, self.offset_max, self.timestamp_min,
                                                   self.timestamp_max))

    @property
    def is_empty(self) -> bool:
        """True when the ranges contradict each other, so nothing can match."""
        return _empty(self.offset_min, self.offset_max) or _empty(self.timestamp_min, self.timestamp_max)

    def overlaps_offsets(self, low: int | None, high: int | None) -> bool:
        """Whether offsets in ``[low, high]`` (None: unbounded) can match."""
        if self.offset_min is not None and high is not None and high < self.offset_min:
            return False
        return not (self.offset_max is not None and low is not None and low > self.offset_max)

    def narrowed_offsets(self, low: int | None, high: int | None) -> "RowBounds":
        """These bounds and offsets in ``[low, high]`` (None: unbounded) too."""
        return replace(self, offset_min=_max_opt(self.offset_min, low), offset_max=_min_opt(self.offset_max, high))

    def admits_max_timestamp(self, max_timestamp: int | None) -> bool:
        """Whether rows whose timestamps are all <= ``max_timestamp`` (None: unknown) can match."""
        return max_timestamp is None or self.timestamp_min is None or max_timestamp >= self.timestamp_min

    def row_mask(self, table: pa.Table) -> pa.ChunkedArray | None:
        """Vectorised row filter for the offset and timestamp ranges; None when every row passes."""
        conditions = []
        for column, low, high in (("offset", self.offset_min, self.offset_max),
                                  ("timestamp", self.timestamp_min, self.timestamp_max)):
            if low is not None:
                conditions.append(pc.greater_equal(table[column], pa.scalar(low, pa.int64())))
            if high is not None:
                conditions.append(pc.less_equal(table[column], pa.scalar(high, pa.int64())))
        if not conditions:
            return None
        mask = conditions[0]
        for condition in conditions[1:]:
            mask = pc.and_(mask, condition)
        return mask

    # ------------------------------------------------------------------ pushdown

    def narrowed(self, filters: Iterable[Filter]) -> tuple["RowBounds", list[Filter]]:
        """Fold the filters this source handles fully into the bounds; return the bounds and the rest.

        Handled: ``=``/``IN`` on topic and partition (constant per split, so split pruning applies them
        exactly), and ``=``, ``<``, ``<=``, ``>``, ``>=`` with integer literals on offset and timestamp
        (applied to rows in the reader). Everything else goes back to Spark.
        """
        bounds = self
        rest: list[Filter] = []
        for f in filters:
            updated = bounds._with_filter(f)
            if updated is None:
                rest.append(f)
            else:
                bounds = updated
        return bounds, rest

    def _with_filter(self, f: Filter) -> "RowBounds | None":
        column = _column(f)
        if column in _SCOPE_COLUMNS:
            values = _scope_values(f, str if column == "topic" else int)
            if values is None:
                return None
            if column == "topic":
                return replace(self, topic_sets=self.topic_sets + (values,))
            return replace(self, partition_sets=self.partition_sets + (values,))
        if column in _RANGE_COLUMNS:
            value = getattr(f, "value", None)
            if not _is_int(value):
                return None
            low, high = _range_of(f, int(value))
            if low is None and high is None:
                return None
            if column == "offset":
                return replace(self, offset_min=_max_opt(self.offset_min, low),
                               offset_max=_min_opt(self.offset_max, high))
            return replace(self, timestamp_min=_max_opt(self.timestamp_min, low),
                           timestamp_max=_min_opt(self.timestamp_max, high))
        return None


def _column(f: Filter) -> str | None:
    attribute = getattr(f, "attribute", None)
    if isinstance(attribute, tuple) and len(attribute) == 1 and isinstance(attribute[0], str):
        return attribute[0]
    return None


def _scope_values(f: Filter, kind: type) -> frozenset | None:
    if isinstance(f, EqualTo):
        candidates: tuple[Any, ...] = (f.value,)
    elif isinstance(f, In):
        candidates = tuple(f.value)
    else:
        return None
    # SQL's NULL never equals anything, so a null literal just adds no value to the set.
    present = [v for v in candidates if v is not None]
    if not all(isinstance(v, kind) and not isinstance(v, bool) for v in present):
        return None
    return frozenset(present)


def _range_of(f: Filter, value: int) -> tuple[int | None, int | None]:
    if isinstance(f, EqualTo):
        return value, value
    if isinstance(f, GreaterThan):
        return value + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return value, None
    if isinstance(f, LessThan):
        return None, value - 1
    if isinstance(f, LessThanOrEqual):
        return None, value
    return None, None


def _is_int(value: Any) -> TypeGuard[int | np.integer]:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _max_opt(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _min_opt(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _empty(low: int | None, high: int | None) -> bool:
    return low is not None and high is not None and high < low

