"""Two-stream jobs: the job file's errors, ``ssbj validate``'s plan, the generated suite, the example, GX on a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from multiway_pipeline_data import load_masters, masters
from twostream_data import job, streams, write_landing

from ssbj.cli import main
from ssbj.config import load_any_config, parse_multiway_config
from ssbj.contracts import RunCounts
from ssbj.errors import ConfigError
from ssbj.pipeline.job import EnrichmentJob
from ssbj.pipeline.multiway_masters import JobQuery
from ssbj.pipeline.multiway_quality import build_multiway_suite
from ssbj.pipeline.orchestration import check_job, job_kind

REPO = Path(__file__).resolve().parents[2]


def _cfg(tmp: Path, files: int = 2, **over: Any) -> dict[str, Any]:
    load_masters(sa.create_engine(f"sqlite:///{tmp / 'm.db'}"), {"customer": masters(seed=3, customers=40)["customer"]})
    dirs = write_landing(tmp, streams(seed=4, files=files, per_file=60))
    wh = {"kind": "database", "url": f"sqlite:///{tmp / 'wh.db'}"}
    return job(
        tmp, {"url": f"sqlite:///{tmp / 'm.db'}"}, dirs, {**wh, "table": "os"}, {**wh, "table": "os_dead"}, **over
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"join": {"lateness": 5}, "second_stream": None}, "join.lateness is for a window join"),
        ({"join": {"lateness": -1}}, "join.lateness"),
        (
            {"sql": "SELECT o.o_id FROM orders o JOIN customer c ON c.c_custkey = o.o_custkey"},
            "does not read the stream 'shipments'",
        ),
        (
            {
                "second_stream": {
                    "name": "orders",
                    "schema": {"s_id": "int64"},
                    "source": {"kind": "files", "path": "/x", "format": "jsonl"},
                }
            },
            "is the name of the first stream",
        ),
        (
            {
                "second_stream": {
                    "name": "customer",
                    "schema": {"s_id": "int64"},
                    "source": {"kind": "files", "path": "/x", "format": "jsonl"},
                }
            },
            "both a stream and a master",
        ),
        (
            {
                "second_stream": {
                    "name": "shipments",
                    "schema": {"s_id": "int64"},
                    "event_time": "s_ts",
                    "source": {"kind": "files", "path": "/x", "format": "jsonl"},
                }
            },
            "event_time 's_ts' is not a column",
        ),
        ({"second_stream": {"name": "shipments", "schema": {"s_id": "int64"}}}, "second_stream.source"),
    ],
)
def test_job_file_errors_name_the_field(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    data = _cfg(tmp_path)
    if change.get("second_stream", 0) is None:
        del data["second_stream"]
        change = {k: v for k, v in change.items() if k != "second_stream"}
    with pytest.raises(ConfigError, match=message):
        parse_multiway_config({**data, **change})


def test_validate_prints_the_window_plan(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_cfg(tmp_path)))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "query: orders and shipments joined with customer" in out
    assert "INNER WINDOW stream s ON s.s_custkey = o.o_custkey AND s.s_ts BETWEEN o.o_ts - 0:00:20" in out
    assert "window: orders.o_ts and shipments.s_ts are the event times; allowed lateness 10 s" in out
    assert "source: stream orders, jsonl files in" in out and "second_stream.source: stream shipments, jsonl" in out
    assert job_kind(path) == "multiway"  # the multi-way DAG runs it as it is


def test_suite_covers_the_window_keys(tmp_path: Path) -> None:
    sql = (
        "SELECT o.o_id, o.o_custkey, s.s_id, s.s_ts, c.c_name FROM orders o JOIN shipments s ON "
        "s.s_custkey = o.o_custkey AND s.s_ts BETWEEN o.o_ts - INTERVAL '20' SECOND AND o.o_ts + INTERVAL '40' SECOND "
        "LEFT JOIN customer c ON c.c_custkey = o.o_custkey"
    )
    cfg = parse_multiway_config(_cfg(tmp_path, sql=sql, quality={"source_id": "o_id"}))
    counts = RunCounts(records_in=10, matched_source_rows=6, unmatched_source_rows=4, output_rows=8)
    suite = build_multiway_suite(cfg, JobQuery(cfg), ["o_id", "o_custkey", "s_id", "s_ts", "c_name"], counts)
    not_null = {e.kwargs["column"] for e in suite if e.kind == "ExpectColumnValuesToNotBeNull"}
    assert not_null == {"o_custkey", "s_ts"}  # the window's key and event time; c is NULL-extended
    # output source rows count both streams: no distinct-count check on one stream's id
    assert not any(e.kind == "ExpectColumnUniqueValueCountToBeBetween" for e in suite)


def test_example_job_is_valid_and_its_query_compiles(tmp_path: Path) -> None:
    cfg = load_any_config(REPO / "examples" / "multiway" / "orders-shipments.yaml")
    assert cfg.second_stream is not None and cfg.join.lateness == 300  # type: ignore[union-attr]
    db = tmp_path / "tpch.db"
    with sa.create_engine(f"sqlite:///{db}").begin() as conn:
        conn.execute(
            sa.text("CREATE TABLE customer (c_custkey INTEGER PRIMARY KEY, c_name TEXT NOT NULL, c_nationkey INTEGER)")
        )
        conn.execute(sa.text("CREATE TABLE nation (n_nationkey INTEGER PRIMARY KEY, n_name TEXT NOT NULL)"))
    local = cfg.model_copy(
        update={"database": cfg.database.model_copy(update={"connection_id": None, "url": f"sqlite:///{db}"})}
    )
    query = JobQuery(local)  # type: ignore[arg-type]
    w = query.spec.window
    assert w is not None and (w.probe_time, w.time, str(w.lateness)) == ("o_ts", "s_ts", "0:05:00")
    assert query.output_schema.names == ["o_orderkey", "ordered_at", "shipped_at", "carrier", "customer", "nation"]


def test_gx_check_of_a_two_stream_run(spark: Any, tmp_path: Path) -> None:
    pytest.importorskip("great_expectations")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_cfg(tmp_path, files=3, quality={"not_null": ["c_name"]})))
    cfg = load_any_config(path)
    run = EnrichmentJob(cfg, spark=spark, run_id="r1").run()
    assert run.counts.reconciled and run.counts.output_rows > 0
    result = check_job(path, "r1")
    # c_name is NULL-extended by the LEFT JOIN for keys without a customer: the declared check finds them
    failing = {c["expectation"]: c["success"] for c in result.checks if "expectation" in c}
    assert result.checks and not result.success and result.failing_rows > 0, failing
    path.write_text(yaml.safe_dump(_cfg(tmp_path, files=3)))
    ok = check_job(path, "r1")
    assert ok.success, ok.summary()
