"""``ssbj explain`` and ``ssbj query``: output, argument handling and error paths.

``ssbj query`` calls ``ssbj.core.multiway.run_query``, built on another branch: its
end-to-end test against DuckDB (the last test) is skipped until that function exists.
The plumbing around it (reading the files, compiling, writing the output with the
SELECT's column names) is checked now with the plain reference evaluator in its place.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from ssbj.cli import main

TPCH = Path(__file__).resolve().parents[1] / "data" / "tpch"

SQL = """
SELECT e.e_id, e.e_amount AS amount, c.c_name AS customer, n.n_name AS nation
FROM events e
  JOIN customer c ON e.e_cust = c.c_id
  LEFT JOIN nation n ON c.c_nation = n.n_id AND n.n_name <> 'X'
WHERE e.e_amount >= 10
"""


def _data() -> dict[str, pa.Table]:
    return {
        "events": pa.table(
            {
                "e_id": pa.array(range(12), pa.int64()),
                "e_cust": pa.array([1, 2, 2, 3, None, 4, 1, 1, 5, 2, 3, 9], pa.int64()),
                "e_amount": pa.array([5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110], pa.int64()),
            }
        ),
        "customer": pa.table(
            {
                "c_id": pa.array([1, 2, 2, 3, 4, 5], pa.int64()),
                "c_name": ["a", "b", "b2", "c", "d", "e"],
                "c_nation": pa.array([10, 11, None, 12, 10, 13], pa.int64()),
            }
        ),
        "nation": pa.table({"n_id": pa.array([10, 11, 12, 12], pa.int64()), "n_name": ["N", "M", "X", "Y"]}),
    }


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    data = _data()
    out = {"sql": tmp_path / "q.sql"}
    out["sql"].write_text(SQL)
    pq.write_table(data["events"], tmp_path / "events.parquet")
    pacsv.write_csv(data["customer"], tmp_path / "customer.csv")
    pq.write_table(data["nation"], tmp_path / "nation.parquet")
    out.update(
        events=tmp_path / "events.parquet", customer=tmp_path / "customer.csv", nation=tmp_path / "nation.parquet"
    )
    return out


def _args(f: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [
        "query",
        "--sql",
        str(f["sql"]),
        "--stream",
        f"events={f['events']}",
        "--master",
        f"customer={f['customer']}",
        "--master",
        f"nation={f['nation']}",
        "--memory",
        "16MB",
        "--out",
        str(out),
        *extra,
    ]


def _duck(sql: str) -> Counter[tuple[Any, ...]]:
    con = duckdb.connect()
    for name, t in _data().items():
        con.register(name, t)
    return Counter(tuple(r.values()) for r in con.sql(sql).to_arrow_table().to_pylist())


def test_explain_tpch_prints_both_plans(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["explain", "--sql", str(TPCH / "q05.sql"), "--schema", str(TPCH / "schema.sql")])
    out = capsys.readouterr().out
    assert rc == 0
    binary, converted = out.split("Converted plan (TSC):")
    assert binary.count("Join INNER") == 5 and "MultiJoin" not in binary
    assert "MultiJoin (6 inputs)" in converted and "Join INNER" not in converted
    assert "TSC: converted" in out


def test_explain_with_files_shows_the_operator_tree(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "explain",
            "--sql",
            str(files["sql"]),
            "--stream",
            f"events={files['events']}",
            "--master",
            f"customer={files['customer']}",
            "--master",
            f"nation={files['nation']}",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "MultiJoin (3 inputs) {INNER e.e_cust = c.c_id; LEFT c.c_nation = n.n_id}" in out
    assert "Multi-way operator:\nstream e [e_cust, e_amount, e_id]" in out
    assert "  LEFT nation AS n ON c.c_nation = n.n_id [n_id, n_name]" in out


def test_explain_reports_queries_the_operator_cannot_run(tmp_path: Path, files: dict[str, Path], capsys: Any) -> None:
    sql = tmp_path / "agg.sql"
    sql.write_text(
        "SELECT c.c_name, count(*) AS n FROM events e JOIN customer c ON e.e_cust = c.c_id GROUP BY c.c_name"
    )
    rc = main(
        [
            "explain",
            "--sql",
            str(sql),
            "--stream",
            f"events={files['events']}",
            "--master",
            f"customer={files['customer']}",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "Aggregate" in out and "MultiJoin (2 inputs)" in out
    assert "Multi-way operator: not supported:" in out and "line 1: GROUP BY is not supported" in out


@pytest.mark.parametrize("stream_format", ["parquet", "csv"])
def test_query_writes_the_select_columns(
    files: dict[str, Path], tmp_path: Path, capsys: Any, stream_format: str
) -> None:
    if stream_format == "csv":
        files["events"] = tmp_path / "events.csv"
        pacsv.write_csv(_data()["events"], files["events"])
    out = tmp_path / "out.parquet"
    assert main(_args(files, out, "--stats", "--batch-rows", "5")) == 0
    report = capsys.readouterr().out
    assert '"rows_written": 12' in report and '"steps": 3' in report  # 12 events in batches of 5
    got = pq.read_table(out)
    assert got.column_names == ["e_id", "amount", "customer", "nation"]
    assert Counter(tuple(r.values()) for r in got.to_pylist()) == _duck(SQL)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: [x.replace("events=", "events") if x.startswith("events=") else x for x in a], "bad --stream"),
        (lambda a: [*a, "--stream", "x=x.parquet", "--stream", "y=y.parquet"], "give one --stream"),
        (lambda a: [*a, "--master", "customer=y.csv"], "--master 'customer' given twice"),
        (lambda a: [x.replace("events.parquet", "missing.parquet") for x in a], "stream file not found"),
        (lambda a: [x.replace("nation.parquet", "q.sql") for x in a], "unsupported file type"),
        (lambda a: [x if x != "16MB" else "lots" for x in a], "--memory"),
        (lambda a: [x.replace("out.parquet", "nodir/out.parquet") for x in a], "output directory"),
        (lambda a: [*a, "--master", "extra=EXTRA"], "not used by the query"),
        (lambda a: [*a, "--batch-rows", "0"], "--batch-rows must be >= 1"),
    ],
)
def test_query_argument_errors(files: dict[str, Path], tmp_path: Path, change: Any, message: str, capsys: Any) -> None:
    pq.write_table(pa.table({"x": [1]}), tmp_path / "extra.parquet")
    args = [a.replace("EXTRA", str(tmp_path / "extra.parquet")) for a in change(_args(files, tmp_path / "out.parquet"))]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("ssbj: error:") and message in err, err
    assert not (tmp_path / "out.parquet").exists()


def test_query_refuses_unsupported_sql(files: dict[str, Path], tmp_path: Path, capsys: Any) -> None:
    files["sql"].write_text("SELECT e.e_id FROM events e\nWHERE e.e_cust IN (SELECT c_id FROM customer)")
    assert main(_args(files, tmp_path / "out.parquet")) == 2
    assert "line 2: subquery in WHERE is not supported" in capsys.readouterr().err


def test_query_output_must_not_overwrite_an_input(files: dict[str, Path], capsys: Any) -> None:
    assert main(_args(files, files["events"])) == 2
    assert "would overwrite input file" in capsys.readouterr().err


def test_query_end_to_end_equals_duckdb(files: dict[str, Path], tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "out.parquet"
    assert main(_args(files, out, "--stats", "--batch-rows", "4")) == 0
    got = pq.read_table(out)
    assert got.column_names == ["e_id", "amount", "customer", "nation"]
    assert Counter(tuple(r.values()) for r in got.to_pylist()) == _duck(SQL)
