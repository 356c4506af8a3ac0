"""A two-stream job against real services: orders from Tansu (Kafka protocol), shipments as files, MariaDB.

One Spark query reads the Kafka topic and the landing directory as one union. Orders have
no late row however the broker's records are cut into batches (jitter below the lateness);
shipments land one file per batch, so their late rows are known. Checked as a multiset
against DuckDB's answer over the rows that are not late; the counts reconcile per stream.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from multiway_pipeline_data import load_masters, masters
from twostream_data import COLUMNS, duckdb_answer, job, late_ids, streams, write_landing

from ssbj.config import parse_multiway_config
from ssbj.pipeline.job import EnrichmentJob
from ssbj.testing.kafka import TansuBroker
from ssbj.testing.mariadb import DATABASE, PASSWORD, USER, MariaDBServer

LATENESS = 45


def test_kafka_and_files_to_mariadb_equal_duckdb(
    spark: Any, mariadb: MariaDBServer, kafka_broker: TansuBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSBJ_TEST_DB_PASSWORD", PASSWORD)
    engine = sa.create_engine(mariadb.url)
    with engine.begin() as conn:
        for t in ("orders_shipments", "orders_shipments_dead"):
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {t}"))
    customer = masters(seed=61, customers=40)["customer"]
    load_masters(engine, {"customer": customer})
    data = streams(seed=62, files=4, lateness=LATENESS, late_frac={"orders": 0.0, "shipments": 0.1})
    dirs = write_landing(tmp_path, data)
    kafka_broker.create_topic("orders-window", partitions=1)
    kafka_broker.produce("orders-window", [m for lines in data.files["orders"] for m in lines])
    db = {"url": f"mysql+pymysql://{USER}@127.0.0.1:{mariadb.port}/{DATABASE}", "password_env": "SSBJ_TEST_DB_PASSWORD"}
    cfg = parse_multiway_config(
        job(
            tmp_path,
            db,
            dirs,
            {"kind": "database", **db, "table": "orders_shipments"},
            {"kind": "database", **db, "table": "orders_shipments_dead"},
            source={
                "kind": "kafka",
                "bootstrap_servers": kafka_broker.bootstrap,
                "topic": "orders-window",
                "max_offsets_per_trigger": 150,
                "reader_options": {"pollTimeoutMs": "800", "endOffsets": "consume"},
            },
            join={"memory": "32MiB", "lateness": LATENESS},
        )
    )
    summary = EnrichmentJob(cfg, spark=spark).run()
    late = late_ids(data, LATENESS)
    assert not late["orders"] and late["shipments"]
    expected = duckdb_answer(data, customer, late)
    with engine.connect() as conn:
        got = Counter(tuple(r) for r in conn.execute(sa.text(f"SELECT {', '.join(COLUMNS)} FROM orders_shipments")))  # noqa: S608
        dead = [tuple(r) for r in conn.execute(sa.text("SELECT reason, position FROM orders_shipments_dead"))]
    assert sum(got.values()) == sum(expected.values()) > 0
    assert got == expected
    kafka_bad = [p for r, p in dead if p.startswith("orders-window/")]
    assert len(kafka_bad) == data.bad["orders"]  # malformed orders: their topic/partition/offset
    assert sum(r.startswith("late: stream shipments") for r, _ in dead) == len(late["shipments"])
    c = summary.counts
    assert c.reconciled and c.records_in == sum(len(ls) for fs in data.files.values() for ls in fs)
    assert all(s["reconciled"] for s in summary.last_progress["streams"].values())
