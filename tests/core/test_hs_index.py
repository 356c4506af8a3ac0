"""H_S's value index: 4-byte words (slot residue, tag, displacement) in both ring size classes (ssbj.core.hsindex)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssbj.core.hashing import mix
from ssbj.core.hs import StreamTable, hs_expire, hs_insert
from ssbj.core.hsindex import EMPTY, INDEX_SLOT, SMALL, dec, enc, tag_ok


@pytest.mark.parametrize("cap", [8, 1000, SMALL - 1, SMALL, 3 * SMALL])
def test_word_round_trip_for_every_live_slot(cap: int) -> None:
    rng = np.random.default_rng(cap)
    for hi in (cap, cap + 1, 5 * SMALL + 17, (1 << 33) + 3):
        for s in {hi - 1, hi - cap, *rng.integers(hi - cap, hi, 50).tolist()}:
            h = np.uint64(mix(int(s) * 7 + 1))
            for d in (0, 1, 14, 15, 16, 1000):
                v = enc(s, h, cap, d)
                assert v != EMPTY
                assert dec(v, hi, cap) == s
                assert tag_ok(v, h, cap, d)


def test_tag_and_home_reject_other_values_in_a_small_ring() -> None:
    cap = 1 << 16
    h = np.uint64(mix(42))
    others = [np.uint64(mix(k)) for k in range(1, 3000)]
    v = enc(123, h, cap, 2)
    # a probe from another home meets the word at another displacement: rejected, whatever the tag
    assert not any(tag_ok(v, o, cap, d) for o in others[:50] for d in (0, 1, 3, 15, 40))
    # from the same home (the same displacement) only the 4-bit tag separates values
    rejected = sum(not tag_ok(v, o, cap, 2) for o in others)
    assert 0.9 * len(others) < rejected < 0.96 * len(others)  # ~1/15 false matches
    # at 15 slots or more from home the displacement is not kept: the tag alone decides
    far = enc(123, h, cap, 40)
    assert tag_ok(far, h, cap, 15) and tag_ok(far, h, cap, 99)
    assert all(tag_ok(enc(5, o, SMALL, 3), h, SMALL, 7) for o in others[:50])  # a large ring keeps neither


def _add(hs: StreamTable, keys: np.ndarray) -> None:
    """ADD ``keys`` as tuples of H_S (the key itself lives in ring_key)."""
    hs.values += hs_insert(hs.hix, hs.ring_key, hs.link, hs.cap, hs.lo, hs.hi, keys)
    hs.rows.append(pa.table({"sk": pa.array(keys)}))
    hs.live += len(keys)


def _expire(hs: StreamTable, upto: int) -> int:
    """DELETE the slots before ``upto`` (no statistics, no empty entries); returns the live tuples that left."""
    _, live, _, gone = hs_expire(
        hs.hix, hs.ring_key, hs.link, hs.cap, hs.hi, hs.lo, upto, False, 0.0, 1.0, 1.0,
        np.zeros(8, np.int64), np.zeros(8, np.bool_), np.zeros((8, 5), np.int32),
    )  # fmt: skip
    hs.rows.drop_before(upto)
    hs.values -= int(gone)
    return int(live)


def _table(keys: np.ndarray, cap: int) -> StreamTable:
    schema = pa.schema([("sk", pa.int64())])
    hs = StreamTable(schema, "sk", "int", store_key=False, cap=cap)
    hs.reserve_values(len(keys))
    _add(hs, keys)
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


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=300),
    st.integers(1, 60),
    st.sampled_from([0.9, 0.97]),
)
def test_chains_match_a_model_through_inserts_and_expiry_at_high_load(keys: list[int], chunk: int, load: float) -> None:
    """Words shifted back by deletions keep their homes: long clusters, displacements past 15."""
    values = len(set(keys))
    hs = StreamTable(pa.schema([("sk", pa.int64())]), "sk", "int", store_key=False, cap=len(keys) + 1)
    hs.hix = np.full(max(int(values / load) + 1, 2), EMPTY, dtype=np.uint32)  # a crowded index
    arr = np.array(keys, np.int64)
    model: Counter[int] = Counter()
    for a in range(0, len(arr), chunk):
        part = arr[a : a + chunk]
        _add(hs, part)
        model.update(part.tolist())
        assert {k: hs.chain_length(k) for k in range(-1, 42)} == {k: model[k] for k in range(-1, 42)}
    for a in range(0, len(arr), chunk):
        upto = min(a + chunk, len(arr))
        assert _expire(hs, upto) == upto - a
        model.subtract(arr[a:upto].tolist())
        assert hs.values == sum(1 for v in model.values() if v > 0)
        assert {k: hs.chain_length(k) for k in range(-1, 42)} == {k: model[k] for k in range(-1, 42)}


@pytest.mark.parametrize("seed", range(3))
def test_thousands_of_values_are_found_through_inserts_and_expiry_in_a_crowded_index(seed: int) -> None:
    """Thousands of values at ~0.9 load: long clusters, deletions shifting words back while others come in."""
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 6000, 12000).astype(np.int64)
    chunk = 1500
    hs = StreamTable(pa.schema([("sk", pa.int64())]), "sk", "int", store_key=False, cap=len(arr) + 1)
    hs.hix = np.full(int(4000 / 0.9) + 1, EMPTY, dtype=np.uint32)
    model: Counter[int] = Counter()
    probe = np.arange(-5, 6005)

    def check() -> None:
        got = np.array([hs.chain_length(int(k)) for k in probe])
        assert (got == np.array([model[int(k)] for k in probe])).all()

    for a in range(0, len(arr), chunk):
        if a >= 4 * chunk:  # a window of four chunks
            upto = a - 3 * chunk
            _expire(hs, upto)
            model.subtract(arr[upto - chunk : upto].tolist())
        part = arr[a : a + chunk]
        _add(hs, part)
        model.update(part.tolist())
        assert hs.values == sum(1 for v in model.values() if v > 0)
        check()
    hs.rebuild_index(len(hs.hix))  # rebuilt from the heads: the same answers
    check()
