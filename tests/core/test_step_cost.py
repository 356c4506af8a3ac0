"""The step-cost rewrites give what the plain versions give (issue 9, item 3; bench/results/bound/stepcost.md)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from ssbj.core.diskphase import key_range
from ssbj.core.hashing import mix
from ssbj.core.interest import BITS_PER_VALUE, Interest, interest_test
from ssbj.core.refresh import rows_equal
from ssbj.core.ringstore import RowRing


@pytest.mark.parametrize("with_valid", [False, True])
def test_key_range_is_numpys_min_max_count(with_valid: bool) -> None:
    rng = np.random.default_rng(7)
    sc = np.zeros(3, dtype=np.int64)
    seen: list[np.ndarray] = []
    for _ in range(5):
        keys = rng.integers(-(1 << 40), 1 << 40, 300).astype(np.int64)
        valid = rng.random(300) < 0.7 if with_valid else np.zeros(0, dtype=bool)
        key_range(keys, valid, sc)
        seen.append(keys[valid] if with_valid else keys)
    allk = np.concatenate(seen)
    assert (sc[0], sc[1], sc[2]) == (len(allk), allk.min(), allk.max())


def test_key_range_of_no_valid_key_leaves_the_range() -> None:
    sc = np.zeros(3, dtype=np.int64)
    key_range(np.array([5, 9], dtype=np.int64), np.array([False, False]), sc)
    assert sc[0] == 0
    key_range(np.array([-3], dtype=np.int64), np.zeros(0, dtype=bool), sc)
    assert list(sc) == [1, -3, -3]


def test_three_bit_interest_filter_has_no_false_negatives_and_few_false_positives() -> None:
    rng = np.random.default_rng(11)
    members = np.unique(rng.integers(0, 1 << 50, 4000)).astype(np.int64)
    f = Interest()
    f.rebuild(members, expect=len(members))
    assert f.bits.shape[0] == -(-max(len(members), 64) * BITS_PER_VALUE // 64)
    assert all(interest_test(f.bits, np.uint64(mix(int(k)))) for k in members)
    others = np.setdiff1d(rng.integers(0, 1 << 50, 40000).astype(np.int64), members)
    fpr = np.mean([interest_test(f.bits, np.uint64(mix(int(k)))) for k in others])
    # one bit per value at 16 bits: ~6%; three bits of one word: ~1%
    assert fpr < 0.02


def test_rows_equal_compares_fixed_width_rows_of_sliced_arrays() -> None:
    n = 50
    payload = [bytes([i % 256]) * 20 for i in range(n)]
    cols = {"k": pa.array(np.arange(n)), "p": pa.array(payload, pa.binary(20)), "d": pa.array(np.arange(n) * 0.5)}
    part = pa.table(cols).slice(5, 40)
    # cached rows: the same values at other positions, in sliced arrays
    cached = [c.chunk(0) for c in part.slice(3).columns]
    rows = np.array([3, 10, 20], dtype=np.int64)
    assert rows_equal(part, rows, cached, rows - 3)
    assert not rows_equal(part, rows, cached, np.array([0, 7, 18], dtype=np.int64))
    changed = [cached[0], pa.array([b"x" * 20] * len(cached[1]), pa.binary(20)), cached[2]]
    assert not rows_equal(part, rows, changed, rows - 3)


@pytest.mark.parametrize("width", [1, 2, 8, 16, 20])
def test_row_ring_gathers_and_relayouts_fixed_width_rows(width: int) -> None:
    rng = np.random.default_rng(width)
    schema = pa.schema([("a", pa.int64()), ("p", pa.binary(width)), ("b", pa.bool_())])

    def batch(n: int) -> pa.Table:
        return pa.table(
            {
                "a": pa.array(rng.integers(0, 1 << 60, n), pa.int64()),
                "p": pa.array([rng.bytes(width) for _ in range(n)], pa.binary(width)),
                "b": pa.array(rng.random(n) < 0.5),
            },
            schema=schema,
        )

    ring = RowRing(schema, schema.names, 32)
    rows = []
    for n in (20, 9, 12):  # wraps around the ring; the oldest leave first
        ring.drop_before(max(0, ring.hi + n - ring.cap))
        t = batch(n)
        ring.append(t)
        rows.append(t)
    all_rows = pa.concat_tables(rows)
    for cap in (32, 77):
        ring.set_capacity(cap)
        slots = np.array([ring.hi - 1, ring.lo, ring.lo + 3, ring.hi - 5], dtype=np.int64)
        got = ring.take(slots)
        want = all_rows.take(pa.array(slots))
        for name in schema.names:
            assert got[name].equals(want.column(name).combine_chunks())
