"""TPC-H Q7 maintained in Spark Structured Streaming: Debezium topics (Tansu) -> MariaDB, landed files -> SQLite.

The maintained table equals DuckDB's Q7 over the snapshot of every record read; the deltas
folded in batch order give the same answer (none doubled); every bad record is a dead
letter with its topic/partition/offset or file:line; and a job killed with SIGKILL at a
crash point and restarted ends exactly there too.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from cq_pipeline_cases import RELATIONS, Q7Case, build_case, check_files_run, files_job, folded, land
from cq_reference import EXAMPLES, PK, canon
from ssbj_process import ssbj

from ssbj.config_cq import parse_cq_config
from ssbj.pipeline.cq_job import CqJob
from ssbj.testing.kafka import TansuBroker
from ssbj.testing.mariadb import DATABASE, PASSWORD, USER, MariaDBServer

KEY = ("supp_nation", "cust_nation", "l_year")


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Q7Case:
    return build_case(tmp_path_factory.mktemp("tpch") / "sf0.01", orders=300, seed=3)


def test_landed_debezium_files_to_sqlite_exact(spark: Any, case: Q7Case, tmp_path: Path) -> None:
    (tmp_path / "q7.sql").write_text(case.sql)
    land(case, tmp_path)
    cfg = parse_cq_config(files_job(tmp_path))
    progress: list[dict[str, Any]] = []
    summary = CqJob(cfg, spark=spark, on_progress=progress.append).run()
    assert summary.batches == 3
    check_files_run(case, tmp_path)
    t = summary.totals
    assert t.records_in == sum(m is not None for v in case.records.values() for m in v)
    assert t.dead_letters == case.bad and t.reconciled
    assert progress[0]["full_write"] and not progress[-1]["full_write"]


def _run(job: Path, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    return ssbj("run", "--config", str(job), "--quiet", crash=crash)


@pytest.mark.slow
def test_sigkill_and_restart_keeps_the_table_exact(case: Q7Case, tmp_path: Path) -> None:
    """Killed inside batch 0's checkpoint (restart from no state: the table rewritten), then after batch 1's writes.

    (A kill after a checkpoint, before Spark's commit, is the restart-and-replay case of
    tests/pipeline/test_cq_processor.py.)
    """
    (tmp_path / "q7.sql").write_text(case.sql)
    land(case, tmp_path)
    job = tmp_path / "q7-job.yaml"
    cfg = files_job(tmp_path)
    cfg["query"] = {"sql_file": "q7.sql", "ddl_file": str(EXAMPLES / "tpch_schema.sql")}  # relative to the job file
    job.write_text(yaml.safe_dump(cfg, sort_keys=False))
    for crash in ("in-checkpoint:0", "after-sink:1"):
        res = _run(job, crash)
        assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    res = _run(job)
    assert res.returncode == 0, res.stderr[-3000:]
    check_files_run(case, tmp_path)
    res = ssbj("check", str(job))
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
    assert folded(deltas) == want
    assert len(positions) == case.bad
    assert all(p.startswith("tpch.") and p.count("/") == 2 for p in positions)
    t = summary.totals
    assert t.records_in == sum(len(v) for v in case.records.values())
    assert t.tombstones == sum(m is None for m in case.records["orders"]) and t.reconciled
