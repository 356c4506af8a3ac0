"""The continuous-query job file: errors name the field; ssbj validate; the result table's GX suite."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from cq_reference import EXAMPLES

from ssbj.adapters.result_table import RESULT_FILE
from ssbj.cli import main
from ssbj.config_cq import is_cq_job, load_cq_config, parse_cq_config
from ssbj.core.checkpoint import DirectoryStore
from ssbj.errors import ConfigError, StateError
from ssbj.pipeline.cq_job import CqJob
from ssbj.pipeline.cq_quality import check_result

Q7_RELATIONS = ("lineitem", "orders", "customer", "supplier", "nation")


def _job(tmp_path: Path, **over: Any) -> dict[str, Any]:
    for r in Q7_RELATIONS:
        (tmp_path / "landing" / r).mkdir(parents=True, exist_ok=True)
    db = f"sqlite:///{tmp_path / 'wh.db'}"
    job: dict[str, Any] = {
        "name": "q7",
        "query": {"sql_file": str(EXAMPLES / "q7.sql"), "ddl_file": str(EXAMPLES / "tpch_schema.sql")},
        "sources": {r: {"kind": "files", "path": str(tmp_path / "landing" / r)} for r in Q7_RELATIONS},
        "target": {
            "result": {"kind": "database", "url": db, "table": "q7_live"},
            "dead_letter": {"kind": "parquet", "path": str(tmp_path / "dead")},
        },
        "checkpoint": str(tmp_path / "ck"),
    }
    job.update(over)
    return job


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_cq_config(data, "job.yaml")
    return str(exc.value)


def test_a_valid_job_plans_its_query(tmp_path: Path) -> None:
    cfg = parse_cq_config(_job(tmp_path))
    assert cfg.plan.root == "lineitem"
    assert cfg.key_columns == ["supp_nation", "cust_nation", "l_year"]
    assert is_cq_job(_job(tmp_path)) and not is_cq_job({"source": {}})


def test_errors_name_the_fields(tmp_path: Path) -> None:
    job = _job(tmp_path)
    del job["sources"]["nation"]
    job["sources"]["part"] = {"kind": "files", "path": "x"}
    msg = _error(job)
    assert "sources.part: not a relation of the query" in msg
    assert "relation 'nation' has no change source" in msg
    msg = _error(_job(tmp_path, query={"sql": "select 1", "sql_file": "q.sql", "ddl": "x"}))
    assert "query" in msg and "exactly one of sql, sql_file" in msg
    job = _job(tmp_path)
    job["sources"]["orders"] = {"kind": "files", "path": "x", "format": "csv"}
    assert "sources.orders.files.format" in _error(job)
    job = _job(tmp_path)
    job["target"] = {"dead_letter": {"kind": "parquet", "path": "d"}}
    assert "target: give result, deltas or both" in _error(job)
    ddl = (EXAMPLES / "tpch_schema.sql").read_text()
    job = _job(tmp_path, query={"sql": "select n_name from nation", "ddl": ddl})
    job["sources"] = {"nation": {"kind": "files", "path": "x"}}
    assert "target.result: the query has no GROUP BY" in _error(job)
    job["query"] = {"sql": "select n_name, count(*) from nation group by n_name having count(*) > 1", "ddl": ddl}
    assert "job.yaml: query:" in _error(job) and "HAVING" in _error(job).upper()
    job = _job(tmp_path)
    job["snapshot"] = {"url": "sqlite:///x.db", "relations": ["nation", "part"]}
    assert "snapshot.relations: 'part' is not a relation" in _error(job)


def test_query_files_are_relative_to_the_job_file(tmp_path: Path) -> None:
    (tmp_path / "q7.sql").write_text((EXAMPLES / "q7.sql").read_text())
    job = _job(tmp_path, query={"sql_file": "q7.sql", "ddl_file": str(EXAMPLES / "tpch_schema.sql")})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert load_cq_config(path).plan.root == "lineitem"


def test_ssbj_validate_a_cq_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_job(tmp_path)))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "join tree root lineitem" in out and "target.result: table q7_live" in out and "OK" in out
    job = _job(tmp_path)
    job["sources"]["orders"]["path"] = str(tmp_path / "missing")
    path.write_text(yaml.safe_dump(job))
    assert main(["validate", str(path)]) == 2
    assert "sources.orders.path" in capsys.readouterr().err


def test_the_result_suite_catches_a_duplicated_group(tmp_path: Path) -> None:
    pytest.importorskip("great_expectations")
    cfg = parse_cq_config(_job(tmp_path))
    with sqlite3.connect(tmp_path / "wh.db") as con:
        con.execute("CREATE TABLE q7_live (supp_nation TEXT, cust_nation TEXT, l_year INTEGER, revenue NUMERIC)")
        con.executemany(
            "INSERT INTO q7_live VALUES (?, ?, ?, ?)",
            [("FRANCE", "GERMANY", 1995, 1.5), ("GERMANY", "FRANCE", 1995, 2.5)],
        )
    DirectoryStore(cfg.engine_checkpoint).write_manifest(3, {"files": [], "batch_id": 3, "result_rows": 2})
    ok = check_result(cfg)
    assert ok.success, ok.summary()
    with sqlite3.connect(tmp_path / "wh.db") as con:
        con.execute("INSERT INTO q7_live VALUES ('FRANCE', 'GERMANY', 1995, 1.5)")
    bad = check_result(cfg)
    assert not bad.success
    failed = {c["expectation"] for c in bad.checks if not c["success"]}
    assert failed == {"expect_compound_columns_to_be_unique", "expect_table_row_count_to_equal"}


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_the_example_jobs_are_valid(path: Path) -> None:
    cfg = load_cq_config(path)
    assert cfg.key_columns == ["supp_nation", "cust_nation", "l_year"]


def test_the_result_suite_on_a_parquet_result(tmp_path: Path) -> None:
    job = _job(tmp_path)
    job["target"]["result"] = {"kind": "parquet", "path": str(tmp_path / "q7")}
    cfg = parse_cq_config(job)
    (tmp_path / "q7").mkdir()
    rows = [("FRANCE", "GERMANY", 1995, 1.5), ("GERMANY", "FRANCE", 1995, 2.5)]
    names = ["supp_nation", "cust_nation", "l_year", "revenue"]
    pq.write_table(
        pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows]), tmp_path / "q7" / RESULT_FILE
    )
    DirectoryStore(cfg.engine_checkpoint).write_manifest(0, {"files": [], "batch_id": 0, "result_rows": 2})
    assert check_result(cfg).success
    rows[1] = ("GERMANY", None, 1995, 2.5)
    pq.write_table(
        pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows]), tmp_path / "q7" / RESULT_FILE
    )
    bad = check_result(cfg)
    assert [c["kwargs"].get("column") for c in bad.checks if not c["success"]] == ["cust_nation"]


def test_a_lost_engine_checkpoint_with_spark_commits_is_refused(tmp_path: Path) -> None:
    cfg = parse_cq_config(_job(tmp_path))
    commits = Path(cfg.spark_checkpoint) / "commits"
    commits.mkdir(parents=True)
    (commits / "0").write_text("v1\n{}")
    with pytest.raises(StateError, match="remove both to start over"):
        CqJob(cfg, spark=object()).run()
