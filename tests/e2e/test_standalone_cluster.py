"""The same job file on a Spark standalone cluster through ``spark-submit``: a master and a worker started on
127.0.0.1 from pip pyspark's ``spark-class``, the join in the cluster's executors (P = 2), exact against the
batch join."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
import yaml
from pipeline_reference import expected_join, warehouse_rows

import ssbj.cli
from ssbj.config import parse_config
from ssbj.pipeline.quickstart import write_demo

pytestmark = pytest.mark.slow

BIN = Path(pyspark.__file__).parent / "bin"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"spark-class exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise TimeoutError(f"nothing listens on {port}")


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    """A standalone master and one worker (2 cores, 2 GiB), stopped after the test."""
    env = dict(
        os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, SPARK_WORKER_DIR=str(tmp_path / "work")
    )
    port = _port()
    cls = str(BIN / "spark-class")
    procs = []
    try:
        master = subprocess.Popen(
            [
                cls,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(_port()),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        procs.append(master)
        _wait_port(port, master)
        url = f"spark://127.0.0.1:{port}"
        worker = subprocess.Popen(
            [
                cls,
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--cores",
                "2",
                "--memory",
                "2g",
                "--webui-port",
                str(_port()),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        procs.append(worker)
        yield url
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, 15)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, 9)


def test_spark_submit_to_a_standalone_cluster_runs_the_join_in_its_executors(standalone: str, tmp_path: Path) -> None:
    job = write_demo(tmp_path, customers=2_000, orders=12_000, files=4, seed=9)
    cfg = yaml.safe_load(job.read_text())
    cfg["join"].update({"placement": "executors", "shards": 2})
    job.write_text(yaml.safe_dump(cfg, sort_keys=False))
    parse_config(cfg, str(job))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    cmd = [
        str(BIN / "spark-submit"),
        "--master",
        standalone,
        "--conf",
        f"spark.pyspark.python={sys.executable}",
        "--conf",
        "spark.ui.enabled=false",
        "--executor-memory",
        "1g",
        "--total-executor-cores",
        "2",
        ssbj.cli.__file__,
        "run",
        "--config",
        str(job),
        "--quiet",
    ]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    expected, _, bad = expected_join(tmp_path / "landing", tmp_path / "master.db")
    assert warehouse_rows(tmp_path / "warehouse.db", "orders_enriched") == expected
    with sqlite3.connect(tmp_path / "warehouse.db") as db:
        (dl,) = db.execute("SELECT COUNT(*) FROM orders_dead_letters").fetchone()
    assert dl == bad
    # the executors ran the shards: their checkpoints exist, the driver's operator checkpoint does not
    assert sorted(p.name for p in (tmp_path / "checkpoint" / "shards").glob("shard-*") if p.is_dir()) == [
        "shard-0",
        "shard-1",
    ]
    assert not (tmp_path / "checkpoint" / "operator").exists()
