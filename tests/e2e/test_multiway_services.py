"""A multi-way job against real services: Tansu (Kafka protocol) in, masters and warehouse in MariaDB.

Checked as a multiset against DuckDB's answer to the same SQL over the produced messages and
the master rows; dead letters carry their topic/partition/offset; the counts reconcile.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from multiway_pipeline_data import COLUMNS, duckdb_answer, job, load_masters, masters, stream

from ssbj.config import parse_multiway_config
from ssbj.pipeline.job import EnrichmentJob
from ssbj.testing.kafka import TansuBroker
from ssbj.testing.mariadb import DATABASE, PASSWORD, USER, MariaDBServer


def test_kafka_to_mariadb_with_masters_in_mariadb_equals_duckdb(
    spark: Any, mariadb: MariaDBServer, kafka_broker: TansuBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSBJ_TEST_DB_PASSWORD", PASSWORD)
    engine = sa.create_engine(mariadb.url)
    with engine.begin() as conn:  # the session's MariaDB: the DAG test leaves rows in tables of these names
        for t in ("orders_3way", "orders_3way_dead"):
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {t}"))
    tables = masters(seed=7)
    load_masters(engine, tables)
    rows, messages, bad = stream(seed=8, n=5_000)
    kafka_broker.create_topic("orders-3way", partitions=2)
    kafka_broker.produce("orders-3way", messages)
    db = {"url": f"mysql+pymysql://{USER}@127.0.0.1:{mariadb.port}/{DATABASE}", "password_env": "SSBJ_TEST_DB_PASSWORD"}
    cfg = parse_multiway_config(
        job(
            tmp_path,
            db,
            {
                "kind": "kafka",
                "bootstrap_servers": kafka_broker.bootstrap,
                "topic": "orders-3way",
                "max_offsets_per_trigger": 700,
                "reader_options": {"pollTimeoutMs": "800", "endOffsets": "consume"},
            },
            {"kind": "database", **db, "table": "orders_3way"},
            {"kind": "database", **db, "table": "orders_3way_dead"},
            # auto: nation and part fit the share of the budget and are held, customer does not
            masters={"customer": {}, "nation": {}, "part": {"mode": "scanned", "partition_rows": 40}},
            join={"memory": "4MiB", "hold_share": 0.005, "store": "lsm"},
        )
    )
    run = EnrichmentJob(cfg, spark=spark)
    summary = run.run()
    plan = getattr(run.processor, "plan", None)
    assert plan is not None and plan.held == {"customer": False, "nation": True, "part": False}
    expected = duckdb_answer(rows, tables)
    with engine.connect() as conn:
        got = Counter(tuple(r) for r in conn.execute(sa.text(f"SELECT {', '.join(COLUMNS)} FROM orders_3way")))  # noqa: S608
        positions = [r[0] for r in conn.execute(sa.text("SELECT position FROM orders_3way_dead"))]
    assert sum(got.values()) == sum(expected.values()) > 0
    assert got == expected
    assert len(positions) == bad and all(p.startswith("orders-3way/") and len(p.split("/")) == 3 for p in positions)
    c = summary.counts
    assert c.reconciled and c.waiting == 0 and c.records_in == len(messages)
    assert c.matched_source_rows == len({r[0] for r in expected})
