"""The doorkeeper of index mode (ssbj.core.doorkeeper): values looked up in this R-cycle and the last."""

from __future__ import annotations

import numpy as np

from ssbj.core.doorkeeper import BITS_PER_VALUE, Doorkeeper


def test_a_value_is_seen_at_its_second_lookup_within_two_generations() -> None:
    d = Doorkeeper()
    d.rotate(expect=10_000)
    keys = np.arange(0, 20_000, 2, dtype=np.int64)
    first = d.seen(keys)
    assert first.mean() < 0.1  # only false positives (and the filter filling up)
    assert d.seen(keys).all()  # no false negatives
    d.rotate(expect=10_000)
    assert d.seen(keys).all()  # the previous generation still holds them
    d.rotate(expect=10_000)
    d.rotate(expect=10_000)
    assert d.seen(keys).mean() < 0.1  # forgotten after two R-cycles without a lookup


def test_false_positives_and_size_follow_the_planned_values() -> None:
    d = Doorkeeper()
    d.rotate(expect=50_000)
    d.seen(np.arange(50_000, dtype=np.int64))
    assert d.added > 0.9 * 50_000
    d.rotate()  # sized for what the last generation took
    assert d.cur.nbytes >= 0.9 * 50_000 * BITS_PER_VALUE / 8
    assert d.nbytes == d.cur.nbytes + d.prev.nbytes
    other = np.arange(10**9, 10**9 + 10_000, dtype=np.int64)
    fp = d.seen(other).mean()
    assert fp < 0.1, fp


def test_load_restores_both_generations() -> None:
    d = Doorkeeper()
    d.rotate(expect=1_000)
    d.seen(np.arange(500, dtype=np.int64))
    d.rotate()
    d.seen(np.arange(500, 900, dtype=np.int64))
    e = Doorkeeper()
    e.load(d.cur, d.prev, d.added)
    probe = np.arange(2_000, dtype=np.int64)
    assert (e.seen(probe) == d.seen(probe)).all() and e.added == d.added
