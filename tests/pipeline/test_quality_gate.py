"""The quality gate: a clean run is published, a deliberately corrupted run is quarantined."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ssbj.cli import main
from ssbj.config import load_config
from ssbj.contracts import RunCounts
from ssbj.pipeline.job import EnrichmentJob
from ssbj.pipeline.quality import build_suite, result_path
from ssbj.pipeline.quickstart import write_demo

pytest.importorskip("great_expectations")


def test_suite_is_generated_from_the_config(tmp_path: Path) -> None:
    job = write_demo(tmp_path, customers=10, orders=10, files=1)
    cfg = load_config(job)
    cols = ["order_id", "customer_id", "amount", "placed_at", "c_name", "c_segment", "c_balance"]
    counts = RunCounts(records_in=9, matched_source_rows=5, unmatched_source_rows=4, output_rows=7)
    suite = build_suite(cfg, cols, ["c_name", "c_segment", "c_balance"], counts)
    kinds = [(e.kind, e.kwargs.get("column")) for e in suite]
    assert ("ExpectColumnValuesToNotBeNull", "customer_id") in kinds
    assert ("ExpectColumnValuesToNotBeNull", "c_name") in kinds
    assert ("ExpectColumnValuesToBeBetween", "amount") in kinds
    assert ("ExpectColumnUniqueValueCountToBeBetween", "order_id") in kinds
    assert any(e.kind == "ExpectTableRowCountToEqual" and e.kwargs["value"] == 7 for e in suite)


def test_clean_run_is_published_and_corrupted_run_quarantined(spark: Any, tmp_path: Path, capsys: Any) -> None:
    job = write_demo(tmp_path, customers=2_000, orders=8_000, files=2, seed=4)
    cfg = load_config(job)
    EnrichmentJob(cfg, spark=spark, run_id="clean").run()
    assert main(["check", str(job), "--run-id", "clean"]) == 0
    assert json.loads(result_path(cfg, "clean").read_text())["success"] is True
    assert main(["gate", str(job), "--run-id", "clean"]) == 0

    # a corrupted delivery: amounts far out of the declared range
    bad = [
        json.dumps(
            {"order_id": 100_000 + i, "customer_id": 1 + i % 50, "amount": 99_999.0, "placed_at": "2026-11-02T00:00:00"}
        )
        for i in range(40)
    ]
    (tmp_path / "landing" / "orders-bad.jsonl").write_text("\n".join(bad) + "\n")
    EnrichmentJob(cfg, spark=spark, run_id="corrupt").run()
    capsys.readouterr()
    assert main(["check", str(job), "--run-id", "corrupt"]) == 1
    out = capsys.readouterr().out
    assert "FAILED expect_column_values_to_be_between" in out and "40 rows failing" in out
    assert main(["gate", str(job), "--run-id", "corrupt"]) == 1
    err = capsys.readouterr().err
    assert "40 rows quarantined" in err and "amount" in err
    with sqlite3.connect(tmp_path / "warehouse.db") as db:
        published = db.execute("SELECT COUNT(*), MAX(amount) FROM orders_published").fetchone()
        quarantined = db.execute("SELECT COUNT(*), MIN(amount) FROM orders_quarantine").fetchone()
        audit = dict(db.execute("SELECT run_id, status FROM ssbj_audit").fetchall())
        failing = db.execute("SELECT rows_failing_checks FROM ssbj_audit WHERE run_id = 'corrupt'").fetchone()
    assert published[0] > 7_000 and published[1] <= 500
    assert quarantined == (40, 99_999.0)
    assert audit == {"clean": "published", "corrupt": "quarantined"}
    assert failing == (40,)
    shutil.rmtree(tmp_path / "checkpoint" / "quality")
    assert main(["gate", str(job), "--run-id", "corrupt"]) == 2  # never gate an unchecked run


def test_the_suite_runs_on_a_spark_dataframe(spark: Any, tmp_path: Path) -> None:
    from ssbj.pipeline.quality import Expectation, validate_spark

    rows = [(i, i % 7, float(i)) for i in range(200)] + [(999, None, 9_999.0)]
    df = spark.createDataFrame(rows, "order_id long, customer_id long, amount double")
    suite = [
        Expectation("ExpectColumnValuesToNotBeNull", {"column": "customer_id"}, "join key"),
        Expectation("ExpectColumnValuesToBeBetween", {"column": "amount", "min_value": 0, "max_value": 500}, "range"),
        Expectation("ExpectTableRowCountToEqual", {"value": 201}, "count"),
    ]
    checks, failing = validate_spark(df, suite)
    by_type = {c["expectation"]: c for c in checks}
    assert by_type["expect_column_values_to_not_be_null"]["success"] is False
    assert by_type["expect_column_values_to_be_between"]["unexpected_count"] == 1
    assert by_type["expect_table_row_count_to_equal"]["success"] is True
    assert failing == 2
    checks, failing = validate_spark(df.where("customer_id IS NOT NULL"), suite[:2])
    assert all(c["success"] for c in checks) and failing == 0
