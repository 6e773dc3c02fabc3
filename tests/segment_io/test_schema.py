"""The column helpers of segment_io.schema read validity bitmaps and integer buffers directly (no compute call):
they must answer what Arrow's own ``is_valid`` / ``fill_null(0)`` / typed ``pa.array`` answer, on sliced
arrays, several chunks, all-null chunks and every integer width."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from segment_io.schema import arrow_array, int64_or_zero, validity

_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]


@st.composite
def _columns(draw):
    typ = draw(st.sampled_from(_TYPES))
    bound = 2 ** (typ.bit_width - 1)
    chunks = []
    for _ in range(draw(st.integers(1, 3))):
        values = draw(st.lists(st.none() | st.integers(-bound, bound - 1), max_size=40))
        arr = pa.array(values, typ)
        start = draw(st.integers(0, len(values)))
        chunks.append(arr.slice(start, draw(st.integers(0, len(values) - start))))
    if draw(st.booleans()):
        chunks.append(pa.nulls(draw(st.integers(0, 5)), typ))
    column = pa.chunked_array(chunks, typ)
    return column if len(chunks) > 1 or draw(st.booleans()) else chunks[0]


@given(_columns())
def test_validity_and_int64_or_zero_read_the_buffers_as_arrow_does(column) -> None:
    expected_valid = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), np.bool_)
    expected_ints = np.asarray(column.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    assert np.array_equal(validity(column), expected_valid)
    got = int64_or_zero(column)
    assert got.dtype == np.int64 and np.array_equal(got, expected_ints)


def test_validity_of_a_binary_column() -> None:
    keys = pa.array([b"a", None, b"cc", None, b""] * 5).slice(3, 17)
    assert np.array_equal(validity(keys), keys.is_valid().to_numpy(zero_copy_only=False))


def test_arrow_array_gives_the_type_asked_for() -> None:
    for dtype, typ in [(np.int64, pa.int64()), (np.int32, pa.int64()), (np.int8, pa.int8()), (np.bool_, pa.bool_()),
                       (np.int64, pa.int32())]:
        values = np.arange(5).astype(dtype)
        arr = arrow_array(values, typ)
        assert arr.type == typ and arr.equals(pa.array(values, type=typ))


def test_the_data_source_page_lists_every_field_of_the_default_schema() -> None:
    """docs/guide/data-source.md's table of the default schema: every field of RECORD_SCHEMA, in order, with the
    Spark type and nullability the data source declares, and a meaning; no field the schema does not have."""
    from segment_io.spark.schemas import SEGMENTS
    from tests.support.paths import REPO

    text = (REPO / "docs" / "guide" / "data-source.md").read_text()
    table = text.split("<!-- record-schema:", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    rows = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in table]
    expected = [(f"`{f.name}`", f"`{f.dataType.simpleString()}`", "yes" if f.nullable else "no")
                for f in SEGMENTS.spark_schema.fields]
    assert [tuple(row[:3]) for row in rows] == expected, "\n".join(f"| {n} | {t} | {z} | ... |" for n, t, z in expected)
    assert all(len(row) == 4 and row[3] for row in rows)
