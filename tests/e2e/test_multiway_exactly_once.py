"""Kill a multi-way ``ssbj run`` with SIGKILL mid-stream, restart it: the warehouse still equals DuckDB's answer."""

from __future__ import annotations

import json
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from multiway_pipeline_data import COLUMNS, duckdb_answer, job, load_masters, masters, stream, write_landing
from ssbj_process import ssbj

from ssbj.config import load_any_config

pytestmark = pytest.mark.slow  # ssbj run subprocesses: 20-40 s each


def _job(root: Path) -> tuple[Path, Any, Any]:
    tables = masters(seed=4)
    load_masters(sa.create_engine(f"sqlite:///{root / 'master.db'}"), tables)
    rows, messages, bad = stream(seed=5, n=4_000)
    write_landing(root / "landing", messages, files=8)
    wh = {"kind": "database", "url": f"sqlite:///{root / 'warehouse.db'}"}
    cfg = job(
        root,
        {"url": f"sqlite:///{root / 'master.db'}"},
        {"kind": "files", "path": str(root / "landing"), "format": "jsonl", "max_files_per_trigger": 1},
        {**wh, "table": "orders_3way"},
        {**wh, "table": "orders_3way_dead"},
    )
    cfg["sql_file"] = "query.sql"  # the SQL from a file next to the job file
    (root / "query.sql").write_text(cfg.pop("sql"))
    path = root / "job.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    load_any_config(path)
    return path, duckdb_answer(rows, tables), (len(messages), bad)


def _run(job: Path, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    return ssbj("run", "--config", str(job), "--quiet", "--summary", str(job.parent / "summary.json"), crash=crash)


def _warehouse(root: Path) -> tuple[Counter[tuple[Any, ...]], int]:
    eng = sa.create_engine(f"sqlite:///{root / 'warehouse.db'}")
    with eng.connect() as conn:
        rows = conn.execute(sa.text(f"SELECT {', '.join(COLUMNS)} FROM orders_3way")).all()  # noqa: S608
        (dead,) = conn.execute(sa.text("SELECT COUNT(*) FROM orders_3way_dead")).one()
    return Counter(tuple(r) for r in rows), int(dead)


def test_sigkill_mid_stream_and_restart_gives_exactly_the_duckdb_answer(tmp_path: Path) -> None:
    job, expected, (records, bad) = _job(tmp_path)
    # batch 2: rows wait in the scans when the sink has written; batch 4: inside the checkpoint
    for crash in ("after-sink:2", "in-checkpoint:4"):
        res = _run(job, crash)
        assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    res = _run(job)
    assert res.returncode == 0, res.stderr[-3000:]
    got, dead = _warehouse(tmp_path)
    assert sum(got.values()) == sum(expected.values()) > 0
    assert got == expected
    assert dead == bad
    assert "0 waiting" in res.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    c = summary["counts"]
    assert summary["reconciled"] and c["records_in"] == records and c["dead_letters"] == bad
    assert c["matched_source_rows"] == len({r[0] for r in expected})
