"""The demo job with its join in executor shards on ``local-cluster[2,1,1024]``, and what its runs must leave.

Shared by the fault tests of the join in the executors (tests/e2e/test_executors_*.py).
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pipeline_reference import expected_join, warehouse_rows

from ssbj.config import parse_config
from ssbj.pipeline.quickstart import write_demo

SSBJ = [sys.executable, "-m", "ssbj.cli"]


def executors_job(root: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """Write the demo job (24,000 orders in 8 files) with P = 2 shards in the executors; ``edit`` changes the rest."""
    job = write_demo(root, customers=3_000, orders=24_000, files=8, seed=5)
    cfg = yaml.safe_load(job.read_text())
    cfg["join"].update({"placement": "executors", "shards": 2})
    edit(cfg)
    cfg["spark"] = {"master": "local-cluster[2,1,1024]", "conf": {"spark.task.maxFailures": "4"}}
    job.write_text(yaml.safe_dump(cfg, sort_keys=False))
    parse_config(cfg, str(job))
    return job


def crash_env(root: Path, crash: str | None = None) -> dict[str, str]:
    """Return the environment of a run: Spark's Python is this one; ``crash`` arms the crash points, each once."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env.pop("SSBJ_CRASH_AT", None)
    if crash:
        (root / "once").mkdir(exist_ok=True)
        env.update(SSBJ_CRASH_AT=crash, SSBJ_CRASH_ONCE=str(root / "once"))
    return env


def check_warehouse(root: Path) -> None:
    """Assert that the warehouse holds exactly the batch join of the landed lines, and every dead letter once."""
    expected, _, bad = expected_join(root / "landing", root / "master.db")
    got = warehouse_rows(root / "warehouse.db", "orders_enriched")
    assert sum(got.values()) == sum(expected.values())
    assert got == expected
    with sqlite3.connect(root / "warehouse.db") as db:
        positions = [p for (p,) in db.execute("SELECT position FROM orders_dead_letters")]
    assert len(positions) == len(set(positions)) == bad  # every dead letter once
