"""Shared jobs are exact: each job's output equals its own batch join (tests/reference.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import as_multiset
from shared_cases import JOBS, SETS, STREAMS, expected, interleave, make_stream, masters_for

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.shared.operator import MasterSource, SharedJobSpec, SharedJoin


def _run(sj: SharedJoin, batches: list[tuple[str, pa.Table]]) -> dict[str, list[pa.Table]]:
    got: dict[str, list[pa.Table]] = {j: [] for j in sj.jobs}
    for out in sj.run(batches):
        for j, t in out.items():
            got[j].append(t)
    return got


def _check(
    sj: SharedJoin, got: dict[str, list[pa.Table]], streams: dict[str, pa.Table], masters: dict[str, MasterSource]
) -> None:
    counts = sj.counts()
    for job in (j.spec for j in sj.jobs.values()):
        master = masters[job.master].scan._table  # type: ignore[attr-defined]
        want, n_um = expected(job, streams[job.stream], master)
        t = pa.concat_tables(got[job.name]) if got[job.name] else sj.output_schema(job.name).empty_table()
        assert t.schema.equals(sj.output_schema(job.name))
        assert as_multiset(t) == want, job.name
        c = counts[job.name]
        n_in = streams[job.stream].num_rows if job.filter is None else streams[job.stream].filter(job.filter).num_rows
        assert (c.tuples_in, c.unmatched, c.waiting, c.output_rows) == (n_in, n_um, 0, t.num_rows), job.name
        assert c.matched == n_in - n_um


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(0, 400),
    keys=st.integers(1, 40),
    dup=st.integers(1, 3),
    b=st.integers(1, 30),
    step=st.integers(1, 50),
    batch=st.integers(1, 80),
    algorithm=st.sampled_from(["ssbj", "meshjoin"]),
    jobs=st.sampled_from(sorted(SETS)),
    share_rows=st.sampled_from(["auto", "always"]),
    seed=st.integers(0, 1 << 16),
)
def test_every_job_gets_its_own_batch_join(
    n: int, keys: int, dup: int, b: int, step: int, batch: int, algorithm: str, jobs: str, share_rows: str, seed: int
) -> None:
    masters = masters_for(keys, keys, dup, b, seed)
    streams = {
        "orders": make_stream("orders", n, keys, seed + 1),
        "clicks": make_stream("clicks", n // 2, keys, seed + 2),
    }
    sj = SharedJoin(SETS[jobs], STREAMS, masters, algorithm=algorithm, step_rows=step, share_rows=share_rows)  # type: ignore[arg-type]
    inline = {g.master: g.inline for g in sj.groups}
    if jobs == "all":
        assert len(sj.groups) == 2 and not any(inline.values())  # customer (both streams) and product
    else:
        assert all(inline.values()) == (share_rows == "auto")
    got = _run(sj, interleave(streams, batch))
    _check(sj, got, streams, masters)
    assert sj.store.rows == 0  # every stored row was released after its last scan


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 300),
    keys=st.integers(1, 30),
    b=st.integers(1, 20),
    step=st.integers(1, 40),
    cut=st.integers(0, 60),
    jobs=st.sampled_from(sorted(SETS)),
    seed=st.integers(0, 1 << 16),
)
def test_checkpoint_restore_is_exact(
    tmp_path_factory: pytest.TempPathFactory, n: int, keys: int, b: int, step: int, cut: int, jobs: str, seed: int
) -> None:
    """Checkpoint after some steps, run on (output discarded), restore, finish: exactly the batch join."""
    path = tmp_path_factory.mktemp("ck")
    masters = masters_for(keys, keys, 2, b, seed)
    streams = {"orders": make_stream("orders", n, keys, seed + 1), "clicks": make_stream("clicks", n, keys, seed + 2)}
    batches = interleave(streams, 25)
    sj = SharedJoin(SETS[jobs], STREAMS, masters, step_rows=step)
    got: dict[str, list[pa.Table]] = {j: [] for j in sj.jobs}
    i = 0
    steps = 0
    cid = 0
    while i < len(batches) and steps < cut:
        sj.push(*batches[i])
        i += 1
        while sj.pending() and steps < cut:
            for j, t in sj.step().items():
                got[j].append(t)
            steps += 1
    cid += 1
    sj.checkpoint(path, cid)
    for _ in range(5):  # work after the checkpoint is lost with the crash
        if sj.pending(drain=True):
            sj.step(drain=True)
    fresh = SharedJoin(SETS[jobs], STREAMS, masters, step_rows=step)
    assert fresh.restore(path) == cid
    for out in fresh.run(batches[i:]):
        for j, t in out.items():
            got[j].append(t)
    _check(fresh, got, streams, masters)


def test_shared_scan_reads_each_partition_once_per_step() -> None:
    """Two jobs on one master: one scan (rows read equal one isolated job's), not two."""
    masters = masters_for(50, 50, 1, 10, 0)
    streams = {"orders": make_stream("orders", 500, 50, 1)}
    jobs = [JOBS[0], SharedJobSpec("o2", "orders", "customer", "cust", "c_key", ("c_seg",))]
    sj = SharedJoin(jobs, {"orders": STREAMS["orders"]}, masters, step_rows=50)
    for _ in sj.run(interleave(streams, 50)):
        pass
    iso = SemiStreamJoin(
        JoinSpec("cust", "c_key", ("c_name",), chunk_bytes=1 << 50, max_step_tuples=50),
        masters["customer"].scan,
        STREAMS["orders"],
        masters["customer"].schema,
    )
    read = sum(r.metrics.b for r in iso.run([t for _, t in interleave(streams, 50)]))
    assert len(sj.groups) == 1
    assert sj.master_rows_read() == read


def test_a_group_of_two_streams_steps_only_on_a_full_step() -> None:
    """A group read by both streams steps once it holds w of each, not on each stream's batch alone."""
    masters = masters_for(50, 50, 1, 10, 0)
    streams = {"orders": make_stream("orders", 400, 50, 1), "clicks": make_stream("clicks", 400, 50, 2)}
    jobs = [JOBS[0], JOBS[4]]  # orders and clicks, both against the customer table
    sj = SharedJoin(jobs, STREAMS, masters, step_rows=50, algorithm="meshjoin")
    (g,) = sj.groups
    assert g.op.spec.max_step_tuples == 100
    batches = interleave(streams, 50)
    sj.push(*batches[0])
    assert not sj.pending() and sj.pending(drain=True)  # half a step: it waits for the other stream
    sj.push(*batches[1])
    assert sj.pending()
    first = sj.step()
    got: dict[str, list[pa.Table]] = {j: [first[j]] if j in first else [] for j in sj.jobs}
    assert not sj.pending() and g.op.buffered_tuples == 0
    for out in sj.run(batches[2:]):
        for j, t in out.items():
            got[j].append(t)
    _check(sj, got, streams, masters)
    # 800 tuples in full steps of 100: 8 steps, each reading one partition of 10 rows, then
    # the drain's k - 1 = 4 finish the last chunk's R-cycle (a step per batch: 16 + 4)
    assert sj.master_rows_read() == 10 * (8 + 4)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(0, 200), b=st.integers(1, 10), step=st.integers(1, 30), seed=st.integers(0, 1 << 16))
def test_string_keys_are_verified(n: int, b: int, step: int, seed: int) -> None:
    """Hashed (string) join keys: two jobs on two streams share one scan; exact per job."""
    rng = np.random.default_rng(seed)
    labels = [f"x{i}" for i in range(7)]
    master = pa.table({"label": pa.array([*labels[:5], "x1"]), "info": pa.array(range(6), pa.int64())})
    masters = {"notes": MasterSource(ArrowMaster(master, b), master.schema)}
    stream = make_stream("orders", n, 5, seed)
    notes = pa.array([labels[int(i)] for i in rng.integers(0, 7, n)], pa.string(), mask=rng.random(n) < 0.1)
    stream = stream.set_column(3, "note", notes)
    jobs = [
        SharedJobSpec("by_note", "orders", "notes", "note", "label", ("info",)),
        SharedJobSpec("by_note_left", "orders", "notes", "note", "label", None, ("oid",), "left"),
    ]
    sj = SharedJoin(jobs, {"orders": STREAMS["orders"]}, masters, step_rows=step)
    got: dict[str, list[pa.Table]] = {j.name: [] for j in jobs}
    for out in sj.run([("orders", stream.slice(i, 17)) for i in range(0, n, 17)]):
        for k, t in out.items():
            got[k].append(t)
    assert len(sj.groups) == 1
    for job in jobs:
        want, _ = expected(job, stream, master)
        t = pa.concat_tables(got[job.name]) if got[job.name] else sj.output_schema(job.name).empty_table()
        assert as_multiset(t) == want


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(50, 400),
    keys=st.integers(5, 60),
    b=st.integers(1, 8),
    step=st.integers(1, 30),
    batch=st.integers(20, 120),
    seed=st.integers(0, 1 << 16),
)
def test_stored_rows_are_released_once_every_scan_has_finished_them(
    n: int, keys: int, b: int, step: int, batch: int, seed: int
) -> None:
    """The store holds at most twice the rows some scan still waits for, whatever the longest R-cycle."""
    _release_run(n, keys, b, step, batch, seed)


def _release_run(n: int, keys: int, b: int, step: int, batch: int, seed: int) -> bool:
    masters = masters_for(keys, max(1, keys // 8), 2, b, seed)  # product: a far shorter R-cycle than customer
    streams = {
        "orders": make_stream("orders", n, keys, seed + 1),
        "clicks": make_stream("clicks", n // 2, keys, seed + 2),
    }
    sj = SharedJoin(SETS["all"], STREAMS, masters, step_rows=step)
    got: dict[str, list[pa.Table]] = {j: [] for j in sj.jobs}
    compacted = False
    for stream, part in interleave(streams, batch):
        sj.push(stream, part)
        while sj.pending():
            for j, t in sj.step().items():
                got[j].append(t)
            needed = np.unique(sj._needed())
            held = np.concatenate([bt.rids() for bt in sj.store.batches]) if sj.store.batches else needed[:0]
            assert np.isin(needed, held).all()  # nothing a scan waits for was released
            assert len(held) <= 2 * len(needed)
            compacted = compacted or any(bt.compacted for bt in sj.store.batches)
    for out in sj.drain():
        for j, t in out.items():
            got[j].append(t)
    _check(sj, got, streams, masters)
    assert sj.store.rows == 0
    return compacted


def test_rows_are_released_before_the_longest_r_cycle_ends() -> None:
    # customer R-cycles several times product's: a batch outlives most of its rows (cache hits, NULL keys)
    assert _release_run(n=400, keys=20, b=4, step=10, batch=100, seed=1)
