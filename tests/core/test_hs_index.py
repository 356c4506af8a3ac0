"""H_S's value index: 4-byte words (slot residue and tag), in both ring size classes (ssbj.core.hs)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from ssbj.core.hashing import mix
from ssbj.core.hs import EMPTY, INDEX_SLOT, SMALL, StreamTable, dec, enc, hs_insert, tag_ok


@pytest.mark.parametrize("cap", [8, 1000, SMALL - 1, SMALL, 3 * SMALL])
def test_word_round_trip_for_every_live_slot(cap: int) -> None:
    rng = np.random.default_rng(cap)
    for hi in (cap, cap + 1, 5 * SMALL + 17, (1 << 33) + 3):
        for s in {hi - 1, hi - cap, *rng.integers(hi - cap, hi, 50).tolist()}:
            h = np.uint64(mix(int(s) * 7 + 1))
            v = enc(s, h, cap)
            assert v != EMPTY
            assert dec(v, hi, cap) == s
            assert tag_ok(v, h, cap)


def test_tag_rejects_other_hashes_in_a_small_ring() -> None:
    cap = 1 << 16
    h = np.uint64(mix(42))
    v = enc(123, h, cap)
    others = [np.uint64(mix(k)) for k in range(1, 2000)]
    rejected = sum(not tag_ok(v, o, cap) for o in others)
    assert rejected > 0.98 * len(others)  # an 8-bit tag: ~1/255 false matches
    assert all(tag_ok(enc(5, o, SMALL), h, SMALL) for o in others[:50])  # a large ring keeps no tag


def _table(keys: np.ndarray, cap: int) -> StreamTable:
    schema = pa.schema([("sk", pa.int64())])
    hs = StreamTable(schema, "sk", "int", store_key=False, cap=cap)
    hs.reserve_values(len(keys))
    st = np.zeros(8, np.int64)
    used = np.zeros(8, np.bool_)
    pay = np.zeros((8, 5), np.int32)
    meta = np.array([0, 0, 2], np.int64)
    hs.values += hs_insert(
        hs.hix,
        hs.ring_key,
        hs.link,
        hs.cap,
        hs.lo,
        hs.hi,
        keys,
        False,
        st,
        used,
        pay,
        meta,
        0,
        0,
        np.zeros(1, np.uint64),
    )
    hs.rows.append(pa.table({"sk": pa.array(keys)}))  # the key itself lives in ring_key
    hs.live += len(keys)
    return hs


def test_chains_survive_a_ring_relayout_within_and_across_size_classes() -> None:
    keys = np.array([3, 9, 3, 3, 11, 9, 3], np.int64)
    hs = _table(keys, 16)
    want = {3: 4, 9: 2, 11: 1, 12: 0}
    assert {k: hs.chain_length(k) for k in want} == want
    assert hs.nbytes() == hs.ring_key.nbytes + hs.link.nbytes + INDEX_SLOT * len(hs.hix)
    hs.set_capacity(1000)  # same class: words kept as they are
    assert {k: hs.chain_length(k) for k in want} == want


def test_chains_survive_a_ring_growing_past_the_tagged_class() -> None:
    hs = _table(np.array([3, 9, 3, 3, 11, 9, 3], np.int64), 16)
    hs.set_capacity(SMALL + 1)  # words re-encoded without tags
    want = {3: 4, 9: 2, 11: 1, 12: 0}
    assert {k: hs.chain_length(k) for k in want} == want
    hs.set_capacity(64)  # and back
    assert {k: hs.chain_length(k) for k in want} == want
