"""TPC-H Q7 maintained in Spark Structured Streaming: Debezium topics (Tansu) -> MariaDB, landed files -> SQLite.

The maintained table equals DuckDB's Q7 over the snapshot of every record read; the deltas
folded in batch order give the same answer (none doubled); every bad record is a dead
letter with its topic/partition/offset or file:line; and a job killed with SIGKILL at a
crash point and restarted ends exactly there too.
"""

from __future__ import annotations

import decimal
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
import sqlalchemy as sa
import yaml
from cq_pipeline_cases import RELATIONS, Q7Case, build_case, split
from cq_reference import EXAMPLES, PK, canon

from ssbj.config_cq import parse_cq_config
from ssbj.pipeline.cq_job import CqJob
from ssbj.testing.kafka import TansuBroker
from ssbj.testing.mariadb import DATABASE, PASSWORD, USER, MariaDBServer

SSBJ = [sys.executable, "-m", "ssbj.cli"]
KEY = ("supp_nation", "cust_nation", "l_year")


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Q7Case:
    return build_case(tmp_path_factory.mktemp("tpch") / "sf0.01", orders=300, seed=3)


def _land(case: Q7Case, root: Path, files: int = 3) -> None:
    """Each relation's records as ``files`` JSON-lines files, oldest first (tombstones have no line)."""
    for rel in RELATIONS:
        d = root / "landing" / rel
        d.mkdir(parents=True)
        for i, chunk in enumerate(split(case.records[rel], files)):
            f = d / f"part-{i:03d}.json"
            f.write_bytes(b"\n".join(m for m in chunk if m is not None) + b"\n")
            os.utime(f, (1_700_000_000 + i * 10, 1_700_000_000 + i * 10))


def _files_job(root: Path, **extra: Any) -> dict[str, Any]:
    db = f"sqlite:///{root / 'warehouse.db'}"
    return {
        "name": "q7-files",
        "query": {"sql": _sql_text(root), "ddl_file": str(EXAMPLES / "tpch_schema.sql")},
        "sources": {
            r: {"kind": "files", "path": str(root / "landing" / r), "max_files_per_trigger": 1} for r in RELATIONS
        },
        "target": {
            "result": {"kind": "database", "url": db, "table": "q7_live"},
            "deltas": {"kind": "parquet", "path": str(root / "deltas")},
            "dead_letter": {"kind": "database", "url": db, "table": "q7_dead"},
        },
        "checkpoint": str(root / "ck"),
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}},
        **extra,
    }


def _sql_text(root: Path) -> str:
    return (root / "q7.sql").read_text()


def _sqlite_result(root: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(root / "warehouse.db") as con:
        rows = con.execute("SELECT supp_nation, cust_nation, l_year, revenue FROM q7_live").fetchall()
    return canon([(a, b, y, decimal.Decimal(f"{v:.4f}")) for a, b, y, v in rows])


def _folded(deltas: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    answer: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for b in sorted({r["ssbj_batch_id"] for r in deltas}):
        rows = [r for r in deltas if r["ssbj_batch_id"] == b]
        for r in rows:
            if r["_op"] == "-":
                del answer[tuple(r[k] for k in KEY)]
        for r in rows:
            if r["_op"] == "+":
                k = tuple(r[c] for c in KEY)
                assert k not in answer, f"batch {b} adds {k} twice"
                answer[k] = (*k, r["revenue"])
    return canon(list(answer.values()))


def _check_files_run(case: Q7Case, root: Path) -> None:
    want = case.expected()
    assert len(want) >= 2
    assert _sqlite_result(root) == want
    assert _folded(ds.dataset(root / "deltas", format="parquet").to_table().to_pylist()) == want
    with sqlite3.connect(root / "warehouse.db") as con:
        positions = [p for (p,) in con.execute("SELECT position FROM q7_dead")]
    assert len(positions) == case.bad
    assert all("/landing/" in p and p.rsplit(":", 1)[1].isdigit() for p in positions)


def test_landed_debezium_files_to_sqlite_exact(spark: Any, case: Q7Case, tmp_path: Path) -> None:
    (tmp_path / "q7.sql").write_text(case.sql)
    _land(case, tmp_path)
    cfg = parse_cq_config(_files_job(tmp_path))
    progress: list[dict[str, Any]] = []
    summary = CqJob(cfg, spark=spark, on_progress=progress.append).run()
    assert summary.batches == 3
    _check_files_run(case, tmp_path)
    t = summary.totals
    assert t.records_in == sum(m is not None for v in case.records.values() for m in v)
    assert t.dead_letters == case.bad and t.reconciled
    assert progress[0]["full_write"] and not progress[-1]["full_write"]


def _run(job: Path, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env.pop("SSBJ_CRASH_AT", None)
    if crash:
        env["SSBJ_CRASH_AT"] = crash
    return subprocess.run(
        [*SSBJ, "run", "--config", str(job), "--quiet"], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_sigkill_and_restart_keeps_the_table_exact(case: Q7Case, tmp_path: Path) -> None:
    """Killed inside batch 0's checkpoint (restart from no state: the table rewritten), then after batch 1's writes.

    (A kill after a checkpoint, before Spark's commit, is the restart-and-replay case of
    tests/pipeline/test_cq_processor.py.)
    """
    (tmp_path / "q7.sql").write_text(case.sql)
    _land(case, tmp_path)
    job = tmp_path / "q7-job.yaml"
    cfg = _files_job(tmp_path)
    cfg["query"] = {"sql_file": "q7.sql", "ddl_file": str(EXAMPLES / "tpch_schema.sql")}  # relative to the job file
    job.write_text(yaml.safe_dump(cfg, sort_keys=False))
    for crash in ("in-checkpoint:0", "after-sink:1"):
        res = _run(job, crash)
        assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    res = _run(job)
    assert res.returncode == 0, res.stderr[-3000:]
    _check_files_run(case, tmp_path)
    res = subprocess.run([*SSBJ, "check", str(job)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert "checks passed" in res.stdout


def _key(rel: str, message: bytes | None) -> bytes | None:
    try:
        p = json.loads(message or b"")["payload"]
        img = p.get("after") or p.get("before")
        return json.dumps([img[c] for c in PK[rel]]).encode()
    except (ValueError, KeyError, TypeError):
        return b"unparsable"


def test_debezium_topics_to_mariadb_exact(
    spark: Any, case: Q7Case, mariadb: MariaDBServer, kafka_broker: TansuBroker, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("SSBJ_TEST_DB_PASSWORD", PASSWORD)
    for rel in RELATIONS:
        topic = f"tpch.{rel}"
        kafka_broker.create_topic(topic, partitions=2 if rel == "lineitem" else 1)
        kafka_broker.produce(topic, [(_key(rel, m), m) for m in case.records[rel]])
    url = f"mysql+pymysql://{USER}@127.0.0.1:{mariadb.port}/{DATABASE}"
    db = {"url": url, "password_env": "SSBJ_TEST_DB_PASSWORD"}
    kafka = {"bootstrap_servers": kafka_broker.bootstrap, "max_offsets_per_trigger": 700}
    kafka["reader_options"] = {"pollTimeoutMs": "800", "endOffsets": "consume"}
    cfg = parse_cq_config(
        {
            "name": "q7-kafka",
            "query": {"sql": case.sql, "ddl_file": str(EXAMPLES / "tpch_schema.sql")},
            "sources": {r: {"kind": "kafka", "topic": f"tpch.{r}", **kafka} for r in RELATIONS},
            "target": {
                "result": {"kind": "database", **db, "table": "q7_live"},
                "deltas": {"kind": "database", **db, "table": "q7_deltas"},
                "dead_letter": {"kind": "database", **db, "table": "q7_dead"},
            },
            "checkpoint": str(tmp_path / "ck"),
        }
    )
    summary = CqJob(cfg, spark=spark).run()
    assert summary.batches >= 2
    want = case.expected()
    engine = sa.create_engine(mariadb.url)
    with engine.connect() as conn:
        got = conn.execute(sa.text("SELECT supp_nation, cust_nation, l_year, revenue FROM q7_live")).all()
        deltas = [dict(r._mapping) for r in conn.execute(sa.text("SELECT * FROM q7_deltas"))]
        positions = [p for (p,) in conn.execute(sa.text("SELECT position FROM q7_dead"))]
    assert canon([tuple(r) for r in got]) == want
    assert _folded(deltas) == want
    assert len(positions) == case.bad
    assert all(p.startswith("tpch.") and p.count("/") == 2 for p in positions)
    t = summary.totals
    assert t.records_in == sum(len(v) for v in case.records.values())
    assert t.tombstones == sum(m is None for m in case.records["orders"]) and t.reconciled
