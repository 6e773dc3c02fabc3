"""Plots of an inspect report, for notebooks: each function takes the rows of
:func:`jobs.inspect.dirty_ratios` (a Spark or pandas DataFrame) and returns a matplotlib Figure.

Figures are built without pyplot, so nothing accumulates in a global figure list and any backend works
(Agg in tests); Jupyter displays a returned Figure inline. Unreadable partitions (``error`` set) are left out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

#: One day, in ms.
_DAY_MS = 86_400_000
_MB = 1e6

_SELECTED, _NOT_SELECTED, _RETAINED, _DELETED = "tab:red", "tab:blue", "tab:gray", "tab:orange"


def as_pandas(rows: Any) -> pd.DataFrame:
    """The readable partitions of ``rows`` (a Spark DataFrame, a pandas DataFrame or a list of dicts) as pandas,
    with a ``name`` column (``topic-partition``)."""
    if hasattr(rows, "toPandas"):
        df = rows.toPandas()
    elif isinstance(rows, pd.DataFrame):
        df = rows.copy()
    else:
        df = pd.DataFrame(list(rows))
    if "error" in df:
        df = df[df["error"].isna()]
    df = df.sort_values(["topic", "partition"]).reset_index(drop=True)
    df["name"] = df["topic"] + "-" + df["partition"].astype(str)
    return df


def _figure(n_rows: int, height_per_row: float = 0.35, min_height: float = 2.5) -> tuple[Figure, Any]:
    fig = Figure(figsize=(9, max(min_height, 1.0 + height_per_row * n_rows)), layout="constrained")
    return fig, fig.add_subplot()


def dirty_ratio_chart(rows: Any) -> Figure:
    """Dirty ratio per partition (horizontal bars, red where compaction at now would select the partition),
    with each topic's min.cleanable.dirty.ratio as a tick."""
    df = as_pandas(rows)
    fig, ax = _figure(len(df))
    y = np.arange(len(df))
    colors = np.where(df["compaction_selected"].astype(bool), _SELECTED, _NOT_SELECTED)
    ax.barh(y, df["dirty_ratio"], color=colors)
    ax.scatter(df["min_cleanable_dirty_ratio"], y, marker="|", s=300, color="black",
               label="min.cleanable.dirty.ratio")
    ax.set_yticks(y, df["name"])
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("dirty ratio (cleanable / (clean + cleanable) bytes)")
    ax.set_title("Dirty ratio per partition (red: compaction at now selects it)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def reclaimable_chart(rows: Any) -> Figure:
    """Bytes per partition: what compaction would remove at now and what retention would delete at now,
    beside the partition's size."""
    df = as_pandas(rows)
    fig, ax = _figure(len(df), height_per_row=0.55)
    y = np.arange(len(df))
    h = 0.27
    ax.barh(y - h, df["bytes"] / _MB, height=h, color=_RETAINED, label="size")
    ax.barh(y, df["compaction_bytes_removed"] / _MB, height=h, color=_SELECTED, label="compaction removes")
    ax.barh(y + h, df["retention_bytes_deleted"] / _MB, height=h, color=_DELETED, label="retention deletes")
    ax.set_yticks(y, df["name"])
    ax.invert_yaxis()
    ax.set_xlabel("MB")
    measured = bool(df["compaction_measured"].all()) if len(df) else True
    ax.set_title("Reclaimable bytes at now" + ("" if measured else " (compaction: estimates)"))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def key_cardinality_chart(rows: Any) -> Figure:
    """Distinct keys against records, one point per partition: on the diagonal every record has its own key
    (nothing to compact); far below it keys churn."""
    df = as_pandas(rows)
    fig = Figure(figsize=(6.5, 5), layout="constrained")
    ax = fig.add_subplot()
    colors = np.where(df["compaction_selected"].astype(bool), _SELECTED, _NOT_SELECTED)
    ax.scatter(df["records"], df["distinct_keys"], c=colors)
    for _, r in df.iterrows():
        ax.annotate(r["name"], (r["records"], r["distinct_keys"]), fontsize=8, xytext=(4, 2),
                    textcoords="offset points")
    top = max(float(df["records"].max()) if len(df) else 1.0, 1.0)
    ax.plot([0, top], [0, top], color="black", linewidth=0.8, linestyle="--", label="one record per key")
    ax.set_xlabel("records")
    exact = bool(df["distinct_keys_exact"].all()) if len(df) else True
    ax.set_ylabel("distinct keys" + ("" if exact else " (HyperLogLog estimate)"))
    ax.set_title("Key cardinality against records")
    ax.legend(loc="upper left")
    return fig


def segment_ages_chart(rows: Any) -> Figure:
    """Every segment's age at now (now minus its largest timestamp, what retention.ms compares), one row of
    dots per partition, dot area by segment size; orange where retention would delete the segment (the
    oldest ``retention_segments_deleted`` of the partition)."""
    df = as_pandas(rows)
    fig, ax = _figure(len(df))
    for y, (_, r) in enumerate(df.iterrows()):
        ages = np.asarray(r["segment_age_ms"], dtype=float) / _DAY_MS
        sizes = np.asarray(r["segment_bytes"], dtype=float)
        deleted = np.arange(len(ages)) < int(r["retention_segments_deleted"] or 0)
        area = 20 + 180 * sizes / max(float(sizes.max()) if len(sizes) else 1.0, 1.0)
        ax.scatter(ages, np.full(len(ages), y), s=area, c=np.where(deleted, _DELETED, _RETAINED), alpha=0.8)
    ax.set_yticks(np.arange(len(df)), df["name"])
    ax.invert_yaxis()
    ax.set_xlabel("segment age at now (days)")
    ax.set_title("Segment ages (orange: retention deletes at now; area: size)")
    return fig


__all__ = ["as_pandas", "dirty_ratio_chart", "key_cardinality_chart", "reclaimable_chart", "segment_ages_chart"]
