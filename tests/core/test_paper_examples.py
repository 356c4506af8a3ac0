"""The paper's worked example (Figure 3), eviction after drift, phase-out, empty entries."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
from reference import as_multiset, batch_join, unmatched_reference

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin

# Every row is two int64 columns: stream tuples and projected master tuples have the same
# size (16 bytes), the special case of Figure 3.
TUPLE = 16


def _master(keys: list[int]) -> pa.Table:
    return pa.table({"mk": pa.array(keys, pa.int64()), "mval": pa.array(range(len(keys)), pa.int64())})


def _stream(keys: list[int]) -> pa.Table:
    return pa.table({"sid": pa.array(range(len(keys)), pa.int64()), "sk": pa.array(keys, pa.int64())})


def _op(master: pa.Table, stream: pa.Table, b: int, per_step: int, **kw: Any) -> SemiStreamJoin:
    # the paper's inequality on row bytes alone (its examples take the entries' bytes as negligible)
    kw.setdefault("count_overheads", False)
    spec = JoinSpec("sk", "mk", ("mval", "mk"), chunk_bytes=per_step * TUPLE, **kw)
    return SemiStreamJoin(spec, ArrowMaster(master, b), stream.schema, master.schema)


def _run_steps(op: SemiStreamJoin, stream: pa.Table, per_step: int) -> tuple[Counter[Any], Counter[Any]]:
    out: Counter[Any] = Counter()
    um: Counter[Any] = Counter()
    for b in stream.to_batches(max_chunksize=per_step):
        op.push(b)
        r = op.step()
        out += as_multiset(r.enriched)
        um += as_multiset(r.unmatched)
    for r in op.drain():
        out += as_multiset(r.enriched)
        um += as_multiset(r.unmatched)
    return out, um


def test_figure3_part10_stays_in_disk_phase_part30_moves_to_cache() -> None:
    # partID 10 has 4 suppliers, partID 30 has 2; both have 3 requests in H_S per R-cycle
    master = _master([10, 10, 10, 10, 30, 30, 101, 102, 103, 104, 105, 106])
    stream = _stream([10, 30] * 60)  # one request of each per step; k = 3 steps per R-cycle
    op = _op(master, stream, b=4, per_step=2)
    assert op.master.num_partitions() == 3
    seen_hs = []
    out: Counter[Any] = Counter()
    for b in stream.to_batches(max_chunksize=2):
        op.push(b)
        r = op.step()
        out += as_multiset(r.enriched)
        if op.r_cycle == 2:
            seen_hs.append((op.hs_count(10), op.hs_count(30)))
    # between steps (after expiry) H_S holds k-1 = 2 chunks; during each disk phase, when
    # the inequality is evaluated, it holds k = 3: n = 3 requests of each value
    assert seen_hs == [(2, 2)] * 3
    cached = set(op.cached_values().tolist())
    assert 30 in cached  # 2 * v_R < 3 * v_S
    assert 10 not in cached  # 4 * v_R >= 3 * v_S
    assert op.hs_count(30) == 0
    assert op.hs_count(10) == 2  # k - 1 chunks between steps
    for r in op.drain():
        out += as_multiset(r.enriched)
    assert out == batch_join(stream, master, "sk", "mk", ["mval", "mk"])
    t = op.totals()
    assert t["served_by_cache"] > 0 and t["evicted"] == 0


def test_eviction_after_hot_set_changes() -> None:
    master = _master([1, 2, 3, 4, 5, 6, 7, 8, 9])
    # 45 R-cycles with value 1 hot, then 45 with value 2 hot (3 steps per R-cycle)
    stream = _stream([1] * 135 + [2] * 135)
    op = _op(master, stream, b=3, per_step=1)
    cached_over_time = []
    out: Counter[Any] = Counter()
    for b in stream.to_batches(max_chunksize=1):
        op.push(b)
        r = op.step()
        out += as_multiset(r.enriched)
        cached_over_time.append(set(op.cached_values().tolist()))
    assert 1 in cached_over_time[134] and 2 not in cached_over_time[134]
    assert 2 in cached_over_time[-1]
    assert 1 not in cached_over_time[-1]  # evicted at an eviction R-cycle (every 10th)
    assert op.totals()["evicted"] >= 1
    for r in op.drain():
        out += as_multiset(r.enriched)
    assert out == batch_join(stream, master, "sk", "mk", ["mval", "mk"])


def _cached_when_hot_set_moves(switching: str, **kw: Any) -> tuple[list[set[int]], SemiStreamJoin]:
    master = _master([1, 2, 3, 4, 5, 6, 7, 8, 9, 9])  # 9 twice: the key is not unique
    # 30 R-cycles with value 1 hot (4 steps each), then 8 with value 2 hot: R-cycles 31-38,
    # before the next eviction R-cycle (40)
    stream = _stream([1] * 120 + [2] * 32)
    op = _op(master, stream, b=3, per_step=1, switching=switching, unique_key_switch=False, **kw)
    assert op.master.num_partitions() == 4
    cached, out = [], Counter[Any]()
    for b in stream.to_batches(max_chunksize=1):
        op.push(b)
        out += as_multiset(op.step().enriched)
        cached.append(set(op.cached_values().tolist()))
    for r in op.drain():
        out += as_multiset(r.enriched)
    assert out == batch_join(stream, master, "sk", "mk", ["mval", "mk"])
    return cached, op


def test_cold_value_leaves_between_evictions_with_the_pipelined_fsm() -> None:
    cached, op = _cached_when_hot_set_moves("pipelined")
    assert 1 in cached[119]
    assert op.r_cycle < 40 and 1 not in cached[-1]  # no hit for two R-cycles: gone before R-cycle 40
    assert op.totals()["evicted"] >= 1
    # in paper mode, or with early_eviction off, Algorithm 1 alone evicts: value 1 stays until R-cycle 40
    for switching, early in (("paper", True), ("pipelined", False)):
        cached_alg1, op_alg1 = _cached_when_hot_set_moves(switching, early_eviction=early)
        assert op_alg1.r_cycle < 40 and 1 in cached_alg1[-1]


def test_phase_out_cycle_produces_no_duplicates() -> None:
    # value 7 has master rows in every partition; its H_S tuples have met different
    # numbers of partitions when it moves to the cache
    keys = []
    for p in range(5):
        keys += [7, 100 + p, 200 + p]
    master = _master(keys)
    stream = _stream([7, 7, 300] * 80)
    op = _op(master, stream, b=3, per_step=3)
    out, um = _run_steps(op, stream, 3)
    expected = batch_join(stream, master, "sk", "mk", ["mval", "mk"])
    assert out == expected
    assert max(out.values()) == 1  # every (stream row, master row) pair exactly once
    assert um == unmatched_reference(stream, master, "sk", "mk")
    assert 7 in set(op.cached_values().tolist())
    assert op.totals()["switched_in"] >= 1


def test_value_without_master_rows_is_cached_as_empty_entry() -> None:
    master = _master([1, 2, 3, 4, 5, 6])
    stream = _stream([99, 99, 1] * 60)
    op = _op(master, stream, b=2, per_step=3)
    out, um = _run_steps(op, stream, 3)
    assert 99 in set(op.cached_values().tolist())
    assert out == batch_join(stream, master, "sk", "mk", ["mval", "mk"])
    assert um == unmatched_reference(stream, master, "sk", "mk")
    t = op.totals()
    assert t["tuples_in"] == t["matched_source_rows"] + t["unmatched_source_rows"]


def test_switch_factor_above_one_delays_switching() -> None:
    # 30 has 2 master rows and 3 H_S tuples: with s_f = 2 the inequality 3*16 > 2*2*16 fails
    master = _master([10, 10, 10, 10, 30, 30, 101, 102, 103, 104, 105, 106])
    stream = _stream([10, 30] * 60)
    op = _op(master, stream, b=4, per_step=2, switch_factor=2.0)
    out, _ = _run_steps(op, stream, 2)
    assert 30 not in set(op.cached_values().tolist())
    assert out == batch_join(stream, master, "sk", "mk", ["mval", "mk"])


def test_meshjoin_never_caches() -> None:
    master = _master([10, 10, 10, 10, 30, 30, 101, 102, 103, 104, 105, 106])
    stream = _stream([10, 30] * 60)
    op = _op(master, stream, b=4, per_step=2, algorithm="meshjoin")
    out, _ = _run_steps(op, stream, 2)
    assert len(op.cached_values()) == 0
    assert op.totals()["served_by_cache"] == 0
    assert out == batch_join(stream, master, "sk", "mk", ["mval", "mk"])


def test_every_disk_phase_tuple_meets_every_partition_once() -> None:
    # k = 4 partitions, value 5 once in each: every stream tuple must meet all four rows
    master = _master([5, 0, 5, 1, 5, 2, 5, 3])
    stream = _stream([5] * 7)
    op = _op(master, stream, b=2, per_step=1, algorithm="meshjoin")
    lifetimes = []
    out: Counter[Any] = Counter()
    for b in stream.to_batches(max_chunksize=1):
        op.push(b)
        out += as_multiset(op.step().enriched)
        lifetimes.append(op.hs_count(5))
    for r in op.drain():
        out += as_multiset(r.enriched)
        lifetimes.append(op.hs_count(5))
    # a chunk stays k steps; after a step's expiry at most k - 1 chunks remain
    assert max(lifetimes) == 3
    assert op.hs_count(5) == 0
    per_tuple = Counter(row[0] for row in out.elements())
    assert set(per_tuple.values()) == {4}
    assert max(out.values()) == 1
