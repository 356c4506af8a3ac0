"""A multi-way job on Spark: landing files in, masters in SQLite, Parquet out, equal to DuckDB's answer."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import sqlalchemy as sa
from multiway_pipeline_data import COLUMNS, duckdb_answer, job, load_masters, masters, stream, write_landing

from ssbj.config import parse_multiway_config
from ssbj.pipeline.job import EnrichmentJob


def _got(path: Path) -> Counter[tuple[Any, ...]]:
    if not any(path.glob("*.parquet")):  # the sink has prepared the directory, nothing written yet
        return Counter()
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


def test_processing_time_trigger_drains_when_the_stream_is_idle(spark: Any, tmp_path: Path) -> None:
    tables = masters(seed=3, customers=200)
    load_masters(sa.create_engine(f"sqlite:///{tmp_path / 'm.db'}"), tables)
    rows, messages, _ = stream(seed=4, n=1_200, customers=200)
    (tmp_path / "landing").mkdir()
    cfg = parse_multiway_config(
        job(
            tmp_path,
            {"url": f"sqlite:///{tmp_path / 'm.db'}"},
            {"kind": "files", "path": str(tmp_path / "landing"), "format": "jsonl"},
            {"kind": "parquet", "path": str(tmp_path / "out")},
            {"kind": "parquet", "path": str(tmp_path / "dl")},
            trigger={"mode": "processing-time", "interval": "1 second", "idle_drain_seconds": 2},
        )
    )
    run = EnrichmentJob(cfg, spark=spark)
    runner = threading.Thread(target=run.run)
    runner.start()
    expected = duckdb_answer(rows, tables)
    try:
        for f in range(3):  # files arrive while the query runs; rows wait in the scans between them
            part = messages[f * 400 : (f + 1) * 400]
            tmp = tmp_path / f".f{f}.tmp"
            tmp.write_bytes(b"\n".join(part) + b"\n")
            tmp.rename(tmp_path / "landing" / f"orders-{f}.jsonl")
            time.sleep(1.5)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if (tmp_path / "out").exists() and _got(tmp_path / "out") == expected:
                break
            time.sleep(1)
    finally:
        run.stop()
        runner.join(60)
    assert _got(tmp_path / "out") == expected
    assert run.processor.counts().waiting == 0 and run.processor.counts().reconciled
