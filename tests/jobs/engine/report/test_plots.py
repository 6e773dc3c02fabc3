"""jobs.engine.report.plots stays readable from a few partitions to thousands: bounded bars and labels (top-N plus an
"others" bar that adds up the rest correctly), log scales exactly where values span decades, per-topic
aggregation that adds up, key-cardinality labels that do not overlap. Rendered to PNG (Agg), no Spark.

Set SEGJOBS_PLOTS_DIR to keep the PNGs and look at them."""

from __future__ import annotations

import io
import os

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text
from PIL import Image

from jobs.engine.report import plots
from jobs.engine.report.run_report import human_bytes
from tests.support.inspect_rows import inspect_rows

CHARTS = ("dirty_ratio_chart", "reclaimable_chart", "key_cardinality_chart", "segment_ages_chart")


@pytest.fixture(scope="module", params=[4, 60, 2000], ids=lambda n: f"{n}-partitions")
def rows(request) -> pd.DataFrame:
    return inspect_rows(request.param)


def _png(fig, name: str) -> Image.Image:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    keep = os.environ.get("SEGJOBS_PLOTS_DIR")
    if keep:
        with open(os.path.join(keep, f"{name}.png"), "wb") as f:
            f.write(buf.getvalue())
    image = Image.open(io.BytesIO(buf.getvalue()))
    image.load()
    return image


def _readable(df: pd.DataFrame) -> pd.DataFrame:
    return plots.as_pandas(df)


@pytest.mark.parametrize("chart", CHARTS)
@pytest.mark.slow
def test_every_chart_renders_to_a_bounded_image(rows, chart) -> None:
    fig = getattr(plots, chart)(rows)
    image = _png(fig, f"{chart}-{len(rows)}")
    width, height = image.size
    # a figure with a row per partition would be hundreds of inches tall at 2,000 partitions
    assert 400 <= width <= 1200 and 150 <= height <= 1600, image.size
    ax = fig.axes[0]
    assert len(ax.get_yticklabels()) <= plots.TOP


@pytest.mark.parametrize("chart", ["dirty_ratio_chart", "reclaimable_chart", "segment_ages_chart"])
def test_bar_charts_show_the_top_n_and_others(rows, chart) -> None:
    readable = _readable(rows)
    if chart == "dirty_ratio_chart":  # a dirty ratio applies to compacted topics only
        readable = plots.compacted(readable)
        if readable.empty:
            return
    ax = getattr(plots, chart)(rows).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    if len(readable) <= plots.TOP:
        assert labels == list(readable["name"])
        assert "top" not in ax.get_title()
    else:
        assert len(labels) == plots.TOP
        assert labels[-1].startswith(f"others: {len(readable) - plots.TOP + 1:,} partitions")
        assert f"of {len(readable):,} partitions" in ax.get_title()


def test_others_bar_of_the_dirty_ratio_is_the_bytes_weighted_ratio_of_the_rest() -> None:
    df = plots.compacted(_readable(inspect_rows(500)))
    ax = plots.dirty_ratio_chart(df).axes[0]
    widths = [p.get_width() for p in ax.patches]
    top = df.sort_values("dirty_ratio", ascending=False, kind="stable")
    shown, rest = top.iloc[: plots.TOP - 1], top.iloc[plots.TOP - 1:]
    assert widths[:-1] == pytest.approx(list(shown["dirty_ratio"]))
    expected = rest["cleanable_bytes"].sum() / (rest["clean_bytes"].sum() + rest["cleanable_bytes"].sum())
    assert widths[-1] == pytest.approx(expected)
    # a histogram of every partition sits below the bars, and counts all of them
    hist = plots.dirty_ratio_chart(df).axes[1]
    assert hist.get_title() == f"All {len(df):,} partitions of compacted topics"
    assert sum(p.get_height() for p in hist.patches) == len(df)


def test_others_bar_of_reclaimable_bytes_adds_up_the_rest() -> None:
    df = _readable(inspect_rows(300))
    ax = plots.reclaimable_chart(df).axes[0]
    n = plots.TOP
    size, compaction, retention = (ax.patches[i * n:(i + 1) * n] for i in range(3))
    reclaim = df["compaction_bytes_removed"] + df["retention_bytes_deleted"]
    ranked = df.assign(r=reclaim).sort_values("r", ascending=False, kind="stable")
    rest = ranked.iloc[n - 1:]
    assert size[-1].get_width() == pytest.approx(rest["bytes"].sum())
    assert compaction[-1].get_width() == pytest.approx(rest["compaction_bytes_removed"].sum())
    assert retention[-1].get_width() == pytest.approx(rest["retention_bytes_deleted"].sum())
    # all the bytes are there: shown plus others
    assert sum(p.get_width() for p in size) == pytest.approx(df["bytes"].sum())


def test_the_others_bar_does_not_flatten_the_named_bars() -> None:
    """The axis is the named bars': "others" (the rest added up, hundreds of times any named bar) neither turns it
    logarithmic nor stretches it, so the named bars keep their proportions; it runs off the right end with its
    value written on it."""
    df = _readable(inspect_rows(300, topics=15, errors=0))
    size = np.linspace(1e6, 5e6, len(df)).round()  # partitions of 1 to 5 MB: one decade, a linear axis
    df["bytes"], df["compaction_bytes_removed"], df["retention_bytes_deleted"] = size, size * 0.3, size * 0.2
    fig = plots.reclaimable_chart(df)
    ax = fig.axes[0]
    bars = ax.patches[:plots.TOP]
    others, named = bars[-1].get_width(), [p.get_width() for p in bars[:-1]]
    assert others > 100 * max(named)
    assert ax.get_xscale() == "linear" and max(named) <= ax.get_xlim()[1] < others
    to_axes = (ax.transData + ax.transAxes.inverted()).transform
    x0 = to_axes((0, 0))[0]
    lengths = [to_axes((w, 0))[0] - x0 for w in named]
    assert max(lengths) > 0.85, "the largest named bar is squeezed into the left of the chart"
    assert min(lengths) / max(lengths) == pytest.approx(min(named) / max(named), rel=0.01)  # proportions kept
    rest = df.nsmallest(len(df) - plots.TOP + 1, "bytes")  # reclaimable goes with size here
    columns = ("bytes", "compaction_bytes_removed", "retention_bytes_deleted")
    assert [t.get_text() for t in ax.texts] == [f"{human_bytes(rest[c].sum())} \u25b6" for c in columns]
    _png(fig, "reclaimable-others")


@pytest.mark.parametrize("by", ["partition", "topic"])
def test_on_a_log_axis_too_the_others_bar_runs_off_the_named_bars_axis(by: str) -> None:
    df = _readable(inspect_rows(1200, topics=300))
    ax = plots.reclaimable_chart(df, by=by).axes[0]
    bars = ax.patches[:plots.TOP]
    others, largest = bars[-1].get_width(), max(p.get_width() for p in bars[:-1])
    assert ax.get_xscale() == "log" and largest <= ax.get_xlim()[1] < others
    assert f"{human_bytes(others)} \u25b6" in [t.get_text() for t in ax.texts]


def test_per_topic_aggregation_adds_up() -> None:
    df = _readable(inspect_rows(120, topics=6))
    ax = plots.dirty_ratio_chart(df, by="topic").axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    compacted = plots.compacted(df).groupby("topic")
    assert 0 < len(labels) == compacted.ngroups < 6  # the delete-only topics have no dirty ratio
    for label, bar, (topic, g) in zip(labels, ax.patches, compacted):
        assert label == f"{topic} ({int(g['compaction_selected'].astype(bool).sum())}/{len(g)} selected)"
        weighted = g["cleanable_bytes"].sum() / (g["clean_bytes"].sum() + g["cleanable_bytes"].sum())
        assert bar.get_width() == pytest.approx(weighted)
    ax = plots.reclaimable_chart(df, by="topic").axes[0]
    assert [p.get_width() for p in ax.patches[:6]] == pytest.approx(list(df.groupby("topic")["bytes"].sum()))
    ax = plots.segment_ages_chart(df, by="topic").axes[0]
    assert len(ax.get_yticklabels()) == 6


@pytest.mark.slow
def test_log_scale_exactly_where_values_span_decades() -> None:
    wide = inspect_rows(200)  # sizes from 100 KB to tens of GB
    assert plots.reclaimable_chart(wide).axes[0].get_xscale() == "log"
    assert plots.key_cardinality_chart(wide).axes[0].get_xscale() == "log"
    narrow = inspect_rows(plots.TOP, errors=0)  # no "others" bar, which would add up to far more
    narrow[["bytes", "compaction_bytes_removed", "retention_bytes_deleted"]] = [[1000, 500, 300]] * len(narrow)
    narrow["records"], narrow["distinct_keys"] = 50_000, 20_000
    assert plots.reclaimable_chart(narrow).axes[0].get_xscale() == "linear"
    assert plots.key_cardinality_chart(narrow).axes[0].get_xscale() == "linear"
    # the histogram under the dirty ratios: log counts only when counts span decades
    skewed = plots.compacted(wide).copy()
    assert len(skewed) > 100
    skewed["dirty_ratio"] = np.where(np.arange(len(skewed)) < 1, 0.9, 0.05)  # 1 against 100+: > 2 decades
    assert plots.dirty_ratio_chart(skewed).axes[1].get_yscale() == "log"
    assert plots.dirty_ratio_chart(wide).axes[1].get_yscale() == "linear"


@pytest.mark.slow
def test_key_cardinality_labels_are_few_and_do_not_overlap(rows) -> None:
    fig = plots.key_cardinality_chart(rows)
    ax = fig.axes[0]
    _png(fig, f"key-labels-{len(rows)}")  # draws, so the text extents are final
    texts = [t for t in ax.texts if t.get_text()]
    readable = _readable(rows)
    assert len(texts) == min(plots.LABELS, len(readable))
    churn = (readable["records"] - readable["distinct_keys"]).sort_values(ascending=False, kind="stable")
    assert {t.get_text() for t in texts} == set(readable.loc[churn.index[: len(texts)], "name"])
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    boxes = [Text.get_window_extent(t, renderer) for t in texts]  # the text alone, not its leader line
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), "two labels overlap"
    # every label lies inside the axes
    frame = ax.get_window_extent(renderer)
    assert all(frame.x0 - 1 <= b.x0 and b.x1 <= frame.x1 + 1 for b in boxes)


def test_segment_ages_rows_draw_a_bounded_sample_with_the_extremes() -> None:
    df = inspect_rows(2000)
    ax = plots.segment_ages_chart(df).axes[0]
    others = ax.collections[-1]
    offsets = others.get_offsets()
    assert len(offsets) <= plots.MAX_DOTS
    readable = _readable(df)
    units = readable.assign(oldest=[max(a) for a in readable["segment_age_ms"]])
    rest = units.sort_values("oldest", ascending=False, kind="stable").iloc[plots.TOP - 1:]
    ages = np.concatenate([np.asarray(a, float) for a in rest["segment_age_ms"]]) / 86_400_000
    assert len(ages) > plots.MAX_DOTS
    assert offsets[:, 0].max() == pytest.approx(ages.max()) and offsets[:, 0].min() == pytest.approx(ages.min())


def test_unknown_grouping_is_refused() -> None:
    with pytest.raises(ValueError, match="by='cluster'"):
        plots.dirty_ratio_chart(inspect_rows(10), by="cluster")


def test_delete_only_topics_have_no_bar_in_the_dirty_ratio_chart() -> None:
    df = _readable(inspect_rows(20, topics=4, errors=0))
    deleting = df[~df["policy"].str.contains("compact")]
    assert len(deleting) and deleting["dirty_ratio"].isna().all()  # as inspect reports them
    ax = plots.dirty_ratio_chart(df).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == list(plots.compacted(df)["name"]) and not set(labels) & set(deleting["name"])
    assert f"{len(deleting)} delete-only partition(s) left out: no dirty ratio" in ax.get_title()
    only_delete = plots.dirty_ratio_chart(deleting)  # nothing to draw: says so instead of an empty frame
    assert "no partition of a compacted topic" in only_delete.axes[0].texts[0].get_text()
