"""One resolver for secrets (environment, then Airflow connection) and one engine per database."""

from pathlib import Path

import pytest

from ssbj.config import Database, DatabaseSink
from ssbj.credentials import database_url, dialect_of_conn_type, dispose_engines, engine, needs_local_infile
from ssbj.errors import ConfigError


def test_one_engine_per_database_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    monkeypatch.setenv("WH_URL", url)
    by_url = Database.model_validate({"url": url})
    by_env = Database.model_validate({"url_env": "WH_URL"})
    other = Database.model_validate({"url": f"sqlite:///{tmp_path / 'other.db'}"})
    try:
        assert engine(by_url) is engine(by_env)
        assert engine(other) is not engine(by_url)
    finally:
        dispose_engines()
    assert engine(by_url) is not None
    dispose_engines()


def test_errors_say_where_the_secret_was_looked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_URL", raising=False)
    with pytest.raises(ConfigError, match="NO_SUCH_URL \\(url_env\\) is not set"):
        database_url(Database.model_validate({"url_env": "NO_SUCH_URL"}))
    monkeypatch.delenv("AIRFLOW_CONN_NOWHERE", raising=False)
    try:
        database_url(Database.model_validate({"connection_id": "nowhere"}))
    except ConfigError as exc:  # without Airflow: names the variable it looked for
        assert "AIRFLOW_CONN_NOWHERE" in str(exc)
    except Exception as exc:
        assert "nowhere" in str(exc)
    else:
        raise AssertionError("a missing connection resolved")


def test_connection_types_map_to_dialects() -> None:
    assert [dialect_of_conn_type(t) for t in ("mysql", "mariadb", "postgres", "sqlite")] == [
        "mysql",
        "mysql",
        "postgresql",
        "sqlite",
    ]
    with pytest.raises(ConfigError, match="not supported"):
        dialect_of_conn_type("oracle")


def test_local_infile_only_for_a_mysql_sink_that_bulk_loads(tmp_path: Path) -> None:
    mysql = "mysql+pymysql://etl@db1:3306/dwh"
    loading = DatabaseSink.model_validate({"kind": "database", "url": mysql, "table": "t"})
    inserting = DatabaseSink.model_validate({"kind": "database", "url": mysql, "table": "t", "bulk": "insert"})
    lite = DatabaseSink.model_validate({"kind": "database", "url": f"sqlite:///{tmp_path / 'w.db'}", "table": "t"})
    plain = Database.model_validate({"url": mysql})
    assert [needs_local_infile(d) for d in (loading, inserting, lite, plain)] == [True, False, False, False]
    try:
        # made without connecting; a loading sink's engine is its own, the others share one per URL
        assert engine(loading) is not engine(plain) and engine(inserting) is engine(plain)
    finally:
        dispose_engines()
