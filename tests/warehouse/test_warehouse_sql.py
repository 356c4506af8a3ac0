"""sql/ is generated from ssbj/warehouse.py and runs on every dialect we can reach here."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest
import sqlalchemy as sa

from ssbj.adapters.sink_sql import SqlTableSink
from ssbj.cli import main
from ssbj.testing.mariadb import MariaDBServer
from ssbj.warehouse import DIALECTS, demo_metadata, enriched_table, render, statements

SQL = Path(__file__).resolve().parents[2] / "sql"


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_sql_files_are_in_step_with_the_model(dialect: str) -> None:
    assert (SQL / dialect / "demo.sql").read_text() == render(demo_metadata(), dialect)


def test_cli_prints_the_same_ddl(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sql", "--dialect", "postgresql"]) == 0
    assert capsys.readouterr().out == render(demo_metadata(), "postgresql")


def test_sqlite_ddl_creates_every_table(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "w.db") as db:
        for stmt in statements((SQL / "sqlite" / "demo.sql").read_text()):
            db.execute(stmt)
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert names == set(demo_metadata().tables)


def test_mysql_ddl_creates_every_table_in_mariadb(mariadb: MariaDBServer) -> None:
    engine = sa.create_engine(mariadb.url)
    with engine.begin() as conn:
        for t in demo_metadata().tables:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {t}"))
        for stmt in statements((SQL / "mysql" / "demo.sql").read_text()):
            conn.execute(sa.text(stmt))
    names = set(sa.inspect(engine).get_table_names())
    assert set(demo_metadata().tables) <= names
    engine.dispose()


def test_the_sink_creates_exactly_the_table_the_ddl_describes(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("order_id", pa.int64()), pa.field("name", pa.string()), pa.field("x", pa.float64())])
    url = f"sqlite:///{tmp_path / 'w.db'}"
    sink = SqlTableSink(url, "orders_enriched")
    sink.prepare(schema)
    sink.close()
    engine = sa.create_engine(url)
    insp = sa.inspect(engine)
    got_cols = [(c["name"], str(c["type"]), c["nullable"]) for c in insp.get_columns("orders_enriched")]
    got_ix = [(i["name"], i["column_names"]) for i in insp.get_indexes("orders_enriched")]
    engine.dispose()
    with sqlite3.connect(tmp_path / "ddl.db") as db:
        db.executescript(render_table(schema))
    ddl = sa.create_engine(f"sqlite:///{tmp_path / 'ddl.db'}")
    insp = sa.inspect(ddl)
    assert got_cols == [(c["name"], str(c["type"]), c["nullable"]) for c in insp.get_columns("orders_enriched")]
    assert got_ix == [(i["name"], i["column_names"]) for i in insp.get_indexes("orders_enriched")]
    ddl.dispose()


def render_table(schema: pa.Schema) -> str:
    md = sa.MetaData()
    enriched_table(md, "orders_enriched", schema)
    return render(md, "sqlite")
