"""Multi-way jobs: the job file's errors, ``ssbj validate``, the generated suite, and the gate on a real run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from multiway_pipeline_data import job, load_masters, masters, stream, write_landing

from ssbj.cli import main
from ssbj.config import load_any_config, parse_multiway_config
from ssbj.contracts import RunCounts
from ssbj.errors import ConfigError
from ssbj.pipeline.job import EnrichmentJob
from ssbj.pipeline.multiway_masters import JobQuery
from ssbj.pipeline.multiway_quality import build_multiway_suite, check_multiway_run
from ssbj.pipeline.quality import gate_run


def _cfg(tmp: Path, **over: Any) -> dict[str, Any]:
    load_masters(sa.create_engine(f"sqlite:///{tmp / 'm.db'}"), masters(seed=3, customers=50))
    (tmp / "landing").mkdir(exist_ok=True)
    wh = {"kind": "database", "url": f"sqlite:///{tmp / 'wh.db'}"}
    return job(
        tmp,
        {"url": f"sqlite:///{tmp / 'm.db'}"},
        {"kind": "files", "path": str(tmp / "landing"), "format": "jsonl"},
        {**wh, "table": "out3"},
        {**wh, "table": "out3_dead"},
        **over,
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sql": "SELECT * FROM orders o JOIN region r ON r.k = o.o_custkey"}, "sql reads region"),
        ({"sql_file": "q.sql"}, "give exactly one of sql, sql_file"),
        ({"masters": {"customer": {"mode": "sometimes"}}}, "masters.customer.mode"),
        ({"stream": {"name": "orders", "schema": {"o_id": "int99"}}}, "stream.schema"),
        ({"sql": "SELECT o.o_id FROM orders o WHERE"}, "SQL syntax error"),
        ({"sql": "SELECT o.o_id FROM orders o"}, "masters not read by the sql: customer, nation, part"),
    ],
)
def test_job_file_errors_name_the_field(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_multiway_config(_cfg(tmp_path, **change))


def test_validate_compiles_against_the_database_and_refuses_unsupported_sql(tmp_path: Path, capsys: Any) -> None:
    cfg = _cfg(tmp_path)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "master customer: table customer, scanned" in out and "master nation: table nation, held" in out
    assert "INNER customer AS c ON o.o_custkey = c.c_custkey" in out
    bad = dict(cfg, sql=cfg["sql"] + " GROUP BY o.o_id")
    path.write_text(yaml.safe_dump(bad))
    assert main(["validate", str(path)]) == 2
    assert "GROUP BY is not supported" in capsys.readouterr().err
    unknown = dict(cfg, sql=cfg["sql"].replace("c.c_name", "c.c_nom"))
    path.write_text(yaml.safe_dump(unknown))
    assert main(["validate", str(path)]) == 2
    assert "column 'c_nom' not found in 'c'" in capsys.readouterr().err


def test_suite_from_the_query(tmp_path: Path) -> None:
    sql = (
        "SELECT o.o_id, o.o_custkey, c.c_custkey, c.c_name, n.n_nationkey, p.p_partkey FROM orders o "
        "JOIN customer c ON c.c_custkey = o.o_custkey JOIN nation n ON n.n_nationkey = c.c_nationkey "
        "LEFT JOIN part p ON p.p_partkey = o.o_partkey"
    )
    cfg = parse_multiway_config(_cfg(tmp_path, sql=sql, quality={"source_id": "o_id", "ranges": {"o_id": {"min": 0}}}))
    counts = RunCounts(records_in=10, matched_source_rows=6, unmatched_source_rows=4, output_rows=8)
    cols = ["o_id", "o_custkey", "c_custkey", "c_name", "n_nationkey", "p_partkey"]
    suite = build_multiway_suite(cfg, JobQuery(cfg), cols, counts)
    not_null = {e.kwargs["column"] for e in suite if e.kind == "ExpectColumnValuesToNotBeNull"}
    assert not_null == {"o_custkey", "c_custkey", "n_nationkey"}  # inner keys; p_partkey is NULL-extended
    assert any(e.kind == "ExpectTableRowCountToEqual" and e.kwargs["value"] == 8 for e in suite)
    assert any(e.kind == "ExpectColumnUniqueValueCountToBeBetween" and e.kwargs["min_value"] == 6 for e in suite)
    assert any(e.kind == "ExpectColumnValuesToBeBetween" for e in suite)


def test_clean_run_published_and_out_of_range_run_quarantined(spark: Any, tmp_path: Path) -> None:
    pytest.importorskip("great_expectations")
    cfg_data = _cfg(tmp_path, quality={"source_id": "o_id", "ranges": {"o_amount": {"min": 0, "max": 25}}})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg_data))
    cfg = load_any_config(path)
    _, messages, _ = stream(seed=9, n=1_500, customers=50)
    write_landing(tmp_path / "landing", messages, files=2)
    clean = EnrichmentJob(cfg, spark=spark, run_id="clean").run()
    assert clean.counts.reconciled
    assert check_multiway_run(cfg, "clean").success  # type: ignore[arg-type]
    gate = gate_run(cfg, "clean")
    assert gate.published and gate.rows == clean.counts.output_rows > 0
    # a delivery with amounts out of range: its rows go to quarantine
    late = stream(seed=10, n=300, start=50_000, customers=50)[1]
    bad = [m.replace(b'"o_amount": ', b'"o_amount": 1000') for m in late]
    (tmp_path / "landing" / "late.jsonl").write_bytes(b"\n".join(bad) + b"\n")
    EnrichmentJob(cfg, spark=spark, run_id="late").run()
    result = check_multiway_run(cfg, "late")  # type: ignore[arg-type]
    assert not result.success and result.failing_rows > 0
    gate = gate_run(cfg, "late")
    assert not gate.published and gate.rows > 0 and "o_amount" in gate.message


def test_example_multiway_job_is_valid_and_its_query_compiles(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "multiway" / "orders-3way.yaml"
    cfg = load_any_config(example)
    assert cfg.query_text.lstrip().startswith("--")  # type: ignore[union-attr]
    db = tmp_path / "tpch.db"
    eng = sa.create_engine(f"sqlite:///{db}")
    with eng.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE TABLE customer (c_custkey INTEGER PRIMARY KEY, c_name TEXT NOT NULL, "
                "c_mktsegment TEXT, c_nationkey INTEGER NOT NULL)"
            )
        )
        conn.execute(sa.text("CREATE TABLE nation (n_nationkey INTEGER PRIMARY KEY, n_name TEXT NOT NULL)"))
        conn.execute(sa.text("CREATE TABLE part (p_partkey INTEGER PRIMARY KEY, p_name TEXT, p_size INTEGER)"))
    local = cfg.model_copy(
        update={
            "database": parse_multiway_config(_cfg(tmp_path)).database.model_copy(update={"url": f"sqlite:///{db}"})
        }
    )
    query = JobQuery(local)  # type: ignore[arg-type]
    assert [e.master for e in query.spec.edges] == ["c", "n", "p"]
    assert query.output_schema.names == [
        "o_orderkey",
        "o_orderdate",
        "o_totalprice",
        "customer",
        "segment",
        "nation",
        "part",
    ]


def test_single_table_commands_refuse_a_multiway_job_clearly(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_cfg(tmp_path)))
    assert main(["sql", "--dialect", "sqlite", "--config", str(path)]) == 2
    assert "a multi-way job (it has sql or sql_file)" in capsys.readouterr().err
