"""The filter classes of Spark's Python data source pushdown, on every pyspark segjobs admits.

pyspark 4.1 added filter pushdown to Python data sources (``DataSourceReader.pushFilters`` and the ``Filter``
classes of :mod:`pyspark.sql.datasource`). pyspark 4.0 has neither: Spark never offers it a filter and applies
every filter itself, which is always correct here (the source then honours its options only). So that the
source's own narrowing (:mod:`segment_io.spark.bounds`) is one code on both, this module gives pyspark's
classes where they exist and, on 4.0, frozen dataclasses of the same names and fields, which only segjobs'
own code and tests ever build. :data:`FILTER_PUSHDOWN` says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

__all__ = [
    "FILTER_PUSHDOWN", "BASE_PUSH_FILTERS",
    "EqualTo", "Filter", "GreaterThan", "GreaterThanOrEqual", "In", "IsNotNull", "IsNull", "LessThan",
    "LessThanOrEqual",
]

try:
    from pyspark.sql.datasource import (
        EqualTo,
        Filter,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        IsNotNull,
        IsNull,
        LessThan,
        LessThanOrEqual,
    )

    #: Whether this pyspark pushes filters down to Python data sources (4.1 and later).
    FILTER_PUSHDOWN = True
except ImportError:  # pyspark 4.0
    FILTER_PUSHDOWN = False

    class Filter:  # type: ignore[no-redef]
        """Stand-in for pyspark's ``Filter`` (4.1+): a condition on ``attribute``, a column path."""

        attribute: tuple[str, ...]

    @dataclass(frozen=True)
    class _Comparison(Filter):
        """A condition comparing the column with ``value`` (a tuple of values for ``In``)."""

        attribute: tuple[str, ...]
        value: Any

    @dataclass(frozen=True)
    class _Test(Filter):
        """A condition on the column alone."""

        attribute: tuple[str, ...]

    # One stand-in per pyspark class the bounds look for, told apart by class as pyspark's are.
    class EqualTo(_Comparison):  # type: ignore[no-redef]
        pass

    class GreaterThan(_Comparison):  # type: ignore[no-redef]
        pass

    class GreaterThanOrEqual(_Comparison):  # type: ignore[no-redef]
        pass

    class LessThan(_Comparison):  # type: ignore[no-redef]
        pass

    class LessThanOrEqual(_Comparison):  # type: ignore[no-redef]
        pass

    class In(_Comparison):  # type: ignore[no-redef]
        pass

    class IsNull(_Test):  # type: ignore[no-redef]
        pass

    class IsNotNull(_Test):  # type: ignore[no-redef]
        pass


def _base_push_filters() -> Callable[..., Any] | None:
    from pyspark.sql.datasource import DataSourceReader

    return getattr(DataSourceReader, "pushFilters", None)


#: ``DataSourceReader.pushFilters`` as pyspark defines it (None on 4.0, which has no pushdown).
BASE_PUSH_FILTERS = _base_push_filters()
