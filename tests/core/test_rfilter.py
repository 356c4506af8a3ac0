"""The R-filter: no false negatives (bitmap and Bloom), its plan, and its life cycle."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ssbj.core.rfilter import BITMAP, BLOOM, OFF, FilterPlan, FilterState, RFilter, bloom_fpr, plan, rf_test


def _state(p: FilterPlan, keys: np.ndarray) -> FilterState:
    f = RFilter()
    f.start(p, 1)
    f.add(keys, np.ones(len(keys), dtype=bool))
    f.new_cycle(2)
    s = f.answering(2)
    assert s is not None
    return s


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.integers(-(1 << 40), 1 << 40), max_size=300),
    probes=st.lists(st.integers(-(1 << 40), 1 << 40), max_size=300),
    words_log2=st.integers(0, 8),
)
def test_bloom_has_no_false_negatives(keys: list[int], probes: list[int], words_log2: int) -> None:
    s = _state(FilterPlan(BLOOM, 0, 64 << words_log2, 0.1), np.array(keys, dtype=np.int64))
    for k in keys:
        assert rf_test(s.bits, s.mode, s.base, s.nbits, s.oor, k)
    present = set(keys)
    negatives = [k for k in probes if not rf_test(s.bits, s.mode, s.base, s.nbits, s.oor, k)]
    assert not present & set(negatives)


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.integers(0, 500), max_size=200), probes=st.lists(st.integers(-50, 700), max_size=200))
def test_bitmap_is_exact_and_values_out_of_range_count_as_present(keys: list[int], probes: list[int]) -> None:
    s = _state(FilterPlan(BITMAP, 100, 300, 0.0), np.array(keys, dtype=np.int64))
    present = set(keys)
    oor = any(not 100 <= k < 400 for k in keys)
    assert s.oor == oor
    for k in probes:
        got = rf_test(s.bits, s.mode, s.base, s.nbits, s.oor, k)
        if 100 <= k < 400:
            assert got == (k in present)
        else:
            assert got == oor


def test_answers_only_after_a_complete_r_cycle_and_filters_are_swapped() -> None:
    f = RFilter()
    f.start(FilterPlan(BITMAP, 0, 64, 0.0), 3)
    f.add(np.array([1, 2]), np.array([True, False]))  # NULL keys are not added
    assert f.answering(3) is None  # still building during R-cycle 3
    f.new_cycle(4)
    s = f.answering(4)
    assert s is not None and rf_test(s.bits, s.mode, s.base, s.nbits, s.oor, 1)
    assert not rf_test(s.bits, s.mode, s.base, s.nbits, s.oor, 2)
    f.start(FilterPlan(BITMAP, 0, 64, 0.0), 10)  # a rebuild: the old one answers until the new is complete
    f.add(np.array([5]), np.array([True]))
    assert f.answering(10) is s and f.nbytes == 16
    f.new_cycle(11)
    s2 = f.answering(11)
    assert s2 is not s and s2 is not None
    assert not rf_test(s2.bits, s2.mode, s2.base, s2.nbits, s2.oor, 1)  # forgotten (deleted from R)
    restored = FilterState.from_meta(s2.to_meta(), s2.bits)
    assert np.array_equal(restored.bits, s2.bits) and restored.complete_rc == s2.complete_rc


def test_plan_adopts_only_what_pays() -> None:
    # small exact range: the bitmap (no false positive) wins when it costs less than it saves
    p = plan(rows=1000, kmin=0, kmax=999, exact=True, value_less_bytes=10_000)
    assert p.mode == BITMAP and p.nbytes == 128 and p.fpr == 0.0
    # nothing to save, or a filter dearer than the saving: none
    assert plan(1000, 0, 999, True, 0).mode == OFF
    assert plan(1_000_000, 0, 1 << 40, True, 1_000).mode == OFF
    # hashed keys: a Bloom filter sized where the saving net of its bytes is largest
    p = plan(rows=100_000, kmin=0, kmax=0, exact=False, value_less_bytes=1_000_000)
    assert p.mode == BLOOM and p.gain > 0
    assert p.gain == max(
        1_000_000 * (1 - bloom_fpr(64 * w / 100_000)) - 8 * w for w in (1 << i for i in range(20)) if 64 * w <= 2.4e6
    )
