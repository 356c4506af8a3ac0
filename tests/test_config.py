"""Job-file validation: clear messages, identifiers checked, secrets never in the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ssbj.cli import main
from ssbj.config import load_config, parse_config
from ssbj.credentials import database_url, kafka_bootstrap, kafka_client_options
from ssbj.errors import ConfigError
from ssbj.planning import plan_join


def _base(**over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "source": {"kind": "files", "path": "/data/landing", "format": "jsonl"},
        "schema": {"id": "int64", "k": "int64", "note": "string", "amt": "decimal(12,2)"},
        "master": {"url": "sqlite:///m.db", "table": "customer", "key": "c_custkey"},
        "join": {"stream_key": "k"},
        "sink": {"kind": "parquet", "path": "/data/out"},
        "dead_letter": {"kind": "parquet", "path": "/data/dl"},
        "checkpoint": "/data/ck",
    }
    for k, v in over.items():
        cfg[k] = v
    return cfg


def _error(data: Any) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(data, "job.yaml")
    return str(exc.value)


def test_valid_file_gives_typed_settings() -> None:
    cfg = parse_config(_base(join={"stream_key": "k", "memory": "1.5GiB"}))
    assert cfg.join.memory == 3 * 2**29
    assert cfg.stream_schema.field("amt").type.precision == 12
    assert cfg.trigger.mode == "available-now"
    assert cfg.spark_checkpoint.endswith("/spark") and cfg.operator_checkpoint.endswith("/operator")


@pytest.mark.parametrize(
    ("join", "fsm", "unique"),
    [
        ({}, "pipelined", True),
        ({"switching": "paper", "unique_key_switch": False, "early_eviction": False}, "paper", False),
    ],
)
def test_switching_settings_reach_the_operator_spec(join: dict[str, Any], fsm: str, unique: bool) -> None:
    cfg = parse_config(_base(join={"stream_key": "k", **join}))
    spec = plan_join(cfg.join_settings(), 32.0, 100_000, 40.0).spec
    assert (spec.switching, spec.unique_key_switch, spec.early_eviction) == (fsm, unique, unique)


@pytest.mark.parametrize(("join", "threads"), [({}, 1), ({"threads": 2}, 2)])
def test_threads_reach_the_operator_spec(join: dict[str, Any], threads: int) -> None:
    cfg = parse_config(_base(join={"stream_key": "k", **join}))
    assert plan_join(cfg.join_settings(), 32.0, 100_000, 40.0).spec.threads == threads


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"source": {"kind": "kafak"}}, "source: Input tag 'kafak'"),
        ({"schema": {"k": "strin"}}, "schema: unknown type 'strin'; allowed: int8"),
        ({"join": {"stream_key": "nope"}}, "join.stream_key 'nope' is not a column of schema"),
        ({"join": {"stream_key": "k", "memory": "12XB"}}, "join.memory: bad size value '12XB'"),
        ({"join": {"stream_key": "k", "algorithm": "hash"}}, "join.algorithm: Input should be 'ssbj' or 'meshjoin'"),
        ({"trigger": {"mode": "sometimes"}}, "trigger.mode: Input should be 'available-now' or 'processing-time'"),
        ({"master": {"url": "sqlite:///m.db", "table": "t; drop table x", "key": "k"}}, "master.table: table"),
        ({"master": {"url": "sqlite:///m.db", "table": "t", "key": "k`"}}, "master.key: column 'k`'"),
        ({"sink": {"kind": "database", "url": "sqlite:///w.db"}}, "sink.database.table: Field required"),
        ({"schema": {"k": "int64", "ssbj_batch_id": "int64"}}, "reserved prefix ssbj_"),
        ({"surprise": 1}, "surprise: Extra inputs are not permitted"),
        ({"join": {"stream_key": "k", "exchange": "read"}}, "join.exchange: read needs a Kafka source"),
        ({"join": {"stream_key": "k", "switching": "global"}}, "join.switching: Input should be 'pipelined' or"),
        ({"join": {"stream_key": "k", "threads": 0}}, "join.threads: Input should be greater than or equal to 1"),
        (
            {"join": {"stream_key": "k", "threads": 2, "placement": "executors"}},
            "join.threads > 1 needs placement: driver",
        ),
    ],
)
def test_errors_name_the_field_and_the_allowed_values(change: dict[str, Any], expected: str) -> None:
    msg = _error(_base(**change))
    assert msg.startswith("job.yaml: invalid job configuration")
    assert expected in msg, msg


def test_password_in_url_is_rejected_and_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    msg = _error(_base(master={"url": "mysql+pymysql://etl:hunter2@db/crm", "table": "t", "key": "k"}))
    assert "contains a password" in msg and "hunter2" not in msg
    cfg = parse_config(
        _base(master={"url": "mysql+pymysql://etl@db:3306/crm", "password_env": "CRM_PW", "table": "t", "key": "k"})
    )
    with pytest.raises(ConfigError, match="CRM_PW"):
        database_url(cfg.master)
    monkeypatch.setenv("CRM_PW", "p@ss:w/rd")
    url = database_url(cfg.master)
    assert "p@ss" not in str(url) and "p@ss" not in repr(url)
    import sqlalchemy as sa

    assert sa.engine.make_url(url.get_secret_value()).password == "p@ss:w/rd"  # noqa: S105
    assert cfg.master.display() == "mysql+pymysql://etl@db:3306/crm"


def test_airflow_connection_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_CRM_DB", "mysql://etl:s%40cret@db1:3307/crm")
    cfg = parse_config(_base(master={"connection_id": "crm_db", "table": "t", "key": "k"}))
    import sqlalchemy as sa

    url = sa.engine.make_url(database_url(cfg.master).get_secret_value())
    assert (url.drivername, url.host, url.port, url.database, url.password) == (
        "mysql+pymysql",
        "db1",
        3307,
        "crm",
        "s@cret",
    )
    monkeypatch.setenv("AIRFLOW_CONN_PG", '{"conn_type": "postgres", "host": "pg", "login": "u", "password": "x"}')
    cfg = parse_config(_base(master={"connection_id": "pg", "table": "t", "key": "k"}))
    assert database_url(cfg.master).get_secret_value().startswith("postgresql+psycopg://u:x@pg")


def test_kafka_broker_from_an_airflow_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    src = {"kind": "kafka", "connection_id": "broker", "topic": "t"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_BROKER",
        '{"conn_type": "kafka", "login": "etl", "password": "pw", '
        '"extra": {"bootstrap.servers": "b1:9092,b2:9092", "security.protocol": "SASL_SSL"}}',
    )
    cfg = parse_config(_base(source=src))
    assert kafka_bootstrap(cfg.source) == "b1:9092,b2:9092"  # type: ignore[union-attr]
    assert kafka_client_options(cfg.source) == {  # type: ignore[union-attr]
        "security.protocol": "SASL_SSL",
        "sasl.username": "etl",
        "sasl.password": "pw",
    }
    assert "pw" not in cfg.source.display()  # type: ignore[union-attr]
    monkeypatch.setenv("AIRFLOW_CONN_BROKER", "kafka://k1:9093")
    assert kafka_bootstrap(cfg.source) == "k1:9093"  # type: ignore[union-attr]
    msg = _error(_base(source={**src, "bootstrap_servers": "x:1"}))
    assert "exactly one of bootstrap_servers, connection_id" in msg


def test_secret_looking_kafka_options_must_come_from_the_environment() -> None:
    msg = _error(
        _base(
            source={
                "kind": "kafka",
                "bootstrap_servers": "b:9092",
                "topic": "t",
                "options": {"sasl.password": "x"},
            }
        )
    )
    assert "secret_options_env" in msg


def test_cli_validate_reports_yaml_and_field_errors(tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text("source: [unclosed\n")
    assert main(["validate", str(bad)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    bad.write_text("source: {kind: files, path: /x, format: xml}\n")
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "source.files.format: Input should be 'csv', 'jsonl' or 'parquet'" in err
    assert "master: Field required" in err
    with pytest.raises(ConfigError, match="cannot read job file"):
        load_config(tmp_path / "missing.yaml")


def test_example_job_files_are_valid() -> None:
    examples = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))
    assert len(examples) >= 2
    for path in examples:
        cfg = load_config(path)  # rejects a password written into a URL
        assert cfg.join.stream_key in cfg.schema_


def test_validate_checks_master_table_key_and_columns(tmp_path: Path, capsys: Any) -> None:
    import sqlite3

    db = tmp_path / "m.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE customer (c_custkey INTEGER PRIMARY KEY, c_name TEXT, c_note TEXT)")
    (tmp_path / "landing").mkdir()
    job = {
        "source": {"kind": "files", "path": str(tmp_path / "landing"), "format": "jsonl"},
        "schema": {"id": "int64", "k": "int64"},
        "master": {"url": f"sqlite:///{db}", "table": "customer", "key": "c_custkey", "columns": ["c_name"]},
        "join": {"stream_key": "k"},
        "sink": {"kind": "parquet", "path": str(tmp_path / "out")},
        "dead_letter": {"kind": "database", "url": f"sqlite:///{tmp_path / 'w.db'}", "table": "dl"},
        "checkpoint": str(tmp_path / "ck"),
    }
    import yaml

    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "master: table customer" in out and "0 rows" in out and out.rstrip().endswith("OK")
    assert "c_custkey has an index: hybrid index" in out  # the primary key
    job["join"]["hybrid"] = "index"
    path.write_text(yaml.safe_dump(job))
    assert main(["validate", str(path)]) == 0
    assert "lookups by c_custkey go through its index" in capsys.readouterr().out
    job["master"]["key"], job["master"]["columns"] = "c_name", ["c_note"]
    job["schema"]["k"] = "string"
    path.write_text(yaml.safe_dump(job))
    assert main(["validate", str(path)]) == 0
    assert "warning: hybrid index looks rows up by c_name, which no index starts with" in capsys.readouterr().out
    job["master"]["key"], job["master"]["columns"], job["schema"]["k"] = "c_custkey", ["c_name"], "int64"
    del job["join"]["hybrid"]
    job["master"]["columns"] = ["c_name", "c_segment"]
    path.write_text(yaml.safe_dump(job))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "c_segment" in err and "c_note" in err  # names the missing column and lists what exists
    job["master"]["columns"] = ["c_name"]
    job["master"]["table"] = "customers"
    path.write_text(yaml.safe_dump(job))
    assert main(["validate", str(path)]) == 2
    assert "customers" in capsys.readouterr().err
    job["master"]["table"] = "customer"
    job["schema"]["k"] = "string"
    path.write_text(yaml.safe_dump(job))
    assert main(["validate", str(path)]) == 2
    assert "cannot be joined" in capsys.readouterr().err
