"""Shared jobs are exact: each job's output equals its own batch join (tests/reference.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import as_multiset, batch_join, unmatched_reference

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.shared.operator import MasterSource, SharedJobSpec, SharedJoin

STREAMS = {
    "orders": pa.schema([("oid", pa.int64()), ("cust", pa.int64()), ("prod", pa.int64()), ("note", pa.string())]),
    "clicks": pa.schema([("cid", pa.int64()), ("cust", pa.int64()), ("page", pa.string())]),
}


def _masters(n_cust: int, n_prod: int, dup: int, b: int, seed: int) -> dict[str, MasterSource]:
    rng = np.random.default_rng(seed)
    ck = np.repeat(np.arange(n_cust), rng.integers(1, dup + 1, n_cust))  # many-to-many: repeated keys
    cust = pa.table(
        {
            "c_key": pa.array(ck, pa.int64()),
            "c_name": pa.array([f"n{k}" for k in ck]),
            "c_seg": pa.array(rng.integers(0, 5, len(ck)), pa.int64()),
        }
    )
    pk = np.arange(n_prod)
    prod = pa.table({"p_key": pa.array(pk, pa.int64()), "p_name": pa.array([f"p{k}" for k in pk])})
    return {
        "customer": MasterSource(ArrowMaster(cust, b), cust.schema),
        "product": MasterSource(ArrowMaster(prod, b), prod.schema),
    }


def _stream(name: str, n: int, keys: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    k = rng.integers(-2, keys + 3, n)  # some keys with no master row
    nulls = rng.random(n) < 0.1
    cust = pa.array(k, pa.int64(), mask=nulls)
    if name == "orders":
        return pa.table(
            {
                "oid": pa.array(np.arange(n), pa.int64()),
                "cust": cust,
                "prod": pa.array(rng.integers(0, keys, n), pa.int64(), mask=rng.random(n) < 0.05),
                "note": pa.array([f"x{i % 7}" for i in range(n)]),
            }
        )
    return pa.table(
        {
            "cid": pa.array(np.arange(n), pa.int64()),
            "cust": cust,
            "page": pa.array(["a", "b"] * (n // 2) + ["c"] * (n % 2)),
        }
    )


JOBS: list[SharedJobSpec] = [
    SharedJobSpec("o_cust", "orders", "customer", "cust", "c_key", ("c_name",)),
    SharedJobSpec("o_cust_left", "orders", "customer", "cust", "c_key", ("c_seg", "c_name"), ("oid", "cust"), "left"),
    SharedJobSpec("o_cust_f", "orders", "customer", "cust", "c_key", None, None, "inner", pc.field("note") != "x3"),
    SharedJobSpec("o_prod", "orders", "product", "prod", "p_key", ("p_name",)),
    SharedJobSpec("c_cust", "clicks", "customer", "cust", "c_key", ("c_key", "c_name"), ("page", "cust")),
    SharedJobSpec(
        "c_cust_left_f", "clicks", "customer", "cust", "c_key", ("c_seg",), None, "left", pc.field("page") != "b"
    ),
]


SETS = {
    "all": JOBS,  # customer read by both streams, orders by two scans: rows in the stream store
    "inline": [JOBS[3], JOBS[4], JOBS[5]],  # each stream read by one scan: rows held in its H_S
    "one_group": JOBS[:3],
}


def _expected(job: SharedJobSpec, stream: pa.Table, master: pa.Table) -> tuple[Counter[tuple[Any, ...]], int]:
    if job.filter is not None:
        stream = stream.filter(job.filter)
    scols = list(job.stream_columns or stream.schema.names)
    mcols = list(job.master_columns or master.schema.names)
    s = stream.select(scols).append_column("__k", stream.column(job.stream_key))
    want = batch_join(s, master, "__k", job.master_key, mcols)
    want = Counter({row[: len(scols)] + row[len(scols) + 1 :]: c for row, c in want.items()})
    um = unmatched_reference(stream, master, job.stream_key, job.master_key)
    n_um = sum(um.values())
    if job.how == "left":
        idx = {n: i for i, n in enumerate(stream.schema.names)}
        for row, c in um.items():
            want[tuple(row[idx[n]] for n in scols) + (None,) * len(mcols)] += c
    return want, n_um


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
        want, n_um = _expected(job, streams[job.stream], master)
        t = pa.concat_tables(got[job.name]) if got[job.name] else sj.output_schema(job.name).empty_table()
        assert t.schema.equals(sj.output_schema(job.name))
        assert as_multiset(t) == want, job.name
        c = counts[job.name]
        n_in = streams[job.stream].num_rows if job.filter is None else streams[job.stream].filter(job.filter).num_rows
        assert (c.tuples_in, c.unmatched, c.waiting, c.output_rows) == (n_in, n_um, 0, t.num_rows), job.name
        assert c.matched == n_in - n_um


def _batches(streams: dict[str, pa.Table], rows: int) -> list[tuple[str, pa.Table]]:
    out = []
    n = max(t.num_rows for t in streams.values())
    for i in range(0, n, rows):
        for name, t in streams.items():
            if i < t.num_rows:
                out.append((name, t.slice(i, rows)))
    return out


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
    masters = _masters(keys, keys, dup, b, seed)
    streams = {"orders": _stream("orders", n, keys, seed + 1), "clicks": _stream("clicks", n // 2, keys, seed + 2)}
    sj = SharedJoin(SETS[jobs], STREAMS, masters, algorithm=algorithm, step_rows=step, share_rows=share_rows)  # type: ignore[arg-type]
    inline = {g.master: g.inline for g in sj.groups}
    if jobs == "all":
        assert len(sj.groups) == 2 and not any(inline.values())  # customer (both streams) and product
    else:
        assert all(inline.values()) == (share_rows == "auto")
    got = _run(sj, _batches(streams, batch))
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
    masters = _masters(keys, keys, 2, b, seed)
    streams = {"orders": _stream("orders", n, keys, seed + 1), "clicks": _stream("clicks", n, keys, seed + 2)}
    batches = _batches(streams, 25)
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
    masters = _masters(50, 50, 1, 10, 0)
    streams = {"orders": _stream("orders", 500, 50, 1)}
    jobs = [JOBS[0], SharedJobSpec("o2", "orders", "customer", "cust", "c_key", ("c_seg",))]
    sj = SharedJoin(jobs, {"orders": STREAMS["orders"]}, masters, step_rows=50)
    for _ in sj.run(_batches(streams, 50)):
        pass
    iso = SemiStreamJoin(
        JoinSpec("cust", "c_key", ("c_name",), chunk_bytes=1 << 50, max_step_tuples=50),
        masters["customer"].scan,
        STREAMS["orders"],
        masters["customer"].schema,
    )
    read = sum(r.metrics.b for r in iso.run([t for _, t in _batches(streams, 50)]))
    assert len(sj.groups) == 1
    assert sj.master_rows_read() == read
