"""Stream and master files and argv builders shared by the command-line tests (tests/cli)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from ssbj.cli import main

STREAM_COLS = ["sid", "sk", "attr"]
MASTER_COLS = ["mid", "mk", "attr", "mname"]
# the master's "attr" collides with the stream's and is renamed in the output
OUT_COLS = ["sid", "sk", "attr", "mid", "mk", "attr_master", "mname"]
MEMORY = "12kB"  # small enough that R is scanned in several partitions


def make_tables(key_type: str = "int", n_stream: int = 6000, seed: int = 1) -> tuple[pa.Table, pa.Table]:
    """Skewed stream with NULL keys and unknown keys; master with duplicate and NULL keys."""
    rng = np.random.default_rng(seed)
    hot = rng.integers(0, 8, n_stream)  # a few hot keys: the cache should take them
    cold = rng.integers(0, 360, n_stream)  # 300..359 are not in the master
    sk = np.where(rng.random(n_stream) < 0.5, hot, cold)
    sk_list: list[Any] = [None if i % 53 == 0 else int(k) for i, k in enumerate(sk)]
    mk_list: list[Any] = [*range(300), *range(0, 100, 2), None, None, 5, 5]  # many-to-many
    if key_type == "string":
        sk_list = [None if k is None else f"k{k}" for k in sk_list]
        mk_list = [None if k is None else f"k{k}" for k in mk_list]
    n_master = len(mk_list)
    stream = pa.table(
        {
            "sid": pa.array(np.arange(n_stream), pa.int64()),
            "sk": pa.array(sk_list, pa.string() if key_type == "string" else pa.int64()),
            "attr": pa.array([f"s{i % 17}" for i in range(n_stream)]),
        }
    )
    master = pa.table(
        {
            "mid": pa.array(np.arange(n_master) + 10_000, pa.int64()),
            "mk": pa.array(mk_list, pa.string() if key_type == "string" else pa.int64()),
            "attr": pa.array(rng.integers(0, 1000, n_master), pa.int64()),
            "mname": pa.array([f"name-{i}" for i in range(n_master)]),
        }
    )
    return stream, master


def write_parquet(tmp_path: Path, stream: pa.Table, master: pa.Table) -> tuple[Path, Path]:
    s, m = tmp_path / "stream.parquet", tmp_path / "master.pq"
    pq.write_table(stream, s, row_group_size=1000)
    pq.write_table(master, m)
    return s, m


def write_csv(path: Path, table: pa.Table) -> None:
    if path.name.endswith(".gz"):
        with pa.CompressedOutputStream(str(path), "gzip") as out:
            pacsv.write_csv(table, out)
    else:
        pacsv.write_csv(table, path)


def join_args(s: Path, m: Path, out: Path, *extra: str) -> list[str]:
    return [
        "join",
        "--stream",
        str(s),
        "--master",
        str(m),
        "--stream-key",
        "sk",
        "--master-key",
        "mk",
        "--memory",
        MEMORY,
        "--batch-rows",
        "700",
        "--out",
        str(out),
        *extra,
    ]


def run_stats(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    report: dict[str, Any] = json.loads(captured.out)
    return report


def check_reconciles(report: dict[str, Any], out: Path) -> None:
    t = report["totals"]
    assert t["waiting"] == 0
    assert t["tuples_in"] == t["matched_source_rows"] + t["unmatched_source_rows"] + t["waiting"]
    assert report["rows_written"] == t["output_rows"] == pq.read_metadata(out).num_rows
