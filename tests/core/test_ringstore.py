"""H_S's row ring: the string bytes it can still take without growing a byte ring (``byte_room``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ssbj.core.ringstore import RowRing
from ssbj.core.rowsize import total_nbytes


def _rows(rng: np.random.Generator, n: int, b: bool = True) -> pa.Table:
    t = pa.table(
        {
            "k": pa.array(rng.integers(0, 9, n), pa.int64()),
            "a": pa.array(["x" * int(i) for i in rng.integers(0, 40, n)]),
            "b": pa.array([b"y" * int(i) for i in rng.integers(0, 10, n)], pa.large_binary()),
            "f": pa.array(rng.random(n) < 0.5),
        }
    )
    return t if b else t.remove_column(2)


def test_rows_within_the_byte_room_do_not_grow_the_byte_ring() -> None:
    """Exact with one byte ring; with several each is assumed to fill at its share (a ring that does not grows)."""
    rng = np.random.default_rng(11)
    schema = _rows(rng, 1).schema.remove(2)
    ring = RowRing(schema, ["a", "f"], 64)  # the key is not stored: its 8 bytes still count
    ring.append(_rows(rng, 10, b=False))
    ring.set_capacity(64, var_extra=800)
    held = ring.var_capacity
    room = ring.byte_room()
    assert room is not None
    fixed, free = room
    assert fixed == 8 + 4 + 1  # the key (not stored), the string's offset, the flag
    taken = 0
    while True:  # rows one at a time while their strings fit what the ring said it can take
        t = _rows(rng, 1, b=False)
        if taken + total_nbytes(t) - fixed > free or ring.hi - ring.lo == ring.cap:
            break
        ring.append(t)
        taken += total_nbytes(t) - fixed
    assert ring.var_capacity == held
    assert taken > free - 40  # the bound is tight: the next row (up to 39 bytes) did not fit


def test_no_bound_without_byte_rings_or_with_a_variable_width_column_not_stored() -> None:
    rng = np.random.default_rng(1)
    schema = _rows(rng, 1).schema
    assert RowRing(pa.schema([schema.field("k"), schema.field("f")]), ["k", "f"]).byte_room() is None
    assert RowRing(schema, ["k", "b", "f"]).byte_room() is None  # "a" is not stored


@settings(max_examples=40, deadline=None)
@given(
    head=st.sampled_from([0, 2**32 - 100, 2**33 - 7, 5 * 2**32 + 3]),
    ops=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 30)), min_size=1, max_size=25),
    seed=st.integers(0, 2**16),
)
def test_rows_read_back_exactly_across_the_32_bit_wrap_of_the_starts(
    head: int, ops: list[tuple[int, int]], seed: int
) -> None:
    """Starts keep the low 32 bits of the byte counter: appends, expiry and re-sizing across a wrap lose nothing."""
    rng = np.random.default_rng(seed)
    schema = _rows(rng, 1).schema
    ring = RowRing(schema, ["a", "b", "f"], 64)
    for c in ring._cols:
        c.head = head  # as after ``head`` bytes appended and expired (an empty ring's counter is arbitrary)
    held: list[pa.Table] = []
    lo = 0
    for op, n in ops:
        if op == 0:
            t = _rows(rng, n)
            if ring.hi + n - ring.lo > ring.cap:
                ring.set_capacity(ring.hi + n - ring.lo, var_extra=int(rng.integers(0, 200)))
            ring.append(t)
            held.append(t)
        elif op == 1:
            lo = min(ring.hi, lo + n)
            ring.drop_before(lo)
        else:
            ring.set_capacity(ring.hi - ring.lo + n, var_extra=int(rng.integers(0, 200)))
    want = pa.concat_tables(held).slice(lo) if held else None
    slots = np.arange(ring.lo, ring.hi)
    got = ring.take(slots)
    if want is None:
        assert len(slots) == 0
        return
    for name in ("a", "b", "f"):
        assert got[name].to_pylist() == want.column(name).to_pylist()
    assert ring.var_bytes == sum(len(x) for x in want.column("a").to_pylist()) + sum(
        len(x) for x in want.column("b").to_pylist()
    )
