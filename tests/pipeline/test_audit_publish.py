"""Runs are audited; a run's rows are published or quarantined as a unit, idempotently."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from ssbj.cli import main
from ssbj.config import load_config
from ssbj.contracts import RunCounts
from ssbj.pipeline.audit import RunRange, Warehouse, audit_counts
from ssbj.pipeline.job import EnrichmentJob
from ssbj.pipeline.quickstart import write_demo


def _count(db: Path, sql: str) -> Any:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchone()


@pytest.mark.parametrize("placement", ["driver", pytest.param("executors", marks=pytest.mark.slow)])
def test_two_runs_are_audited_and_published_or_quarantined_separately(
    spark: Any, tmp_path: Path, placement: str
) -> None:
    job = write_demo(tmp_path, customers=2_000, orders=12_000, files=4, seed=5)
    doc = yaml.safe_load(job.read_text())
    doc["join"].update({"placement": placement, "shards": 2})
    job.write_text(yaml.safe_dump(doc, sort_keys=False))
    landing = tmp_path / "landing"
    later = tmp_path / "later"
    later.mkdir()
    for f in sorted(landing.glob("*.jsonl"))[2:]:
        shutil.move(f, later / f.name)  # the second run gets these
    cfg = load_config(job)
    wh = tmp_path / "warehouse.db"

    s1 = EnrichmentJob(cfg, spark=spark, run_id="run-1").run()
    for f in later.iterdir():
        shutil.move(f, landing / f.name)
    s2 = EnrichmentJob(cfg, spark=spark, run_id="run-2").run()
    assert s1.batches > 0 and s2.batches > 0

    with sqlite3.connect(wh) as conn:
        rows = {
            r[0]: r[1:]
            for r in conn.execute(
                "SELECT run_id, rows_in, rows_enriched, source_rows_enriched, unmatched, dead_lettered, "
                "waiting, status FROM ssbj_audit"
            )
        }
    total_in = sum(r[0] for r in rows.values())
    assert total_in == 12_000 + 4 * 2  # every order line plus two malformed lines per file
    for r in rows.values():
        rows_in, _, source_enriched, unmatched, dead, waiting, status = r
        assert rows_in == source_enriched + unmatched + dead and waiting == 0 and status == "loaded"
    (loaded,) = _count(wh, "SELECT COUNT(*) FROM orders_enriched")
    assert loaded == sum(r[1] for r in rows.values())

    assert main(["publish", str(job), "--run-id", "run-1"]) == 0
    assert main(["quarantine", str(job), "--run-id", "run-2", "--reason", "amount out of range"]) == 0
    assert main(["publish", str(job), "--run-id", "run-1"]) == 0  # idempotent
    pub = _count(wh, "SELECT COUNT(*), COUNT(DISTINCT ssbj_run_id) FROM orders_published")
    qua = _count(wh, "SELECT COUNT(*), MIN(ssbj_reason) FROM orders_quarantine")
    assert pub == (rows["run-1"][1], 1)
    assert qua == (rows["run-2"][1], "amount out of range")
    assert pub[0] + qua[0] == loaded
    with sqlite3.connect(wh) as conn:
        statuses = dict(conn.execute("SELECT run_id, status FROM ssbj_audit").fetchall())
    assert statuses == {"run-1": "published", "run-2": "quarantined"}


def test_a_retried_run_adds_its_counts_and_reads_them_back_typed(tmp_path: Path) -> None:
    cfg = load_config(write_demo(tmp_path, customers=10, orders=10, files=1))
    wh = Warehouse(cfg)
    assert wh.begin_run("r", (-1, 0)) == RunRange((-1, 0), (-1, 0))
    first = RunCounts(
        records_in=10, matched_source_rows=6, unmatched_source_rows=2, waiting=1, dead_letters=1, output_rows=8
    )
    wh.finish_run("r", (0, 0), first, 1.0)
    assert wh.begin_run("r", (5, 0)) == RunRange((-1, 0), (0, 0))  # a retried run keeps its first start
    # the retry reads 4 more records and finishes the tuple that was waiting
    second = RunCounts(records_in=4, matched_source_rows=4, unmatched_source_rows=1, output_rows=5)
    wh.finish_run("r", (1, 0), second, 1.0)
    got = audit_counts(wh.run("r"))
    assert got == RunCounts(
        records_in=14, matched_source_rows=10, unmatched_source_rows=3, waiting=0, dead_letters=1, output_rows=13
    )
    assert got.reconciled and got.unaccounted == 0
    assert RunCounts(records_in=5, matched_source_rows=3).unaccounted == 2
