"""The empty cache entries as a sorted array (ssbj.core.empties), against a plain dict."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import as_multiset, batch_join, unmatched_reference

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core.empties import E_F, E_SINCE, ENTRY_BYTES, EmptySet, es_find

_keys = st.lists(st.integers(-(2**62), 2**62) | st.integers(0, 40), max_size=30)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.tuples(st.sampled_from(["add", "drop", "evict", "hit"]), _keys), max_size=25))
def test_matches_a_dict(batches: list[tuple[str, list[int]]]) -> None:
    e = EmptySet()
    ref: dict[int, list[int]] = {}  # key -> [f_count, since]
    for rc, (op, ks) in enumerate(batches):
        keys = np.array(ks, dtype=np.int64)
        if op == "add":
            assert e.add(keys, rc) == len(set(ks) - set(ref))
            for k in ks:
                ref.setdefault(k, [0, rc % 256])
        elif op == "drop":
            assert e.drop(keys) == len(set(ks) & set(ref))
            for k in ks:
                ref.pop(k, None)
        elif op == "hit":  # what the cache phase does on a hit
            for k in ks:
                j = es_find(e.keys, k)
                assert (j >= 0) == (k in ref)
                if j >= 0:
                    e.payload[j, E_F] = min(255, int(e.payload[j, E_F]) + 1)
                    ref[k][0] = min(255, ref[k][0] + 1)
        else:
            gone = [k for k, (f, since) in ref.items() if f / max(1, (rc - since) % 256) * 40.0 <= 12.5]
            assert e.evict(12.5, 40.0, 1.0, rc) == len(gone)
            for k in gone:
                del ref[k]
            for v in ref.values():
                v[:] = [0, rc % 256]
        assert e.keys.tolist() == sorted(ref)
        assert e.payload[:, E_F].tolist() == [ref[k][0] for k in sorted(ref)]
        assert e.payload[:, E_SINCE].tolist() == [ref[k][1] for k in sorted(ref)]
        assert e.nbytes == e.cap * ENTRY_BYTES and e.cap >= e.size
    k, p = e.entries()
    restored = EmptySet()
    restored.load(k[::-1].copy(), p[::-1].copy())  # any order in, sorted out
    assert restored.keys.tolist() == k.tolist() and restored.payload.tolist() == p.tolist()


def test_entry_is_ten_bytes_plus_the_spare_quarter() -> None:
    e = EmptySet()
    e.add(np.arange(1000, dtype=np.int64), 0)
    assert e.nbytes <= 1.3 * 1000 * 10
    assert EmptySet.entry_bytes() == 12.5


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
