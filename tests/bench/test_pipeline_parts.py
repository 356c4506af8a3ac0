# ruff: noqa: S608 - SQL text built from the test's own column names
"""The pipeline benchmark's parts without services: data and expected joins, the LRU cache, the timeline, the report.

Expected results are checked against DuckDB joins of the generated tables; the cache and the
interval arithmetic against brute-force references, over hypothesis-drawn inputs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import bound_n

from ssbj.bench.pipeline import cli, registry
from ssbj.bench.pipeline.data import generate, theorem1
from ssbj.bench.pipeline.lookup import LruTtlCache
from ssbj.bench.pipeline.report import SUMMARY_CHARS, error_summary, write_readme
from ssbj.bench.pipeline.scaling import Model, Run, report
from ssbj.bench.pipeline.spec import CASES, SCALES, Scale
from ssbj.bench.pipeline.timeline import Timeline, intersect, merge, render, subtract, total
from ssbj.cli import main

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------- data and the expected join
def _master_and_stream(d: Any, case: str) -> tuple[pa.Table, pa.Table]:
    ids = np.arange(1, d.master_rows + 1, dtype=np.int64)
    master = {"c_custkey": ids, "c_balance": d.balance[1:]}
    if case == "b":
        master["c_zip"] = d.zip_of[1:]
    stream = pa.table({"order_id": np.arange(len(d.keys), dtype=np.int64), "k": d.keys})
    return pa.table(master), stream


@pytest.mark.parametrize("case", ["a", "b"])
@pytest.mark.parametrize("seed", [1, 7])
def test_expected_results_equal_a_duckdb_join(case: str, seed: int) -> None:
    scale = Scale(3_000, 4_000, 1_000, "64KiB", 20, "256M", key_space_factor=1.1)
    d = generate(scale, CASES[case], seed)
    master, stream = _master_and_stream(d, case)
    key = "c_custkey" if case == "a" else "c_zip"
    con = duckdb.connect()
    con.register("m", master)
    con.register("s", stream)
    con.register("hot", pa.table({"h": pa.array(d.hot_keys, pa.int64())}))

    def one(sql: str) -> tuple[Any, ...]:
        rows = con.execute(sql).fetchall()
        assert len(rows) == 1
        return tuple(rows[0])

    rows, s_oid, s_bal = one(f"SELECT COUNT(*), SUM(order_id), SUM(c_balance) FROM s JOIN m ON s.k = m.{key}")
    (unmatched,) = one(f"SELECT COUNT(*) FROM s WHERE k NOT IN (SELECT {key} FROM m)")
    (hot_rows,) = one(f"SELECT COUNT(*) FROM s JOIN m ON s.k = m.{key} WHERE m.c_custkey IN (SELECT h FROM hot)")
    assert d.expected["rows"] == rows
    assert d.expected["sum_order_id"] == s_oid
    assert d.expected["sum_balance"] == pytest.approx(s_bal, rel=1e-12)
    assert d.expected["unmatched_tuples"] == unmatched > 0
    assert d.expected["hot_key_tuples"] == hot_rows > 0
    assert len(d.hot_keys) >= scale.hot_keys and all(1 <= k <= scale.master_rows for k in d.hot_keys)
    if case == "b":  # many-to-many: a zip names several customers, so there are more rows than matched orders
        assert rows > len(d.keys) - unmatched
        counts = np.bincount(d.zip_of[1:])[1:]
        assert counts.min() >= 1 and counts.max() <= counts.min() + 1


@pytest.mark.parametrize("case", ["a", "b"])
def test_theorem1_bound_of_the_generated_data(case: str) -> None:
    """The bound the report prints, against a plain bisection over the same keys."""
    scale = Scale(3_000, 4_000, 1_000, "64KiB", 20, "256M", key_space_factor=1.1)
    d = generate(scale, CASES[case], 3)
    memory = int(0.05 * d.master_rows * d.master_row_bytes)
    got = theorem1(d, memory)
    vals, counts = np.unique(d.keys, return_counts=True)
    per_key = np.bincount(d.zip_of[1:] if case == "b" else np.arange(1, d.master_rows + 1))
    m = np.array([per_key[v] if v < len(per_key) else 0 for v in vals])
    n = bound_n(counts / counts.sum(), m, memory, 24.0, d.master_row_bytes)
    assert got["ssbj/meshjoin"] == pytest.approx(n * 24.0 / memory, rel=1e-6)
    assert got["ssbj/meshjoin"] > 1 and 0 < got["cache_share"] < 1


def test_item5_preset_is_issue_11s_scale() -> None:
    s = SCALES["item5"]
    assert (s.master_rows, s.tuples) == (20_000_000, 5_000_000)
    assert s.budgets() == ["1%", "5%"]


# ---------------------------------------------------------------------- the LRU cache
def _reference(keys: list[int | None], table: dict[int, tuple[tuple[Any, ...], ...]]) -> list[tuple[int, Any]]:
    return [(i, row) for i, k in enumerate(keys) if k is not None for row in table.get(k, ())]


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.one_of(st.none(), st.integers(0, 30)), max_size=80),
    fanout=st.dictionaries(st.integers(0, 25), st.integers(1, 4), max_size=25),
    max_rows=st.integers(1, 20),
    batched=st.booleans(),
)
def test_lru_cache_returns_the_join_rows_and_stays_within_its_rows(
    keys: list[int | None], fanout: dict[int, int], max_rows: int, batched: bool
) -> None:
    table = {k: tuple((k, j, f"r{k}-{j}") for j in range(n)) for k, n in fanout.items()}
    cache = LruTtlCache(max_rows, ttl=3600)
    fetched: list[int] = []

    def one(k: int) -> tuple[tuple[Any, ...], ...]:
        fetched.append(k)
        return table.get(k, ())

    def many(ks: list[int]) -> dict[int, tuple[tuple[Any, ...], ...]]:
        assert len(set(ks)) == len(ks)  # distinct misses only
        fetched.extend(ks)
        return {k: table[k] for k in ks if k in table}

    for lo in range(0, len(keys), 20):  # micro-batches
        part = keys[lo : lo + 20]
        idx, found = cache.lookup_batch(part, many) if batched else cache.lookup_each(part, one)  # type: ignore[arg-type]
        assert list(zip(idx, found, strict=True)) == _reference(part, table)
        # at most one entry may exceed the capacity on its own (a key with more rows than max_rows)
        assert cache.rows <= max_rows or len(cache) == 1
        assert cache.rows == sum(max(1, len(v[1])) for v in cache.d.values())
    non_null = [k for k in keys if k is not None]
    assert cache.hits + cache.misses + cache.expired == len(non_null)
    assert cache.db_keys == len(fetched)


def test_lru_cache_expires_after_ttl() -> None:
    cache = LruTtlCache(10, ttl=0.0)  # every entry is expired when read again
    table = {1: ((1, "a"),)}
    cache.lookup_each([1, 1, 1], lambda k: table.get(k, ()))
    assert cache.db_keys == 3 and cache.expired == 2


# ---------------------------------------------------------------------- the timeline
intervals = st.lists(st.tuples(st.integers(0, 50), st.integers(1, 10)).map(lambda t: (t[0], t[0] + t[1])), max_size=12)


def _grid(ivs: list[tuple[float, float]]) -> set[int]:
    return {x for s, e in ivs for x in range(int(s), int(e))}


@settings(max_examples=150, deadline=None)
@given(a=intervals, b=intervals)
def test_interval_arithmetic_equals_a_unit_grid(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    fa, fb = [(float(s), float(e)) for s, e in a], [(float(s), float(e)) for s, e in b]
    ma, mb = merge(fa), merge(fb)
    assert _grid(ma) == _grid(fa) and total(ma) == len(_grid(fa))
    assert all(ma[i][1] < ma[i + 1][0] for i in range(len(ma) - 1))  # disjoint, sorted
    assert _grid(intersect(ma, mb)) == _grid(fa) & _grid(fb)
    assert _grid(subtract(ma, mb)) == _grid(fa) - _grid(fb)


def test_timeline_overlap_is_zero_when_sequential_and_measured_when_concurrent() -> None:
    tl = Timeline()
    tl.start()
    t0 = tl.t0
    assert t0 is not None
    # a batch: decode 0-1, join 1-4 containing a master read 1-2, write 4-5; then a read 5.5-6.5 during a write
    tl.add("decode", t0, t0 + 1)
    tl.add("join", t0 + 1, t0 + 4)
    tl.add("master_read", t0 + 1, t0 + 2)
    tl.add("write", t0 + 4, t0 + 7)
    tl.add("master_read", t0 + 5.5, t0 + 6.5)
    tl.t_end = t0 + 8
    r = tl.result(bins=8)
    assert r["busy_seconds"] == {"decode": 1, "master_read": 2, "join_compute": 2, "write": 3}
    assert r["overlap_seconds"] == {"master_read&write": 1}
    assert r["master_read_overlap_seconds"] == 1
    assert r["union_seconds"] == 7 and r["idle_seconds"] == 1
    assert r["concurrency"] == pytest.approx(8 / 7)
    assert r["bins"]["write"] == [0, 0, 0, 0, 1, 1, 1, 0]
    assert render(r) == [
        "      decode |#       | 1.0 s",
        " master_read | #   ++ | 2.0 s",
        "join_compute |  ##    | 2.0 s",
        "       write |    ### | 3.0 s",
        "              0 s  8 s",
    ]


def test_timeline_records_a_progress_record_back_to_back() -> None:
    tl = Timeline()
    tl.start()
    tl.on_progress({"event": "batch", "seconds": {"decode": 0.5, "join": 1.0, "write": 0.25, "checkpoint": 0.25}})
    tl.stop()
    lanes = {k: v[0] for k, v in tl.lanes.items()}
    assert lanes["decode"][1] == pytest.approx(lanes["join"][0])
    assert lanes["join"][1] == pytest.approx(lanes["write"][0])
    assert lanes["checkpoint"][1] - lanes["decode"][0] == pytest.approx(2.0)


# ---------------------------------------------------------------------- registry, options, report
def test_registry_has_one_module_per_method() -> None:
    assert registry.METHODS == (
        "ssbj",
        "ssbj_index",
        "ssbj_index_ttl",
        "ssbj_exec",
        "ssbj_exec_read",
        "meshjoin",
        "lookup_lru",
        "lookup_lru_in",
        "spark_static",
    )
    for name in registry.METHODS:
        m = registry.method(name)
        assert m.name == name and m.label
        assert m.supports_shards(1) is None
    # P > 1 is the executor placement, modules of their own: each driver-side method refuses it with a reason
    executors = ("ssbj_exec", "ssbj_exec_read")
    driver_side = [n for n in registry.METHODS if n not in executors]
    assert all(registry.method(n).supports_shards(2) for n in driver_side)
    assert all(registry.method(n).supports_shards(4) is None for n in executors)


def test_every_pipeline_bench_module_stays_small() -> None:
    paths = list((ROOT / "ssbj" / "bench" / "pipeline").glob("*.py"))
    assert len(paths) >= 10
    for path in paths:
        assert len(path.read_text().splitlines()) < 500, path


def test_options_variants() -> None:
    args = cli.parse_args(["--case", "b", "--shards", "1", "2", "--memory", "1%", "5%", "--scale", "tiny"])
    assert args.case == "b" and args.shards == [1, 2] and args.memory == ["1%", "5%"]
    assert cli._variant("1%", 2) == "mem-1pct-p2"
    with pytest.raises(SystemExit):
        cli.parse_args(["--shards", "0"])


def test_report_rewrites_the_committed_results(tmp_path: Path) -> None:
    doc = json.loads((ROOT / "bench" / "pipeline" / "mem-24MiB-p1" / "results.json").read_text())
    out = tmp_path / "README.md"
    write_readme(doc, out)
    text = out.read_text()
    assert text.startswith("# End-to-end pipeline benchmark")
    for m, r in doc["results"].items():
        assert f"| {m} | {r['tuples']:,} |" in text
    assert "case a: one-to-many" in text  # documents without a case are case a


def test_ssbj_bench_pipeline_is_the_same_command(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text((ROOT / "bench" / "pipeline" / "mem-24MiB-p1" / "results.json").read_text())
    assert main(["bench", "pipeline", "--report-only", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "README.md").read_text().startswith("# End-to-end pipeline benchmark")
    args = cli.parse_args(["--scale", "item5", "--case", "b", "--shards", "1", "2", "--out", "x"])
    assert cli.command(args) == "python -m ssbj.bench.pipeline --scale item5 --case b --shards 1 2 --out x"


def test_scaling_model_reproduces_its_p1_run_and_splits_shard_work() -> None:
    p1 = Run(1, 1_000_000, 20.0, 18.0, 6.0, 8.0, 4.9)
    p2 = Run(2, 1_000_000, 17.0, 15.0, 6.0, 10.0, 7.0)
    m = Model.fit(p1, p2, cores=2, sources=2)
    assert (m.a, m.b) == (6.0, 2.0)  # shard work a + b*P: 8 at P = 1, 10 at P = 2
    assert abs(m.wall(1) - p1.wall) < 1e-9  # the fit reproduces the run it was taken from
    assert m.wall(2) == m.other + m.spark + 6.0 / 2 + (6.0 + 4.0) / 2
    assert m.wall(4, 4, 4) < m.wall(2, 2, 2) < m.wall(1, 1, 1)
    assert "| 32 |" in report(p1, p2, 2, 2)


def test_error_summary_is_one_line_naming_the_innermost_cause() -> None:
    spark = (
        "round 1: StreamingQueryException: [STREAM_FAILED] Query terminated with exception\n"
        '  File "m_spark_static.py", line 92, in foreach\n'
        "py4j.protocol.Py4JJavaError: An error occurred while calling o1151.save.\n"
        ": org.apache.spark.SparkException: Not enough memory to build and broadcast the table\n"
        "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.notEnough(QueryExecutionErrors.scala:2180)\n"
    )
    assert error_summary(spark) == (
        "round 1: StreamingQueryException: [STREAM_FAILED] Query t... "
        "... org.apache.spark.SparkException: Not enough memory to build and broadcast the table"
    )
    assert error_summary("round 1: ValueError: plain\nmore") == "round 1: ValueError: plain"
    assert len(error_summary("x" * 1000)) == SUMMARY_CHARS
