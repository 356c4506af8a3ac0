"""Kill a two-stream ``ssbj run`` with SIGKILL mid-stream, restart it: the warehouse still equals DuckDB's answer."""

from __future__ import annotations

import json
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from multiway_pipeline_data import load_masters, masters
from ssbj_process import ssbj
from twostream_data import COLUMNS, duckdb_answer, job, late_ids, streams, write_landing

from ssbj.config import load_any_config

pytestmark = pytest.mark.slow  # ssbj run subprocesses: 20-40 s each


def _run(job: Path, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    return ssbj("run", "--config", str(job), "--quiet", "--summary", str(job.parent / "summary.json"), crash=crash)


def test_sigkill_mid_stream_and_restart_gives_exactly_the_duckdb_answer(tmp_path: Path) -> None:
    tables = masters(seed=51, customers=40)
    load_masters(sa.create_engine(f"sqlite:///{tmp_path / 'master.db'}"), {"customer": tables["customer"]})
    data = streams(seed=52, files=5)
    dirs = write_landing(tmp_path, data)
    wh = {"kind": "database", "url": f"sqlite:///{tmp_path / 'warehouse.db'}"}
    cfg = job(
        tmp_path,
        {"url": f"sqlite:///{tmp_path / 'master.db'}"},
        dirs,
        {**wh, "table": "orders_shipments"},
        {**wh, "table": "orders_shipments_dead"},
        join={"memory": "32MiB", "lateness": 10, "store": "lsm"},
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    load_any_config(path)
    # batch 1: after the sink wrote (the rows kept in the window are in the checkpoint of batch 0 only);
    # batch 3: inside the operator's checkpoint
    for crash in ("after-sink:1", "in-checkpoint:3"):
        res = _run(path, crash)
        assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    res = _run(path)
    assert res.returncode == 0, res.stderr[-3000:]
    late = late_ids(data)
    expected = duckdb_answer(data, tables["customer"], late)
    eng = sa.create_engine(f"sqlite:///{tmp_path / 'warehouse.db'}")
    with eng.connect() as conn:
        rows = conn.execute(sa.text(f"SELECT {', '.join(COLUMNS)} FROM orders_shipments")).all()  # noqa: S608
        reasons = [r for (r,) in conn.execute(sa.text("SELECT reason FROM orders_shipments_dead")).all()]
    got = Counter(tuple(r) for r in rows)
    assert sum(got.values()) == sum(expected.values()) > 0
    assert got == expected
    n_late = sum(len(v) for v in late.values())
    assert len(reasons) == sum(data.bad.values()) + n_late
    assert sum(r.startswith("late: stream ") for r in reasons) == n_late
    summary = json.loads((tmp_path / "summary.json").read_text())
    c = summary["counts"]
    assert summary["reconciled"] and c["records_in"] == sum(len(ls) for fs in data.files.values() for ls in fs)
    assert c["dead_letters"] == len(reasons)
    per = {s["stream"]: s for s in summary["streams"].values()}
    assert {n: s["late"] for n, s in per.items()} == {n: len(v) for n, v in late.items()}
    assert all(s["reconciled"] for s in per.values())
    assert "stream shipments: " in res.stdout and "late)" in res.stdout
