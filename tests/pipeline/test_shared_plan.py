"""``ssbj plan --config a.yaml b.yaml ...`` on real job files and a SQLite master database."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from ssbj.cli import main


def _job(tmp: Path, name: str, stream: str, key: str, table: str, mkey: str) -> str:
    cfg = {
        "name": name,
        "source": {"kind": "files", "path": str(tmp / stream), "format": "jsonl"},
        # rows of ~100 B: with rows hardly wider than key + row id, one stored copy plus a
        # narrow entry per scan can cost more than rows kept by one scan (docs/shared.md)
        "schema": {
            "id": "int64",
            "cust": "int64",
            "prod": "int64",
            "note": "string",
            "addr": "string",
            "comment": "string",
        },
        "master": {"url": f"sqlite:///{tmp / 'm.db'}", "table": table, "key": mkey, "partition_rows": 500},
        "join": {"stream_key": key, "step_rows": 1000},
        "sink": {"kind": "parquet", "path": str(tmp / "out" / name)},
        "dead_letter": {"kind": "parquet", "path": str(tmp / "dl" / name)},
        "checkpoint": str(tmp / "ck" / name),
    }
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return str(p)


@pytest.fixture
def jobs(tmp_path: Path) -> list[str]:
    con = sqlite3.connect(tmp_path / "m.db")
    con.execute("create table customer (c_key integer primary key, c_name text)")
    con.executemany("insert into customer values (?, ?)", [(i, f"c{i}") for i in range(5000)])
    con.execute("create table product (p_key integer primary key, p_name text)")
    con.executemany("insert into product values (?, ?)", [(i, f"p{i}") for i in range(2000)])
    con.commit()
    con.close()
    return [
        _job(tmp_path, "orders_cust", "orders", "cust", "customer", "c_key"),
        _job(tmp_path, "clicks_cust", "clicks", "cust", "customer", "c_key"),
        _job(tmp_path, "orders_prod", "orders", "prod", "product", "p_key"),
    ]


def test_plan_shares_the_customer_scan(jobs: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--config", *jobs, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    stores = {Path(s["master"]).name: s for s in doc["stores"]}
    assert sorted(stores["customer#c_key"]["jobs"]) == ["clicks_cust", "orders_cust"]
    assert stores["product#p_key"]["jobs"] == ["orders_prod"]
    groups = {Path(g["master"]).name: g for g in doc["run_plan"]["groups"]}
    assert groups["customer#c_key"]["jobs"] == ["clicks_cust", "orders_cust"]
    pred = doc["predicted"]
    # one scan of customer instead of two: less predicted CPU and memory than isolated
    assert pred["shared"]["cpu_core_seconds_per_second"] < pred["isolated"]["cpu_core_seconds_per_second"]
    assert pred["shared"]["memory_bytes"] < pred["isolated"]["memory_bytes"]
    assert pred["stream_decodes"] == {"shared": 2, "isolated": 3}
    assert [j["master_rows"] for j in doc["jobs"]] == [5000, 5000, 2000]


def test_plan_text_and_shards_under_load(jobs: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # at 20M tuples/s one shard cannot keep up: the ILP splits the customer store
    assert main(["plan", "--config", *jobs, "--rate", "4e6", "--capacity", "1"]) == 0
    out = capsys.readouterr().out
    assert "shared scan of" in out and "shards on c_key" in out and "isolated" in out


def test_plan_without_inputs_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan"]) == 2
    assert "--stream" in capsys.readouterr().err


def test_plan_beyond_capacity_says_so(jobs: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--config", *jobs, "--rate", "1e9", "--capacity", "1"]) == 2
    assert "capacity" in capsys.readouterr().err
