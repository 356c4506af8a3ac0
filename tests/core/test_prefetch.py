"""The prefetching master scan: exact joins, out-of-order requests, errors, close.

The operator's output with prefetch (depth 1 and 2) is compared, as a multiset, with the
batch reference join; the scan underneath is a real :class:`ArrowMaster` that copies its
slices (as a database read makes new buffers) and records which partitions it was asked for.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import as_multiset, batch_join, unmatched_reference

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.costmodel import DISK_ROW_OVERHEAD, QUEUE_RECORD, RESERVE_SHARE, CostModel, plan_memory
from ssbj.core.prefetch import PrefetchingScan, prefetch_depth, prefetched_nbytes
from ssbj.errors import ConfigError, InputError, StateError, TransientError


class CopyingMaster(ArrowMaster):
    """ArrowMaster whose partitions are fresh copies (like rows read from a database), with a read log."""

    def __init__(self, table: pa.Table, partition_rows: int, delay: float = 0.0) -> None:
        super().__init__(table, partition_rows)
        self.reads: list[tuple[int, str]] = []  # (partition, thread name)
        self.delay = delay
        self.fail: dict[int, BaseException] = {}  # partition -> error raised once
        self.concurrent = 0
        self.max_concurrent = 0
        self._lock = threading.Lock()

    def read_partition(self, p: int) -> pa.Table:
        with self._lock:
            self.concurrent += 1
            self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            if self.delay:
                time.sleep(self.delay)
            self.reads.append((p, threading.current_thread().name))
            if p in self.fail:
                raise self.fail.pop(p)
            part = super().read_partition(p)
            return pa.table({c: pa.array(part.column(c).to_numpy().copy()) for c in part.column_names})
        finally:
            with self._lock:
                self.concurrent -= 1

    def repartition(self, partition_rows: int) -> CopyingMaster:
        return CopyingMaster(self._table, partition_rows, self.delay)


def _data(n_master: int, n_stream: int, seed: int = 1) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    mk = rng.integers(0, n_master // 2, n_master)  # many-to-many: repeated master keys
    master = pa.table({"mid": np.arange(n_master, dtype=np.int64), "mk": mk, "attr": rng.integers(0, 9, n_master)})
    sk = rng.integers(0, n_master, n_stream)  # half the keys have no master row
    nulls = rng.random(n_stream) < 0.05
    stream = pa.table(
        {"sid": np.arange(n_stream, dtype=np.int64), "sk": pa.array(sk, mask=nulls)},
    )
    return stream, master


SPEC = JoinSpec("sk", "mk", ("mid", "attr"), chunk_bytes=2_000, eviction_interval=3)


def _run(op: SemiStreamJoin, batches: list[pa.RecordBatch]) -> tuple[Counter[Any], Counter[Any]]:
    out: Counter[Any] = Counter()
    um: Counter[Any] = Counter()
    for r in op.run(batches):
        out += as_multiset(r.enriched)
        um += as_multiset(r.unmatched)
    return out, um


@pytest.mark.parametrize("depth", [0, 1, 2])
@pytest.mark.parametrize("algorithm", ["ssbj", "meshjoin"])
def test_operator_with_prefetch_is_exact(depth: int, algorithm: str) -> None:
    stream, master = _data(3_000, 12_000)
    scan = PrefetchingScan(CopyingMaster(master, 400), depth)
    spec = JoinSpec("sk", "mk", ("mid", "attr"), algorithm=algorithm, chunk_bytes=2_000, eviction_interval=3)  # type: ignore[arg-type]
    op = SemiStreamJoin(spec, scan, stream.schema, master.schema)
    with scan:
        out, um = _run(op, stream.to_batches(max_chunksize=700))
    assert out == batch_join(stream, master, "sk", "mk", ["mid", "attr"])
    assert um == unmatched_reference(stream, master, "sk", "mk")
    if depth:
        # only the first read (and none else: the operator scans in order) is synchronous
        assert scan.stats.misses == 1 and scan.stats.hits == op.totals()["steps"] - 1
        assert any(name == "ssbj-prefetch" for _, name in scan.inner.reads)  # type: ignore[attr-defined]
    else:
        assert scan.stats.hits == 0 and not scan.worker_alive()
    assert scan.inner.max_concurrent == 1  # type: ignore[attr-defined]  # never two reads of the scan at once


def test_prefetched_partition_is_the_next_in_scan_order() -> None:
    _, master = _data(1_000, 10)
    inner = CopyingMaster(master, 300)  # k = 4
    with PrefetchingScan(inner, 2) as scan:
        for p in [0, 1, 2, 3, 0, 1]:
            got = scan.read_partition(p)
            assert got.equals(ArrowMaster(master, 300).read_partition(p))
            scan.settle()
            # the queue holds (p+1) mod k and (p+2) mod k, at their real size
            expect = sum(ArrowMaster(master, 300).read_partition((p + i) % 4).nbytes for i in (1, 2))
            assert scan.prefetched_nbytes() == expect
        assert [p for p, _ in inner.reads] == [0, 1, 2, 3, 0, 1, 2, 3]
        assert scan.stats.misses == 1


def test_out_of_order_request_reads_synchronously_and_discards_the_queue() -> None:
    _, master = _data(1_000, 10)
    inner = CopyingMaster(master, 250)
    with PrefetchingScan(inner, 1) as scan:
        scan.read_partition(0)
        scan.settle()
        got = scan.read_partition(2)  # 1 was read ahead: thrown away
        assert got.equals(ArrowMaster(master, 250).read_partition(2))
        assert scan.stats.misses == 2 and scan.stats.discarded == 1
        scan.settle()
        assert scan.read_partition(3).equals(ArrowMaster(master, 250).read_partition(3))
        assert scan.stats.hits == 1


def test_queue_is_discarded_when_k_changes() -> None:
    """A new R-cycle with another k: the queued partition was planned for the old k."""

    class Growing(CopyingMaster):
        k = 3

        def num_partitions(self) -> int:
            return self.k

    _, master = _data(1_000, 10)
    inner = Growing(master, 250)
    with PrefetchingScan(inner, 1) as scan:
        scan.read_partition(2)  # queues partition 0 for k = 3
        scan.settle()
        inner.k = 4
        scan.read_partition(0)
        assert scan.stats.misses == 2 and scan.stats.discarded == 1


def test_restore_mid_cycle_with_prefetch_is_exact(tmp_path: Path) -> None:
    stream, master = _data(3_000, 12_000, seed=5)
    batches = stream.to_batches(max_chunksize=600)
    scan = PrefetchingScan(CopyingMaster(master, 500), 1)
    op = SemiStreamJoin(SPEC, scan, stream.schema, master.schema)
    out: Counter[Any] = Counter()
    store = DirectoryStore(tmp_path / "ckpt")
    for i, b in enumerate(batches):
        op.push(b)
        while op.buffered_tuples:
            out += as_multiset(op.step().enriched)
        if i == len(batches) // 2:
            assert op._p != 0  # mid R-cycle
            op.checkpoint(store, 1)
            # restored with the same scan: its queue holds the next partition of the old operator
            op = SemiStreamJoin.restore(store, SPEC, scan, stream.schema, master.schema)
            # and once more with a fresh scan (a restart)
            op.checkpoint(store, 2)
            scan.close()
            scan = PrefetchingScan(CopyingMaster(master, 500), 1)
            op = SemiStreamJoin.restore(store, SPEC, scan, stream.schema, master.schema)
    for r in op.drain():
        out += as_multiset(r.enriched)
    scan.close()
    assert out == batch_join(stream, master, "sk", "mk", ["mid", "attr"])


def test_replay_from_an_older_checkpoint_reads_the_asked_partition(tmp_path: Path) -> None:
    """Rolling back to a checkpoint a few steps back asks for an earlier partition: out of order."""
    stream, master = _data(2_000, 6_000, seed=7)
    batches = stream.to_batches(max_chunksize=500)
    ref_scan = CopyingMaster(master, 300)
    scan = PrefetchingScan(CopyingMaster(master, 300), 1)
    store = DirectoryStore(tmp_path / "ckpt")
    op = SemiStreamJoin(SPEC, scan, stream.schema, master.schema)
    op.push(batches[0])
    op.step()
    op.checkpoint(store, 1)
    for b in batches[1:4]:
        op.push(b)
        op.step()
    op = SemiStreamJoin.restore(store, SPEC, scan, stream.schema, master.schema, 1)
    ref = SemiStreamJoin.restore(store, SPEC, ref_scan, stream.schema, master.schema, 1)
    for b in batches[1:]:
        op.push(b)
        ref.push(b)
        while ref.buffered_tuples:
            a, e = op.step(), ref.step()
            assert as_multiset(a.enriched) == as_multiset(e.enriched)
    scan.close()


@pytest.mark.parametrize("error", [TransientError("database gone"), InputError("bad value in partition")])
def test_background_error_surfaces_with_its_type_then_the_retry_reads_again(error: Exception) -> None:
    _, master = _data(1_000, 10)
    inner = CopyingMaster(master, 250)
    inner.fail[1] = error
    with PrefetchingScan(inner, 1) as scan:
        scan.read_partition(0)
        scan.settle()
        with pytest.raises(type(error)) as got:
            scan.read_partition(1)
        assert got.value is error
        assert scan.prefetched_nbytes() == 0
        # the retry reads partition 1 synchronously, and the scan goes on reading ahead
        assert scan.read_partition(1).equals(ArrowMaster(master, 250).read_partition(1))
        scan.settle()
        assert inner.reads[-2:] == [(1, threading.current_thread().name), (2, "ssbj-prefetch")]
        assert scan.read_partition(2).num_rows == 250
        assert scan.stats.hits == 1


def test_failed_background_read_then_restore_is_exact(tmp_path: Path) -> None:
    """The pipeline's recovery: a step fails on a prefetched read, the last checkpoint is restored."""
    stream, master = _data(2_000, 4_000, seed=11)
    inner = CopyingMaster(master, 500)
    scan = PrefetchingScan(inner, 1)
    store = DirectoryStore(tmp_path / "ckpt")
    op = SemiStreamJoin(SPEC, scan, stream.schema, master.schema)
    ref = SemiStreamJoin(SPEC, CopyingMaster(master, 500), stream.schema, master.schema)
    failed = 0
    with scan:
        for i, b in enumerate(stream.to_batches(max_chunksize=400)):
            op.push(b)
            ref.push(b)
            if i == 3:
                op.checkpoint(store, 1)
                k = scan.num_partitions()
                inner.fail[(op._p + 1) % k] = TransientError("lost connection")
                op.step()  # reads p, starts the background read of p + 1, which fails
                with pytest.raises(TransientError):
                    op.step()
                failed += 1
                op = SemiStreamJoin.restore(store, SPEC, scan, stream.schema, master.schema, 1)
            while ref.buffered_tuples:
                assert as_multiset(op.step().enriched) == as_multiset(ref.step().enriched)
        for a, e in zip(op.drain(), ref.drain(), strict=True):
            assert as_multiset(a.enriched) == as_multiset(e.enriched)
    assert failed == 1


def test_close_stops_the_thread_and_refuses_reads() -> None:
    _, master = _data(1_000, 10)
    inner = CopyingMaster(master, 250, delay=0.05)
    scan = PrefetchingScan(inner, 2)
    scan.read_partition(0)
    assert scan.worker_alive()
    scan.close()
    assert not scan.worker_alive()
    assert scan.prefetched_nbytes() == 0
    assert not any(t.name == "ssbj-prefetch" and t.is_alive() for t in threading.enumerate() if t is not None)
    with pytest.raises(StateError):
        scan.read_partition(1)


def test_worker_thread_ends_when_the_queue_is_full() -> None:
    _, master = _data(1_000, 10)
    with PrefetchingScan(CopyingMaster(master, 250), 1) as scan:
        scan.read_partition(0)
        scan.settle()
        deadline = time.monotonic() + 5
        while scan.worker_alive() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert not scan.worker_alive()  # no idle thread per scan: a read starts one
        assert scan.prefetched_nbytes() > 0


def test_depth_is_validated_and_reported() -> None:
    _, master = _data(100, 10)
    for bad in (-1, True, 1.5):
        with pytest.raises(ConfigError):
            PrefetchingScan(ArrowMaster(master, 10), bad)  # type: ignore[arg-type]
    assert prefetch_depth(PrefetchingScan(ArrowMaster(master, 10), 2)) == 2
    assert prefetch_depth(ArrowMaster(master, 10)) == 0 and prefetched_nbytes(ArrowMaster(master, 10)) == 0
    rep = PrefetchingScan(ArrowMaster(master, 10), 2).repartition(20)
    assert isinstance(rep, PrefetchingScan) and rep.depth == 2 and rep.num_partitions() == 5


def test_step_metrics_separate_read_time_from_wait() -> None:
    stream, master = _data(2_000, 4_000)
    inner = CopyingMaster(master, 500, delay=0.03)
    spec = JoinSpec("sk", "mk", ("mid", "attr"), chunk_bytes=2_000)
    with PrefetchingScan(inner, 1) as scan:
        op = SemiStreamJoin(spec, scan, stream.schema, master.schema)
        op.push(stream)
        first = op.step().metrics
        scan.settle()  # the next partition is in the queue: no wait
        second = op.step().metrics
    assert first.read_wait_seconds >= 0.03 and first.io_seconds >= 0.03
    assert second.io_seconds >= 0.03 and second.read_wait_seconds < 0.03


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_master=st.integers(1, 600),
    b=st.integers(1, 200),
    depth=st.integers(0, 3),
    chunk=st.integers(40, 4_000),
    batch=st.integers(1, 300),
    seed=st.integers(0, 1_000),
)
def test_prefetch_exact_for_any_layout(n_master: int, b: int, depth: int, chunk: int, batch: int, seed: int) -> None:
    stream, master = _data(max(n_master, 2), 900, seed)
    spec = JoinSpec("sk", "mk", ("mid", "attr"), chunk_bytes=chunk, eviction_interval=3)
    with PrefetchingScan(CopyingMaster(master, b), depth) as scan:
        out, um = _run(SemiStreamJoin(spec, scan, stream.schema, master.schema), stream.to_batches(batch))
    assert out == batch_join(stream, master, "sk", "mk", ["mid", "attr"])
    assert um == unmatched_reference(stream, master, "sk", "mk")


@pytest.mark.parametrize("depth", [0, 1, 2, 4])
def test_planner_reserves_a_disk_buffer_per_prefetched_partition(depth: int) -> None:
    budget, r_t, v_s, v_r, v_p = 2_000_000, 100_000, 40.0, 60.0, 20.0
    plan = plan_memory(budget, r_t, v_s, v_r, CostModel(), v_p=v_p, prefetch=depth)
    b, k = plan.partition_rows, plan.partitions
    used = (1 + depth) * b * (v_r + DISK_ROW_OVERHEAD) + k * plan.w_s * (v_p + v_s) + (k + 2) * QUEUE_RECORD
    assert used <= budget * (1 - RESERVE_SHARE)
    if depth:  # the plan made without the reserve would not hold the read-ahead buffers
        p0 = plan_memory(budget, r_t, v_s, v_r, CostModel(), v_p=v_p)
        b0, k0 = p0.partition_rows, p0.partitions
        used0 = (1 + depth) * b0 * (v_r + DISK_ROW_OVERHEAD) + k0 * p0.w_s * (v_p + v_s) + (k0 + 2) * QUEUE_RECORD
        assert used0 > budget * (1 - RESERVE_SHARE)
    with pytest.raises(ConfigError):
        plan_memory(budget, r_t, v_s, v_r, CostModel(), prefetch=-1)
