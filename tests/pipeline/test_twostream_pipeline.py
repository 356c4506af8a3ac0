"""A two-stream multi-way job on Spark: two landing directories read as one union, Parquet out, equal to DuckDB."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import sqlalchemy as sa
from multiway_pipeline_data import load_masters, masters
from twostream_data import COLUMNS, duckdb_answer, job, late_ids, streams, write_landing

from ssbj.config import parse_multiway_config
from ssbj.pipeline.job import EnrichmentJob


def _got(path: Path) -> Counter[tuple[Any, ...]]:
    if not any(path.glob("*.parquet")):
        return Counter()
    t = ds.dataset(path, format="parquet").to_table()
    return Counter(zip(*[t.column(c).to_pylist() for c in COLUMNS], strict=True))


def test_two_file_streams_to_parquet_equal_duckdb_and_reconcile_per_stream(spark: Any, tmp_path: Path) -> None:
    tables = masters(seed=41, customers=40)
    load_masters(sa.create_engine(f"sqlite:///{tmp_path / 'm.db'}"), {"customer": tables["customer"]})
    data = streams(seed=42, files=5)
    dirs = write_landing(tmp_path, data)
    cfg = parse_multiway_config(
        job(
            tmp_path,
            {"url": f"sqlite:///{tmp_path / 'm.db'}"},
            dirs,
            {"kind": "parquet", "path": str(tmp_path / "out")},
            {"kind": "parquet", "path": str(tmp_path / "dl")},
        )
    )
    summary = EnrichmentJob(cfg, spark=spark).run()
    late = late_ids(data)
    expected = duckdb_answer(data, tables["customer"], late)
    got = _got(tmp_path / "out")
    assert sum(got.values()) == sum(expected.values()) > 0
    assert got == expected
    assert summary.batches == 5  # one file of each stream per micro-batch
    c = summary.counts
    records = sum(len(lines) for fs in data.files.values() for lines in fs)
    n_late = sum(len(v) for v in late.values())
    assert c.reconciled and c.records_in == records and c.dead_letters == sum(data.bad.values()) + n_late
    per = summary.last_progress["streams"]
    assert {s["stream"]: s["late"] for s in per.values()} == {n: len(v) for n, v in late.items()}
    assert all(s["reconciled"] for s in per.values())
    dl = ds.dataset(tmp_path / "dl", format="parquet").to_table()
    assert dl.num_rows == c.dead_letters
    assert sum(r.startswith("late: stream ") for r in dl.column("reason").to_pylist()) == n_late
    # a second run finds nothing new and changes nothing
    again = EnrichmentJob(cfg, spark=spark).run()
    assert again.batches == 0 and _got(tmp_path / "out") == expected
