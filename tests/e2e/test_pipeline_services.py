"""The whole job against real services: Tansu (Kafka protocol) in, MariaDB master, MariaDB warehouse.

Checked as a multiset against a plain batch join of the produced messages with the master
table, with dead letters for malformed messages, outages of the database and the broker
in the middle of the run, and no secret in any log line.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ssbj.config import parse_config
from ssbj.pipeline.job import EnrichmentJob
from ssbj.testing.kafka import TansuBroker
from ssbj.testing.mariadb import DATABASE, PASSWORD, USER, MariaDBServer

CUSTOMERS = 4_000


def _load_master(engine: sa.Engine) -> dict[int, tuple[Any, ...]]:
    rng = random.Random(11)
    rows = {
        i: (f"Customer#{i:06d}", ["AUTO", "BUILD", "HOUSE"][i % 3], round(rng.uniform(-99, 999), 2))
        for i in range(1, CUSTOMERS + 1)
    }
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS customer"))
        conn.execute(
            sa.text(
                "CREATE TABLE customer (c_custkey BIGINT PRIMARY KEY, c_name VARCHAR(25) NOT NULL, "
                "c_segment VARCHAR(10) NOT NULL, c_balance DOUBLE NOT NULL)"
            )
        )
        conn.execute(
            sa.text("INSERT INTO customer VALUES (:k, :n, :s, :b)"),
            [{"k": k, "n": n, "s": s, "b": b} for k, (n, s, b) in rows.items()],
        )
    return rows


def _messages(n: int, seed: int) -> tuple[list[bytes], int]:
    rng = random.Random(seed)
    out: list[bytes] = []
    bad = 0
    for i in range(n):
        if i % 501 == 7:
            out.append(b'{"order_id": 1, "customer_id": ')  # truncated JSON
            bad += 1
        elif i % 733 == 5:
            out.append(json.dumps({"order_id": "x", "customer_id": 3}).encode())  # wrong type
            bad += 1
        elif i % 977 == 3:
            out.append(json.dumps({"order_id": i, "amount": 1.0}).encode())  # no key field
            bad += 1
        else:
            key = None if i % 389 == 0 else min(int(rng.paretovariate(0.9)), CUSTOMERS + 300)
            out.append(json.dumps({"order_id": i, "customer_id": key, "amount": round(rng.uniform(1, 99), 2)}).encode())
    return out, bad


def _expected(messages: list[bytes], master: dict[int, tuple[Any, ...]]) -> tuple[Counter[tuple[Any, ...]], int]:
    out: Counter[tuple[Any, ...]] = Counter()
    unmatched = 0
    for m in messages:
        try:
            r = json.loads(m)
        except ValueError:
            continue
        if not isinstance(r.get("order_id"), int) or "customer_id" not in r:
            continue
        row = master.get(r["customer_id"]) if r["customer_id"] is not None else None
        if row is None:
            unmatched += 1
        else:
            out[(r["order_id"], r["customer_id"], r["amount"], *row)] += 1
    return out, unmatched


def _config(
    mariadb: MariaDBServer,
    broker: TansuBroker,
    topic: str,
    ck: Path,
    table: str,
    reader: str = "auto",
    broker_connection: str | None = None,
    **trigger: Any,
) -> Any:
    url = f"mysql+pymysql://{USER}@127.0.0.1:{mariadb.port}/{DATABASE}"
    return parse_config(
        {
            "name": f"e2e-{table}",
            "source": {
                "kind": "kafka",
                **(
                    {"connection_id": broker_connection}
                    if broker_connection
                    else {"bootstrap_servers": broker.bootstrap}
                ),
                "topic": topic,
                "max_offsets_per_trigger": 500,
                "reader_options": {"pollTimeoutMs": "800", "endOffsets": "consume"},
            },
            "schema": {"order_id": "int64", "customer_id": "int64", "amount": "float64"},
            "master": {
                "url": url,
                "password_env": "SSBJ_TEST_DB_PASSWORD",
                "table": "customer",
                "key": "c_custkey",
                "columns": ["c_name", "c_segment", "c_balance"],
                "partition_rows": 700,
                "reader": reader,
            },
            "join": {"stream_key": "customer_id", "memory": "16MiB", "step_rows": 250},
            "sink": {"kind": "database", "url": url, "password_env": "SSBJ_TEST_DB_PASSWORD", "table": table},
            "dead_letter": {
                "kind": "database",
                "url": url,
                "password_env": "SSBJ_TEST_DB_PASSWORD",
                "table": f"{table}_dead",
            },
            "trigger": {"mode": "available-now", **trigger},
            "checkpoint": str(ck),
        }
    )


def _warehouse(engine: sa.Engine, table: str) -> Counter[tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(f"SELECT order_id, customer_id, amount, c_name, c_segment, c_balance FROM {table}")  # noqa: S608
        ).all()
    return Counter(tuple(r) for r in rows)


@pytest.fixture()
def db_password(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SSBJ_TEST_DB_PASSWORD", PASSWORD)
    return PASSWORD


def test_kafka_to_mariadb_exact_with_dead_letters_and_no_secrets_in_logs(
    spark: Any,
    mariadb: MariaDBServer,
    kafka_broker: TansuBroker,
    tmp_path: Path,
    db_password: str,
    caplog: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = sa.create_engine(mariadb.url)
    master = _load_master(engine)
    messages, bad = _messages(12_000, seed=5)
    kafka_broker.create_topic("orders-e2e", partitions=2)
    kafka_broker.produce("orders-e2e", messages)
    # the broker from an Airflow connection, the database password from the environment
    monkeypatch.setenv(
        "AIRFLOW_CONN_SSBJ_BROKER",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_broker.bootstrap}}),
    )
    cfg = _config(mariadb, kafka_broker, "orders-e2e", tmp_path / "ck", "enriched_e2e", broker_connection="ssbj_broker")
    progress: list[dict[str, Any]] = []
    with caplog.at_level(logging.DEBUG):
        summary = EnrichmentJob(cfg, spark=spark, on_progress=progress.append).run()
    expected, unmatched = _expected(messages, master)
    assert _warehouse(engine, "enriched_e2e") == expected
    c = summary.counts
    assert c["records_in"] == len(messages)
    assert c["dead_letters"] == bad
    assert c["unmatched_source_rows"] == unmatched
    assert c["waiting"] == 0
    assert c["records_in"] == c["matched_source_rows"] + c["unmatched_source_rows"] + c["dead_letters"]
    with engine.connect() as conn:
        positions = [r[0] for r in conn.execute(sa.text("SELECT position FROM enriched_e2e_dead"))]
    assert len(positions) == bad
    assert all(p.startswith("orders-e2e/") and len(p.split("/")) == 3 for p in positions)
    assert len(progress) > 2 and any(p["cache_hit_share"] > 0 for p in progress)
    assert db_password not in caplog.text
    assert db_password not in json.dumps(progress)


def test_outages_of_database_and_broker_lose_nothing_with_retries_and_query_restarts(
    spark: Any, mariadb: MariaDBServer, kafka_broker: TansuBroker, tmp_path: Path, db_password: str
) -> None:
    engine = sa.create_engine(mariadb.url)
    master = _load_master(engine)
    messages, _ = _messages(25_000, seed=9)
    kafka_broker.create_topic("orders-outage", partitions=2)
    kafka_broker.produce("orders-outage", messages)
    # the driver path: its retries give up after ~7.5 s (connectorx waits inside its own pool instead)
    cfg = _config(mariadb, kafka_broker, "orders-outage", tmp_path / "ck", "enriched_outage", reader="driver")
    seen = threading.Event()
    batches_at: list[float] = []
    outage_ended: list[float] = []

    def on_progress(p: dict[str, Any]) -> None:
        batches_at.append(time.monotonic())
        seen.set()

    job = EnrichmentJob(cfg, spark=spark, on_progress=on_progress, restart_backoff=0.5)

    def outages() -> None:
        seen.wait(120)
        mariadb.stop()
        time.sleep(12)  # longer than the adapters' retries (~7.5 s): the job must restart its query
        mariadb.start()
        time.sleep(1)
        kafka_broker.stop()
        time.sleep(3)
        kafka_broker.start()
        outage_ended.append(time.monotonic())

    t = threading.Thread(target=outages)
    t.start()
    summary = job.run()
    t.join()
    assert outage_ended and batches_at[-1] > outage_ended[0], "the job ended before the outages: make it longer"
    assert summary.restarts >= 1  # the database outage outlasted the adapters' retries
    engine.dispose()  # its pooled connections died with the server
    expected, _ = _expected(messages, master)
    assert _warehouse(engine, "enriched_outage") == expected
    assert summary.counts.waiting == 0
