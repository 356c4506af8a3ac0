"""Kill the job with SIGKILL at several points, restart it, and check the warehouse holds the batch join exactly."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest
import yaml
from pipeline_reference import expected_join, warehouse_rows
from ssbj_process import ssbj

from ssbj.config import parse_config
from ssbj.pipeline.quickstart import write_demo

pytestmark = pytest.mark.slow  # spark-submit / ssbj run subprocesses: 20-60 s each


def _job(root: Path) -> Path:
    job = write_demo(root, customers=3_000, orders=24_000, files=6, seed=3)
    cfg = yaml.safe_load(job.read_text())  # edited as data: a renamed field fails here, not silently
    cfg["source"]["max_files_per_trigger"] = 1
    cfg["master"]["partition_rows"] = 500
    job.write_text(yaml.safe_dump(cfg, sort_keys=False))
    parse_config(cfg, str(job))
    return job


def _run(job: Path, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    return ssbj("run", "--config", str(job), "--quiet", crash=crash)


def _check(root: Path) -> None:
    expected, unmatched, bad = expected_join(root / "landing", root / "master.db")
    got = warehouse_rows(root / "warehouse.db", "orders_enriched")
    assert sum(got.values()) == sum(expected.values())
    assert got == expected
    with sqlite3.connect(root / "warehouse.db") as db:
        (dl,) = db.execute("SELECT COUNT(*) FROM orders_dead_letters").fetchone()
        positions = [p for (p,) in db.execute("SELECT position FROM orders_dead_letters")]
    assert dl == bad
    assert all(p.rsplit(":", 1)[0].endswith(".jsonl") and p.rsplit(":", 1)[1].isdigit() for p in positions)
    assert unmatched > 0


@pytest.mark.parametrize(
    "crashes",
    [
        ["after-decode:2"],
        ["after-sink:3"],
        ["in-checkpoint:2"],
        ["after-checkpoint:4", "after-sink:5"],
    ],
    ids=lambda c: "+".join(c),
)
def test_sigkill_and_restart_gives_exactly_the_batch_join(tmp_path: Path, crashes: list[str]) -> None:
    job = _job(tmp_path)
    for crash in crashes:
        res = _run(job, crash)
        assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    res = _run(job)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "0 waiting" in res.stdout
    _check(tmp_path)
    # a second run finds nothing new and changes nothing
    res = _run(job)
    assert res.returncode == 0, res.stderr[-3000:]
    _check(tmp_path)


def test_uninterrupted_run_matches_the_batch_join(tmp_path: Path) -> None:
    job = _job(tmp_path)
    res = _run(job)
    assert res.returncode == 0, res.stderr[-3000:]
    _check(tmp_path)
