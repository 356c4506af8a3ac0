"""v_R's per-partition total (``total_nbytes``) against the per-row sizes it replaces."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ssbj.core.rowsize import row_nbytes, total_nbytes

_TEXT = st.one_of(st.none(), st.text(max_size=6))
_BIN = st.one_of(st.none(), st.binary(max_size=6))


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(_TEXT, _BIN, st.one_of(st.none(), st.integers(-5, 5)), _TEXT), max_size=30),
    cut=st.tuples(st.integers(0, 30), st.integers(0, 30)),
    split=st.integers(0, 30),
)
def test_total_equals_the_rows_sizes_summed(rows: list[tuple], cut: tuple[int, int], split: int) -> None:
    cols = list(zip(*rows, strict=True)) if rows else [[], [], [], []]
    t = pa.table(
        {
            "s": pa.array(cols[0], pa.string()),
            "b": pa.array(cols[1], pa.large_binary()),
            "i": pa.array(cols[2], pa.int64()),
            "v": pa.array(cols[3], pa.string_view()),
        }
    )
    t = pa.concat_tables([t.slice(0, split), t.slice(split)])  # several chunks, each a slice of its buffers
    t = t.slice(min(cut), abs(cut[0] - cut[1]))
    assert total_nbytes(t) == int(row_nbytes(t).sum())


def test_dictionary_and_boolean_columns() -> None:
    t = pa.table(
        {
            "d": pa.array(["a", "bb", None, "a"]).dictionary_encode(),
            "f": pa.array([True, None, False, True]),
        }
    )
    assert total_nbytes(t) == int(row_nbytes(t).sum()) == (4 + 1) + (4 + 2) + 4 + (4 + 1) + 4
