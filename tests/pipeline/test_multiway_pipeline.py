"""A multi-way job on Spark: landing files in, masters in SQLite, Parquet out, equal to DuckDB's answer."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import sqlalchemy as sa
from multiway_pipeline_data import COLUMNS, duckdb_answer, job, load_masters, masters, stream, write_landing

from ssbj.config import parse_multiway_config
from ssbj.pipeline.job import EnrichmentJob


def _got(path: Path) -> Counter[tuple[Any, ...]]:
    t = ds.dataset(path, format="parquet").to_table()
    return Counter(zip(*[t.column(c).to_pylist() for c in COLUMNS], strict=True))


def test_files_to_parquet_equals_duckdb_and_counts_reconcile(spark: Any, tmp_path: Path) -> None:
    tables = masters(seed=1)
    load_masters(sa.create_engine(f"sqlite:///{tmp_path / 'm.db'}"), tables)
    rows, messages, bad = stream(seed=2, n=3_000)
    write_landing(tmp_path / "landing", messages, files=6)
    cfg = parse_multiway_config(
        job(
            tmp_path,
            {"url": f"sqlite:///{tmp_path / 'm.db'}"},
            {"kind": "files", "path": str(tmp_path / "landing"), "format": "jsonl", "max_files_per_trigger": 1},
            {"kind": "parquet", "path": str(tmp_path / "out")},
            {"kind": "parquet", "path": str(tmp_path / "dl")},
            join={"memory": "32MiB", "step_rows": 200},
        )
    )
    summary = EnrichmentJob(cfg, spark=spark).run()
    expected = duckdb_answer(rows, tables)
    got = _got(tmp_path / "out")
    assert sum(got.values()) == sum(expected.values()) > 0
    assert got == expected
    c = summary.counts
    assert c.records_in == len(messages) and c.dead_letters == bad and c.waiting == 0
    assert c.matched_source_rows == len({r[0] for r in expected})  # o_id is unique per record
    assert c.reconciled and c.unmatched_source_rows == len(rows) - c.matched_source_rows
    assert c.output_rows == sum(expected.values())
    dl = ds.dataset(tmp_path / "dl", format="parquet").to_table()
    assert dl.num_rows == bad and all(p.rsplit(":", 1)[1].isdigit() for p in dl.column("position").to_pylist())
    # a second run finds nothing new and changes nothing
    again = EnrichmentJob(cfg, spark=spark).run()
    assert again.batches == 0 and _got(tmp_path / "out") == expected
