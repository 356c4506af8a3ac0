"""H_S's chain links: bit-packed, log2(ring slots) + 2 bits each, two of them flags (ssbj.core.hs)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from ssbj.core.hs import StreamTable, hs_insert
from ssbj.core.hslinks import link_bits, lk_read, lk_write, new_links


@pytest.mark.parametrize("cap", [1, 2, 3, 255, 256, 17_000, 1 << 20, (1 << 22) + 5])
def test_link_round_trip_with_flags(cap: int) -> None:
    rng = np.random.default_rng(cap)
    link = new_links(cap)
    n = min(cap, 3000)
    pos = np.unique(np.concatenate([[0, cap - 1], rng.integers(0, cap, n)]))
    d = rng.integers(0, cap, len(pos))
    d[0] = cap - 1  # the largest distance a ring of cap slots has
    f = rng.integers(0, 4, len(pos)).astype(np.uint8)
    lk_write(link, pos, d, f)
    got_d, got_f = lk_read(link, pos)
    assert (got_d == d).all() and (got_f == f).all()
    # a neighbour's write leaves a link alone (links share bytes)
    if cap > 2:
        lk_write(link, np.array([1]), np.array([0]), np.zeros(1, np.uint8))
        d2, f2 = lk_read(link, pos[pos != 1])
        keep = pos != 1
        assert (d2 == d[keep]).all() and (f2 == f[keep]).all()


def test_bits_follow_the_ring_size() -> None:
    assert link_bits(17_243) == 15 + 2
    assert link_bits(180_718) == 18 + 2
    assert link_bits(1 << 16) == 16 + 2 and link_bits((1 << 16) + 1) == 17 + 2
    schema = pa.schema([("sk", pa.int64())])
    hs = StreamTable(schema, "sk", "int", store_key=False, cap=1000)
    assert hs.link_bytes == 12 / 8
    assert hs.link.nbytes == (1000 * 12 + 7) // 8 + 9


def _filled(keys: np.ndarray, cap: int) -> StreamTable:
    hs = StreamTable(pa.schema([("sk", pa.int64())]), "sk", "int", store_key=False, cap=cap)
    hs.reserve_values(len(keys))
    hs.values += hs_insert(hs.hix, hs.ring_key, hs.link, hs.cap, hs.lo, hs.hi, keys)
    hs.rows.append(pa.table({"sk": pa.array(keys)}))
    hs.live += len(keys)
    return hs


def test_chains_and_flags_survive_a_relayout_to_other_link_sizes() -> None:
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 40, 500).astype(np.int64)
    hs = _filled(keys, 512)
    slots = np.arange(hs.lo, hs.hi)
    hs.mark_matched(slots[::3])
    hs.mark_removed(slots[::7])
    want_d, want_m, want_r = hs.deltas(slots), hs.matched(slots), hs.removed(slots)
    assert (want_d > 0).sum() == len(keys) - len(np.unique(keys))
    chains = {int(k): hs.chain_length(int(k)) for k in range(41)}
    assert chains == {k: int((keys == k).sum()) for k in range(41)}
    for cap in (70_000, 600, 500):  # 19, 12 and 11 bits per link
        hs.set_capacity(cap)
        assert hs.link_bytes == link_bits(cap) / 8
        assert (hs.deltas(slots) == want_d).all()
        assert (hs.matched(slots) == want_m).all() and (hs.removed(slots) == want_r).all()
        assert {k: hs.chain_length(k) for k in chains} == chains


def test_set_deltas_clears_flags() -> None:
    hs = _filled(np.array([5, 6, 5, 5], np.int64), 8)
    slots = np.arange(4)
    hs.mark_matched(slots)
    hs.set_deltas(slots, np.array([0, 0, 2, 1]))
    assert not hs.matched(slots).any()
    assert hs.chain_length(5) == 3
