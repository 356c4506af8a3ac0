"""Slices of one call on several threads (ssbj.core.lanes): coverage, order, errors."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssbj.core import lanes
from ssbj.core.spec import JoinSpec
from ssbj.errors import ConfigError


@given(
    start=st.integers(0, 1000),
    n=st.integers(0, 50_000),
    threads=st.integers(1, 8),
    least=st.integers(1, 5000),
)
def test_slices_cover_the_range_in_order(start: int, n: int, threads: int, least: int) -> None:
    parts = lanes.slices(start, n, threads, least)
    assert sum(ln for _, ln in parts) == n
    at = start
    for s, ln in parts:  # contiguous, in order, none empty
        assert s == at and ln > 0
        at += ln
    assert len(parts) <= threads
    if len(parts) > 1:  # split only into slices of at least the least size
        assert min(ln for _, ln in parts) >= least
        assert max(ln for _, ln in parts) - min(ln for _, ln in parts) <= 1


def test_run_returns_in_slice_order_from_several_threads() -> None:
    seen: set[int] = set()
    lock = threading.Lock()

    def work(s: int, n: int) -> tuple[int, int]:
        with lock:
            seen.add(threading.get_ident())
        return s, n

    parts = lanes.slices(0, 40_000, 4, 1000)
    assert len(parts) == 4
    assert lanes.run(work, parts) == parts
    assert threading.get_ident() in seen  # the first slice on the calling thread


def test_a_failing_slice_fails_the_call() -> None:
    def work(s: int, n: int) -> int:
        if s > 0:
            raise ValueError(f"slice at {s}")
        return n

    with pytest.raises(ValueError, match="slice at"):
        lanes.run(work, lanes.slices(0, 100, 3, 10))


def test_threads_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="threads"):
        JoinSpec("k", "k", threads=0)
