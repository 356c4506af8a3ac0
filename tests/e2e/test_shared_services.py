"""A shared run over a Kafka topic (Tansu) with master tables in MariaDB: two jobs, then a third added."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from multijob_cases import dead_letters, expected_lines, job_config, lines_for, output, write_masters

from ssbj.pipeline.multijob import MultiJob
from ssbj.testing.kafka import TansuBroker
from ssbj.testing.mariadb import PASSWORD, MariaDBServer

PW = "SSBJ_TEST_SHARED_DB_PASSWORD"


def _copy_masters(root: Path, server: MariaDBServer) -> None:
    eng = sa.create_engine(server.url)
    with sqlite3.connect(root / "m.db") as src, eng.begin() as dst:
        for table, ddl in (
            ("customer", "id BIGINT PRIMARY KEY, ck BIGINT, c_name VARCHAR(20), c_seg BIGINT"),
            ("product", "p_key BIGINT PRIMARY KEY, p_name VARCHAR(20)"),
        ):
            dst.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
            dst.execute(sa.text(f"CREATE TABLE {table} ({ddl})"))
            rows = src.execute(f"SELECT * FROM {table}").fetchall()  # noqa: S608
            marks = ", ".join(f":c{i}" for i in range(len(rows[0])))
            insert = sa.text(f"INSERT INTO {table} VALUES ({marks})")  # noqa: S608 - the test's own tables
            dst.execute(insert, [{f"c{i}": v for i, v in enumerate(r)} for r in rows])
    eng.dispose()


def _cfg(root: Path, name: str, broker: TansuBroker, server: MariaDBServer, topic: str) -> Any:
    base = job_config(root, name)
    return job_config(
        root,
        name,
        source={"kind": "kafka", "bootstrap_servers": broker.bootstrap, "topic": topic, "max_offsets_per_trigger": 250},
        master={
            **base.master.model_dump(),
            "url": f"mysql+pymysql://ssbj@127.0.0.1:{server.port}/ssbj",
            "password_env": PW,
        },
    )


def test_kafka_topic_and_mariadb_masters_shared_by_two_then_three_jobs(
    tmp_path: Path,
    spark: Any,
    mariadb: MariaDBServer,
    kafka_broker: TansuBroker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PW, PASSWORD)
    write_masters(tmp_path)
    _copy_masters(tmp_path, mariadb)
    topic = f"orders-{tmp_path.name[-12:]}".replace("_", "-")
    kafka_broker.create_topic(topic, 2)
    first = [ln for f in range(3) for ln in lines_for("orders", f, 200)]
    kafka_broker.produce(topic, first)
    cfgs = {n: _cfg(tmp_path, n, kafka_broker, mariadb, topic) for n in "abd"}
    MultiJob([cfgs["a"], cfgs["b"]], tmp_path / "app", spark=spark).run()
    more = [ln for f in range(3, 5) for ln in lines_for("orders", f, 200)]
    kafka_broker.produce(topic, more)
    summary = MultiJob([cfgs["a"], cfgs["b"], cfgs["d"]], tmp_path / "app", spark=spark).run()
    assert summary.switched and all(c.reconciled for c in summary.counts.values())
    for name, lines in (("a", first + more), ("b", first + more), ("d", more)):
        want, dead = expected_lines(tmp_path, name, lines)
        got = output(tmp_path, name)
        assert sum(got.values()) == sum(want.values()), name
        assert got == want, name
        assert dead_letters(tmp_path, name) == dead, name
