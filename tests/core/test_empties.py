"""The empty cache entries, block-packed (ssbj.core.empties), against a plain dict."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import as_multiset, batch_join, unmatched_reference

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.empties import BLOCK, ENTRY_ESTIMATE, F_MAX_EMPTY, EmptySet, es_find, es_hit

# wide keys (any int64, hashed keys look like these) and dense small ones, mixed
_keys = st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-5, 40) | st.integers(10**6, 10**6 + 3000), max_size=90)


def _packed_bytes(keys: list[int]) -> int:
    """Size of the packing computed independently: per block of 64 sorted keys, 16 B and the distance bits."""
    ks = sorted(keys)
    n = len(ks)
    blocks = [ks[i : i + BLOCK] for i in range(0, n, BLOCK)]
    bits = sum(len(b) * (b[-1] - b[0]).bit_length() for b in blocks)
    return 8 * (2 + 2 * len(blocks) + -(-bits // 64)) + 8 * -(-n // 32)


def _evicted(ref: dict[int, int], entry_cost: float, cycles: int) -> list[int]:
    return [k for k, f in ref.items() if entry_cost >= 1.0 * f / cycles * 40.0]


@settings(max_examples=80, deadline=None)
@given(
    batches=st.lists(
        st.tuples(st.sampled_from(["add", "drop", "evict", "hit", "fit", "add_within", "save"]), _keys), max_size=25
    )
)
def test_matches_a_dict(batches: list[tuple[str, list[int]]]) -> None:
    e = EmptySet()
    ref: dict[int, int] = {}  # key -> hits since the last eviction (saturating at 3)
    since = 0
    for rc, (op, ks) in enumerate(batches, start=1):
        keys = np.array(ks, dtype=np.int64)
        if op == "add":
            assert e.add(keys, rc) == len(set(ks) - set(ref))
            for k in ks:
                ref.setdefault(k, 0)
        elif op == "drop":
            assert e.drop(keys) == len(set(ks) & set(ref))
            for k in ks:
                ref.pop(k, None)
        elif op == "hit":  # what the cache phase does on a hit
            for k in ks:
                j = es_find(e.blob, k)
                assert (j >= 0) == (k in ref)
                assert e.contains(k) == (k in ref)
                if j >= 0:
                    assert j == sorted(ref).index(k)  # the rank in key order
                    es_hit(e.counts, j)
                    ref[k] = min(F_MAX_EMPTY, ref[k] + 1)
        elif op == "fit":  # the new arrays of a batch must fit in what is free
            cand = sorted(set(ks))
            room = e.nbytes + 8 * len(cand)
            n = e.fit(np.array(cand, dtype=np.int64), room)
            assert n <= len(cand)
            assert _packed_bytes(list(set(ref) | set(cand[:n]))) <= room
            if n < len(cand):
                assert _packed_bytes(list(set(ref) | set(cand[: n + 1]))) > room
        elif op == "add_within":  # fit and add in one: the prefix that fits is added, hits kept
            cand = sorted(set(ks))
            room = None if len(cand) % 3 == 0 else e.nbytes + 8 * len(cand)
            n = e.add_within(np.array(cand, dtype=np.int64), room)
            if room is None:
                assert n == len(cand)
            else:
                assert _packed_bytes(list(set(ref) | set(cand[:n]))) <= room
                if n < len(cand):
                    assert _packed_bytes(list(set(ref) | set(cand[: n + 1]))) > room
            for k in cand[:n]:
                ref.setdefault(k, 0)
        elif op == "save":  # checkpoint and restore, both forms
            k, h = e.entries()
            packed = EmptySet()
            packed.load_packed(e.blob, e.counts, e.since)
            loaded = EmptySet()
            loaded.load(k[::-1].copy(), h[::-1].copy(), e.since)  # any order in, sorted out
            for r in (packed, loaded):
                assert r.keys.tolist() == k.tolist() and r.hits.tolist() == h.tolist() and r.since == e.since
                assert r.nbytes == e.nbytes
        else:
            cost = float(ks[0] % 200) if ks else 2.5
            gone = _evicted(ref, cost, max(1, rc - since))
            assert e.evict(cost, 40.0, 1.0, rc) == len(gone)
            since = rc
            for k in gone:
                del ref[k]
            for k in ref:
                ref[k] = 0
        assert e.keys.tolist() == sorted(ref)
        assert e.hits.tolist() == [ref[k] for k in sorted(ref)]
        assert e.size == len(ref)
        assert e.nbytes == _packed_bytes(list(ref)) == e.blob.nbytes + e.counts.nbytes


def test_old_checkpoint_pairs_restore_with_their_f_count() -> None:
    e = EmptySet()
    pay = np.array([[0, 7], [2, 7], [200, 9]], dtype=np.uint8)  # (f_count, since) of the sorted-array format
    e.load(np.array([30, -4, 12], dtype=np.int64), pay, since=5)
    assert e.keys.tolist() == [-4, 12, 30]
    assert e.hits.tolist() == [2, 3, 0]  # f_count saturates at 3
    assert e.since == 5


def test_entry_at_small_budgets_is_about_two_and_a_half_bytes() -> None:
    # the data at 1% of R: a few thousand values without rows over a 2M key range
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(0, 2_000_000, size=2_000))
    e = EmptySet()
    e.add(keys, 1)
    assert e.size == len(keys)
    assert e.entry_bytes() == (e.nbytes - 16) / e.size
    assert 2.0 < e.entry_bytes() < 3.0  # 12.5 B in the sorted array before
    assert EmptySet().entry_bytes() == ENTRY_ESTIMATE
    # hashed (full-range) keys still pack below 8 B
    h = EmptySet()
    h.add(np.unique(rng.integers(-(2**63), 2**63 - 1, size=2_000, dtype=np.int64)), 1)
    assert h.entry_bytes() < 8.5


def _table(name: str, keys: list[int]) -> pa.Table:
    return pa.table({name: pa.array(keys, pa.int64()), f"{name}v": pa.array(range(len(keys)), pa.int64())})


def test_r_filter_makes_empty_entries_redundant_and_they_are_dropped() -> None:
    master = _table("mk", list(range(0, 40, 2)))  # even keys; odd ones have no rows
    stream = _table("sk", [1, 1, 3, 3, 2, 5, 5, 7] * 60)
    spec = JoinSpec("sk", "mk", ("mkv",), chunk_bytes=8 * 16, r_filter="always")
    op = SemiStreamJoin(spec, ArrowMaster(master, 5), stream.schema, master.schema)
    out: Counter[Any] = Counter()
    um: Counter[Any] = Counter()
    for b in stream.to_batches(max_chunksize=8):
        op.push(b)
        r = op.step()
        out += as_multiset(r.enriched)
        um += as_multiset(r.unmatched)
    for r in op.drain():
        out += as_multiset(r.enriched)
        um += as_multiset(r.unmatched)
    assert out == batch_join(stream, master, "sk", "mk", ["mkv"])
    assert um == unmatched_reference(stream, master, "sk", "mk")
    assert op.rfilter.answering(op.r_cycle) is not None
    # values found empty before the bitmap answered were dropped once it did
    assert op._c.extra.get("empties_cached", 0) > 0 and op._c.extra.get("empties_filtered", 0) > 0
    assert op.cache.empty_values == 0  # the bitmap answers every value without rows
    assert op._c.extra.get("filter_answered", 0) > 0


def _drive(op: SemiStreamJoin, batches: list[pa.RecordBatch], out: Counter[Any], um: Counter[Any]) -> None:
    for b in batches:
        op.push(b)
        r = op.step()
        out += as_multiset(r.enriched)
        um += as_multiset(r.unmatched)


def test_checkpoints_restore_the_entries_packed_and_in_the_older_key_form(tmp_path: Any) -> None:
    master = _table("mk", list(range(0, 40, 2)))  # odd keys have no rows
    stream = _table("sk", [1, 1, 3, 3, 2, 5, 5, 7, 9, 9] * 40)
    spec = JoinSpec("sk", "mk", ("mkv",), chunk_bytes=10 * 16, r_filter="off")
    batches = stream.to_batches(max_chunksize=10)
    op = SemiStreamJoin(spec, ArrowMaster(master, 5), stream.schema, master.schema)
    out: Counter[Any] = Counter()
    um: Counter[Any] = Counter()
    _drive(op, batches[:25], out, um)
    assert op.cache.empty_values > 0
    store = DirectoryStore(tmp_path)
    op.checkpoint(store, 1)
    keys, hits = op.cache.empties.entries()
    for older in (False, True):
        if older:  # rewrite the state as the sorted-array format saved it: keys and (f_count, since) pairs
            _, m = store.read_manifest(1)
            arrays = store.read_arrays(m["state"])
            del arrays["em_blob"], arrays["em_counts"]
            arrays["em_keys"] = keys
            arrays["em_pay"] = np.stack([hits, np.full(len(hits), 3, np.uint8)], axis=1)
            store.write_arrays(m["state"], arrays)
        r = SemiStreamJoin.restore(store, spec, ArrowMaster(master, 5), stream.schema, master.schema)
        assert r.cache.empties.keys.tolist() == keys.tolist() and r.cache.empties.hits.tolist() == hits.tolist()
        o2, u2 = out.copy(), um.copy()
        _drive(r, batches[25:], o2, u2)
        for res in r.drain():
            o2 += as_multiset(res.enriched)
            u2 += as_multiset(res.unmatched)
        assert o2 == batch_join(stream, master, "sk", "mk", ["mkv"])
        assert u2 == unmatched_reference(stream, master, "sk", "mk")


@settings(max_examples=300, deadline=None)
@given(
    old=st.sets(st.integers(-(1 << 40), 1 << 40), max_size=400),
    new=st.sets(st.integers(-(1 << 40), 1 << 40), max_size=400),
    cut=st.integers(0, 400),
)
def test_merged_size_by_rank_equals_the_rewrites_size(old: set[int], new: set[int], cut: int) -> None:
    """fit's size check by block ends equals what a rewrite with those keys writes."""
    from ssbj.core.empties import _ALL, _merged_bytes, _rewrite

    es = EmptySet()
    es.add(np.array(sorted(old), np.int64))
    add = np.array(sorted(new - old), np.int64).view(np.uint64) ^ np.uint64(1 << 63)
    n = min(cut, len(add))
    want = _rewrite(es.blob, es.counts, add, n, _ALL, False, True)
    assert _merged_bytes(es.blob, add, n) == want[2] == 8 * (len(want[0]) + len(want[1]))
