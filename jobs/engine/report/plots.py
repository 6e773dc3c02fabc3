"""Plots of an inspect report, for notebooks: each function takes the rows of
:func:`jobs.api.dirty_ratios` (a Spark or pandas DataFrame) and returns a matplotlib Figure; and one
plot of the run ledger (:func:`reclaimed_per_run_chart`, from :func:`jobs.engine.report.ledger.read_history`).

Figures are built without pyplot, so nothing accumulates in a global figure list and any backend works
(Agg in tests); Jupyter displays a returned Figure inline. Unreadable partitions (``error`` set) are left out.

They stay readable from a handful of partitions to thousands:

- Bar charts show one bar per partition (``by="partition"``) or per topic (``by="topic"``, the topic's
  partitions added up). Beyond ``top`` bars they show the ``top - 1`` largest by what the chart is about,
  plus one grey "others" bar that adds up the rest, and the title says how many are shown.
- An axis of bytes, records or ages switches to a log scale when its values span more than two decades,
  so that small partitions do not vanish beside big ones.
- The key-cardinality scatter labels only the partitions where most records are superseded, never all.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from jobs.engine.report.run_report import human_bytes
from segment_io.units import DAY_MS

#: Bars (or rows) a chart shows at most, "others" included.
TOP = 30
#: Points the key-cardinality chart labels at most.
LABELS = 8
#: A numeric axis goes logarithmic when its positive values span more than this many decades.
LOG_DECADES = 2.0

_SELECTED, _NOT_SELECTED, _RETAINED, _DELETED, _OTHERS = "tab:red", "tab:blue", "tab:gray", "tab:orange", "0.6"
_BYTES_AXIS = FuncFormatter(lambda v, _: human_bytes(v))


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
    df["name"] = df["topic"] + "-" + df["partition"].astype(int).astype(str)
    return df


# --------------------------------------------------------------------------------------------------
# Units (partitions or topics), the top-N cut, and scales
# --------------------------------------------------------------------------------------------------

_SUMMED = ("bytes", "clean_bytes", "cleanable_bytes", "records", "distinct_keys", "superseded_records",
           "compaction_bytes_removed", "retention_bytes_deleted")


def _deleted_flags(r: pd.Series) -> list[bool]:
    """Per segment (oldest first): would retention delete it at now (the oldest ``retention_segments_deleted``)."""
    n, deleted = len(r["segment_age_ms"]), r["retention_segments_deleted"]
    return (np.arange(n) < (0 if pd.isna(deleted) else int(deleted))).tolist()


def _summary(df: pd.DataFrame, name: str, *, others: bool = False) -> dict[str, Any]:
    """One bar's worth of partitions added up: sums, the bytes-weighted dirty ratio, the selected count and
    every segment. Dirty ratio is recomputed from bytes (a mean of ratios would let tiny partitions weigh
    as much as huge ones)."""
    out: dict[str, Any] = {k: float(df[k].fillna(0).sum()) for k in _SUMMED}
    total = out["clean_bytes"] + out["cleanable_bytes"]
    ratios = df["min_cleanable_dirty_ratio"].dropna().unique()
    out.update(
        name=name, partitions=len(df), others=others, selected=int(df["compaction_selected"].astype(bool).sum()),
        dirty_ratio=out["cleanable_bytes"] / total if total else 0.0,
        min_cleanable_dirty_ratio=float(ratios[0]) if len(ratios) == 1 and not others else np.nan,
        segment_age_ms=[a for ages in df["segment_age_ms"] for a in ages],
        segment_bytes=[b for sizes in df["segment_bytes"] for b in sizes],
        segment_deleted=[d for _, r in df.iterrows() for d in _deleted_flags(r)],
        keys_exact=bool(df["distinct_keys_exact"].astype(bool).all()) if len(df) else True,
        measured=bool(df["compaction_measured"].astype(bool).all()) if len(df) else True,
    )
    return out


def _units(df: pd.DataFrame, by: str) -> pd.DataFrame:
    """One row per partition or per topic (``by``), in topic/partition order, with :func:`_summary`'s columns
    and ``key``: the partition's name or the topic (the column of ``df`` it selects is ``_KEY_COLUMN[by]``)."""
    if by == "partition":  # vectorised: thousands of one-partition summaries would take seconds
        u = df[list(_SUMMED)].astype(float).fillna(0)
        ratio = df["min_cleanable_dirty_ratio"].astype(float)
        u = u.assign(key=df["name"], name=df["name"], partitions=1, others=False,
                     selected=df["compaction_selected"].astype(bool).astype(int),
                     dirty_ratio=df["dirty_ratio"].astype(float).fillna(0), min_cleanable_dirty_ratio=ratio,
                     segment_age_ms=df["segment_age_ms"], segment_bytes=df["segment_bytes"],
                     # a column whose cells are lists, which pandas-stubs' assign() does not foresee
                     segment_deleted=[_deleted_flags(r) for _, r in df.iterrows()])  # type: ignore[misc]
        return u.reset_index(drop=True)
    if by == "topic":
        return pd.DataFrame([{**_summary(g, str(topic)), "key": topic}
                             for topic, g in df.groupby("topic", sort=True)])
    raise ValueError(f"by={by!r}: expected 'partition' or 'topic'")


_KEY_COLUMN = {"partition": "name", "topic": "topic"}


def _top(units: pd.DataFrame, df: pd.DataFrame, by: str, key: str, top: int, ranking: str,
         ) -> tuple[pd.DataFrame, str]:
    """At most ``top`` rows: all units when they fit, else the ``top - 1`` largest by ``key`` (largest first)
    and one "others" row adding up the rest. Also the note for the title ("" when everything is shown);
    ``ranking`` says in it what ``key`` is."""
    if len(units) <= top:
        return units.reset_index(drop=True), ""
    ranked = units.sort_values(key, ascending=False, kind="stable")
    shown, rest = ranked.iloc[: top - 1], ranked.iloc[top - 1:]
    what = "partitions" if by == "partition" else "topics"
    others = _summary(df[df[_KEY_COLUMN[by]].isin(set(rest["key"]))], f"others: {len(rest):,} {what}", others=True)
    note = f"top {top - 1} of {len(units):,} {what} by {ranking}"
    return pd.concat([shown, pd.DataFrame([others])], ignore_index=True), note


def _labels(bars: pd.DataFrame, by: str, *, selected: bool = False) -> list[str]:
    """Tick labels: partition names, or topics with their partition count (and how many are selected)."""
    out = []
    for _, r in bars.iterrows():
        if r["others"] or by == "partition":
            out.append(r["name"] + (f" ({r['selected']:,} selected)" if r["others"] and selected else ""))
        elif selected:
            out.append(f"{r['name']} ({r['selected']}/{r['partitions']} selected)")
        else:
            out.append(f"{r['name']} ({r['partitions']} partition{'' if r['partitions'] == 1 else 's'})")
    return out


def _spans_decades(values: Any, decades: float = LOG_DECADES) -> bool:
    """True when the positive ``values`` span more than ``decades`` powers of ten."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    return len(v) > 1 and np.log10(v.max() / v.min()) > decades


def _bar_height(n_rows: int, height_per_row: float = 0.35) -> float:
    """Inches for a bar chart of ``n_rows`` rows: room for each label, and a floor for a handful."""
    return max(2.5, 1.2 + height_per_row * n_rows)


def _bar_figure(n_rows: int, height_per_row: float = 0.35) -> tuple[Figure, Any]:
    fig = Figure(figsize=(10, _bar_height(n_rows, height_per_row)), layout="constrained")
    return fig, fig.add_subplot()


def _title(ax: Any, title: str, note: str) -> None:
    ax.set_title(title + (f"\n{note}" if note else ""), fontsize=11)


def _selected_color(r: pd.Series) -> str:
    return _OTHERS if r["others"] else (_SELECTED if r["selected"] else _NOT_SELECTED)


# --------------------------------------------------------------------------------------------------
# Charts
# --------------------------------------------------------------------------------------------------


def compacted(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of topics whose cleanup.policy includes compact: the only ones a dirty ratio applies to (inspect
    reports it as null for delete-only topics)."""
    return df[df["policy"].fillna("").str.contains("compact", regex=False)]


def dirty_ratio_chart(rows: Any, *, by: str = "partition", top: int = TOP) -> Figure:
    """Dirty ratio per partition or per topic of the compacted topics (delete-only topics have none and are
    left out; the title counts them): horizontal bars, red where compaction at now would select it (a topic is
    red when it has a selected partition), with min.cleanable.dirty.ratio as a black tick. Beyond ``top`` bars:
    the dirtiest, "others" with the bytes-weighted ratio of the rest, and below them a histogram of every
    compacted partition's ratio (log counts when they span more than two decades)."""
    everything = as_pandas(rows)
    df = compacted(everything)
    left_out = len(everything) - len(df)
    units = _units(df, by)
    if df.empty:
        fig, ax = _bar_figure(1)
        ax.text(0.5, 0.5, f"no partition of a compacted topic ({left_out} delete-only: no dirty ratio)",
                ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    bars, note = _top(units, df, by, "dirty_ratio", top, "dirty ratio")
    cut = len(bars) < len(units)  # then a histogram of every partition follows the bars
    if left_out:
        note = "; ".join(n for n in (note, f"{left_out:,} delete-only partition(s) left out: no dirty ratio") if n)
    height = _bar_height(len(bars))
    fig = Figure(figsize=(10, height + (3.0 if cut else 0.0)), layout="constrained")
    grid = fig.add_gridspec(2 if cut else 1, 1, height_ratios=[height, 3.0] if cut else [1])
    ax = fig.add_subplot(grid[0])
    y = np.arange(len(bars))
    ax.barh(y, bars["dirty_ratio"], color=[_selected_color(r) for _, r in bars.iterrows()])
    ax.scatter(bars["min_cleanable_dirty_ratio"], y, marker="|", s=300, color="black",
               label="min.cleanable.dirty.ratio")
    ax.set_yticks(y, _labels(bars, by, selected=True), fontsize=8 if len(bars) > 15 else 10)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("dirty ratio (cleanable / (clean + cleanable) bytes)")
    _title(ax, f"Dirty ratio per {by} (red: compaction at now selects it)", note)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if cut:
        _ratio_histogram(fig.add_subplot(grid[1]), df)
    return fig


def _ratio_histogram(ax: Any, df: pd.DataFrame) -> None:
    """Every partition's dirty ratio (of compacted topics) in 20 bins, selected ones stacked in red."""
    bins = np.linspace(0, 1, 21)
    ratios = df["dirty_ratio"].astype(float).fillna(0).to_numpy()
    sel = df["compaction_selected"].astype(bool).to_numpy()
    counts = [np.histogram(ratios[~sel], bins)[0], np.histogram(ratios[sel], bins)[0]]
    ax.hist([ratios[~sel], ratios[sel]], bins=bins, stacked=True, color=[_NOT_SELECTED, _SELECTED],
            label=["not selected", "compaction at now selects"])
    if _spans_decades(counts[0] + counts[1]):
        ax.set_yscale("log")
    ax.set_xlim(0, 1)
    ax.set_xlabel("dirty ratio")
    ax.set_ylabel("partitions" + (" (log scale)" if ax.get_yscale() == "log" else ""))
    ax.set_title(f"All {len(df):,} partitions of compacted topics", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))


def reclaimable_chart(rows: Any, *, by: str = "partition", top: int = TOP) -> Figure:
    """Bytes per partition or per topic: what compaction would remove at now and what retention would delete
    at now, beside the size. Beyond ``top`` rows: the ones with the most to reclaim, and "others" adding up
    the rest. The byte axis is logarithmic when sizes span more than two decades. The axis is scaled to the named
    bars: an "others" bar adding up hundreds of partitions runs off its right end, its value written on it, rather
    than squeezing the named bars into a corner of the chart."""
    df = as_pandas(rows)
    units = _units(df, by)
    units["reclaimable"] = units["compaction_bytes_removed"] + units["retention_bytes_deleted"]
    bars, note = _top(units, df, by, "reclaimable", top, "bytes reclaimable")
    fig, ax = _bar_figure(len(bars), height_per_row=0.5)
    y = np.arange(len(bars))
    h = 0.27
    ax.barh(y - h, bars["bytes"], height=h, color=_RETAINED, label="size")
    ax.barh(y, bars["compaction_bytes_removed"], height=h, color=_SELECTED, label="compaction removes")
    ax.barh(y + h, bars["retention_bytes_deleted"], height=h, color=_DELETED, label="retention deletes")
    ax.set_yticks(y, _labels(bars, by), fontsize=8 if len(bars) > 15 else 10)
    ax.invert_yaxis()
    columns = ["bytes", "compaction_bytes_removed", "retention_bytes_deleted"]
    named = bars[~bars["others"].astype(bool)]
    values = named[columns].to_numpy().ravel()
    if _spans_decades(values):
        ax.set_xscale("log")
    if len(named) < len(bars):
        _fit_to_named(ax, bars, columns, offsets=[-h, 0.0, h], log=ax.get_xscale() == "log")
    ax.xaxis.set_major_formatter(_BYTES_AXIS)
    ax.set_xlabel("bytes" + (" (log scale)" if ax.get_xscale() == "log" else ""))
    measured = bool(df["compaction_measured"].astype(bool).all()) if len(df) else True
    _title(ax, f"Reclaimable bytes at now, per {by}" + ("" if measured else " (compaction: estimates)"), note)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def _fit_to_named(ax: Any, bars: pd.DataFrame, columns: list[str], *, offsets: list[float], log: bool) -> None:
    """Scale the byte axis of a bar chart to its named bars (``bars``' rows that are not "others"), and write on
    each "others" bar that runs past the right end its value (``columns``: one set of bars each, at ``offsets``
    from the row)."""
    named = bars[~bars["others"].astype(bool)][columns].to_numpy(dtype=float)
    largest = float(named.max()) if named.size else 0.0
    if largest <= 0:
        return
    right = largest * (1.6 if log else 1.08)
    ax.set_xlim(right=right)
    for y, (_, r) in enumerate(bars.iterrows()):
        if not r["others"]:
            continue
        for column, dy in zip(columns, offsets):
            if r[column] > right:
                ax.annotate(f"{human_bytes(r[column])} \u25b6", (1.0, y + dy), xycoords=("axes fraction", "data"),
                            xytext=(-4, 0), textcoords="offset points", ha="right", va="center", fontsize=7,
                            bbox=dict(boxstyle="square,pad=0.1", facecolor="white", edgecolor="none", alpha=0.8))


def key_cardinality_chart(rows: Any, *, labels: int = LABELS) -> Figure:
    """Distinct keys against records, one point per partition: on the diagonal every record has its own key
    (nothing to compact); far below it keys churn. Only the ``labels`` partitions with the most superseded
    records are named; colours are topics (up to ten), else red/blue for selected or not. Both axes are
    logarithmic when records span more than two decades (empty partitions are then left out, and counted)."""
    df = as_pandas(rows)
    fig = Figure(figsize=(8, 6), layout="constrained")
    ax = fig.add_subplot()
    records = df["records"].astype(float).to_numpy()
    keys = df["distinct_keys"].astype(float).to_numpy()
    log = _spans_decades(records)
    shown = (records > 0) & (keys > 0) if log else np.ones(len(df), bool)
    size, alpha = (36, 0.9) if len(df) <= 100 else (12, 0.5)
    topics = sorted(df["topic"].unique())
    if len(topics) <= 10:
        for i, t in enumerate(topics):
            m = shown & (df["topic"] == t).to_numpy()
            ax.scatter(records[m], keys[m], s=size, alpha=alpha, color=f"C{i}", label=t)
    else:
        sel = df["compaction_selected"].astype(bool).to_numpy()
        ax.scatter(records[shown & ~sel], keys[shown & ~sel], s=size, alpha=alpha, color=_NOT_SELECTED,
                   label="not selected")
        ax.scatter(records[shown & sel], keys[shown & sel], s=size, alpha=alpha, color=_SELECTED,
                   label="compaction at now selects")
    churn = (df["records"].astype(float) - df["distinct_keys"].astype(float)).to_numpy()
    named = [i for i in np.argsort(-churn, kind="stable") if shown[i]][:labels]
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    top = max(float(records.max()) if len(df) else 1.0, 1.0)
    low = max(float(records[shown].min()) if shown.any() else 1.0, 1.0) if log else 0.0
    ax.plot([low, top], [low, top], color="black", linewidth=0.8, linestyle="--", label="one record per key")
    _label_points(ax, [df["name"].iloc[i] for i in named], records[named], keys[named])  # once the limits are set
    ax.set_xlabel("records" + (" (log scale)" if log else ""))
    exact = bool(df["distinct_keys_exact"].astype(bool).all()) if len(df) else True
    ax.set_ylabel("distinct keys" + ("" if exact else " (HyperLogLog estimate)") + (" (log scale)" if log else ""))
    hidden = int((~shown).sum())
    note = (f"{len(df):,} partitions; the {min(labels, int(shown.sum()))} with the most superseded records named"
            + (f"; {hidden} empty not shown" if hidden else ""))
    _title(ax, "Key cardinality against records", note)
    ax.legend(loc="upper left", fontsize=8)
    return fig


def _label_points(ax: Any, names: list[str], xs: np.ndarray, ys: np.ndarray, fontsize: float = 8) -> None:
    """Name points without labels running into each other: each label goes beside its point, moved down
    (or up) by whole label heights, with a thin leader line, until it overlaps no label placed before.
    Works in axes fractions, from the axes' current limits and size."""
    if not names:
        return
    ax.autoscale_view()
    to_axes = ax.transScale + ax.transLimits
    width_in, height_in = ax.figure.get_size_inches() * 0.8  # the axes' share of the figure, about
    line_h = fontsize * 1.4 / 72 / height_in
    char_w = fontsize * 0.6 / 72 / width_in
    placed: list[tuple[float, float, float, float]] = []  # x0, x1, y0, y1 of labels, in axes fractions
    order = np.argsort(-np.asarray(ys, dtype=float), kind="stable")
    for i in order:
        px, py = to_axes.transform((xs[i], ys[i]))
        w = char_w * len(names[i])
        left = px + 0.01 + w > 0.98  # no room on the right: write it to the left of the point
        x0 = px - 0.01 - w if left else px + 0.01
        for step in range(0, 40):
            ty = py + (-1) ** step * ((step + 1) // 2) * line_h
            if 0 <= ty <= 1 - line_h and not any(x0 < b[1] and b[0] < x0 + w and ty < b[3] and b[2] < ty + line_h
                                                   for b in placed):
                break
        placed.append((x0, x0 + w, ty, ty + line_h))
        ax.annotate(names[i], (xs[i], ys[i]), xytext=(x0 + (w if left else 0), ty + line_h / 2),
                    textcoords="axes fraction", fontsize=fontsize, va="center", ha="right" if left else "left",
                    arrowprops=None if step == 0 else dict(arrowstyle="-", linewidth=0.5, color="0.4"))


def segment_ages_chart(rows: Any, *, by: str = "partition", top: int = TOP) -> Figure:
    """Every segment's age at now (now minus its largest timestamp, what retention.ms compares), one row of
    dots per partition or topic, dot area by segment size; orange where retention would delete the segment.
    Beyond ``top`` rows: the partitions (topics) with the oldest segments, and "others" holding the other
    segments (a row of more than :data:`MAX_DOTS` dots draws an even sample, always with the oldest and
    youngest). The age axis is logarithmic when ages span more than two decades."""
    df = as_pandas(rows)
    units = _units(df, by)
    units["oldest"] = [max(a) if len(a) else 0 for a in units["segment_age_ms"]]
    lines, note = _top(units, df, by, "oldest", top, "oldest segment")
    fig, ax = _bar_figure(len(lines))
    all_ages = np.asarray([a for ages in lines["segment_age_ms"] for a in ages], dtype=float) / DAY_MS
    log = _spans_decades(all_ages) and bool((all_ages > 0).all())
    biggest = max([max(b) for b in lines["segment_bytes"] if len(b)] or [1])
    alpha = 0.8 if len(all_ages) < 2_000 else 0.4
    for y, (_, r) in enumerate(lines.iterrows()):
        ages = np.asarray(r["segment_age_ms"], dtype=float) / DAY_MS
        sizes = np.asarray(r["segment_bytes"], dtype=float)
        deleted = np.asarray(r["segment_deleted"], dtype=bool)
        if len(ages) > MAX_DOTS:
            keep = _even_sample(ages, MAX_DOTS)
            ages, sizes, deleted = ages[keep], sizes[keep], deleted[keep]
        area = 8 + 150 * sizes / max(float(biggest), 1.0)
        ax.scatter(ages, np.full(len(ages), y), s=area, c=np.where(deleted, _DELETED, _RETAINED), alpha=alpha,
                   linewidths=0)
    ax.set_yticks(np.arange(len(lines)), _labels(lines, by), fontsize=8 if len(lines) > 15 else 10)
    ax.invert_yaxis()
    if log:
        ax.set_xscale("log")
    ax.set_xlabel("segment age at now (days" + (", log scale)" if log else ")"))
    _title(ax, "Segment ages (orange: retention deletes at now; area: size)", note)
    return fig


#: Dots one row of the segment-ages chart draws at most (beyond, drawing takes seconds and shows nothing more).
MAX_DOTS = 3_000


def _even_sample(ages: np.ndarray, n: int) -> np.ndarray:
    """Indices of ``n`` of ``ages`` spread evenly over their order by age, the oldest and youngest included."""
    order = np.argsort(ages, kind="stable")
    return order[np.unique(np.linspace(0, len(order) - 1, n).round().astype(int))]


# --------------------------------------------------------------------------------------------------
# The run ledger
# --------------------------------------------------------------------------------------------------

#: Topics the per-run chart colours at most, "others" included.
LEDGER_TOPICS = 8


def reclaimed_per_run_chart(history: Any, *, topics: int = LEDGER_TOPICS) -> Figure:
    """Bytes reclaimed per run of a ledger (a :class:`jobs.engine.report.ledger.History`, or its ``run_topic_frame()``),
    one bar per run, oldest left, stacked by topic (by topic and log dir, ``orders (/var/kafka/a)``, when the runs
    cover several log dirs): the ``topics - 1`` topics that got the most back, plus one grey "others" part adding up
    the rest. Dry runs are hatched: what they would have reclaimed."""
    df = history.run_topic_frame() if hasattr(history, "run_topic_frame") else pd.DataFrame(history)
    if "series" not in df.columns:  # a frame of one's own, with topics alone
        df = df.assign(series=df["topic"])
    runs = df.drop_duplicates("run_id")[["run_id", "label", "dry_run"]].reset_index(drop=True)
    fig = Figure(figsize=(10, 4.5), layout="constrained")
    ax = fig.add_subplot()
    if runs.empty:
        ax.text(0.5, 0.5, "no runs in the ledger", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    table = df.pivot_table(index="run_id", columns="series", values="bytes_removed", aggfunc="sum", fill_value=0)
    table = table.reindex(runs["run_id"]).fillna(0)
    ranked = table.sum().sort_values(ascending=False, kind="stable").index.tolist()
    note = ""
    if len(ranked) > topics:
        kept, rest = ranked[: topics - 1], ranked[topics - 1:]
        table = table[kept].assign(**{f"others: {len(rest):,} topics": table[rest].sum(axis=1)})
        note = f"top {topics - 1} of {len(ranked):,} topics by bytes reclaimed"
    else:
        table = table[ranked]
    x = np.arange(len(runs))
    bottom = np.zeros(len(runs))
    hatches = ["//" if d else "" for d in runs["dry_run"]]
    for i, topic in enumerate(table.columns):
        values = table[topic].to_numpy(dtype=float)
        color = _OTHERS if str(topic).startswith("others: ") else f"C{i % 10}"
        bars = ax.bar(x, values, bottom=bottom, color=color, label=str(topic), edgecolor="white", linewidth=0.5)
        for bar, hatch in zip(bars, hatches):
            bar.set_hatch(hatch)
        bottom += values
    ax.set_xticks(x, runs["label"], rotation=45, ha="right", fontsize=7 if len(runs) > 15 else 9)
    ax.yaxis.set_major_formatter(_BYTES_AXIS)
    ax.set_ylabel("bytes reclaimed")
    dry = " (hatched: dry runs, what they would reclaim)" if runs["dry_run"].any() else ""
    _title(ax, f"Bytes reclaimed per run, oldest left{dry}", note)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return fig


__all__ = ["LABELS", "LEDGER_TOPICS", "TOP", "as_pandas", "compacted", "dirty_ratio_chart",
           "key_cardinality_chart", "reclaimable_chart", "reclaimed_per_run_chart", "segment_ages_chart"]
