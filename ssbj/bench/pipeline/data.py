# ruff: noqa: S608 - SQL text is built from the benchmark's own table names and %s placeholders only
"""The generated master table and stream, their load into MariaDB and Kafka, and the expected join."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ssbj.bench.pipeline.spec import SEGMENTS, Case, Json, Scale
from ssbj.core.bound import key_distribution, memory_optimal_bound


@dataclass
class Data:
    """The generated master table and stream, kept for the expected results."""

    master_rows: int
    balance: np.ndarray  # c_balance of customer i at index i (index 0 unused)
    keys: np.ndarray  # stream key of order i (customer_id in case a, zip in case b)
    amounts: np.ndarray
    hot_keys: list[int]  # customers updated mid-run (c_custkey)
    master_row_bytes: float  # Arrow bytes per projected master row
    zip_of: np.ndarray | None = None  # case b: c_zip of customer i at index i
    expected: Json = field(default_factory=dict)


def zipf_keys(n: int, universe: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` keys from 1..universe with P(rank r) ~ 1/r; ranks mapped to keys by a random permutation."""
    weights = 1.0 / np.arange(1, universe + 1, dtype=np.float64)
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ranks = np.searchsorted(cdf, rng.random(n), side="right")
    ranks = np.minimum(ranks, universe - 1)
    perm = rng.permutation(universe) + 1  # rank r (0-based) -> key perm[r]
    return perm[ranks].astype(np.int64), perm


def _row_bytes(case: Case, balance: np.ndarray, zip_of: np.ndarray | None) -> float:
    n = min(10_000, len(balance) - 1)
    ids = np.arange(1, n + 1, dtype=np.int64)
    cols: dict[str, Any] = {"c_custkey": ids}
    if zip_of is not None:
        cols["c_zip"] = zip_of[1 : n + 1]
    cols |= {
        "c_name": [f"Customer#{i:09d}" for i in ids],
        "c_segment": [SEGMENTS[i % 5] for i in ids],
        "c_balance": balance[1 : n + 1],
    }
    sample = pa.table(cols)
    return float(sample.nbytes / sample.num_rows)


def generate(scale: Scale, case: Case, seed: int) -> Data:
    """Draw the customers and the orders' keys; compute the expected batch-join results."""
    rng = np.random.default_rng(seed)
    m = scale.master_rows
    balance = np.zeros(m + 1)
    balance[1:] = np.round(rng.uniform(-999.0, 9999.0, m), 2)
    order_ids = np.arange(scale.tuples, dtype=np.int64)
    if case.name == "a":
        universe = round(m * scale.key_space_factor)
        keys, perm = zipf_keys(scale.tuples, universe, rng)
        amounts = np.round(rng.uniform(1.0, 500.0, scale.tuples), 2)
        hot = [int(k) for k in perm[: 4 * scale.hot_keys] if k <= m][: scale.hot_keys]
        d = Data(m, balance, keys, amounts, hot, _row_bytes(case, balance, None))
        matched = keys <= m
        d.expected = {
            "rows": int(matched.sum()),
            "sum_order_id": int(order_ids[matched].sum()),
            "sum_balance": float(balance[keys[matched]].sum()),
            "unmatched_tuples": int((~matched).sum()),
            "distinct_keys": int(np.unique(keys).size),
            "hot_key_tuples": int(np.isin(keys, hot).sum()),
        }
        return d
    zips = max(1, m // scale.zip_share)
    zip_of = np.zeros(m + 1, dtype=np.int64)
    zip_of[1:] = 1 + rng.permutation(m) % zips  # every zip has m // zips or one more customers
    universe = max(zips + 1, round(zips * scale.key_space_factor))
    keys, perm = zipf_keys(scale.tuples, universe, rng)
    amounts = np.round(rng.uniform(1.0, 500.0, scale.tuples), 2)
    count = np.bincount(zip_of[1:], minlength=universe + 1)  # customers per zip
    bal = np.bincount(zip_of[1:], weights=balance[1:], minlength=universe + 1)
    by_zip = np.argsort(zip_of, kind="stable")  # customers grouped by zip (index 0, zip 0, first)
    starts = np.searchsorted(zip_of[by_zip], np.arange(universe + 2))
    hot = []
    for z in perm:  # the customers of the hottest zips that exist
        if len(hot) >= scale.hot_keys:
            break
        if z <= zips:
            hot.extend(int(c) for c in by_zip[starts[z] : starts[z + 1]])
    d = Data(m, balance, keys, amounts, sorted(hot), _row_bytes(case, balance, zip_of), zip_of)
    per_tuple = count[keys]
    tuples_per_zip = np.bincount(keys, minlength=universe + 1)
    d.expected = {
        "rows": int(per_tuple.sum()),
        "sum_order_id": int((order_ids * per_tuple).sum()),
        "sum_balance": float(bal[keys].sum()),
        "unmatched_tuples": int((per_tuple == 0).sum()),
        "distinct_keys": int(np.unique(keys).size),
        "hot_key_tuples": int(tuples_per_zip[zip_of[hot]].sum()),
        "zips": zips,
    }
    return d


def master_keys(data: Data) -> np.ndarray:
    """R's join key per row: ``c_custkey`` (case a) or ``c_zip`` (case b)."""
    if data.zip_of is not None:
        return data.zip_of[1:]
    return np.arange(1, data.master_rows + 1, dtype=np.int64)


def theorem1(data: Data, memory_bytes: int) -> Json:
    """Theorem 1's memory-optimal bound on SSBJ / MESHJOIN tuples per R-cycle for this run's data and budget.

    The stream's key frequencies are the generated orders' own, R's row counts per key the
    generated table's (docs/bound.md). The ratio does not depend on v_S (both N scale with
    it); v_R is the projected Arrow row. Where reading R dominates both R-cycles, as with a
    master read from the database, it bounds the service-rate ratio as well.
    """
    dist = key_distribution(data.keys, master_keys(data))
    v_s = 1.0  # (the ratio is the same for any v_S)
    b = memory_optimal_bound(dist, float(memory_bytes), v_s, data.master_row_bytes)
    return {"ssbj/meshjoin": None if math.isinf(b.ratio) else float(b.ratio), "cache_share": float(b.cache_share)}


def load_master(db: Any, data: Data, workdir: Path, table: str = "customer") -> float:
    """Create the master table and LOAD DATA LOCAL INFILE it; returns seconds.

    Case b adds ``c_zip`` without an index (the point of case b: the database cannot seek on it).
    """
    t0 = time.perf_counter()
    path = workdir / f"{table}.tsv"
    m = data.master_rows
    z = data.zip_of
    with path.open("w") as f:
        step = 100_000
        for lo in range(1, m + 1, step):
            hi = min(m + 1, lo + step)
            if z is None:
                f.write(
                    "".join(f"{i}\tCustomer#{i:09d}\t{SEGMENTS[i % 5]}\t{data.balance[i]:.2f}\n" for i in range(lo, hi))
                )
            else:
                f.write(
                    "".join(
                        f"{i}\tCustomer#{i:09d}\t{SEGMENTS[i % 5]}\t{data.balance[i]:.2f}\t{z[i]}\n"
                        for i in range(lo, hi)
                    )
                )
    zip_col, zip_field = ("", "") if z is None else (", c_zip BIGINT NOT NULL", ", c_zip")
    conn = db.root(db.name, local_infile=True)
    with conn.cursor() as cur:
        cur.execute(
            f"CREATE TABLE `{table}` (c_custkey BIGINT PRIMARY KEY, c_name VARCHAR(25), "
            f"c_segment VARCHAR(10), c_balance DOUBLE{zip_col}) ENGINE=InnoDB"
        )
        cur.execute(
            f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE `{table}` FIELDS TERMINATED BY '\\t' "
            f"LINES TERMINATED BY '\\n' (c_custkey, c_name, c_segment, c_balance{zip_field})"
        )
        cur.execute(f"SELECT COUNT(*) FROM `{table}`")
        n = cur.fetchone()[0]
        cur.execute(f"ANALYZE TABLE `{table}`")
        cur.fetchall()
    conn.close()
    path.unlink()
    if n != m:
        raise RuntimeError(f"loaded {n} customers, expected {m}")
    return time.perf_counter() - t0


def produce_orders(bootstrap: str, topic: str, data: Data, case: Case) -> float:
    """Produce order i to partition i % 2 (so its offset is i // 2); returns seconds."""
    from confluent_kafka import Producer

    t0 = time.perf_counter()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.num.messages": 10_000,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1 << 21,
            "compression.type": "none",
            "acks": "1",
        }
    )
    errors: list[Any] = []
    delivered = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered[0] += 1

    keys, amounts = data.keys.tolist(), data.amounts.tolist()
    key = case.stream_key
    n = len(keys)
    for i in range(n):
        value = (
            f'{{"order_id": {i}, "{key}": {keys[i]}, "amount": {amounts[i]:.2f}, '
            f'"placed_at": "2026-11-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00"}}'
        ).encode()
        while True:
            try:
                producer.produce(topic, value, partition=i % 2, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(600)
    if left or errors or delivered[0] != n:
        raise RuntimeError(f"produce: {left} undelivered, {delivered[0]} of {n} delivered, errors {errors[:3]}")
    return time.perf_counter() - t0
