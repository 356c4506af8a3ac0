"""Jobs, streams and masters shared by the shared-operator tests, and each job's expected output."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from reference import batch_join, unmatched_reference

from ssbj.core import ArrowMaster
from ssbj.shared.operator import MasterSource, SharedJobSpec

STREAMS = {
    "orders": pa.schema([("oid", pa.int64()), ("cust", pa.int64()), ("prod", pa.int64()), ("note", pa.string())]),
    "clicks": pa.schema([("cid", pa.int64()), ("cust", pa.int64()), ("page", pa.string())]),
}


def masters_for(n_cust: int, n_prod: int, dup: int, b: int, seed: int) -> dict[str, MasterSource]:
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


def make_stream(name: str, n: int, keys: int, seed: int) -> pa.Table:
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


def expected(job: SharedJobSpec, stream: pa.Table, master: pa.Table) -> tuple[Counter[tuple[Any, ...]], int]:
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


def interleave(streams: dict[str, pa.Table], rows: int) -> list[tuple[str, pa.Table]]:
    out = []
    n = max(t.num_rows for t in streams.values())
    for i in range(0, n, rows):
        for name, t in streams.items():
            if i < t.num_rows:
                out.append((name, t.slice(i, rows)))
    return out
